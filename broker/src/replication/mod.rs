//! The shard's replication runtime (ARCHITECTURE.md, Replication): one `MultiRaft` driver
//! per shard owning the Raft groups of the partitions this shard hosts (and, on shard 0,
//! the controller's group 0), its loop, and the internal RPC that carries its messages.
//!
//! - The loop sleeps until woken (a proposal, a peer's batch, finished disk work) or the
//!   next tick, then runs one turn: the groups whose disk work finished are completed,
//!   `turn_begin` (the leaders' appends leave at once), each dirty store's disk work starts
//!   as its own task (one fdatasync per partition per write), `turn_end`. No turn waits
//!   for the disk: a group with a write in flight waits alone.
//! - Groups live on the same shard on every node (every node runs the same number of
//!   shards and placement is in the metadata), so shard s talks only to shard s of its
//!   peers: one connection per (peer node, shard), at the peer's RPC port + s.
//! - After each turn the partitions learn their role, epoch and high watermark, and leader
//!   changes are broadcast to every shard of this node (for Metadata and FindCoordinator).
//!
//! Invariants: no `RefCell` borrow of the driver is held across an `.await`; a proposal's
//! waiter is answered exactly once (commit with its base offset, or why not); outgoing
//! queues are bounded in bytes (a full queue drops the batch: Raft retries).
//!
//! Files: `net` (the RPC transport), `balance` (preferred-leader balancing), `store` (a
//! partition's Raft log over its storage log), `journal` (the shard's Raft state file),
//! `isr` (Kafka's in-sync set), `ack_timer` (follower acknowledgement timing), `upgrade`
//! (a single node's log becoming a group's).
//!
//! May use: `common`, `runtime`, `partition`.

pub mod ack_timer;
pub mod balance;
pub mod isr;
pub mod journal;
pub mod net;
#[cfg(feature = "sim")]
pub mod sim;
pub mod store;
mod upgrade;

use std::cell::{Cell, RefCell};
use std::collections::{BTreeSet, HashMap};
use std::net::SocketAddr;
use std::rc::Rc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures::channel::{mpsc, oneshot};
use futures::future::LocalBoxFuture;
use futures::StreamExt;

use strand_raft::{
    Ack, Completion, DriverConfig, GroupId, KafkaOffset, MessageBatch, MultiRaft, NodeId,
    ProposalId, RaftError, RaftIndex,
};

use crate::common::errors::KafkaError;
use crate::partition::Partition;
use crate::replication::journal::RaftJournal;
use crate::replication::store::RaftLogStore;
use balance::LEADER_BALANCE_INTERVAL;
use net::{cluster_tag, RpcOut};

/// The controller's Raft group.
pub const CONTROLLER_GROUP: GroupId = GroupId(0);
/// The journal append of one turn, awaited by each of its jobs.
type StateWritten =
    futures::future::Shared<futures::future::LocalBoxFuture<'static, Result<(), String>>>;

/// A turn at least this long is logged (at most once per `SLOW_TURN_LOG_INTERVAL`): a
/// tenth of the default election timeout.
const SLOW_TURN: Duration = Duration::from_millis(50);
const SLOW_TURN_LOG_INTERVAL: Duration = Duration::from_secs(10);
/// How often a shard announces every group it leads to its peers (changes go at once):
/// a node learns the leaders of partitions it does not host, and one that missed an
/// announcement (it joined, or was cut off) catches up.
pub const LEADERS_ANNOUNCE_INTERVAL: Duration = Duration::from_secs(5);
/// How long a new group's preferred replica waits for a leader before it campaigns again
/// (`Replicator::retry_first_campaign`): longer than a vote round on a loaded node, well
/// under the election timeout.
const FIRST_CAMPAIGN_RETRY: Duration = Duration::from_millis(50);
/// How many times it campaigns again before the election timeout alone is left.
const FIRST_CAMPAIGN_ATTEMPTS: usize = 12;
/// Kafka's `broker.session.timeout.ms` default: a node the controller's leader has not
/// heard from for this long is fenced (left out of Metadata).
pub const BROKER_SESSION_TIMEOUT: Duration = Duration::from_secs(9);
/// Groups per announcement frame: each is 25–80 bytes of JSON (group, leader, epoch and the
/// out-of-sync replicas), so a frame stays under the control frame's 64 KiB limit.
pub(crate) const LEADERS_PER_ANNOUNCEMENT_MAX: usize = 500;
/// The driver's clock: monotonic time since the replicator started.
#[derive(Clone, Copy, Debug)]
pub struct MonoClock(Instant);

impl strand_raft::Clock for MonoClock {
    fn now(&self) -> Duration {
        crate::common::clock::now().saturating_duration_since(self.0)
    }
}

/// A group's partition and its last published role.
struct Hosted {
    part: Rc<Partition>,
    /// The preferred leader (first replica): leadership returns to it when it is in sync.
    preferred: NodeId,
    leader: Option<NodeId>,
    term: u64,
    /// The last leader known (`leader` is none during an election): a change from one
    /// known leader to another is logged, so a failover leaves a line on every node.
    known_leader: Option<NodeId>,
    /// Counted in the shard's `ReplicaHealth` after its last turn.
    leaderless: bool,
    under_replicated: bool,
    /// As leader: Kafka's in-sync set and the replicas last published out of it.
    isr: crate::replication::isr::IsrTracker,
    out_of_sync: Vec<i32>,
}

/// Replication health of a shard's groups after a turn.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ReplicaHealth {
    /// Hosted partitions whose leader this node does not know (an election runs).
    pub leaderless: u64,
    /// Partitions led here with a voter behind the commit index or silent for an election
    /// timeout.
    pub under_replicated: u64,
    /// Whether this node leads the controller group (shard 0).
    pub controller_leader: bool,
}

/// The body of an RPC control frame between nodes (JSON).
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize, PartialEq, Eq)]
pub enum ControlMsg {
    /// A node asks a seed's shard 0 for an id; answered with a control frame holding the
    /// seed's reply. The request is the cluster's (`cluster::join::JoinRequest`), opaque
    /// here: replication carries it to the `OnJoin` handler and knows nothing of membership.
    Join(serde_json::Value),
    /// Groups the sender leads: (group, leader node, leader epoch). Every node learns the
    /// leaders of partitions it does not host, for Metadata and FindCoordinator.
    Leaders(Vec<LeaderChange>),
}

/// Answers a node asking to join (shard 0): the reply frame's body.
pub type OnJoin = Rc<dyn Fn(serde_json::Value) -> futures::future::LocalBoxFuture<'static, Bytes>>;

/// A group's leader as a node sees it after a turn; when `leader` is the node reporting
/// it, also the replicas out of Kafka's in-sync set (see `crate::replication::isr`).
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct LeaderChange {
    /// The Raft group.
    #[serde(rename = "g")]
    pub group: u64,
    /// Leader node, -1 when none is known.
    #[serde(rename = "l")]
    pub leader: i32,
    /// The leader's term as the Kafka leader epoch.
    #[serde(rename = "e")]
    pub epoch: i32,
    /// Reported by the leader itself: replicas out of the in-sync set (sorted).
    #[serde(rename = "o", default, skip_serializing_if = "Vec::is_empty")]
    pub out_of_sync: Vec<i32>,
}
/// Receives the leader changes of a turn.
pub type OnLeaderChanges = Box<dyn Fn(Vec<LeaderChange>)>;

/// This shard's multi-raft driver.
type Driver = MultiRaft<RaftLogStore, RpcOut, MonoClock>;

/// The shard's replication runtime. See the module doc.
pub struct Replicator {
    me: NodeId,
    shard: usize,
    cluster_tag: u64,
    /// The driver's clock (same origin), to sleep until its next tick.
    clock: MonoClock,
    driver: RefCell<Driver>,
    /// The transport's count of dropped frames.
    rpc_dropped: Rc<Cell<u64>>,
    /// Mutual TLS between nodes (`rpc_tls_*`), for the listener (the transport has a copy).
    tls: Option<net::RpcTls>,
    /// Peer connections refused in their TLS handshake.
    rpc_tls_refused: Cell<u64>,
    /// Follower acknowledgement times (the transport notes the sends).
    acks: Rc<RefCell<crate::replication::ack_timer::AckTimer>>,
    waiters: RefCell<HashMap<ProposalId, oneshot::Sender<Result<KafkaOffset, RaftError>>>>,
    hosted: RefCell<HashMap<GroupId, Hosted>>,
    wake_tx: mpsc::Sender<()>,
    wake_rx: RefCell<Option<mpsc::Receiver<()>>>,
    /// Called after each turn with the leader changes (the shard broadcasts them).
    on_changes: RefCell<Option<OnLeaderChanges>>,
    /// Called after a turn in which the controller group applied entries.
    on_controller_applied: RefCell<Option<Box<dyn Fn()>>>,
    /// Answers a node asking to join (shard 0).
    on_join: RefCell<Option<OnJoin>>,
    /// Receives the leaders other nodes announce.
    on_remote_leaders: RefCell<Option<OnLeaderChanges>>,
    /// When this shard last announced every group it leads.
    announced_at: Cell<Instant>,
    /// A connection with a peer began since the last turn (its Hello reached this shard, or
    /// this shard's writer to it connected; shared with `RpcOut`): the next turn announces
    /// every group led here, so a node that restarted knows the leaders of the partitions
    /// it does not host at once instead of answering Metadata without them until the next
    /// periodic announcement (`LEADERS_ANNOUNCE_INTERVAL`).
    announce_all_due: Rc<Cell<bool>>,
    controller_applied: Cell<Option<KafkaOffset>>,
    /// After the last turn: hosted partitions with no known leader, partitions led here with a
    /// voter out of sync, and whether this node leads the controller.
    health: Cell<ReplicaHealth>,
    reads_in_flight: RefCell<std::collections::HashSet<GroupId>>,
    /// Compactions retention asked for since the last turn: applied at the start of the
    /// next one (never while a persist job of the turn is in flight), whose jobs persist
    /// the new points and delete the segments they cover.
    compactions: RefCell<Vec<(GroupId, RaftIndex)>>,
    /// The Raft state of every group on this shard (one append per turn).
    journal: Rc<RaftJournal>,
    /// Groups whose disk work (a `PersistJob`) is running; see `turn`.
    persisting: RefCell<BTreeSet<GroupId>>,
    /// Disk work finished since the last turn, with its outcome.
    persist_done: RefCell<Vec<(GroupId, Result<(), String>)>>,
    slow_turn_log: crate::common::logging::RateLimit,
    stopping: Cell<bool>,
    /// The node is shutting down and hands its leaderships away (`balance`): none is
    /// handed back to it.
    draining: Cell<bool>,
}

/// A partition proposes through its group's replicator (`partition::RaftGroups`).
impl crate::partition::RaftGroups for Replicator {
    fn applied_index(&self, group: GroupId) -> Option<RaftIndex> {
        Replicator::applied_index(self, group)
    }

    fn compact_for_retention(&self, group: GroupId, through: RaftIndex) {
        Replicator::compact_for_retention(self, group, through);
    }

    fn propose_log_start(
        &self,
        group: GroupId,
        offset: KafkaOffset,
    ) -> LocalBoxFuture<'_, Result<(), KafkaError>> {
        Box::pin(Replicator::propose_log_start(self, group, offset))
    }

    fn propose(
        &self,
        group: GroupId,
        batch: Bytes,
        record_count: u32,
        ack: Ack,
    ) -> LocalBoxFuture<'_, Result<KafkaOffset, KafkaError>> {
        Box::pin(Replicator::propose(self, group, batch, record_count, ack))
    }
}

/// What a replica that opens blank (no Raft state) is, for `Replicator::host`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Newness {
    /// Start an election at once (the preferred leader of a new group).
    pub campaign: bool,
    /// Blank because the group is new here, not because its state was lost: it votes
    /// like any replica from the start (`cluster::incarnation`), instead of refusing
    /// candidates ahead of it until a leader reaches it.
    pub blank_is_new: bool,
}

impl Replicator {
    /// A replicator for shard `shard` of node `me` with peers at their shard-0 RPC
    /// addresses, over mutual TLS when `tls` is given; each group's store writes begin at
    /// most once per `sync_min_interval` (`group_commit_min_interval_us`; zero: no pacing).
    pub fn new(
        (me, shard): (i32, usize),
        seeds: &[(i32, SocketAddr)],
        journal: RaftJournal,
        tls: Option<net::RpcTls>,
        sync_min_interval: Duration,
    ) -> Rc<Replicator> {
        let me_id = NodeId(me as u64);
        let tag = cluster_tag(seeds);
        let rpc_dropped = Rc::new(Cell::new(0));
        let acks = Rc::new(RefCell::new(
            crate::replication::ack_timer::AckTimer::default(),
        ));
        let (wake_tx, wake_rx) = mpsc::channel(1);
        let announce_all_due = Rc::new(Cell::new(false));
        let out = RpcOut {
            connected: (announce_all_due.clone(), wake_tx.clone()),
            me: me_id,
            shard,
            cluster_tag: tag,
            peers: seeds
                .iter()
                .filter(|(id, _)| *id != me)
                .map(|&(id, a)| (NodeId(id as u64), a))
                .collect(),
            seeds: seeds.iter().map(|&(id, _)| NodeId(id as u64)).collect(),
            queues: HashMap::new(),
            dropped: rpc_dropped.clone(),
            acks: acks.clone(),
            tls: tls.clone(),
        };
        let seed = u64::from(crc32c::crc32c(
            format!("{me}/{shard}/{:?}", crate::common::clock::now()).as_bytes(),
        ));
        let mut config = DriverConfig::new(me_id, seed);
        config.async_persist = true;
        config.sync_min_interval = sync_min_interval;
        // Partition followers serve nothing from applied entries (Fetch goes to the leader),
        // so they learn the commit index with the next append; every node applies the
        // controller's metadata, so it is announced at once.
        config.eager_commit_groups.insert(CONTROLLER_GROUP);
        let clock = MonoClock(crate::common::clock::now());
        Rc::new(Replicator {
            me: me_id,
            shard,
            cluster_tag: tag,
            clock,
            driver: RefCell::new(MultiRaft::new(config, clock, out)),
            rpc_dropped,
            tls,
            rpc_tls_refused: Cell::new(0),
            acks,
            waiters: RefCell::new(HashMap::new()),
            hosted: RefCell::new(HashMap::new()),
            wake_tx,
            wake_rx: RefCell::new(Some(wake_rx)),
            on_changes: RefCell::new(None),
            on_controller_applied: RefCell::new(None),
            on_join: RefCell::new(None),
            on_remote_leaders: RefCell::new(None),
            announced_at: Cell::new(crate::common::clock::now()),
            announce_all_due,
            controller_applied: Cell::new(None),
            health: Cell::new(ReplicaHealth::default()),
            reads_in_flight: RefCell::new(Default::default()),
            compactions: RefCell::new(Vec::new()),
            journal: Rc::new(journal),
            persisting: RefCell::new(BTreeSet::new()),
            persist_done: RefCell::new(Vec::new()),
            slow_turn_log: crate::common::logging::RateLimit::new(SLOW_TURN_LOG_INTERVAL),
            stopping: Cell::new(false),
            draining: Cell::new(false),
        })
    }

    /// Sets the callback receiving leader changes after each turn.
    pub fn set_on_changes(&self, f: OnLeaderChanges) {
        *self.on_changes.borrow_mut() = Some(f);
    }

    /// Sets the callback run when the controller group applied entries.
    pub fn set_on_controller_applied(&self, f: Box<dyn Fn()>) {
        *self.on_controller_applied.borrow_mut() = Some(f);
    }

    /// Sets the handler of join requests (shard 0).
    pub fn set_on_join(&self, f: OnJoin) {
        *self.on_join.borrow_mut() = Some(f);
    }

    /// A peer node connected (it started, restarted or was cut off): it may know none of
    /// the leaders of this shard's groups, so the next turn announces all of them.
    pub(crate) fn peer_connected(&self, peer: NodeId) {
        self.driver.borrow_mut().peer_reconnected(peer);
        self.announce_all_due.set(true);
        self.wake();
    }

    /// Sets the receiver of the leaders other nodes announce.
    pub fn set_on_remote_leaders(&self, f: OnLeaderChanges) {
        *self.on_remote_leaders.borrow_mut() = Some(f);
    }

    /// Tells every peer node (the same shard of it) which of `changes` this node leads now;
    /// `all` announces every group led here instead.
    fn announce_leaders(&self, changes: &[LeaderChange], all: bool) {
        let me = self.me.0 as i32;
        let led: Vec<LeaderChange> = if all {
            let d = self.driver.borrow();
            self.hosted
                .borrow()
                .iter()
                .filter(|(&g, _)| d.is_leader(g))
                .map(|(&g, h)| {
                    let term = d.term(g).map_or(0, |t| t.0);
                    LeaderChange {
                        group: g.0,
                        leader: me,
                        epoch: i32::try_from(term).unwrap_or(i32::MAX),
                        out_of_sync: h.out_of_sync.clone(),
                    }
                })
                .collect()
        } else {
            changes.iter().filter(|c| c.leader == me).cloned().collect()
        };
        if led.is_empty() {
            return;
        }
        let mut d = self.driver.borrow_mut();
        let out = d.transport_mut();
        for chunk in led.chunks(LEADERS_PER_ANNOUNCEMENT_MAX) {
            let msg = ControlMsg::Leaders(chunk.to_vec());
            let Ok(body) = serde_json::to_vec(&msg) else {
                continue;
            };
            let peers: Vec<NodeId> = out.peers.keys().copied().collect();
            for to in peers {
                out.send_control(to, Bytes::from(body.clone()));
            }
        }
    }

    /// Learns the RPC addresses of nodes beyond the seeds (nodes that joined), as the
    /// metadata names them: `(node, shard-0 RPC address)`.
    /// A node no longer registered (removed from the cluster) is forgotten, its queue
    /// closed; the seeds stay.
    pub fn learn_peers(&self, peers: impl IntoIterator<Item = (i32, SocketAddr)>) {
        let mut d = self.driver.borrow_mut();
        let out = d.transport_mut();
        let mut known = Vec::new();
        for (id, addr) in peers {
            let id = NodeId(id as u64);
            known.push(id);
            if id != self.me {
                out.peers.entry(id).or_insert(addr);
            }
        }
        let seeds = out.seeds.clone();
        let keep = |id: &NodeId| known.contains(id) || seeds.contains(id);
        out.peers.retain(|id, _| keep(id));
        out.queues.retain(|id, _| keep(id));
    }

    /// As the controller's leader, adds `node` to the controller group as a learner, or
    /// with `learner` false removes it (a node removed from the cluster).
    pub fn set_controller_learner(&self, node: i32, learner: bool) -> Result<(), RaftError> {
        let r =
            self.driver
                .borrow_mut()
                .set_learner(CONTROLLER_GROUP, NodeId(node as u64), learner);
        self.wake();
        r
    }

    /// As the controller's leader, the next step toward the voters `target` (learners stay;
    /// voters outside it become learners).
    pub fn move_controller_voters(
        &self,
        target: &[i32],
    ) -> Result<strand_raft::MembershipStep, RaftError> {
        let target: Vec<NodeId> = target.iter().map(|&n| NodeId(n as u64)).collect();
        let r = self
            .driver
            .borrow_mut()
            .move_voters(CONTROLLER_GROUP, &target);
        self.wake();
        r
    }

    /// The controller group as this node sees it.
    pub fn controller_view(&self) -> Option<strand_raft::GroupView> {
        self.driver.borrow().view(CONTROLLER_GROUP)
    }

    /// How long since this shard last heard from `node` (see `MultiRaft::silent_for`).
    pub fn silent_for(&self, node: i32) -> Option<Duration> {
        let node = NodeId(u64::try_from(node).ok()?);
        self.driver.borrow().silent_for(node)
    }

    /// Whether this shard heard from no peer for an election timeout (see
    /// `MultiRaft::isolated`).
    pub fn isolated(&self) -> bool {
        self.driver.borrow().isolated()
    }

    /// The voters and learners of the controller group as applied here.
    pub fn controller_members(&self) -> Option<(Vec<u64>, Vec<u64>)> {
        self.driver.borrow().members(CONTROLLER_GROUP)
    }

    /// Whether this node leads the controller group.
    pub fn leads_controller(&self) -> bool {
        self.driver.borrow().is_leader(CONTROLLER_GROUP)
    }

    /// RPC frames (message batches, control frames) this shard dropped instead of sending:
    /// for a peer it does not know, over a full queue, queued while the connection was
    /// down, or lost with a failed write. Raft resends what matters; a count that keeps
    /// rising means a peer is unreachable or too slow.
    pub fn rpc_dropped_frames(&self) -> u64 {
        self.rpc_dropped.get()
    }

    /// Peer connections this shard refused in their TLS handshake (`rpc_tls_*`): no
    /// certificate, one of another CA, expired, or a timeout.
    pub fn rpc_tls_refused(&self) -> u64 {
        self.rpc_tls_refused.get()
    }

    /// How long followers took to acknowledge appends this shard led (see
    /// `raft_ack_timer`).
    pub fn append_acks(&self) -> crate::common::metrics::HistogramSnapshot {
        self.acks.borrow().snapshot()
    }

    /// Wakes the loop for a turn.
    pub fn wake(&self) {
        let _ = self.wake_tx.clone().try_send(());
    }

    /// Adds the group of `part` with `voters` and `learners` (a new group when the store
    /// holds none); `new` says what to do when it opens blank.
    pub async fn host(
        self: &Rc<Self>,
        group: GroupId,
        part: Rc<Partition>,
        voters: &[u64],
        learners: &[u64],
        new: Newness,
    ) -> anyhow::Result<()> {
        if self.hosted.borrow().contains_key(&group) {
            return Ok(());
        }
        let saved = self.journal.get(group);
        if saved.is_none() {
            // A single node's log may start past its first entry, where a snapshot would
            // start a new replica: its log start goes into the log first.
            upgrade::replicate_log_start(part.log()).await?;
        }
        let store = RaftLogStore::open(part.clone(), voters, learners, saved).await?;
        let fresh =
            strand_raft::LogStore::index(&store).last_index().0 == 0 && raft_term(&store) == 0;
        {
            let mut d = self.driver.borrow_mut();
            d.add_group(group, store)
                .map_err(|e| anyhow::anyhow!("{e}"))?;
            if fresh && new.blank_is_new {
                d.trust_blank(group);
            }
            if new.campaign && fresh {
                let _ = d.campaign(group);
            }
        }
        if new.campaign && fresh {
            self.retry_first_campaign(group);
        }
        let weak: std::rc::Weak<Replicator> = Rc::downgrade(self);
        let driver: std::rc::Weak<dyn crate::partition::RaftGroups> = weak;
        part.attach_replication(driver, group);
        let preferred = NodeId(voters.first().copied().unwrap_or(self.me.0));
        self.hosted.borrow_mut().insert(
            group,
            Hosted {
                part,
                preferred,
                leader: None,
                term: 0,
                known_leader: None,
                leaderless: false,
                under_replicated: false,
                isr: Default::default(),
                out_of_sync: Vec::new(),
            },
        );
        self.wake();
        Ok(())
    }

    /// A new group's first campaign can reach peers that have not created the group yet
    /// (they apply the topic from the controller log a moment later, and drop messages of
    /// groups they do not host): it would then wait out an election timeout without a
    /// leader (Metadata answers LEADER_NOT_AVAILABLE for that second). Until a leader is
    /// known, the preferred replica campaigns again every `FIRST_CAMPAIGN_RETRY`, at most
    /// `FIRST_CAMPAIGN_ATTEMPTS` times. Pre-vote makes a campaign harmless where another
    /// node already leads: its peers refuse it without a new term.
    fn retry_first_campaign(self: &Rc<Self>, group: GroupId) {
        let weak = Rc::downgrade(self);
        crate::runtime::task::spawn_local(async move {
            for _ in 0..FIRST_CAMPAIGN_ATTEMPTS {
                crate::runtime::task::sleep(FIRST_CAMPAIGN_RETRY).await;
                let Some(rep) = weak.upgrade() else {
                    return;
                };
                {
                    let mut d = rep.driver.borrow_mut();
                    if !d.has_group(group) || d.leader_of(group).is_some() {
                        return;
                    }
                    let _ = d.campaign(group);
                }
                rep.wake();
            }
        });
    }

    /// Sets the replica leadership returns to (`balance_leaders`): the first replica.
    pub fn set_preferred(&self, group: GroupId, node: i32) {
        if let Some(h) = self.hosted.borrow_mut().get_mut(&group) {
            h.preferred = NodeId(node as u64);
        }
    }

    /// As `group`'s leader, the next step of moving it to the voters `target` (see
    /// `strand_raft::MultiRaft::move_members`).
    pub fn move_members(
        &self,
        group: GroupId,
        target: &[i32],
    ) -> Result<strand_raft::MembershipStep, RaftError> {
        let target: Vec<NodeId> = target.iter().map(|&n| NodeId(n as u64)).collect();
        let r = self.driver.borrow_mut().move_members(group, &target);
        self.wake();
        r
    }

    /// Stops hosting `group`.
    pub fn unhost(&self, group: GroupId) {
        self.driver.borrow_mut().remove_group(group);
        self.journal.remove(group);
        self.acks.borrow_mut().forget(group);
        if let Some(h) = self.hosted.borrow_mut().remove(&group) {
            let mut health = self.health.get();
            health.leaderless -= u64::from(h.leaderless);
            health.under_replicated -= u64::from(h.under_replicated);
            self.health.set(health);
        }
        self.answer_completions();
    }

    /// The index through which this node applied `group`'s entries (committed data only
    /// up to there); `None` for a group this shard does not drive.
    pub fn applied_index(&self, group: GroupId) -> Option<RaftIndex> {
        self.driver.borrow().applied_index(group)
    }

    /// Retention on a replicated log: the closed segments through `through` (due, and
    /// applied on this node: `applied_index`) leave the Raft log (the compaction point
    /// moves at the start of the next turn, whose job persists it and then deletes them).
    /// A follower that still needs them gets the point as a snapshot.
    pub fn compact_for_retention(&self, group: GroupId, through: RaftIndex) {
        self.compactions.borrow_mut().push((group, through));
        self.wake();
    }

    /// Applies the compactions retention asked for; returns the groups whose stores now
    /// have a job (the new point to persist). A group whose disk work is in flight keeps
    /// its request for a later turn (its store must not change under the job).
    fn apply_compactions(&self) -> Vec<GroupId> {
        let mut d = self.driver.borrow_mut();
        let mut moved = Vec::new();
        let persisting = self.persisting.borrow();
        let (later, now): (Vec<_>, Vec<_>) = self
            .compactions
            .take()
            .into_iter()
            .partition(|(g, _)| persisting.contains(g));
        *self.compactions.borrow_mut() = later;
        for (g, through) in now {
            match d.compact(g, through) {
                Ok(()) => moved.push(g),
                Err(e) => {
                    tracing::warn!(group = %g, error = %e, "retention could not compact the raft log")
                }
            }
        }
        moved
    }

    /// Moves `group`'s log start offset to `offset` on every replica (a replicated
    /// DeleteRecords): resolves once committed and applied here.
    pub async fn propose_log_start(
        &self,
        group: GroupId,
        offset: KafkaOffset,
    ) -> Result<(), KafkaError> {
        let id = self
            .driver
            .borrow_mut()
            .propose_log_start(group, offset)
            .map_err(kafka_error)?;
        let (tx, rx) = oneshot::channel();
        self.waiters.borrow_mut().insert(id, tx);
        self.wake();
        match rx.await {
            Ok(r) => r.map(|_| ()).map_err(kafka_error),
            Err(_) => Err(KafkaError::NotLeader),
        }
    }

    /// Moves the log start offset of each partition whose log start entry (DeleteRecords, or
    /// an upgraded log's start: `upgrade`) was applied (in a task each: the offset's file
    /// is written off the driver's turn; a log writes its start offsets one at a time and
    /// never moves it back).
    fn apply_log_starts(&self) {
        let starts = self.driver.borrow_mut().drain_log_starts();
        for (g, offset) in starts {
            let Some(part) = self.hosted.borrow().get(&g).map(|h| h.part.clone()) else {
                continue;
            };
            let offset = strand_storage::KafkaOffset(offset.0);
            // In memory now, within the turn; the file is written in a task.
            match part.log().advance_log_start(offset) {
                Ok(start) => tracing::info!(topic = %part.topic, partition = part.index,
                    log_start_offset = start.0, "log start offset moved (a log start entry)"),
                Err(e) => {
                    tracing::error!(topic = %part.topic, partition = part.index,
                        error = %e, "cannot move the log start offset");
                    continue;
                }
            }
            crate::runtime::task::spawn_local(async move {
                if let Err(e) = part.log().persist_log_start().await {
                    tracing::error!(topic = %part.topic, partition = part.index,
                        error = %e, "cannot write the log start offset");
                }
            });
        }
    }

    /// Proposes one producer batch; resolves with its base offset once committed, or with
    /// `Ack::Append` once this leader appended it (acks=1).
    pub async fn propose(
        &self,
        group: GroupId,
        batch: Bytes,
        record_count: u32,
        ack: Ack,
    ) -> Result<KafkaOffset, KafkaError> {
        let id = self
            .driver
            .borrow_mut()
            .propose_acked(group, batch, record_count, ack)
            .map_err(kafka_error)?;
        let (tx, rx) = oneshot::channel();
        self.waiters.borrow_mut().insert(id, tx);
        self.wake();
        match rx.await {
            Ok(r) => r.map_err(kafka_error),
            Err(_) => Err(KafkaError::NotLeader),
        }
    }

    /// Proposes on the controller leader, through this node if it leads or forwarded
    /// otherwise; the caller watches the applied metadata for the outcome.
    pub fn forward_to_controller(
        &self,
        payload: Bytes,
        record_count: u32,
    ) -> Result<(), RaftError> {
        let r = self
            .driver
            .borrow_mut()
            .forward(CONTROLLER_GROUP, payload, record_count);
        self.wake();
        r
    }

    /// Kafka end of the controller log's applied (committed) entries.
    pub fn controller_applied_end(&self) -> Option<KafkaOffset> {
        self.driver.borrow().applied_kafka_end(CONTROLLER_GROUP)
    }

    /// Hands a peer's batch to the driver.
    fn step(&self, batch: MessageBatch) {
        self.acks
            .borrow_mut()
            .received(&batch, crate::common::clock::now());
        let outcome = self.driver.borrow_mut().step(batch);
        if outcome.dropped > 0 {
            tracing::debug!(
                dropped = outcome.dropped,
                "raft messages for unknown groups dropped"
            );
        }
        self.wake();
    }

    /// Replication health after the last turn.
    pub fn health(&self) -> ReplicaHealth {
        self.health.get()
    }

    /// Groups hosted here that are fenced (a failed log write, or a log that lost entries it
    /// had acknowledged): they vote and acknowledge nothing on this node.
    pub fn fenced_groups(&self) -> u64 {
        let d = self.driver.borrow();
        let fenced = self
            .hosted
            .borrow()
            .keys()
            .filter(|&&g| d.is_fenced(g))
            .count();
        u64::try_from(fenced).unwrap_or(u64::MAX)
    }

    /// Stops the loop after its current turn.
    pub fn stop(&self) {
        self.stopping.set(true);
        self.wake();
    }

    /// The loop. See the module doc.
    pub async fn run(self: Rc<Self>) {
        let Some(mut wake_rx) = self.wake_rx.borrow_mut().take() else {
            return;
        };
        let mut balance_at = crate::common::clock::now() + LEADER_BALANCE_INTERVAL;
        while !self.stopping.get() {
            if crate::common::clock::now() >= balance_at && !self.draining.get() {
                self.balance_leaders();
                balance_at = crate::common::clock::now() + LEADER_BALANCE_INTERVAL;
            }
            let (wait, ready) = {
                let d = self.driver.borrow();
                (d.next_wake_at(), d.has_ready())
            };
            let now = strand_raft::Clock::now(&self.clock);
            if wait > now && !ready {
                let _ = crate::runtime::task::timeout(wait - now, wake_rx.next()).await;
            }
            self.turn().await;
            // A turn whose awaits all complete at once never yields: with groups that always
            // have work, the RPC readers, Kafka connections and admin HTTP of this shard would
            // starve.
            strand_storage::io_runtime::yield_now().await;
        }
    }

    /// One turn. Persistence is pipelined: each dirty group's disk work runs as its own
    /// task and the group is finished (its persisted messages sent, its next `Ready`
    /// begun) in the first turn after it completes; the turn itself never waits for the
    /// disk, so one slow fdatasync (or thousands of elections' state writes) does not
    /// silence this shard's heartbeats for every other group.
    async fn turn(self: &Rc<Self>) {
        let started = crate::common::clock::now();
        self.finish_persisted();
        let mut dirty = {
            let persisting = self.persisting.borrow();
            self.driver.borrow_mut().turn_begin(&persisting)
        };
        for g in self.apply_compactions() {
            if !dirty.contains(&g) {
                dirty.push(g);
            }
        }
        let began = crate::common::clock::now();
        let jobs: Vec<_> = {
            let mut d = self.driver.borrow_mut();
            let persisting = self.persisting.borrow();
            // One write per store at a time: a group still persisting keeps what it staged.
            dirty
                .iter()
                .filter(|g| !persisting.contains(g))
                .filter_map(|&g| d.store_mut(g).and_then(|s| s.take_job()).map(|j| (g, j)))
                .collect()
        };
        let started_jobs = jobs.len();
        let mut jobs = jobs;
        let state_written = write_states(&self.journal, &mut jobs);
        {
            let mut persisting = self.persisting.borrow_mut();
            for (g, job) in jobs {
                persisting.insert(g);
                let me = Rc::downgrade(self);
                let state_written = state_written.clone();
                crate::runtime::task::spawn_local(async move {
                    let r = job.run(state_written).await;
                    if let Some(me) = me.upgrade() {
                        me.persist_done.borrow_mut().push((g, r));
                        me.wake();
                    }
                });
            }
            self.driver.borrow_mut().turn_end(&persisting);
        }
        self.apply_log_starts();
        self.answer_completions();
        self.publish_roles();
        self.start_reads();
        let ended = crate::common::clock::now();
        if ended - started >= SLOW_TURN {
            if let Some(suppressed) = self.slow_turn_log.allow(ended) {
                tracing::warn!(
                    begin_ms = (began - started).as_millis() as u64,
                    finish_ms = (ended - began).as_millis() as u64,
                    started_jobs,
                    persisting_groups = self.persisting.borrow().len(),
                    awake_groups = self.driver.borrow().awake_groups(),
                    suppressed,
                    "slow raft turn: peers hear nothing from this shard meanwhile"
                );
            }
        }
    }

    /// Finishes the groups whose disk work completed since the last turn.
    fn finish_persisted(&self) {
        let done = self.persist_done.take();
        if done.is_empty() {
            return;
        }
        let mut d = self.driver.borrow_mut();
        let mut persisting = self.persisting.borrow_mut();
        let mut groups = Vec::with_capacity(done.len());
        for (g, r) in done {
            if let Err(e) = &r {
                tracing::error!(group = %g, error = %e, "raft log persist failed; fencing the group");
            }
            if let Some(s) = d.store_mut(g) {
                s.finish_job(r);
            }
            persisting.remove(&g);
            groups.push(g);
        }
        d.persisted(&groups);
    }

    fn answer_completions(&self) {
        let mut done: Vec<Completion> = Vec::new();
        self.driver.borrow_mut().drain_completions(&mut done);
        let mut w = self.waiters.borrow_mut();
        for c in done {
            if let Some(tx) = w.remove(&c.id) {
                let _ = tx.send(c.result);
            }
        }
    }

    /// Updates the role, epoch and high watermark of every hosted partition the turns
    /// visited (a hibernating group's stand still); records leader changes and hands them
    /// to the shard; keeps the health counts.
    #[expect(
        clippy::too_many_lines,
        reason = "longer than 70 lines when the lint came in (issue 27): split it when it next changes"
    )]
    fn publish_roles(&self) {
        let mut changes = Vec::new();
        let mut controller_moved = false;
        let mut health = self.health.get();
        {
            let touched = self.driver.borrow_mut().take_touched();
            let now = crate::common::clock::now();
            let d = self.driver.borrow();
            let mut hosted = self.hosted.borrow_mut();
            for g in touched {
                let Some(h) = hosted.get_mut(&g) else {
                    continue;
                };
                let leader = d.leader_of(g);
                let term = d.term(g).map_or(0, |t| t.0);
                let is_leader = d.is_leader(g);
                let hw = d.high_watermark(g);
                h.part
                    .set_replica_role(is_leader, term, hw, d.applied_kafka_end(g));
                health.leaderless -= u64::from(h.leaderless);
                health.under_replicated -= u64::from(h.under_replicated);
                h.leaderless = g != CONTROLLER_GROUP && leader.is_none();
                h.under_replicated = g != CONTROLLER_GROUP
                    && !h.leaderless
                    && d.lagging_voters(g).is_some_and(|n| n > 0);
                health.leaderless += u64::from(h.leaderless);
                health.under_replicated += u64::from(h.under_replicated);
                if g == CONTROLLER_GROUP {
                    health.controller_leader = is_leader;
                }
                let out_of_sync = match d.voter_progress(g) {
                    Some(progress) if g != CONTROLLER_GROUP => h.isr.update(&progress, now),
                    // The controller's "out of sync" members are the fenced nodes.
                    Some(progress) => fenced_nodes(&d, &progress),
                    None => {
                        h.isr.reset();
                        Vec::new()
                    }
                };
                if let Some(now_leading) = leader {
                    if let Some(was) = h.known_leader.filter(|&was| was != now_leading) {
                        tracing::info!(topic = %h.part.topic, partition = h.part.index, term,
                            leader = %now_leading, %was, "partition leader changed");
                    }
                    h.known_leader = Some(now_leading);
                }
                if (leader, term) != (h.leader, h.term) || out_of_sync != h.out_of_sync {
                    h.leader = leader;
                    h.term = term;
                    h.out_of_sync = out_of_sync.clone();
                    changes.push(LeaderChange {
                        group: g.0,
                        leader: leader.map_or(-1, |n| n.0 as i32),
                        epoch: i32::try_from(term).unwrap_or(i32::MAX),
                        out_of_sync,
                    });
                }
                if g == CONTROLLER_GROUP {
                    let end = d.applied_kafka_end(g);
                    if end != self.controller_applied.get() {
                        self.controller_applied.set(end);
                        controller_moved = true;
                    }
                }
            }
        }
        self.health.set(health);
        let all = self.announce_all_due.replace(false)
            || crate::common::clock::now().saturating_duration_since(self.announced_at.get())
                >= LEADERS_ANNOUNCE_INTERVAL;
        if all {
            self.announced_at.set(crate::common::clock::now());
        }
        if all || !changes.is_empty() {
            self.announce_leaders(&changes, all);
        }
        if !changes.is_empty() {
            if let Some(f) = self.on_changes.borrow().as_ref() {
                f(changes);
            }
        }
        if controller_moved {
            if let Some(f) = self.on_controller_applied.borrow().as_ref() {
                f();
            }
        }
    }

    /// Starts the asynchronous log reads raft-rs waits for (a follower behind the cache).
    fn start_reads(self: &Rc<Self>) {
        let wanted = self.driver.borrow().wanted_reads();
        for (g, ranges) in wanted {
            if !self.reads_in_flight.borrow_mut().insert(g) {
                continue;
            }
            let Some(part) = self.hosted.borrow().get(&g).map(|h| h.part.clone()) else {
                continue;
            };
            let me = self.clone();
            crate::runtime::task::spawn_local(async move {
                let mut frames = Vec::new();
                for (lo, hi) in ranges {
                    let r = part
                        .log()
                        .read_entries(
                            strand_storage::RaftIndex(lo.0),
                            strand_storage::RaftIndex(hi.0),
                            strand_raft::multi_raft::APPEND_BYTES_MAX_DEFAULT as usize,
                        )
                        .await;
                    match r {
                        Ok(f) => frames.extend(f),
                        Err(e) => tracing::warn!(group = %g, error = %e, "raft log read failed"),
                    }
                }
                {
                    let mut d = me.driver.borrow_mut();
                    if let Some(s) = d.store_mut(g) {
                        s.load_fetched(frames);
                    }
                    d.entries_fetched(g);
                    if let Some(s) = d.store_mut(g) {
                        s.clear_fetched();
                    }
                }
                me.reads_in_flight.borrow_mut().remove(&g);
                me.wake();
            });
        }
    }
}

/// As the controller's leader: the nodes of the cluster (the controller group's other
/// members) not heard from for [`BROKER_SESSION_TIMEOUT`], sorted. Announced as the
/// controller group's out-of-sync list; Metadata and DescribeCluster leave them out, as
/// Kafka leaves out a fenced broker, so clients stop choosing a node the cluster cannot
/// reach (it could not find a coordinator or a leader for them).
fn fenced_nodes(d: &Driver, members: &[(NodeId, bool, bool)]) -> Vec<i32> {
    let mut out: Vec<i32> = members
        .iter()
        .filter(|(n, _, _)| {
            d.silent_for(*n)
                .is_some_and(|t| t >= BROKER_SESSION_TIMEOUT)
        })
        .map(|(n, _, _)| n.0 as i32)
        .collect();
    out.sort_unstable();
    out
}

fn raft_term(store: &RaftLogStore) -> u64 {
    strand_raft::LogStore::hard_state(store).term
}

/// The Kafka error for a proposal that did not commit.
pub fn kafka_error(e: RaftError) -> KafkaError {
    match e {
        RaftError::NotLeader { .. } | RaftError::UnknownGroup { .. } => KafkaError::NotLeader,
        // Outcome unknown (overwritten or dropped): the producer retries; idempotence
        // makes that safe.
        RaftError::Dropped { .. } => KafkaError::NotLeader,
        RaftError::Backpressure { .. } => KafkaError::RequestTimedOut,
        RaftError::InvalidProposal { why, .. } => KafkaError::CorruptMessage(why.to_string()),
        e @ RaftError::Fenced { .. } => KafkaError::Storage(e.to_string()),
        RaftError::Store { source, .. } => KafkaError::Storage(source.to_string()),
        RaftError::Raft { reason, .. } => KafkaError::Storage(reason),
    }
}

/// One journal append for the states of a turn's `jobs` (taken from them), after the work
/// those states depend on (a restored snapshot's partition state, also taken); each job
/// waits for it. Shared by the replication loop and the simulator.
pub(crate) fn write_states(
    journal: &Rc<RaftJournal>,
    jobs: &mut [(GroupId, crate::replication::store::PersistJob)],
) -> StateWritten {
    use futures::FutureExt;
    let states: Vec<_> = jobs
        .iter_mut()
        .filter_map(|(g, j)| j.take_state().map(|s| (*g, s)))
        .collect();
    let before: Vec<_> = jobs
        .iter_mut()
        .filter_map(|(_, j)| j.take_before_state())
        .collect();
    if states.is_empty() && before.is_empty() {
        return futures::future::ready(Ok(())).boxed_local().shared();
    }
    let journal = journal.clone();
    async move {
        futures::future::join_all(before).await;
        if states.is_empty() {
            return Ok(());
        }
        journal.append(states).await.map_err(|e| {
            tracing::error!(error = %e, "raft journal append failed; its groups are fenced");
            e.to_string()
        })
    }
    .boxed_local()
    .shared()
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_full_leaders_announcement_fits_a_control_frame() {
        use super::{ControlMsg, LeaderChange, LEADERS_PER_ANNOUNCEMENT_MAX};
        let widest = LeaderChange {
            group: u64::MAX,
            leader: i32::MIN,
            epoch: i32::MIN,
            out_of_sync: vec![i32::MIN; 2],
        };
        let msg = ControlMsg::Leaders(vec![widest; LEADERS_PER_ANNOUNCEMENT_MAX]);
        let bytes = serde_json::to_vec(&msg).expect("encodes");
        assert!(
            bytes.len() <= strand_raft::rpc::CONTROL_BODY_BYTES_MAX,
            "{}",
            bytes.len()
        );
    }
}
