//! Cluster mode on a shard (ARCHITECTURE.md, Replication: Controller): the controller
//! group's log applied into [`Metadata`], metadata commands proposed to it, node
//! registration, the leader table every shard keeps (with each leader's in-sync set for
//! Metadata), and hosting the Raft groups of the
//! partitions this node is a replica of.
//!
//! Invariants: the metadata a node serves is exactly the controller log's committed prefix
//! applied in order (shard 0 applies, then publishes the snapshot to every shard); a
//! command is reported done only once it is visible in that applied state; a partition is
//! opened on a node only if the node is one of its replicas, on the shard the metadata
//! names (the same shard on every node).
//!
//! Files: `metadata` (the state machine of cluster commands), `metastore` (the single-node
//! metadata log), `join` (joining through the seeds), `reassign` (partition moves),
//! `adopt` (the one-time upgrade of a single-node data directory), `topic_config` (topic
//! configs and their storage mapping), `markers` (transaction markers and verifications
//! between nodes) over `net` (one request to another node's Kafka listener).
//!
//! May use: `common`, `runtime`, `partition`, `replication`. The controller runs over the
//! shard it is on through [`ClusterHost`], which the shard implements.

pub mod adopt;
pub mod broker_config;
pub mod group_config;
pub mod incarnation;
pub mod join;
pub mod markers;
pub mod metadata;
pub mod metastore;
pub mod net;
pub mod reassign;
pub mod topic_config;

use std::cell::{Cell, RefCell};
use std::collections::{HashMap, HashSet};
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use strand_raft::{GroupId, MembershipStep};
use strand_storage::{LogConfig, SystemClock};
use strand_wire::BatchBuilder;

use futures::future::LocalBoxFuture;

use crate::cluster::metadata::{Command, MetaError, Metadata};
use crate::common::config::Config;
use crate::common::metrics::ShardMetrics;
use crate::partition::Partition;
use crate::replication::{LeaderChange, Newness, OnLeaderChanges, Replicator, CONTROLLER_GROUP};
use crate::runtime::task::sleep;

/// Directory of the controller group's log under the data directory.
pub const CONTROLLER_DIR: &str = "__strand_controller";
/// Longest a metadata command waits to become visible before it fails.
pub const META_COMMIT_TIMEOUT: Duration = Duration::from_secs(15);
/// A metadata change not visible after this is logged (once) with what this node knows of
/// the controller.
const META_COMMIT_SLOW: Duration = Duration::from_secs(5);
/// How long a forwarded command is given before it is forwarded again.
pub const META_RETRY: Duration = Duration::from_millis(1000);
/// Poll interval while waiting for applied metadata.
const META_POLL: Duration = Duration::from_millis(10);
/// Bytes of controller log read per step when applying.
const APPLY_READ_BYTES: usize = 1 << 20;
/// How often the controller's leader looks for admitted nodes not yet following it.
const LEARNER_CHECK_INTERVAL: Duration = Duration::from_millis(500);

/// Whom Metadata names as the leader of a partition whose leader this node (`me`) does not
/// know, so that a client does not stall on it (Redpanda's heuristic): a client asks
/// Metadata of the broker it used last, and when that is a node cut off from the others it
/// would be told "no leader" for as long as the cut lasts and never ask anyone else.
/// - This node led the partition last (`former` is `me`): it lost the leadership without
///   learning the successor, so another replica (of those `listed`, picked by `seed`).
/// - This node hears from no peer (`isolated`): the last leader it knew when that is
///   another listed node, else another replica.
/// - Otherwise an election is under way among nodes this node hears: `None` (no leader;
///   naming a former leader that died would send clients to a dead node).
///
/// The answer carries LEADER_NOT_AVAILABLE and this node's last epoch, so a client that
/// knows a newer leader keeps it and one that goes to the stand-in is redirected from there.
pub fn stand_in_leader(
    me: i32,
    former: Option<i32>,
    isolated: bool,
    replicas: &[i32],
    listed: &[i32],
    seed: usize,
) -> Option<i32> {
    let other = |n: &i32| *n != me && listed.contains(n);
    match former {
        Some(f) if f == me => {}
        Some(f) if isolated && other(&f) => return Some(f),
        _ if isolated => {}
        _ => return None,
    }
    let others: Vec<i32> = replicas.iter().copied().filter(other).collect();
    (!others.is_empty()).then(|| others[seed % others.len()])
}

/// Per-shard cluster state.
#[derive(Default)]
pub struct ClusterState {
    /// This shard's replicator (cluster mode only).
    pub replicator: RefCell<Option<Rc<Replicator>>>,
    /// Leader node (-1 unknown) and epoch of every group, as broadcast by the shards.
    pub leaders: RefCell<HashMap<u64, (i32, i32)>>,
    /// The last leader known of every group that had one (kept while none is known).
    pub former_leaders: RefCell<HashMap<u64, i32>>,
    /// Groups whose entry in `leaders` another node's announcement set (this node's own
    /// shards have not reported a change of them since).
    announced: RefCell<HashSet<u64>>,
    /// The replicas out of Kafka's in-sync set of every group, as its leader reported them,
    /// with the leader's epoch.
    pub out_of_sync: RefCell<HashMap<u64, (i32, Vec<i32>)>>,
    /// Shard 0: the metadata applied from the controller log.
    applied: RefCell<Metadata>,
    /// Shard 0: Kafka offset of the next controller record to apply.
    applied_to: Cell<i64>,
    /// Shard 0: an apply task runs.
    applying: Cell<bool>,
    /// Shard 0: the controller log.
    controller: RefCell<Option<Rc<Partition>>>,
}

impl ClusterState {
    /// Records leader changes a shard of node `me` saw in the groups it hosts. A change to
    /// "no leader known" in the epoch whose leader another node's announcement named keeps
    /// that leader: a replica that voted in an election reports the new term before it
    /// hears from the winner, whose announcement may have come first (Metadata answered -1
    /// meanwhile). Once this node's own view named a leader of the epoch, losing it (a
    /// pre-vote after the leader went silent) is recorded as leaderless.
    pub fn note_local(&self, me: i32, changes: Vec<LeaderChange>) {
        let mut l = self.leaders.borrow_mut();
        let mut former = self.former_leaders.borrow_mut();
        let mut out = self.out_of_sync.borrow_mut();
        let mut announced = self.announced.borrow_mut();
        for c in changes {
            let keep = c.leader < 0
                && announced.contains(&c.group)
                && l.get(&c.group)
                    .is_some_and(|&(old, old_epoch)| old >= 0 && old != me && old_epoch == c.epoch);
            if !keep {
                l.insert(c.group, (c.leader, c.epoch));
                announced.remove(&c.group);
            }
            if c.leader >= 0 {
                former.insert(c.group, c.leader);
            }
            if c.leader == me {
                out.insert(c.group, (c.epoch, c.out_of_sync));
            }
        }
    }

    /// Records the leaders another node announced: newer than what is known (a higher
    /// epoch, or a leader where the same epoch had none).
    pub fn note_remote(&self, changes: Vec<LeaderChange>) {
        let mut l = self.leaders.borrow_mut();
        let mut former = self.former_leaders.borrow_mut();
        let mut out = self.out_of_sync.borrow_mut();
        let mut announced = self.announced.borrow_mut();
        for c in changes {
            let newer = l.get(&c.group).is_none_or(|&(old, old_epoch)| {
                c.epoch > old_epoch || (c.epoch == old_epoch && old < 0)
            });
            if newer {
                l.insert(c.group, (c.leader, c.epoch));
                announced.insert(c.group);
                if c.leader >= 0 {
                    former.insert(c.group, c.leader);
                }
            }
            // Every announced group is led by the announcer: its in-sync set is current.
            if out.get(&c.group).is_none_or(|&(e, _)| c.epoch >= e) {
                out.insert(c.group, (c.epoch, c.out_of_sync));
            }
        }
    }
}

/// What the cluster layer uses of the shard it runs on (`shard::Shard` implements the
/// required methods). The provided methods are the cluster view every layer above reads
/// (leaders, brokers, the committed metadata).
pub trait ClusterHost: 'static {
    /// This shard's index.
    fn shard_id(&self) -> usize;
    /// Number of shards of this node.
    fn shard_count(&self) -> usize;
    /// The node's configuration.
    fn config(&self) -> &Config;
    /// This shard's cluster state.
    fn cluster(&self) -> &ClusterState;
    /// The metadata snapshot this shard applied.
    fn metadata(&self) -> Arc<Metadata>;
    /// This shard's latency histograms and counters.
    fn metrics(&self) -> Rc<ShardMetrics>;
    /// Whether the shard is shutting down.
    fn stopping(&self) -> bool;
    /// Whether this node is part of a replicated cluster (`--seeds` given).
    fn clustered(&self) -> bool;
    /// Shard 0: applies a metadata snapshot on every shard of this node.
    fn publish(self: &Rc<Self>, snapshot: Arc<Metadata>) -> LocalBoxFuture<'_, ()>;
    /// A receiver of leader changes that hands them to every shard of this node
    /// (`remote`: another node announced them).
    fn leader_changes_to_every_shard(self: &Rc<Self>, remote: bool) -> OnLeaderChanges;
    /// What runs when this node becomes the leader of `part` (an offsets partition's
    /// groups are reloaded); `None` for a partition with nothing to reload.
    fn on_leader_gain(self: &Rc<Self>, part: &Rc<Partition>) -> Option<Box<dyn Fn()>>;

    /// This shard's replicator (cluster mode).
    fn replicator(&self) -> Option<Rc<Replicator>> {
        self.cluster().replicator.borrow().clone()
    }

    /// Leader node (or -1) and leader epoch of a Raft group, as this node knows it.
    fn leader_of_group(&self, group: u64) -> (i32, i32) {
        self.cluster()
            .leaders
            .borrow()
            .get(&group)
            .copied()
            .unwrap_or((-1, -1))
    }

    /// The stand-in Metadata names for `group` while this node knows no leader of it
    /// (replicas `replicas`, of which the answer lists `listed`; `seed` picks among equals):
    /// see [`stand_in_leader`].
    fn stand_in_for(
        &self,
        group: u64,
        replicas: &[i32],
        listed: &[i32],
        seed: usize,
    ) -> Option<i32> {
        let former = self.cluster().former_leaders.borrow().get(&group).copied();
        let isolated = self.replicator().is_some_and(|r| r.isolated());
        stand_in_leader(
            self.config().node_id,
            former,
            isolated,
            replicas,
            listed,
            seed,
        )
    }

    /// The node leading the controller, if known.
    fn controller_leader(&self) -> Option<i32> {
        let (l, _) = self.leader_of_group(CONTROLLER_GROUP.0);
        (l >= 0).then_some(l)
    }

    /// The brokers Kafka clients of the listener named `listener` see, `(id, host, port)`:
    /// every registered node with such a listener on a cluster, this node alone without one.
    /// A node the controller's leader fenced (not heard from for a broker session) is
    /// left out, as Kafka leaves out fenced brokers; this node always lists itself.
    fn brokers(&self, listener: &str) -> Vec<(i32, String, u16)> {
        let c = self.config();
        let me = c.node_id;
        // This node answers, so it is listed even before its registration is applied
        // here (start-up): a client must find the controller this node reports.
        let own = c
            .listeners
            .iter()
            .find(|l| l.name == listener)
            .map(|l| (me, l.advertised_host.clone(), l.advertised_port));
        if !self.clustered() {
            return own.into_iter().collect();
        }
        let fenced = self.fenced_nodes();
        let mut listed: Vec<(i32, String, u16)> = self
            .metadata()
            .nodes
            .values()
            .filter(|n| n.id != me && !fenced.contains(&n.id))
            .filter_map(|n| n.endpoint(listener).map(|(host, port)| (n.id, host, port)))
            .chain(own)
            .collect();
        listed.sort_by_key(|b| b.0);
        listed
    }

    /// The nodes the controller's current leader announced as fenced (see
    /// `replication::BROKER_SESSION_TIMEOUT`).
    fn fenced_nodes(&self) -> Vec<i32> {
        let (_, epoch) = self.leader_of_group(CONTROLLER_GROUP.0);
        match self.cluster().out_of_sync.borrow().get(&CONTROLLER_GROUP.0) {
            Some((e, fenced)) if *e == epoch => fenced.clone(),
            _ => Vec::new(),
        }
    }

    /// The controller id Kafka clients see: this node, as a KRaft broker reports a live
    /// broker rather than the controller itself. Every node forwards controller requests to
    /// the controller's leader, and the node answering is one a client reaches: librdkafka's
    /// admin requests wait for the controller Metadata names and do not ask again, so naming
    /// the leader (or -1) left them waiting until their timeout whenever that node was not
    /// in the answer's broker list (start-up) or had just stopped.
    fn controller_id(&self) -> i32 {
        self.config().node_id
    }

    /// The committed metadata as this shard knows it: on shard 0 the state applied from the
    /// controller log (ahead of the published snapshot while partitions open).
    fn committed_metadata(&self) -> Arc<Metadata> {
        if self.shard_id() == 0 && self.clustered() {
            Arc::new(self.cluster().applied.borrow().clone())
        } else {
            self.metadata()
        }
    }

    /// The ids of the registered nodes in the committed metadata, without copying it.
    fn committed_node_ids(&self) -> Vec<i32> {
        if self.shard_id() == 0 && self.clustered() {
            self.cluster()
                .applied
                .borrow()
                .nodes
                .keys()
                .copied()
                .collect()
        } else {
            self.metadata().nodes.keys().copied().collect()
        }
    }

    /// Records leader changes broadcast by a shard of this node (it hosts those groups).
    fn note_leaders(&self, changes: Vec<LeaderChange>) {
        self.cluster().note_local(self.config().node_id, changes);
    }

    /// Records the leaders another node announced: newer than what is known (a higher
    /// epoch, or a leader where the same epoch had none).
    fn note_remote_leaders(&self, changes: Vec<LeaderChange>) {
        self.cluster().note_remote(changes);
    }

    /// Kafka's in-sync replicas of `group` with leader epoch `epoch`: `replicas` less those
    /// its leader reported out of sync in that epoch (all of them while none is known).
    fn in_sync_replicas(&self, group: u64, epoch: i32, replicas: &[i32]) -> Vec<i32> {
        match self.cluster().out_of_sync.borrow().get(&group) {
            Some((e, out)) if *e == epoch => replicas
                .iter()
                .copied()
                .filter(|r| !out.contains(r))
                .collect(),
            _ => replicas.to_vec(),
        }
    }

    /// Cluster-mode readiness: the controller has a leader, the metadata names the cluster
    /// and this node is registered in it.
    fn cluster_ready(&self) -> bool {
        let m = self.metadata();
        self.controller_leader().is_some()
            && !m.cluster_id.is_empty()
            && m.nodes.contains_key(&self.config().node_id)
    }
}

/// The controller group's voters as the committed metadata names them: those set by
/// `Command::SetControllerVoters` (AddRaftVoter, RemoveRaftVoter), else the seeds.
pub fn controller_voters<H: ClusterHost>(shard: &H) -> Vec<i32> {
    let m = shard.committed_metadata();
    if !m.controller_voters.is_empty() {
        return m.controller_voters.clone();
    }
    let mut seeds: Vec<i32> = shard.config().seeds.iter().map(|&(id, _)| id).collect();
    seeds.sort_unstable();
    seeds
}

/// Starts cluster mode on this shard: the replicator, its RPC listener and loop; on shard 0
/// also the controller group.
pub async fn start<H: ClusterHost>(
    shard: &Rc<H>,
    tls: Option<crate::security::tls::Loaded<crate::security::tls::RpcConfigs>>,
) -> anyhow::Result<()> {
    let c = shard.config();
    let journal_path = crate::replication::journal::journal_path(&c.data_dir, shard.shard_id());
    let journal = crate::replication::journal::RaftJournal::open(journal_path).await?;
    let tls = tls.map(|t| Rc::new(crate::security::tls::Reloading::new(t)));
    let inter_broker_ssl = c.listeners[c.inter_broker_listener].protocol
        == crate::common::listeners::SecurityProtocol::Ssl;
    crate::cluster::net::set_tls(tls.clone().filter(|_| inter_broker_ssl));
    let pace = std::time::Duration::from_micros(shard.config().group_commit_min_interval_us);
    let rep = Replicator::new((c.node_id, shard.shard_id()), &c.seeds, journal, tls, pace);
    let port = c
        .rpc_addr
        .port()
        .checked_add(shard.shard_id() as u16)
        .ok_or_else(|| anyhow::anyhow!("rpc port + shard overflows"))?;
    rep.listen(std::net::SocketAddr::new(c.rpc_addr.ip(), port))?;
    rep.set_on_changes(shard.leader_changes_to_every_shard(false));
    rep.set_on_remote_leaders(shard.leader_changes_to_every_shard(true));
    *shard.cluster().replicator.borrow_mut() = Some(rep.clone());
    crate::runtime::task::spawn_local(rep.clone().run());
    crate::cluster::reassign::spawn(shard);
    if shard.shard_id() == 0 {
        start_controller(shard, &rep).await?;
    }
    Ok(())
}

#[expect(
    clippy::too_many_lines,
    reason = "longer than 70 lines when the lint came in (issue 27): split it when it next changes"
)]
async fn start_controller<H: ClusterHost>(
    shard: &Rc<H>,
    rep: &Rc<Replicator>,
) -> anyhow::Result<()> {
    let c = shard.config();
    if adopt::single_node_metadata_dir(c).exists() && c.seeds.len() > 1 {
        anyhow::bail!(
            "{} holds a single-node broker's topics: upgrade it by starting it as the only \
             seed of a new cluster (--seeds {}@<its rpc address>), then join more nodes",
            c.data_dir.display(),
            c.node_id
        );
    }
    let lc = LogConfig {
        allow_buffered_io: c.allow_buffered_io,
        shared_device_flush: c.shared_device_flush,
        ..LogConfig::default()
    };
    let cache = Rc::new(strand_storage::BatchCache::new(16 << 20));
    let log = strand_storage::Log::open(
        &c.data_dir.join(CONTROLLER_DIR),
        lc,
        Rc::new(SystemClock),
        cache,
    )
    .await?;
    let part = Rc::new(Partition::new(
        CONTROLLER_DIR.to_string(),
        0,
        log,
        usize::MAX,
        shard.metrics(),
    ));
    *shard.cluster().controller.borrow_mut() = Some(part.clone());
    let voters: Vec<u64> = c.seeds.iter().map(|&(id, _)| id as u64).collect();
    let first = c.seeds.first().map(|&(id, _)| id) == Some(c.node_id);
    // A node that joined follows the controller without voting.
    let learners: Vec<u64> = if crate::cluster::join::is_joiner(c) {
        vec![c.node_id as u64]
    } else {
        Vec::new()
    };
    {
        let weak = Rc::downgrade(shard);
        rep.set_on_controller_applied(Box::new(move || {
            if let Some(s) = weak.upgrade() {
                crate::runtime::task::spawn_local(async move { apply_controller(&s).await });
            }
        }));
    }
    // A blank controller replica keeps the guard: nothing records when it was created.
    let new = Newness {
        campaign: first,
        blank_is_new: false,
    };
    rep.host(CONTROLLER_GROUP, part, &voters, &learners, new)
        .await?;
    {
        let weak = Rc::downgrade(shard);
        rep.set_on_join(Rc::new(move |req| {
            let weak = weak.clone();
            Box::pin(async move {
                let req = match serde_json::from_value::<crate::cluster::join::JoinRequest>(req) {
                    Ok(req) => req,
                    Err(e) => {
                        return join_reply(None, Some(format!("malformed join request: {e}")))
                    }
                };
                match weak.upgrade() {
                    Some(s) => admit(&s, req).await,
                    None => join_reply(None, Some("the node is stopping".into())),
                }
            })
        }));
    }
    let weak = Rc::downgrade(shard);
    crate::runtime::task::spawn_local(async move {
        loop {
            sleep(LEARNER_CHECK_INTERVAL).await;
            match weak.upgrade() {
                Some(s) if !s.stopping() => {
                    if !move_controller_voters(&s) {
                        admit_learners(&s);
                    }
                }
                _ => return,
            }
        }
    });
    Ok(())
}

/// Applies committed controller records to the metadata and publishes the snapshot.
async fn apply_controller<H: ClusterHost>(shard: &Rc<H>) {
    if shard.cluster().applying.replace(true) {
        return;
    }
    while let Some(end) = shard.replicator().and_then(|r| r.controller_applied_end()) {
        let Some(part) = shard.cluster().controller.borrow().clone() else {
            break;
        };
        let from = shard.cluster().applied_to.get();
        if from >= end.0 {
            break;
        }
        let r = part
            .log()
            .read(
                strand_storage::KafkaOffset(from),
                strand_storage::KafkaOffset(end.0),
                APPLY_READ_BYTES,
                true,
            )
            .await;
        let r = match r {
            Ok(r) if !r.batches.is_empty() => r,
            Ok(_) => break,
            Err(e) => {
                tracing::error!(error = %e, "reading the controller log failed");
                break;
            }
        };
        {
            let mut m = shard.cluster().applied.borrow_mut();
            for b in r.batches {
                match crate::cluster::metastore::decode_commands(b) {
                    Ok(cmds) => {
                        for cmd in cmds {
                            if let Err(e) = m.apply(&cmd) {
                                tracing::debug!(error = %e, "controller command refused on apply");
                            }
                        }
                    }
                    Err(e) => tracing::error!(error = %e, "undecodable controller record skipped"),
                }
            }
        }
        shard.cluster().applied_to.set(r.next_offset.0);
        let snapshot = Arc::new(shard.cluster().applied.borrow().clone());
        shard.publish(snapshot).await;
    }
    shard.cluster().applying.set(false);
}

/// Encodes commands as one record batch (the metadata log's format).
pub fn encode_commands(cmds: &[Command]) -> anyhow::Result<Bytes> {
    let now = crate::common::clock::wall_ms();
    let mut b = BatchBuilder::new(now);
    for c in cmds {
        b.push(now, None, Some(&serde_json::to_vec(c)?), &[]);
    }
    Ok(b.build())
}

/// When every accepted command is visible in the committed metadata `m`: per command of
/// `cmds`, the error of one that lost a race to another node's change committed before it
/// (the controller's apply refused it; this node's trial had not seen that change yet).
fn committed(
    m: &Metadata,
    after: &Metadata,
    cmds: &[Command],
    accepted: &[Command],
) -> Option<Vec<Option<MetaError>>> {
    accepted
        .iter()
        .all(|c| visible(m, after, c))
        .then(|| cmds.iter().map(|c| lost_race(m, c)).collect())
}

/// The error a committed `cmd` ended with when another node's change won, as Kafka's
/// controller answers the second of two such requests: a topic created by another node's
/// request at the same time has another id (TOPIC_ALREADY_EXISTS); a topic deleted by
/// another request has no deletion of this one's token (UNKNOWN_TOPIC_OR_PARTITION); a
/// topic grown by another request to the count this one asked for was not grown by its
/// token (INVALID_PARTITIONS; a later growth by a third request reads the same, which
/// only a request racing two others can meet).
fn lost_race(m: &Metadata, cmd: &Command) -> Option<MetaError> {
    match cmd {
        Command::CreateTopic { name, id, .. } => m
            .topics
            .get(name)
            .is_some_and(|t| t.id != *id)
            .then(|| MetaError::TopicExists(name.clone())),
        Command::DeleteTopic { name, token } if *token != 0 => {
            (!m.deletions.contains(token)).then(|| MetaError::UnknownTopic(name.clone()))
        }
        Command::CreatePartitions { name, token, .. } if *token != 0 => {
            let t = m.topics.get(name)?;
            (t.grown_by != *token).then_some(MetaError::InvalidPartitions(t.shards.len() as i64))
        }
        _ => None,
    }
}

/// `results` with the lost races of `committed` in place of their success.
fn with_lost_races(
    results: Vec<Result<(), MetaError>>,
    lost: Vec<Option<MetaError>>,
) -> Vec<Result<(), MetaError>> {
    results
        .into_iter()
        .zip(lost.into_iter().chain(std::iter::repeat(None)))
        .map(|(r, l)| match (r, l) {
            (Ok(()), Some(e)) => Err(e),
            (r, _) => r,
        })
        .collect()
}

/// Whether `cmd` is visible in `m` (`after` is the state the command was checked against,
/// with it applied).
fn visible(m: &Metadata, after: &Metadata, cmd: &Command) -> bool {
    match cmd {
        Command::InitCluster { .. } => !m.cluster_id.is_empty(),
        Command::RegisterNode(n) => m.nodes.get(&n.id) == Some(n),
        Command::AdmitNode { token, .. } => m.join_tokens.contains_key(token),
        Command::CreateTopic { name, .. } => m.topics.contains_key(name),
        Command::DeleteTopic { name, .. } => !m.topics.contains_key(name),
        Command::CreatePartitions { name, .. } => {
            let want = after.topics.get(name).map_or(0, |t| t.shards.len());
            m.topics.get(name).is_some_and(|t| t.shards.len() >= want)
        }
        Command::ReserveProducerIds { up_to, .. } => m.producer_ids_reserved_to >= *up_to,
        Command::RemoveNode { id } => !m.nodes.contains_key(id),
        Command::ReassignPartition {
            name, partition, ..
        } => {
            // The move's target as committed, or its end (a move may finish at once).
            let target_of = |m: &Metadata| {
                let t = m.topics.get(name)?;
                Some(
                    t.moving
                        .get(partition)
                        .map_or_else(|| t.replicas_of(*partition).to_vec(), |r| r.target.clone()),
                )
            };
            target_of(m).is_some_and(|now| Some(now) == target_of(after))
        }
        Command::FinishReassignment {
            name,
            partition,
            target,
        } => m
            .topics
            .get(name)
            .is_none_or(|t| t.moving.get(partition).is_none_or(|r| &r.target != target)),
        Command::SetControllerVoters { voters } => {
            let mut sorted = voters.clone();
            sorted.sort_unstable();
            m.controller_voters == sorted
        }
        Command::AlterConfig { name, set, delete } => m.topics.get(name).is_some_and(|t| {
            set.iter().all(|(k, v)| t.configs.get(k) == Some(v))
                && delete.iter().all(|k| !t.configs.contains_key(k))
        }),
        Command::UpsertScramCredential {
            user,
            mechanism,
            credential,
        } => m.scram.get(user).and_then(|c| c.get(mechanism)) == Some(credential),
        Command::DeleteScramCredential { user, mechanism } => {
            m.scram.get(user).is_none_or(|c| !c.contains_key(mechanism))
        }
        Command::CreateAcls { acls } => acls.iter().all(|a| m.acls.contains(a)),
        Command::DeleteAcls { acls } => acls.iter().all(|a| !m.acls.contains(a)),
        Command::AlterGroupConfig { group, set, delete } => {
            holds(m.group_configs.get(group), set, delete)
        }
        Command::AlterBrokerConfig {
            broker,
            set,
            delete,
        } => holds(m.broker_configs.get(broker), set, delete),
        Command::AlterClientQuota {
            entity,
            set,
            remove,
        } => holds(m.quotas.get(entity), set, remove),
    }
}

/// Whether `values` has every entry of `set` and none of the keys `removed`.
fn holds<V: PartialEq>(
    values: Option<&std::collections::BTreeMap<String, V>>,
    set: &std::collections::BTreeMap<String, V>,
    removed: &[String],
) -> bool {
    set.iter()
        .all(|(k, v)| values.and_then(|x| x.get(k)) == Some(v))
        && removed
            .iter()
            .all(|k| values.is_none_or(|x| !x.contains_key(k)))
}

/// Whether `check` holds for the committed metadata: the state applied from the controller
/// log on shard 0 (where metadata commands run), else the published snapshot.
fn committed_here<H: ClusterHost, T>(shard: &H, check: impl Fn(&Metadata) -> T) -> T {
    if shard.shard_id() == 0 {
        check(&shard.cluster().applied.borrow())
    } else {
        check(&shard.metadata())
    }
}

/// How long a node catching up with the controller log waits at most (`catch_up`).
pub const CATCH_UP_TIMEOUT: Duration = Duration::from_secs(2);

/// Cluster mode, shard 0: waits until `found` holds for the applied metadata, or until this
/// node has every controller record committed before the call, as far as it can tell: it
/// heard from the controller's leader since the call began (a peer's batches arrive in the
/// order sent, so what that leader sent before is in this node's log), its log is committed
/// through its last entry (the leader's own log is), all of it is applied, and the snapshot
/// is published on every shard. At most `CATCH_UP_TIMEOUT`. Kafka forwards topic changes
/// to its active controller; a node here answers from the metadata it applied, so a topic
/// created through another node a moment ago must not be called unknown before this.
pub async fn catch_up<H: ClusterHost>(shard: &Rc<H>, found: impl Fn(&Metadata) -> bool) {
    let began = crate::common::clock::now();
    let deadline = began + CATCH_UP_TIMEOUT;
    while crate::common::clock::now() < deadline && !shard.stopping() {
        if found(&shard.cluster().applied.borrow()) && !shard.cluster().applying.get() {
            return;
        }
        let since = crate::common::clock::now().saturating_duration_since(began);
        if caught_up(&**shard, since) {
            return;
        }
        sleep(META_POLL).await;
    }
    tracing::debug!("not caught up with the controller log in time");
}

/// See [`catch_up`]: whether this node holds every controller record committed more than
/// `since` ago.
fn caught_up<H: ClusterHost>(shard: &H, since: Duration) -> bool {
    let Some(rep) = shard.replicator() else {
        return true;
    };
    let Some(v) = rep.controller_view() else {
        return false;
    };
    let Some(leader) = v.leader.and_then(|l| i32::try_from(l).ok()) else {
        return false;
    };
    let current = if leader == shard.config().node_id {
        true
    } else {
        rep.silent_for(leader).is_some_and(|t| t < since) && v.commit >= v.last_index
    };
    let c = shard.cluster();
    current
        && v.applied >= v.commit
        && rep
            .controller_applied_end()
            .is_some_and(|end| c.applied_to.get() >= end.0)
        && !c.applying.get()
}

/// Cluster mode: checks commands against the current metadata, proposes the accepted ones
/// to the controller (forwarded to its leader), and waits until they are visible here.
pub async fn meta_commands<H: ClusterHost>(
    shard: &Rc<H>,
    cmds: Vec<Command>,
) -> Vec<Result<(), MetaError>> {
    let mut trial = (*shard.committed_metadata()).clone();
    let mut results: Vec<Result<(), MetaError>> = cmds.iter().map(|c| trial.apply(c)).collect();
    let accepted: Vec<Command> = cmds
        .iter()
        .zip(&results)
        .filter(|(_, r)| r.is_ok())
        .map(|(c, _)| c.clone())
        .collect();
    if accepted.is_empty() {
        return results;
    }
    let fail = |results: &mut Vec<Result<(), MetaError>>, why: String| {
        for r in results.iter_mut().filter(|r| r.is_ok()) {
            *r = Err(MetaError::Internal(why.clone()));
        }
    };
    let payload = match encode_commands(&accepted) {
        Ok(p) => p,
        Err(e) => {
            fail(&mut results, format!("encoding metadata commands: {e}"));
            return results;
        }
    };
    let Some(rep) = shard.replicator() else {
        fail(&mut results, "no replicator on this shard".into());
        return results;
    };
    let started = crate::common::clock::now();
    let deadline = started + META_COMMIT_TIMEOUT;
    let mut warned = false;
    let count = u32::try_from(accepted.len()).unwrap_or(u32::MAX);
    while crate::common::clock::now() < deadline && !shard.stopping() {
        let forwarded = rep.forward_to_controller(payload.clone(), count);
        if let Err(e) = &forwarded {
            tracing::debug!(error = %e, "controller proposal not accepted yet");
        }
        if !warned
            && crate::common::clock::now().saturating_duration_since(started) >= META_COMMIT_SLOW
        {
            warned = true;
            tracing::warn!(
                commands = ?accepted.iter().map(Command::kind).collect::<Vec<_>>(),
                controller_leader = ?shard.controller_leader(),
                forward = ?forwarded.err().map(|e| e.to_string()),
                "metadata change not committed yet"
            );
        }
        let retry_at = crate::common::clock::now() + META_RETRY;
        while crate::common::clock::now() < retry_at {
            // The committed state, as applied from the controller log: publishing it (opening
            // thousands of partitions) may take longer than a client waits.
            if let Some(lost) = committed_here(&**shard, |m| committed(m, &trial, &cmds, &accepted))
            {
                return with_lost_races(results, lost);
            }
            sleep(META_POLL).await;
        }
    }
    // The shard may have been busy (opening thousands of partitions) past the deadline:
    // look once more before reporting a failure.
    if let Some(lost) = committed_here(&**shard, |m| committed(m, &trial, &cmds, &accepted)) {
        return with_lost_races(results, lost);
    }
    fail(
        &mut results,
        "the controller did not commit the change in time (no controller leader?)".into(),
    );
    results
}

/// Registers this node with the controller (and names the cluster if nobody has), retrying
/// until the registration is visible.
pub async fn register<H: ClusterHost>(shard: &Rc<H>) {
    let info = crate::cluster::join::node_info(shard.config(), shard.shard_count());
    while !shard.stopping() {
        let m = shard.committed_metadata();
        if let Some(other) = m.nodes.values().find(|n| n.shards != info.shards) {
            tracing::error!(
                node = other.id,
                shards = other.shards,
                ours = info.shards,
                "every node of a cluster must run the same number of shards (--smp)"
            );
        }
        let mut cmds = Vec::new();
        if m.cluster_id.is_empty() {
            cmds.push(Command::InitCluster {
                cluster_id: crate::cluster::metastore::new_cluster_id(),
            });
        }
        if m.nodes.get(&info.id) != Some(&info) {
            cmds.push(Command::RegisterNode(info.clone()));
        }
        if cmds.is_empty() {
            return;
        }
        let r = meta_commands(shard, cmds).await;
        if r.iter().all(Result::is_ok) {
            continue;
        }
        sleep(META_RETRY).await;
    }
}

/// Cluster mode: the partitions of `meta` this shard hosts (replica here, on this shard).
pub fn hosted_here<H: ClusterHost>(shard: &H, meta: &Metadata) -> Vec<(String, i32)> {
    let me = shard.config().node_id;
    let mut out = Vec::new();
    for (name, t) in &meta.topics {
        for (p, &s) in t.shards.iter().enumerate() {
            let p = p as i32;
            if s as usize == shard.shard_id() && t.replicas_of(p).contains(&me) {
                out.push((name.clone(), p));
            }
        }
    }
    out
}

/// Cluster mode: makes an opened partition a Raft group of its replicas; the preferred
/// leader (first replica) campaigns at once when the group is new.
pub async fn host_partition<H: ClusterHost>(shard: &Rc<H>, meta: &Metadata, part: Rc<Partition>) {
    let Some(rep) = shard.replicator() else {
        return;
    };
    let Some(t) = meta.topics.get(&part.topic) else {
        return;
    };
    let me = shard.config().node_id;
    let p = part.index;
    // The group's configuration before its log's changes: its origin replicas. A node
    // hosting a moved partition without a log (new to it, or removed and back) joins as a
    // learner and learns the rest from the log or a snapshot; never as a voter that might
    // elect itself on an empty log.
    let origin = usize::try_from(p)
        .ok()
        .and_then(|i| t.origin.get(i))
        .map_or(&[][..], Vec::as_slice);
    let moved = t.moved.contains(&p);
    let voters: Vec<u64> = origin
        .iter()
        .filter(|&&n| !(moved && n == me))
        .map(|&n| n as u64)
        .collect();
    let learners: Vec<u64> = if moved { vec![me as u64] } else { Vec::new() };
    let replicas = t.replicas_of(p);
    let preferred = replicas.first() == Some(&me) && !moved;
    let group = GroupId(t.group_of(p));
    if let Some(hook) = shard.on_leader_gain(&part) {
        part.set_on_leader_gain(hook);
    }
    let new = Newness {
        campaign: preferred,
        blank_is_new: t.born_on(p, me, shard.config().incarnation),
    };
    if let Err(e) = rep.host(group, part.clone(), &voters, &learners, new).await {
        tracing::error!(topic = %part.topic, partition = part.index, error = %format!("{e:#}"),
            "cannot start the partition's raft group");
    }
    refresh_partition(&**shard, meta, &part);
}

/// Cluster mode: what a metadata change means for a partition hosted here — its preferred
/// leader (the first replica, which a move changes).
pub fn refresh_partition<H: ClusterHost>(shard: &H, meta: &Metadata, part: &Partition) {
    let (Some(rep), Some(t)) = (shard.replicator(), meta.topics.get(&part.topic)) else {
        return;
    };
    if let Some(&first) = t.replicas_of(part.index).first() {
        rep.set_preferred(GroupId(t.group_of(part.index)), first);
    }
}

/// Cluster mode: stops the Raft group of a partition this node no longer hosts.
pub fn unhost_partition<H: ClusterHost>(shard: &H, meta_before: &Metadata, topic: &str, p: i32) {
    let (Some(rep), Some(t)) = (shard.replicator(), meta_before.topics.get(topic)) else {
        return;
    };
    rep.unhost(GroupId(t.group_of(p)));
}

/// Shard 0 of a seed: admits a node asking to join (a control frame's body is its
/// `JoinRequest`): commits `AdmitNode` and answers with the id the controller gave it.
async fn admit<H: ClusterHost>(shard: &Rc<H>, req: crate::cluster::join::JoinRequest) -> Bytes {
    if req.info.shards as usize != shard.shard_count() {
        let why = format!(
            "this cluster runs {} shards per node, the joining node {} (--smp must match)",
            shard.shard_count(),
            req.info.shards
        );
        return join_reply(None, Some(why));
    }
    let seeds = shard.config().seeds.iter().map(|&(id, _)| id).collect();
    let token = req.token.clone();
    let cmd = Command::AdmitNode {
        token: req.token,
        info: req.info,
        seeds,
    };
    match meta_commands(shard, vec![cmd]).await.pop() {
        Some(Ok(())) => {
            let id = shard.committed_metadata().join_tokens.get(&token).copied();
            tracing::info!(node = ?id, "admitted a joining node");
            join_reply(id, None)
        }
        Some(Err(e)) => join_reply(None, Some(e.to_string())),
        None => join_reply(None, Some("no outcome".into())),
    }
}

fn join_reply(node_id: Option<i32>, error: Option<String>) -> Bytes {
    let reply = crate::cluster::join::JoinReply { node_id, error };
    // A struct of an option and a short string always serializes.
    Bytes::from(serde_json::to_vec(&reply).unwrap_or_default())
}

/// As the controller's leader: takes the next step of moving the controller group to the
/// voters the metadata names (`Command::SetControllerVoters`; none named: the seeds stay).
/// Voters outside them become learners and keep following. True when this round proposed
/// a change or handed over leadership (learners wait for the next round); false when there
/// was nothing to do or the move waits (a new voter catching up, or down).
fn move_controller_voters<H: ClusterHost>(shard: &Rc<H>) -> bool {
    let Some(rep) = shard.replicator() else {
        return false;
    };
    if !rep.leads_controller() {
        return false;
    }
    let target = shard.committed_metadata().controller_voters.clone();
    let Some((mut voters, _)) = rep.controller_members() else {
        return false;
    };
    voters.sort_unstable();
    let wanted: Vec<u64> = target.iter().map(|&n| n as u64).collect();
    if target.is_empty() || voters == wanted {
        return false;
    }
    match rep.move_controller_voters(&target) {
        Ok(MembershipStep::Waiting(why)) => {
            // A new voter catching up (or down): joined nodes are still admitted as
            // learners meanwhile, or a voter that never arrives would keep them out.
            tracing::debug!(?target, why, "controller voters: waiting");
            false
        }
        Ok(step) => {
            tracing::info!(?step, ?target, "moving the controller's voters");
            true
        }
        Err(e) => {
            tracing::warn!(?target, error = %e, "controller voters not moved yet");
            false
        }
    }
}

/// As the controller's leader: every registered node outside the controller group joins
/// it as a learner, and a learner no longer registered (removed from the cluster) leaves
/// it (one configuration change at a time; the next check retries).
fn admit_learners<H: ClusterHost>(shard: &Rc<H>) {
    let Some(rep) = shard.replicator() else {
        return;
    };
    if !rep.leads_controller() {
        return;
    }
    let Some((voters, learners)) = rep.controller_members() else {
        return;
    };
    let registered: Vec<u64> = shard
        .committed_node_ids()
        .into_iter()
        .map(|id| id as u64)
        .collect();
    let change = registered
        .iter()
        .find(|id| !voters.contains(id) && !learners.contains(id))
        .map(|&id| (id, true))
        .or_else(|| {
            learners
                .iter()
                .find(|id| !registered.contains(id))
                .map(|&id| (id, false))
        });
    let Some((node, learner)) = change else {
        return;
    };
    match rep.set_controller_learner(node as i32, learner) {
        Ok(()) if learner => tracing::info!(
            node,
            "adding a joined node to the controller group as a learner"
        ),
        Ok(()) => tracing::info!(
            node,
            "removing a node that left the cluster from the controller group"
        ),
        Err(e) => tracing::debug!(node, error = %e, "controller learners not changed yet"),
    }
}

/// The RPC addresses of the registered nodes (the seeds' come from `--seeds`).
pub fn peer_addrs(meta: &Metadata) -> Vec<(i32, std::net::SocketAddr)> {
    meta.nodes
        .values()
        .filter(|n| n.rpc_port != 0)
        .filter_map(|n| {
            let ip: std::net::IpAddr = n.host.parse().ok()?;
            Some((n.id, std::net::SocketAddr::new(ip, n.rpc_port)))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::stand_in_leader;

    const REPLICAS: [i32; 3] = [1, 2, 3];

    #[test]
    fn a_node_that_lost_its_leadership_names_another_replica() {
        for seed in 0..4 {
            let named = stand_in_leader(1, Some(1), false, &REPLICAS, &REPLICAS, seed);
            assert!(matches!(named, Some(2 | 3)), "{named:?}");
        }
        let seen: Vec<_> = (0..2)
            .map(|seed| stand_in_leader(1, Some(1), false, &REPLICAS, &REPLICAS, seed))
            .collect();
        assert_eq!(seen, [Some(2), Some(3)], "the seed picks among the others");
    }

    #[test]
    fn an_isolated_node_names_the_leader_it_knew_last() {
        assert_eq!(
            stand_in_leader(3, Some(1), true, &REPLICAS, &REPLICAS, 7),
            Some(1)
        );
        // Never a leader known, or the last one is not listed (fenced): another replica.
        assert_eq!(
            stand_in_leader(3, None, true, &REPLICAS, &REPLICAS, 0),
            Some(1)
        );
        assert_eq!(
            stand_in_leader(3, Some(1), true, &REPLICAS, &[2, 3], 0),
            Some(2)
        );
    }

    #[test]
    fn a_node_hearing_its_peers_names_no_leader_during_an_election() {
        // The last leader (node 1) may be dead: naming it would send clients there.
        assert_eq!(
            stand_in_leader(3, Some(1), false, &REPLICAS, &REPLICAS, 0),
            None
        );
        assert_eq!(
            stand_in_leader(3, None, false, &REPLICAS, &REPLICAS, 0),
            None
        );
    }

    #[test]
    fn with_no_other_listed_replica_there_is_no_stand_in() {
        assert_eq!(stand_in_leader(1, Some(1), true, &[1], &REPLICAS, 0), None);
        assert_eq!(stand_in_leader(1, Some(1), false, &REPLICAS, &[1], 0), None);
    }

    fn create(name: &str, id: u128) -> super::Command {
        super::Command::CreateTopic {
            name: name.to_string(),
            id,
            shards: vec![0],
            configs: Default::default(),
            replicas: vec![REPLICAS.to_vec()],
        }
    }

    #[test]
    fn a_creation_that_another_nodes_creation_beat_is_answered_topic_exists() {
        use super::{committed, with_lost_races, MetaError, Metadata};
        let mut ours = Metadata::default();
        ours.apply(&create("t", 1)).expect("trial");
        let mut theirs = Metadata::default();
        theirs
            .apply(&create("t", 2))
            .expect("the other node's creation");
        let cmds = [create("t", 1), create("u", 3)];
        let mut both = theirs.clone();
        both.apply(&cmds[1]).expect("ours of u");
        let lost = committed(&both, &ours, &cmds, &cmds).expect("both visible");
        let answered = with_lost_races(vec![Ok(()), Ok(())], lost);
        assert!(
            matches!(&answered[..], [Err(MetaError::TopicExists(t)), Ok(())] if t == "t"),
            "{answered:?}"
        );
        // Our own creation committed: success.
        let lost = committed(&ours, &ours, &cmds[..1], &cmds[..1]).expect("visible");
        assert!(with_lost_races(vec![Ok(())], lost)[0].is_ok());
        // Not committed yet: no answer.
        assert!(committed(&Metadata::default(), &ours, &cmds[..1], &cmds[..1]).is_none());
    }

    #[test]
    fn a_deletion_or_growth_that_another_request_beat_is_answered_as_kafka_answers_it() {
        use super::{committed, with_lost_races, Command, MetaError, Metadata};
        let mut base = Metadata::default();
        base.apply(&create("t", 1)).expect("the topic");
        let delete = |token| Command::DeleteTopic {
            name: "t".into(),
            token,
        };
        let grow = |token| Command::CreatePartitions {
            name: "t".into(),
            shards: vec![0],
            replicas: vec![REPLICAS.to_vec()],
            from_count: Some(1),
            token,
        };
        // The same change made by two requests through two nodes, tokens 10 (ours) and 20
        // (theirs), the controller log applying theirs first: each request's answer.
        let race = |make: &dyn Fn(u128) -> Command| {
            let mut ours = base.clone();
            ours.apply(&make(10)).expect("our trial");
            let mut theirs = base.clone();
            theirs.apply(&make(20)).expect("their change");
            assert!(theirs.apply(&make(10)).is_err(), "ours refused on apply");
            [10, 20].map(|token| {
                let cmd = [make(token)];
                let lost = committed(&theirs, &ours, &cmd, &cmd).expect("visible");
                with_lost_races(vec![Ok(())], lost).remove(0)
            })
        };
        let [ours, theirs] = race(&delete);
        assert!(matches!(ours, Err(MetaError::UnknownTopic(t)) if t == "t"));
        assert!(theirs.is_ok(), "theirs won");
        let [ours, theirs] = race(&grow);
        assert!(matches!(ours, Err(MetaError::InvalidPartitions(2))));
        assert!(theirs.is_ok(), "theirs won");
        // A request without a token (an older binary's) is answered as before: success
        // when the topic has the count it asked for.
        let mut theirs = base.clone();
        theirs.apply(&grow(20)).expect("their growth");
        let lost = committed(&theirs, &base, &[grow(0)], &[grow(0)]).expect("visible");
        assert!(with_lost_races(vec![Ok(())], lost)[0].is_ok());
    }

    fn change(group: u64, leader: i32, epoch: i32) -> crate::replication::LeaderChange {
        crate::replication::LeaderChange {
            group,
            leader,
            epoch,
            out_of_sync: Vec::new(),
        }
    }

    #[test]
    fn a_voter_that_has_not_heard_the_winner_keeps_the_announced_leader() {
        let state = super::ClusterState::default();
        let leader = |g| state.leaders.borrow().get(&g).copied();
        // Node 2 hears node 1's announcement of epoch 1, then its own replica reports the
        // term it voted in, with no leader heard yet.
        state.note_remote(vec![change(7, 1, 1)]);
        state.note_local(2, vec![change(7, -1, 1)]);
        assert_eq!(leader(7), Some((1, 1)));
        // Its replica hears the leader, then loses it in the same epoch (a pre-vote after
        // the leader went silent): leaderless.
        state.note_local(2, vec![change(7, 1, 1)]);
        state.note_local(2, vec![change(7, -1, 1)]);
        assert_eq!(leader(7), Some((-1, 1)));
        // A later epoch is taken as reported.
        state.note_remote(vec![change(7, 3, 2)]);
        state.note_local(2, vec![change(7, -1, 3)]);
        assert_eq!(leader(7), Some((-1, 3)));
        // A node that led the epoch itself and stepped down (check-quorum) is leaderless.
        state.note_local(2, vec![change(8, 2, 4)]);
        state.note_local(2, vec![change(8, -1, 4)]);
        assert_eq!(leader(8), Some((-1, 4)));
    }
}
