//! `MultiRaft`: the per-shard driver owning every Raft group of its shard
//! (ARCHITECTURE.md, Replication). It ticks the groups from the injected `Clock`, steps
//! incoming batches, and in each `turn` drains every group's `Ready`: all writes first, the
//! leaders' messages sent, then one sync per dirty group, then the messages that wait for
//! persistence. Outgoing messages are batched per destination node, one batch per turn.
//! A turn with a tick visits every awake group; a turn without one visits only the groups
//! that may have a `Ready` (stepped, proposed to, persisted, woken), so its cost follows the
//! groups with work. The broker pipelines persistence (`turn_end` / `persisted`): a group
//! whose write is in flight begins no new `Ready` until it is done, and no turn waits for
//! the disk.
//!
//! Idle groups hibernate (see `group`): a sleeping group is neither ticked nor visited by a
//! turn, so a shard's idle cost does not grow with its partitions. Instead every driver
//! sends each peer node an (often empty) batch every heartbeat interval and notes when it
//! last heard from each; a peer silent for an election timeout wakes every sleeping group
//! it belongs to (its followers campaign, its leaders check their quorum). Any message that
//! is not a response, a proposal, a transfer or a campaign wakes a group.
//!
//! Invariants: a proposal's completion is pushed exactly once (Ok with the Kafka base
//! offset only after commit, or for `Ack::Append` after this leader appended it); at most one tick per group per turn (a stalled loop does not
//! replay missed ticks as a burst of elections); groups are visited in `GroupId` order, so
//! a run is a function of its inputs. Knows nothing of sockets, disks or glommio.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use bytes::Bytes;
use raft::eraftpb::Message;
use raft::{Config, RawNode};

use crate::clock::Clock;
use crate::error::{RaftError, StoreError};
pub use crate::group::Ack;
use crate::group::{Activity, Effects, Group};
use crate::log_store::LogStore;
use crate::seed::Prng;
use crate::storage::GroupStorage;
use crate::transport::{GroupMessage, MessageBatch, Transport, MESSAGES_PER_BATCH_MAX};
use crate::types::{GroupId, KafkaOffset, NodeId, RaftIndex, RaftTerm};

/// Default tick: raft-rs counts elections and heartbeats in ticks. 50 ms keeps the phase
/// difference between two nodes' tick clocks (at most one tick) small against the timeouts.
pub const TICK_INTERVAL_DEFAULT: Duration = Duration::from_millis(50);
/// Leader heartbeat every 2 ticks (100 ms).
pub const HEARTBEAT_TICKS_DEFAULT: usize = 2;
/// The election timeout, 10 ticks (500 ms, five missed heartbeats): a follower that heard
/// from its leader more recently honours the leader's lease and rejects votes
/// (check-quorum), and a leader that heard from no quorum for this long steps down.
pub const ELECTION_TICKS_DEFAULT: usize = 10;
/// A follower campaigns after a timeout drawn from `ELECTION_TICKS_DEFAULT + 1 ..
/// ELECTION_TICKS_MAX_DEFAULT` ticks (550 ms to 1.45 s). Starting one tick past the lease
/// means the other followers' leases (their tick clocks lag by at most one tick) have
/// expired when the first candidate asks. The range is wide (19 values) because after a
/// leader dies the two survivors reset their timers together: equal draws split the vote
/// and cost a whole extra round. Measured by the simulator's `failover` (issue 5 target:
/// under 2 s).
pub const ELECTION_TICKS_MAX_DEFAULT: usize = 30;
/// Most bytes of entries in one append message (raft-rs `max_size_per_msg`).
pub const APPEND_BYTES_MAX_DEFAULT: u64 = 1024 * 1024;
/// Most append messages in flight to one follower (raft-rs `max_inflight_msgs`).
pub const APPENDS_IN_FLIGHT_MAX_DEFAULT: usize = 256;
/// Most proposals of one group waiting for commit; more get `Backpressure`. Kafka's
/// producer keeps at most 5 requests in flight per connection, so this covers ~50 busy
/// producers on one partition.
pub const PROPOSALS_IN_FLIGHT_MAX_DEFAULT: usize = 256;
/// A leader hibernates its group after this many quiescent ticks (1 s at 50 ms).
pub const HIBERNATE_TICKS_DEFAULT: usize = 20;

const _: () = assert!(HEARTBEAT_TICKS_DEFAULT < ELECTION_TICKS_DEFAULT);
const _: () = assert!(ELECTION_TICKS_DEFAULT + 1 < ELECTION_TICKS_MAX_DEFAULT);

/// Identifies a proposal until its completion.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ProposalId(pub u64);

/// The outcome of a proposal.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Completion {
    pub id: ProposalId,
    pub group: GroupId,
    /// The committed batch's Kafka base offset, or why it is not (known to be) committed.
    pub result: Result<KafkaOffset, RaftError>,
}

/// Every this many ticks (1 s at the default interval) every awake group counts as touched,
/// so that health that moves without a `Ready` (a voter falling behind) is republished.
const TOUCH_ALL_EVERY_TICKS: u64 = 20;

/// Driver settings; `DriverConfig::new` gives the defaults.
#[derive(Clone, Debug)]
pub struct DriverConfig {
    pub node: NodeId,
    pub tick_interval: Duration,
    pub heartbeat_ticks: usize,
    pub election_ticks: usize,
    pub election_ticks_max: usize,
    pub append_bytes_max: u64,
    pub appends_in_flight_max: usize,
    pub proposals_in_flight_max: usize,
    /// Quiescent ticks before a leader hibernates its group; 0 never hibernates.
    pub hibernate_ticks: usize,
    /// Seeds the election jitter (from the run's seed in the simulator).
    pub jitter_seed: u64,
    /// The store persists between `turn_begin` and `turn_finish_async` while the driver
    /// keeps stepping and proposing (the broker); false: `turn` with a synchronous store.
    pub async_persist: bool,
    /// Followers learn that the commit index moved from the leader's next append or
    /// heartbeat, not from an empty append sent at once (raft-rs `skip_bcast_commit`;
    /// a configuration change is still announced at once). Halves the messages of a
    /// steady write stream: without it every entry costs each follower two appends and
    /// two answers. Followers then lag one entry (or a heartbeat interval) in what they
    /// know is committed, which only groups whose followers act on applied entries mind.
    pub lazy_commit_notice: bool,
    /// Groups that announce a new commit index at once even with `lazy_commit_notice`
    /// (the controller: every node applies its metadata).
    pub eager_commit_groups: BTreeSet<GroupId>,
    /// Least time between the starts of two store writes of one group (group commit
    /// pacing): a group whose last write began sooner begins no `Ready` until then, so the
    /// proposals and appends it receives meanwhile go into one later write. Zero (the
    /// default): a group's next `Ready` begins as soon as its previous write is done.
    pub sync_min_interval: Duration,
}

impl DriverConfig {
    /// The defaults for `node`.
    pub fn new(node: NodeId, jitter_seed: u64) -> Self {
        Self {
            node,
            tick_interval: TICK_INTERVAL_DEFAULT,
            heartbeat_ticks: HEARTBEAT_TICKS_DEFAULT,
            election_ticks: ELECTION_TICKS_DEFAULT,
            election_ticks_max: ELECTION_TICKS_MAX_DEFAULT,
            append_bytes_max: APPEND_BYTES_MAX_DEFAULT,
            appends_in_flight_max: APPENDS_IN_FLIGHT_MAX_DEFAULT,
            proposals_in_flight_max: PROPOSALS_IN_FLIGHT_MAX_DEFAULT,
            hibernate_ticks: HIBERNATE_TICKS_DEFAULT,
            jitter_seed,
            async_persist: false,
            lazy_commit_notice: true,
            eager_commit_groups: BTreeSet::new(),
            sync_min_interval: Duration::ZERO,
        }
    }

    fn raft_config(&self, group: GroupId, applied: RaftIndex) -> Config {
        Config {
            id: self.node.0,
            election_tick: self.election_ticks,
            heartbeat_tick: self.heartbeat_ticks,
            min_election_tick: self.election_ticks + 1,
            max_election_tick: self.election_ticks_max,
            applied: applied.0,
            max_size_per_msg: self.append_bytes_max,
            max_inflight_msgs: self.appends_in_flight_max,
            // A partitioned node does not disturb the leader when it returns (pre-vote),
            // and a leader cut off from its quorum steps down (check-quorum).
            check_quorum: true,
            pre_vote: true,
            skip_bcast_commit: self.lazy_commit_notice
                && !self.eager_commit_groups.contains(&group),
            ..Config::default()
        }
    }
}

/// Messages to send at the end of a turn, per destination node.
#[derive(Debug, Default)]
pub(crate) struct Outbox {
    by_node: BTreeMap<NodeId, Vec<GroupMessage>>,
    /// Nodes that get a batch at the next flush even if it is empty (liveness).
    pings: Vec<NodeId>,
}

impl Outbox {
    pub fn push(&mut self, group: GroupId, messages: Vec<Message>) {
        for message in messages {
            let to = NodeId(message.to);
            self.by_node
                .entry(to)
                .or_default()
                .push(GroupMessage { group, message });
        }
    }

    fn ping(&mut self, to: NodeId) {
        self.pings.push(to);
    }

    fn flush(&mut self, from: NodeId, transport: &mut impl Transport) {
        for to in std::mem::take(&mut self.pings) {
            if self.by_node.get(&to).is_none_or(Vec::is_empty) {
                let messages = Vec::new();
                transport.send(MessageBatch { from, to, messages });
            }
        }
        for (&to, queued) in self.by_node.iter_mut() {
            while !queued.is_empty() {
                let rest = queued.split_off(queued.len().min(MESSAGES_PER_BATCH_MAX));
                let messages = std::mem::replace(queued, rest);
                transport.send(MessageBatch { from, to, messages });
            }
        }
    }
}

/// What `step` did with a batch.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StepOutcome {
    /// Messages handed to their group.
    pub stepped: usize,
    /// Messages for a group this node does not have, or malformed.
    pub dropped: usize,
}

/// See the module doc.
pub struct MultiRaft<S: LogStore, T: Transport, C: Clock> {
    config: DriverConfig,
    clock: C,
    transport: T,
    rng: Prng,
    groups: BTreeMap<GroupId, Group<S>>,
    /// The groups not hibernating: only these are ticked and visited by a turn.
    awake: BTreeSet<GroupId>,
    /// Groups visited since the last `take_touched` (their role or progress may have moved).
    touched: BTreeSet<GroupId>,
    /// Awake groups that may have a `Ready` since the last turn (stepped, proposed to,
    /// persisted, woken): a turn without a tick visits only these, so its cost follows the
    /// groups with work, not every awake group.
    pending: BTreeSet<GroupId>,
    /// The groups the last `turn_begin` visited (the ones its second half finishes).
    visited: Vec<GroupId>,
    /// Log start entries applied since the last `drain_log_starts`.
    log_starts: Vec<(GroupId, KafkaOffset)>,
    /// Every other node some group here replicates with, and when it was last heard from.
    last_heard: BTreeMap<NodeId, Duration>,
    /// Peers not heard from for an election timeout.
    silent: BTreeSet<NodeId>,
    ticks: u64,
    outbox: Outbox,
    completions: Vec<Completion>,
    next_tick_at: Duration,
    next_proposal: u64,
    /// When each group's last store write began (only with `sync_min_interval`).
    sync_began: BTreeMap<GroupId, Duration>,
}

impl<S: LogStore, T: Transport, C: Clock> MultiRaft<S, T, C> {
    /// A driver with no groups.
    pub fn new(config: DriverConfig, clock: C, transport: T) -> Self {
        let next_tick_at = clock.now() + config.tick_interval;
        Self {
            rng: Prng::new(config.jitter_seed),
            config,
            clock,
            transport,
            groups: BTreeMap::new(),
            awake: BTreeSet::new(),
            touched: BTreeSet::new(),
            pending: BTreeSet::new(),
            visited: Vec::new(),
            log_starts: Vec::new(),
            last_heard: BTreeMap::new(),
            silent: BTreeSet::new(),
            ticks: 0,
            outbox: Outbox::default(),
            completions: Vec::new(),
            next_tick_at,
            next_proposal: 0,
            sync_began: BTreeMap::new(),
        }
    }

    /// Until when `group` may begin no `Ready` (`DriverConfig::sync_min_interval`), if it
    /// is held at `now` (an associated function: `turn_begin` asks while it holds other
    /// fields mutably). `sync_began` is empty without pacing, so nothing is ever held then.
    fn held_until(
        sync_began: &BTreeMap<GroupId, Duration>,
        interval: Duration,
        group: GroupId,
        now: Duration,
    ) -> Option<Duration> {
        let until = *sync_began.get(&group)? + interval;
        (now < until).then_some(until)
    }

    /// When the next turn has work for certain: the next tick, or sooner when a group
    /// held by `sync_min_interval` with work pending is released.
    pub fn next_wake_at(&self) -> Duration {
        let now = self.clock.now();
        self.pending
            .iter()
            .filter_map(|&g| {
                Self::held_until(&self.sync_began, self.config.sync_min_interval, g, now)
            })
            .fold(self.next_tick_at, Duration::min)
    }

    /// Starts (or restarts from its store) a group whose store holds its configuration (a
    /// new replica of a moved partition may know itself only as a learner).
    pub fn add_group(&mut self, group: GroupId, mut store: S) -> Result<(), RaftError> {
        let conf = store.conf_state();
        if conf.voters.is_empty() && conf.learners.is_empty() {
            let reason = "the store holds no members".to_string();
            return Err(RaftError::Raft { group, reason });
        }
        // Entries through the persisted commit index were applied before a restart: the
        // partition log is the state machine, so applying them again would only replay
        // completions nobody waits for, and would read the whole log from disk.
        // A configuration entry committed but not yet applied when the state was written
        // is applied again from `persisted_applied` (the configuration read back lacks it).
        let committed = RaftIndex(store.hard_state().commit).min(store.index().last_index());
        let committed = store
            .persisted_applied()
            .map_or(committed, |a| a.min(committed));
        let applied = store.index().compaction_point().index.max(committed);
        let implied = crate::log_store::implied_commit(&store, applied);
        let mut hard = store.hard_state();
        if implied.0 > hard.commit {
            hard.commit = implied.0;
            store.set_hard_state(&hard);
        }
        let raft_config = self.config.raft_config(group, applied);
        let logger = crate::log_bridge::logger(self.config.node, group);
        let node = RawNode::new(&raft_config, GroupStorage::new(store), &logger).map_err(|e| {
            RaftError::Raft {
                group,
                reason: e.to_string(),
            }
        })?;
        let ticks = (
            self.config.election_ticks + 1,
            self.config.election_ticks_max,
        );
        let mut g = Group::new(group, node, ticks, &mut self.rng);
        if self.config.async_persist {
            g.set_async_persist();
        }
        let now = self.clock.now();
        for p in g.peers() {
            self.last_heard.entry(p).or_insert(now);
        }
        self.groups.insert(group, g);
        self.awake.insert(group);
        self.pending.insert(group);
        Ok(())
    }

    /// Marks `group` awake after real activity (see `Group::on_activity`).
    fn activity(&mut self, group: GroupId) {
        if let Some(g) = self.groups.get_mut(&group) {
            g.on_activity();
            self.awake.insert(group);
            self.pending.insert(group);
        }
    }

    /// This node's id.
    pub fn node(&self) -> NodeId {
        self.config.node
    }

    /// The transport (the simulator drains its queue through this).
    pub fn transport_mut(&mut self) -> &mut T {
        &mut self.transport
    }

    /// Proposes one Kafka batch of `record_count` records to `group`; the result arrives as
    /// a `Completion` from `drain_completions` once it is committed.
    pub fn propose(
        &mut self,
        group: GroupId,
        payload: Bytes,
        record_count: u32,
    ) -> Result<ProposalId, RaftError> {
        self.propose_acked(group, payload, record_count, Ack::Commit)
    }

    /// `propose`, completing when `ack` says (Kafka's acks=all or acks=1).
    pub fn propose_acked(
        &mut self,
        group: GroupId,
        payload: Bytes,
        record_count: u32,
        ack: Ack,
    ) -> Result<ProposalId, RaftError> {
        let context = Bytes::copy_from_slice(&crate::entry::data_context(record_count));
        self.propose_entry(group, payload, context, ack)
    }

    /// Proposes one entry `classify` accepts on `group`'s leader.
    fn propose_entry(
        &mut self,
        group: GroupId,
        data: Bytes,
        context: Bytes,
        ack: Ack,
    ) -> Result<ProposalId, RaftError> {
        let g = self
            .groups
            .get_mut(&group)
            .ok_or(RaftError::UnknownGroup { group })?;
        let id = ProposalId(self.next_proposal);
        g.propose_entry(id, data, context, self.config.proposals_in_flight_max, ack)?;
        self.next_proposal += 1;
        self.activity(group);
        Ok(id)
    }

    /// Proposes on the leader or forwards to it (raft-rs proposal forwarding) without a
    /// completion; `NotLeader` when no leader is known yet.
    pub fn forward(
        &mut self,
        group: GroupId,
        payload: Bytes,
        record_count: u32,
    ) -> Result<(), RaftError> {
        self.groups
            .get_mut(&group)
            .ok_or(RaftError::UnknownGroup { group })?
            .forward(payload, record_count)?;
        self.activity(group);
        Ok(())
    }

    /// Hands a peer's batch to its groups. Nothing is sent until the next `turn`.
    pub fn step(&mut self, batch: MessageBatch) -> StepOutcome {
        let mut outcome = StepOutcome::default();
        if batch.to != self.config.node || batch.messages.len() > MESSAGES_PER_BATCH_MAX {
            outcome.dropped = batch.messages.len();
            return outcome;
        }
        // A node not among the groups' peers at their start (a learner added since) is
        // tracked from its first batch.
        self.last_heard.insert(batch.from, self.clock.now());
        self.silent.remove(&batch.from);
        let mut fx = Effects {
            outbox: &mut self.outbox,
            completions: &mut self.completions,
            rng: &mut self.rng,
            log_starts: &mut self.log_starts,
        };
        for GroupMessage { group, mut message } in batch.messages {
            let stepped = match self.groups.get_mut(&group) {
                Some(g) if message.from == batch.from.0 => {
                    let activity = g.classify(&mut message);
                    if activity == Activity::Wake {
                        g.lease_ends_if_from_leader(&message);
                        g.on_activity();
                        self.awake.insert(group);
                        self.pending.insert(group);
                    }
                    let (from, term) = (message.from, message.term);
                    let stepped = g.step(message, &mut fx).is_ok();
                    if activity == Activity::Notice {
                        g.on_notice(from, term);
                    }
                    if g.has_ready() || g.has_wanted() {
                        self.awake.insert(group);
                        self.pending.insert(group);
                    }
                    stepped
                }
                _ => false,
            };
            if stepped {
                outcome.stepped += 1;
            } else {
                outcome.dropped += 1;
            }
        }
        outcome
    }

    /// One loop turn: tick if due, drain every `Ready` in two phases, send the batches.
    /// With a store whose `sync` is synchronous (the simulator's) this is the whole turn.
    pub fn turn(&mut self) {
        self.turn_begin(&BTreeSet::new());
        self.turn_finish();
    }

    /// First half of a turn: ticks if due, takes every `Ready` (appending entries and hard
    /// state to the stores without syncing) and sends the leaders' messages. Returns the
    /// groups whose stores must be made durable before `turn_finish`, which calls their
    /// `sync` (a store persisting asynchronously reports there what the caller's write and
    /// fdatasync did in between).
    ///
    /// `persisting` (pipelined persistence, see `turn_end`): the groups whose store write
    /// is still running. They neither tick nor begin a `Ready` until `persisted` reports
    /// the write done, whether that write holds a `Ready` of theirs or only store work the
    /// caller staged between turns (a compaction): a second write of one store never starts
    /// while the first runs, and a `Ready` is finished only by its own write.
    pub fn turn_begin(&mut self, persisting: &BTreeSet<GroupId>) -> Vec<GroupId> {
        let now = self.clock.now();
        let tick = self.tick_if_due(now);
        let mut fx = Effects {
            outbox: &mut self.outbox,
            completions: &mut self.completions,
            rng: &mut self.rng,
            log_starts: &mut self.log_starts,
        };
        let silent = &self.silent;
        let sweep = tick && self.ticks % TOUCH_ALL_EVERY_TICKS == 0;
        let visit: Vec<GroupId> = if tick {
            self.pending.clear();
            self.awake.iter().copied().collect()
        } else {
            let awake = &self.awake;
            std::mem::take(&mut self.pending)
                .into_iter()
                .filter(|g| awake.contains(g))
                .collect()
        };
        let mut dirty = Vec::new();
        for &id in &visit {
            if persisting.contains(&id) {
                continue;
            }
            let Some(g) = self.groups.get_mut(&id) else {
                continue;
            };
            // Paced: its `Ready` waits until the interval is over (it stays pending so a
            // later turn takes it), but its clock runs — a busy leader cut off from its
            // quorum must still step down, a follower still time out.
            let interval = self.config.sync_min_interval;
            if Self::held_until(&self.sync_began, interval, id, now).is_some() {
                if tick {
                    g.tick(fx.rng);
                }
                self.pending.insert(id);
                continue;
            }
            // A leader that hibernates skips the tick: no heartbeat may follow its notices.
            // A group whose write is in flight skips it too: its clock stops while its own
            // disk is slow (it could send nothing before the write ends anyway), so a
            // candidate does not start term after term, each another write, while its vote
            // is still being persisted.
            if tick
                && !g.in_flight()
                && !g.maybe_hibernate(
                    self.config.hibernate_ticks,
                    |n| silent.contains(&n),
                    &mut fx,
                )
            {
                g.tick(fx.rng);
            }
            // Role, term and commit move only through a `Ready`; the health of the voters
            // (lagging, recently active) also moves with ticks, so every awake group is
            // touched once per sweep.
            if sweep || g.has_ready() {
                self.touched.insert(id);
            }
            g.begin_ready(&mut fx);
            if g.needs_sync() {
                dirty.push(id);
                if !self.config.sync_min_interval.is_zero() {
                    self.sync_began.insert(id, now);
                }
            }
        }
        self.visited = visit;
        // The leaders' appends leave before their own fsync (ARCHITECTURE.md, Replication).
        self.outbox.flush(self.config.node, &mut self.transport);
        dirty
    }

    /// The node's tick, when due at `now`: liveness of the peers and their pings. Whether
    /// it ticked (the groups tick in the same turn).
    fn tick_if_due(&mut self, now: Duration) -> bool {
        if now < self.next_tick_at {
            return false;
        }
        // A tick later than one interval means this loop stalled (a long turn): peers'
        // batches wait unread in their sockets, so their silence is ours, not theirs.
        let late = now.saturating_sub(self.next_tick_at) > self.config.tick_interval;
        if late {
            let floor = now.saturating_sub(self.config.tick_interval);
            for heard in self.last_heard.values_mut() {
                *heard = (*heard).max(floor);
            }
        }
        self.next_tick_at = (self.next_tick_at + self.config.tick_interval)
            .max(now + self.config.tick_interval / 2);
        self.ticks += 1;
        self.check_liveness(now);
        if self.ticks % self.config.heartbeat_ticks.max(1) as u64 == 0 {
            for &p in self.last_heard.keys() {
                self.outbox.ping(p);
            }
        }
        true
    }

    /// Second half of a turn: syncs (or collects the outcome of) every store written by
    /// `turn_begin`, sends what waited for persistence, applies what is committed.
    pub fn turn_finish(&mut self) {
        self.finish_groups(false, &BTreeSet::new());
    }

    /// Second half of a turn for a store that persisted while the driver kept stepping and
    /// proposing (see `Group::finish_ready_async`); commits surface in the next turn,
    /// which `has_ready` asks for.
    pub fn turn_finish_async(&mut self) {
        self.finish_groups(true, &BTreeSet::new());
    }

    /// Pipelined persistence (the broker): ends a turn without waiting for the disk.
    /// Every awake group is finished as `turn_finish_async` does except those in
    /// `persisting`, whose store's write and fdatasync are still running; each of those is
    /// finished by `persisted` once its write is done, and begins no new `Ready` before. A
    /// slow fdatasync of one group then delays that group only: the others keep ticking,
    /// sending heartbeats and answering.
    pub fn turn_end(&mut self, persisting: &BTreeSet<GroupId>) {
        self.finish_groups(true, persisting);
    }

    /// The store of `group` finished the write taken after `turn_begin` (see `turn_end`):
    /// sends what waited for it and lets the group's next `Ready` begin.
    pub fn persisted(&mut self, groups: &[GroupId]) {
        let mut fx = Effects {
            outbox: &mut self.outbox,
            completions: &mut self.completions,
            rng: &mut self.rng,
            log_starts: &mut self.log_starts,
        };
        for id in groups {
            if let Some(g) = self.groups.get_mut(id) {
                g.finish_ready_async(&mut fx);
                self.touched.insert(*id);
                self.pending.insert(*id);
            }
        }
    }

    /// Finishes every awake group's `Ready` (except those `persisting`), puts to sleep
    /// those whose hibernation is due, sends the batches.
    fn finish_groups(&mut self, async_persist: bool, persisting: &BTreeSet<GroupId>) {
        let mut fx = Effects {
            outbox: &mut self.outbox,
            completions: &mut self.completions,
            rng: &mut self.rng,
            log_starts: &mut self.log_starts,
        };
        let silent = &self.silent;
        let mut sleepers = Vec::new();
        for &id in &self.visited {
            if persisting.contains(&id) {
                continue;
            }
            let Some(g) = self.groups.get_mut(&id) else {
                continue;
            };
            if g.in_flight() {
                self.touched.insert(id);
            }
            if async_persist {
                g.finish_ready_async(&mut fx);
            } else {
                g.finish_ready(&mut fx);
            }
            if g.sleep_decision(|n| silent.contains(&n)) == Some(true) {
                sleepers.push(id);
                self.touched.insert(id);
            }
        }
        for id in sleepers {
            self.awake.remove(&id);
        }
        self.outbox.flush(self.config.node, &mut self.transport);
    }

    /// Marks the peers silent for an election timeout and wakes the sleeping groups they
    /// belong to; a peer heard from again is no longer silent (`step`).
    fn check_liveness(&mut self, now: Duration) {
        let timeout = self.config.tick_interval * self.config.election_ticks as u32;
        for (&p, &heard) in &self.last_heard {
            if now.saturating_sub(heard) < timeout || !self.silent.insert(p) {
                continue;
            }
            let mut woken = 0usize;
            for (&id, g) in self.groups.iter_mut() {
                if self.awake.contains(&id) || !g.has_peer(p) {
                    continue;
                }
                if g.leader() == Some(p) {
                    g.leader_went_silent();
                } else {
                    g.on_activity();
                }
                self.awake.insert(id);
                self.pending.insert(id);
                woken += 1;
            }
            tracing::info!(node = %self.config.node, peer = %p, woken, "peer silent for an election timeout; its hibernating groups woke");
        }
    }

    /// A peer (re)connected: it may have restarted faster than an election timeout, with
    /// no log position or leader known. Its sleeping groups wake so their leaders tell it
    /// the commit index (a learner never campaigns to ask).
    pub fn peer_reconnected(&mut self, peer: NodeId) {
        for (&id, g) in self.groups.iter_mut() {
            if !self.awake.contains(&id) && g.has_peer(peer) {
                g.on_activity();
                self.awake.insert(id);
                self.pending.insert(id);
            }
        }
    }

    /// Whether any group has work for another turn now (a group held by
    /// `sync_min_interval` has none until it is released: `next_wake_at`).
    pub fn has_ready(&self) -> bool {
        let now = self.clock.now();
        self.pending
            .iter()
            .filter(|&&id| {
                Self::held_until(&self.sync_began, self.config.sync_min_interval, id, now).is_none()
            })
            .filter_map(|id| self.groups.get(id))
            .any(Group::has_ready)
    }

    /// Whether `group` hibernates.
    pub fn is_asleep(&self, group: GroupId) -> bool {
        self.groups.contains_key(&group) && !self.awake.contains(&group)
    }

    /// The groups visited by turns since the last call: only their role, term or progress
    /// can have changed.
    pub fn take_touched(&mut self) -> Vec<GroupId> {
        std::mem::take(&mut self.touched).into_iter().collect()
    }

    /// When the next tick is due (the broker sleeps until then when nothing else happens).
    pub fn next_tick_at(&self) -> Duration {
        self.next_tick_at
    }

    /// Groups whose log reads raft-rs is waiting for, with the index ranges wanted: the
    /// caller loads them into the store, then calls `entries_fetched`.
    pub fn wanted_reads(&self) -> Vec<(GroupId, Vec<(RaftIndex, RaftIndex)>)> {
        self.visited
            .iter()
            .filter_map(|id| self.groups.get(id).map(|g| (*id, g)))
            .filter(|(_, g)| g.has_wanted())
            .map(|(id, g)| (id, g.wanted_ranges()))
            .collect()
    }

    /// The store of `group` now holds the entries it wanted: raft-rs sends them.
    pub fn entries_fetched(&mut self, group: GroupId) {
        if let Some(g) = self.groups.get_mut(&group) {
            g.entries_fetched();
            self.awake.insert(group);
            self.pending.insert(group);
        }
    }

    /// Stops and forgets a group (its replica moved away or its topic was deleted); its
    /// pending proposals complete `Dropped`; its store is dropped. False if unknown.
    pub fn remove_group(&mut self, group: GroupId) -> bool {
        let Some(g) = self.groups.remove(&group) else {
            return false;
        };
        self.awake.remove(&group);
        self.touched.remove(&group);
        self.pending.remove(&group);
        self.sync_began.remove(&group);
        for id in g.into_pending() {
            self.completions.push(Completion {
                id,
                group,
                result: Err(RaftError::Dropped { group }),
            });
        }
        true
    }

    /// Whether `group` exists here.
    pub fn has_group(&self, group: GroupId) -> bool {
        self.groups.contains_key(&group)
    }

    /// Moves the completions so far into `out`.
    pub fn drain_completions(&mut self, out: &mut Vec<Completion>) {
        out.append(&mut self.completions);
    }

    /// `group` opened blank because it is new on this node, not because its state was lost
    /// (the caller knows: the broker's `cluster::incarnation`): it votes like any replica
    /// from now on instead of refusing candidates ahead of it until a leader reaches it.
    pub fn trust_blank(&mut self, group: GroupId) {
        if let Some(g) = self.groups.get_mut(&group) {
            g.trust_blank();
        }
    }

    /// Starts an election in `group` now (bootstrap and tests; elections otherwise time out).
    pub fn campaign(&mut self, group: GroupId) -> Result<(), RaftError> {
        let g = self
            .groups
            .get_mut(&group)
            .ok_or(RaftError::UnknownGroup { group })?;
        let r = g.campaign().map_err(|e| RaftError::Raft {
            group,
            reason: e.to_string(),
        });
        self.activity(group);
        r
    }

    /// The groups on this node, in order.
    pub fn groups(&self) -> impl Iterator<Item = GroupId> + '_ {
        self.groups.keys().copied()
    }

    /// The leader this node knows of (itself included).
    pub fn leader_of(&self, group: GroupId) -> Option<NodeId> {
        self.groups.get(&group).and_then(Group::leader)
    }

    /// Whether this node leads `group` (and is not fenced).
    pub fn is_leader(&self, group: GroupId) -> bool {
        self.groups.get(&group).is_some_and(Group::is_leader)
    }

    /// Current term of `group` on this node (the Kafka leader epoch).
    pub fn term(&self, group: GroupId) -> Option<RaftTerm> {
        self.groups.get(&group).map(Group::term)
    }

    /// The high watermark this node serves as the group's leader; `None` when it is not
    /// the leader or has not yet committed an entry of its own term.
    pub fn high_watermark(&self, group: GroupId) -> Option<KafkaOffset> {
        self.groups
            .get(&group)
            .and_then(Group::leader_high_watermark)
    }

    /// The Kafka offset just past the data this node has applied (any role).
    pub fn applied_kafka_end(&self, group: GroupId) -> Option<KafkaOffset> {
        self.groups.get(&group).map(Group::applied_kafka_end)
    }

    /// Drops `group`'s entries through `through` from its log (retention removed their
    /// data): a follower that needs them later gets the compaction point as a snapshot.
    /// Refused past the applied index. The store persists the new point with its next
    /// sync; until then a restart finds the entries again.
    pub fn compact(&mut self, group: GroupId, through: RaftIndex) -> Result<(), StoreError> {
        let Some(g) = self.groups.get_mut(&group) else {
            return Ok(());
        };
        if through > g.applied() {
            return Err(StoreError::Unavailable {
                index: through,
                last: g.applied(),
            });
        }
        if through <= g.store().index().compaction_point().index {
            return Ok(());
        }
        g.store_mut().compact_through(through)
    }

    /// As leader of `group`, proposes moving its log start offset to `offset` (a replicated
    /// DeleteRecords); completes once committed. Every replica applies it
    /// (`drain_log_starts`).
    pub fn propose_log_start(
        &mut self,
        group: GroupId,
        offset: KafkaOffset,
    ) -> Result<ProposalId, RaftError> {
        let (data, context) = crate::entry::log_start_entry(offset.0);
        self.propose_entry(
            group,
            Bytes::from(data),
            Bytes::from_static(context),
            Ack::Commit,
        )
    }

    /// The log start entries applied since the last call, in order: (group, new log start).
    pub fn drain_log_starts(&mut self) -> Vec<(GroupId, KafkaOffset)> {
        std::mem::take(&mut self.log_starts)
    }

    /// Groups that tick (not hibernating).
    pub fn awake_groups(&self) -> usize {
        self.awake.len()
    }

    /// Last applied Raft index of `group`.
    pub fn applied_index(&self, group: GroupId) -> Option<RaftIndex> {
        self.groups.get(&group).map(Group::applied)
    }

    /// As `group`'s leader, how many other voters are not in sync (see
    /// `Group::lagging_voters`); `None` when this node does not lead it.
    /// A hibernating group has none: it sleeps only with every voter in sync (and is woken
    /// when one goes silent), while raft-rs's activity flags stand still.
    pub fn lagging_voters(&self, group: GroupId) -> Option<usize> {
        let silent = &self.silent;
        let lagging = self
            .groups
            .get(&group)
            .and_then(|g| g.lagging_voters(|n| silent.contains(&n)))?;
        Some(if self.awake.contains(&group) {
            lagging
        } else {
            0
        })
    }

    /// As `group`'s leader: each other voter, caught up with the commit index or not,
    /// heard from within an election timeout or not (see `Group::voter_progress`). A
    /// hibernating group's voters are all caught up and active (it sleeps only so).
    pub fn voter_progress(&self, group: GroupId) -> Option<Vec<(NodeId, bool, bool)>> {
        let silent = &self.silent;
        let progress = self
            .groups
            .get(&group)
            .and_then(|g| g.voter_progress(|n| silent.contains(&n)))?;
        Some(if self.awake.contains(&group) {
            progress
        } else {
            progress
                .into_iter()
                .map(|(n, _, _)| (n, true, true))
                .collect()
        })
    }

    /// How long since this shard last heard from `node` (any batch); `None` for a node it
    /// does not track (it shares no group with it and never heard from it).
    pub fn silent_for(&self, node: NodeId) -> Option<Duration> {
        let heard = self.last_heard.get(&node)?;
        Some(self.clock.now().saturating_sub(*heard))
    }

    /// Whether this shard has heard from none of the nodes it replicates with for an
    /// election timeout (it is cut off, or every peer is down); false while it tracks none.
    pub fn isolated(&self) -> bool {
        !self.last_heard.is_empty() && self.silent.len() >= self.last_heard.len()
    }

    /// As `group`'s leader: whether voter `node` is in sync (see `Group::voter_in_sync`).
    pub fn voter_in_sync(&self, group: GroupId, node: NodeId) -> bool {
        self.groups
            .get(&group)
            .is_some_and(|g| g.voter_in_sync(node, |n| self.silent.contains(&n)))
    }

    /// As `group`'s leader, adds or removes the learner `node` (see `Group::set_learner`).
    pub fn set_learner(
        &mut self,
        group: GroupId,
        node: NodeId,
        learner: bool,
    ) -> Result<(), RaftError> {
        self.groups
            .get_mut(&group)
            .ok_or(RaftError::UnknownGroup { group })?
            .set_learner(node, learner)?;
        self.activity(group);
        Ok(())
    }

    /// As `group`'s leader, the next step toward the voters `target` (see
    /// `Group::move_members`); members outside it leave.
    pub fn move_members(
        &mut self,
        group: GroupId,
        target: &[NodeId],
    ) -> Result<crate::group::MembershipStep, RaftError> {
        self.move_to(group, target, false)
    }

    /// As `move_members`, but learners outside `target` stay learners: only the voters
    /// change (the controller group, which every other node follows as a learner).
    pub fn move_voters(
        &mut self,
        group: GroupId,
        target: &[NodeId],
    ) -> Result<crate::group::MembershipStep, RaftError> {
        self.move_to(group, target, true)
    }

    fn move_to(
        &mut self,
        group: GroupId,
        target: &[NodeId],
        keep_learners: bool,
    ) -> Result<crate::group::MembershipStep, RaftError> {
        let silent = &self.silent;
        let step = self
            .groups
            .get_mut(&group)
            .ok_or(RaftError::UnknownGroup { group })?
            .move_members(target, |n| silent.contains(&n), keep_learners)?;
        self.activity(group);
        Ok(step)
    }

    /// raft-rs's state of `group` (see `Group::describe`).
    pub fn describe(&self, group: GroupId) -> Option<String> {
        self.groups
            .get(&group)
            .map(|g| format!("{} hibernating {}", g.describe(), self.is_asleep(group)))
    }

    /// `group` as this node sees it (leader, term, commit, members; progress on the leader).
    pub fn view(&self, group: GroupId) -> Option<crate::group::GroupView> {
        self.groups.get(&group).map(Group::view)
    }

    /// The voters and learners of `group` as this node applied them.
    pub fn members(&self, group: GroupId) -> Option<(Vec<u64>, Vec<u64>)> {
        self.groups.get(&group).map(Group::members)
    }

    /// Hands `group`'s leadership to `node` if this node leads it.
    pub fn transfer_leader(&mut self, group: GroupId, node: NodeId) {
        if let Some(g) = self.groups.get_mut(&group) {
            g.transfer_leader(node);
            self.activity(group);
        }
    }

    /// Whether this node leads `group` and is handing its leadership to another voter.
    pub fn transferring(&self, group: GroupId) -> bool {
        self.groups.get(&group).is_some_and(Group::transferring)
    }

    /// Whether `group` is fenced (a failed log write, or a log that lost acknowledged entries).
    pub fn is_fenced(&self, group: GroupId) -> bool {
        self.groups.get(&group).is_some_and(Group::is_fenced)
    }

    /// The log store of `group`.
    pub fn store(&self, group: GroupId) -> Option<&S> {
        self.groups.get(&group).map(Group::store)
    }

    /// The log store of `group`, for fault injection and compaction.
    pub fn store_mut(&mut self, group: GroupId) -> Option<&mut S> {
        self.groups.get_mut(&group).map(Group::store_mut)
    }
}
