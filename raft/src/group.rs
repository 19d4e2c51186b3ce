//! One Raft group on this shard: its `RawNode`, the proposals waiting for commit, and the
//! handling of its `Ready` in two phases (ARCHITECTURE.md, Replication):
//!
//! 1. `begin_ready`: take the `Ready`, queue the leader's `messages()` (they leave before
//!    our own fsync), apply what is committed, append entries and hard state (no sync).
//! 2. `finish_ready`: sync once, queue `persisted_messages()`, `advance_append`, and handle
//!    the `LightReady` (commit index, messages, committed entries).
//!
//! Hibernation (issue 5: idle groups cost nothing): a leader whose group has been
//! quiescent (nothing pending, every voter holding every entry, all applied) for the
//! driver's `hibernate_ticks` sends each follower a hibernation notice (a heartbeat marked
//! with `HIBERNATE_CONTEXT`) and stops ticking; a follower that receives the notice from its
//! leader in its term, holding every committed entry, stops ticking too. The driver wakes
//! them (see `MultiRaft`).
//!
//! A replica that opened blank (no term, no vote, no entries: new, or its data directory
//! lost everything) may have acknowledged entries before it lost them, and only a leader
//! can tell. Until a leader is known (one reached it, or it was elected itself, after which
//! refusing a candidate ahead of it protects nothing), it votes for no candidate whose log holds
//! entries it lacks: otherwise a stale replica and a wiped one, a majority together, could
//! elect the stale one and lose what the third (down) replica and the wiped one had
//! committed. Candidates as blank as it (a new group's first election) get its vote. A
//! caller that knows the replica is blank because the group is new on this node (the
//! broker records each replica's data-directory incarnation when it creates a partition)
//! lifts this at once (`trust_blank`): a new group whose leader died before it reached
//! one follower then elects the other, as Kafka elects from a new partition's full ISR.
//!
//! Invariants: a fenced group (its sync failed, or its log lost entries it had acknowledged)
//! is never touched again and acknowledges or votes for nothing; a proposal completes `Ok` only when its own entry (same index *and* term) is
//! applied, i.e. committed by a majority that fsynced it; `applied` only grows.
//! Election jitter comes from the driver's seeded `Prng`, never from raft-rs's own
//! `thread_rng` draw, which `observe_role` overrides after every call that may reset it.

use std::collections::BTreeMap;

use bytes::Bytes;
use protobuf::Message as _;
use raft::eraftpb::{ConfChange, ConfChangeV2, Entry, EntryType, Message, MessageType};
use raft::{RawNode, StateRole};

use crate::entry;
use crate::error::{RaftError, StoreError};
use crate::log_store::LogStore;
use crate::multi_raft::{Completion, Outbox, ProposalId};
use crate::seed::Prng;
use crate::storage::{compaction_point_of, GroupStorage};
use crate::types::{GroupId, KafkaOffset, NodeId, RaftIndex, RaftTerm};

/// Marks a leader's heartbeat as a hibernation notice (see the module doc). The follower
/// steps it as a plain heartbeat (the marker removed).
pub const HIBERNATE_CONTEXT: &[u8] = b"strand:hibernate";

/// How a peer's message bears on hibernation (see `Group::classify`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Activity {
    /// A leader's hibernation notice.
    Notice,
    /// A response: the leader stays asleep unless raft-rs has work after it.
    Response,
    /// Anything else wakes the group.
    Wake,
}

/// What `Group::move_members` did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MembershipStep {
    /// The voters are the target, nobody else is a member, and this node leads.
    Done,
    /// Proposed the next configuration change.
    Proposed,
    /// Handing leadership to this target voter (the leader is outside the target).
    Transferring(NodeId),
    /// Nothing to do until this clears.
    Waiting(&'static str),
}

/// A proposal waiting for its entry to be applied.
#[derive(Clone, Copy, Debug)]
struct Pending {
    id: ProposalId,
    term: RaftTerm,
    ack: Ack,
    /// Its completion was pushed when the leader appended it (`Ack::Append`).
    answered: bool,
}

/// When a proposal completes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ack {
    /// When committed (a majority fsynced it): Kafka's acks=all.
    Commit,
    /// When this leader appended it to its log: Kafka's acks=1. The entry may still be
    /// lost if this leader fails before a majority has it.
    Append,
}

/// Where a group's effects go during a turn.
pub(crate) struct Effects<'a> {
    pub outbox: &'a mut Outbox,
    pub completions: &'a mut Vec<Completion>,
    pub rng: &'a mut Prng,
    /// Log start entries applied (DeleteRecords): the owner moves each partition's start.
    pub log_starts: &'a mut Vec<(GroupId, KafkaOffset)>,
}

/// See the module doc.
pub(crate) struct Group<S: LogStore> {
    id: GroupId,
    node: RawNode<GroupStorage<S>>,
    fenced: bool,
    pending: BTreeMap<RaftIndex, Pending>,
    // Invariant: only grows.
    applied: RaftIndex,
    /// Election ticks are drawn from `election_ticks.0..election_ticks.1`.
    election_ticks: (usize, usize),
    /// (term, role, leader) when the election timeout was last drawn.
    jitter_key: Option<(u64, StateRole, u64)>,
    /// The `Ready` between the two phases, and whether it wrote anything.
    in_flight: Option<(raft::Ready, bool)>,
    /// Asynchronous persistence (the broker): the `Ready` was advanced at once; its number,
    /// whether it wrote, and the messages that wait for its persistence.
    in_flight_async: Option<(u64, bool, Vec<Message>)>,
    /// Whether this group persists asynchronously (see `finish_ready_async`).
    async_persist: bool,
    /// Consecutive ticks this node led the group while it was quiescent.
    idle_ticks: usize,
    /// Hibernation is wanted (a leader sent its notices, or a follower received one); the
    /// driver puts the group to sleep at the end of a turn once it has no work left.
    sleep_requested: bool,
    /// The replica opened blank and no leader has reached it yet (see the module doc).
    blank_until_leader: bool,
    /// A vote refused while blank was logged (once per group).
    blank_refusal_logged: bool,
    /// As leader: ticks each follower has waited in raft-rs's snapshot state. Nothing
    /// reports a snapshot's delivery (the transport may drop it), so one not followed by
    /// progress within twice the longest election timeout is reported failed and sent
    /// again (`expire_snapshots`).
    snapshot_waits: BTreeMap<u64, usize>,
}

impl<S: LogStore> Group<S> {
    pub fn new(
        id: GroupId,
        node: RawNode<GroupStorage<S>>,
        election_ticks: (usize, usize),
        rng: &mut Prng,
    ) -> Self {
        // raft-rs starts applying after `Config::applied`, which the driver sets to the
        // larger of the compaction point and the persisted commit index.
        let applied = RaftIndex(node.raft.raft_log.applied);
        let blank =
            node.raft.term == 0 && node.raft.vote == 0 && node.raft.raft_log.last_index() == 0;
        if blank {
            tracing::debug!(group = %id, node = node.raft.id, "replica opened blank");
        }
        let mut group = Self {
            id,
            node,
            fenced: false,
            pending: BTreeMap::new(),
            applied,
            election_ticks,
            jitter_key: None,
            in_flight: None,
            in_flight_async: None,
            async_persist: false,
            idle_ticks: 0,
            sleep_requested: false,
            blank_until_leader: blank,
            blank_refusal_logged: false,
            snapshot_waits: BTreeMap::new(),
        };
        group.observe_role(rng);
        group
    }

    /// The proposals still waiting, when the group is removed (its store is dropped).
    pub fn into_pending(self) -> Vec<ProposalId> {
        self.pending
            .into_values()
            .filter(|p| !p.answered)
            .map(|p| p.id)
            .collect()
    }

    /// Switches the group to asynchronous persistence (see `finish_ready_async`).
    pub fn set_async_persist(&mut self) {
        self.async_persist = true;
    }

    pub fn is_fenced(&self) -> bool {
        self.fenced
    }

    pub fn is_leader(&self) -> bool {
        !self.fenced && self.node.raft.state == StateRole::Leader
    }

    pub fn term(&self) -> RaftTerm {
        RaftTerm(self.node.raft.term)
    }

    pub fn leader(&self) -> Option<NodeId> {
        match self.node.raft.leader_id {
            raft::INVALID_ID => None,
            id => Some(NodeId(id)),
        }
    }

    pub fn applied(&self) -> RaftIndex {
        self.applied
    }

    pub fn store(&self) -> &S {
        self.node.store().store()
    }

    pub fn store_mut(&mut self) -> &mut S {
        self.node.mut_store().store_mut()
    }

    /// Kafka offset just past the data this node has applied (committed).
    pub fn applied_kafka_end(&self) -> KafkaOffset {
        self.store()
            .index()
            .kafka_end_at(self.applied)
            .expect("the applied index is at or after the compaction point")
    }

    /// The high watermark this node serves as leader: none until it has applied an entry
    /// of its own term (until then a previous leader may have committed more).
    pub fn leader_high_watermark(&self) -> Option<KafkaOffset> {
        if !self.is_leader() {
            return None;
        }
        let applied_term = self.store().index().term_of(self.applied).ok()?;
        (applied_term == self.term()).then(|| self.applied_kafka_end())
    }

    /// Ends blank mode (see the module doc): this replica is blank because the group is new
    /// here, which only the caller can know.
    pub fn trust_blank(&mut self) {
        self.blank_until_leader = false;
    }

    /// After every raft-rs call that may change the term, the role or the leader: a known
    /// leader (one reached this replica, or it was elected itself) ends blank mode (see the
    /// module doc), and a new (term, role, leader) draws a new election timeout.
    fn observe_role(&mut self, rng: &mut Prng) {
        let r = &self.node.raft;
        if r.leader_id != raft::INVALID_ID {
            self.blank_until_leader = false;
        }
        let key = (r.term, r.state, r.leader_id);
        if self.jitter_key == Some(key) {
            return;
        }
        self.jitter_key = Some(key);
        let (lo, hi) = self.election_ticks;
        let ticks = usize::try_from(rng.range(lo as u64, hi as u64))
            .expect("a tick count drawn below a usize bound fits in usize");
        self.node.raft.set_randomized_election_timeout(ticks);
    }

    pub fn campaign(&mut self) -> raft::Result<()> {
        if self.fenced {
            return Ok(());
        }
        self.node.campaign()
    }

    pub fn tick(&mut self, rng: &mut Prng) {
        if self.fenced {
            return;
        }
        self.observe_role(rng);
        self.node.tick();
        self.observe_role(rng);
        self.expire_snapshots();
    }

    /// Reports as failed each snapshot a follower has waited for twice the longest
    /// election timeout (in ticks): raft-rs keeps a follower in its snapshot
    /// state, sending it nothing, until the snapshot's delivery is reported, so a
    /// snapshot lost on the way stalled that follower for as long as this node led (found
    /// by the simulator over the real storage path, seed 823). Reported failed, the
    /// follower is probed and, still behind the compaction point, sent a new snapshot.
    fn expire_snapshots(&mut self) {
        if !self.is_leader() {
            self.snapshot_waits.clear();
            return;
        }
        let limit = self.election_ticks.1.saturating_mul(2).max(1);
        let waiting: Vec<u64> = self
            .node
            .raft
            .prs()
            .iter()
            .filter(|(_, pr)| pr.state == raft::ProgressState::Snapshot)
            .map(|(id, _)| *id)
            .collect();
        self.snapshot_waits.retain(|id, _| waiting.contains(id));
        for id in waiting {
            let waited = self.snapshot_waits.entry(id).or_insert(0);
            *waited += 1;
            if *waited >= limit {
                self.snapshot_waits.remove(&id);
                tracing::info!(group = %self.id, follower = id,
                    "no progress after a snapshot: reporting it failed so that it is sent again");
                self.node.report_snapshot(id, raft::SnapshotStatus::Failure);
            }
        }
    }

    /// After a tick as leader: counts the quiescent ticks; after `hibernate_ticks` of them
    /// queues the hibernation notices and asks to sleep. `silent` tells whether a node has
    /// gone silent (a group with such a voter stays awake). True when it asked to sleep.
    pub fn maybe_hibernate(
        &mut self,
        hibernate_ticks: usize,
        silent: impl Fn(NodeId) -> bool,
        fx: &mut Effects<'_>,
    ) -> bool {
        if hibernate_ticks == 0 || self.sleep_requested {
            return false;
        }
        if !(self.leader_may_sleep(&silent) && self.settled()) {
            self.idle_ticks = 0;
            return false;
        }
        self.idle_ticks += 1;
        if self.idle_ticks < hibernate_ticks {
            return false;
        }
        let r = &self.node.raft;
        let notices: Vec<Message> = r
            .prs()
            .iter()
            .filter(|(&id, _)| id != r.id)
            .map(|(&id, _)| {
                let mut m = Message::default();
                m.set_msg_type(MessageType::MsgHeartbeat);
                m.to = id;
                m.from = r.id;
                m.term = r.term;
                m.commit = r.raft_log.committed;
                m.context = Bytes::from_static(HIBERNATE_CONTEXT);
                m
            })
            .collect();
        fx.outbox.push(self.id, notices);
        self.sleep_requested = true;
        true
    }

    /// The leader-side condition: leading, nothing proposed or being transferred or read,
    /// every voter's node heard from recently and holding every entry, everything applied.
    fn leader_may_sleep(&self, silent: &impl Fn(NodeId) -> bool) -> bool {
        let r = &self.node.raft;
        let last = r.raft_log.last_index();
        self.is_leader()
            && self.pending.is_empty()
            && r.lead_transferee.is_none()
            && r.pending_read_count() == 0
            && r.raft_log.committed == last
            && self.applied.0 == last
            && r.prs().iter().all(|(&id, pr)| {
                // Not `recent_active`: check-quorum clears it every election timeout.
                // The driver's node liveness stands in for it.
                id == r.id || (pr.matched == last && !silent(NodeId(id)))
            })
    }

    /// The follower-side condition: a follower of `leader` in `term` holding every entry
    /// it knows to be committed, and no more (applying them is left to the `Ready`).
    fn follower_may_sleep(&self, leader: u64, term: u64) -> bool {
        let r = &self.node.raft;
        !self.fenced
            && r.state == StateRole::Follower
            && r.leader_id == leader
            && r.term == term
            && r.raft_log.committed == r.raft_log.last_index()
    }

    /// No `Ready` waiting and none between its two phases.
    fn settled(&self) -> bool {
        self.in_flight.is_none() && self.in_flight_async.is_none() && !self.node.has_ready()
    }

    /// How `message` bears on hibernation; a notice loses its marker here.
    pub fn classify(&self, message: &mut Message) -> Activity {
        match message.get_msg_type() {
            MessageType::MsgHeartbeat if message.context.as_ref() == HIBERNATE_CONTEXT => {
                message.context = Bytes::new();
                Activity::Notice
            }
            MessageType::MsgHeartbeatResponse | MessageType::MsgAppendResponse => {
                Activity::Response
            }
            _ => Activity::Wake,
        }
    }

    /// After stepping a notice: sleep is wanted if the notice came from the leader this
    /// node follows, in its term, and this node holds every entry.
    pub fn on_notice(&mut self, from: u64, term: u64) {
        if self.follower_may_sleep(from, term) {
            self.sleep_requested = true;
        }
    }

    /// Real activity (a proposal, a leader's message, an election): hibernation is off
    /// until the group is quiescent again.
    pub fn on_activity(&mut self) {
        self.idle_ticks = 0;
        self.sleep_requested = false;
    }

    /// At the end of a turn: `Some(true)` to sleep now, `Some(false)` to keep waiting for
    /// the `Ready` to drain, `None` when sleep is not (or no longer) wanted.
    pub fn sleep_decision(&mut self, silent: impl Fn(NodeId) -> bool) -> Option<bool> {
        if !self.sleep_requested {
            return None;
        }
        let r = &self.node.raft;
        let eligible = if r.state == StateRole::Leader {
            self.leader_may_sleep(&silent)
        } else {
            self.follower_may_sleep(r.leader_id, r.term)
        };
        if !eligible {
            self.on_activity();
            return None;
        }
        Some(self.settled() && self.applied.0 == self.node.raft.raft_log.committed)
    }

    /// Wakes a sleeping follower whose leader went silent: its lease is over (it heard
    /// nothing for an election timeout), so it campaigns after the remaining jitter instead
    /// of waiting a whole timeout more.
    pub fn leader_went_silent(&mut self) {
        self.on_activity();
        self.end_lease();
    }

    /// As a follower, treats the leader's lease (check-quorum) as expired.
    fn end_lease(&mut self) {
        let r = &mut self.node.raft;
        if r.state == StateRole::Follower {
            r.election_elapsed = r.election_elapsed.max(r.election_timeout());
        }
    }

    /// A vote request from the leader this node follows means that leader restarted or
    /// stepped down: its lease no longer holds, so the request is not ignored as a
    /// disruption (check-quorum's lease; a hibernating follower's clock stood still).
    pub fn lease_ends_if_from_leader(&mut self, message: &Message) {
        let vote = matches!(
            message.get_msg_type(),
            MessageType::MsgRequestVote | MessageType::MsgRequestPreVote
        );
        if vote && self.node.raft.leader_id == message.from {
            self.end_lease();
        }
    }

    /// The other voters and learners of this group.
    pub fn peers(&self) -> impl Iterator<Item = NodeId> + '_ {
        let me = self.node.raft.id;
        self.node
            .raft
            .prs()
            .iter()
            .map(|(&id, _)| id)
            .filter(move |&id| id != me)
            .map(NodeId)
    }

    /// Whether `node` is one of this group's voters or learners.
    pub fn has_peer(&self, node: NodeId) -> bool {
        node.0 != self.node.raft.id && self.node.raft.prs().get(node.0).is_some()
    }

    /// Steps a peer's message; a malformed one is dropped and reported.
    pub fn step(&mut self, message: Message, fx: &mut Effects<'_>) -> Result<(), &'static str> {
        if self.fenced {
            return Ok(());
        }
        validate(&message)?;
        if let Some(lost) = self.lost_acknowledged(&message) {
            tracing::error!(
                group = %self.id,
                leader = message.from,
                term = message.term,
                leader_counts_through = lost.counted,
                log_ends_at = lost.last,
                "this node's log lacks entries it acknowledged: the data directory lost data \
                 (wiped, or restored from an older copy); the group is fenced here (no votes, \
                 no acknowledgements), its other replicas keep the data. Move this replica \
                 away and back (or drain and replace the node) to bring it back"
            );
            self.fence_quietly(fx);
            return Ok(());
        }
        if self.blank_until_leader && self.refuses_while_blank(&message) {
            return Ok(());
        }
        // A stale or unexpected message is raft-rs's to ignore; its error says nothing we act on.
        if let Err(e) = self.node.step(message) {
            tracing::debug!(group = %self.id, error = %e, "raft step refused a message");
        }
        self.observe_role(fx.rng);
        self.fail_pending_unless_leader(fx);
        Ok(())
    }

    /// As leader, proposes one entry `classify` accepts (a data or a log start entry);
    /// completes with `ack` (see `Ack`).
    pub fn propose_entry(
        &mut self,
        id: ProposalId,
        data: Bytes,
        context: Bytes,
        proposals_max: usize,
        ack: Ack,
    ) -> Result<(), RaftError> {
        let group = self.id;
        if self.fenced {
            return Err(RaftError::Fenced { group });
        }
        if !self.is_leader() {
            let leader_hint = self.leader();
            return Err(RaftError::NotLeader { group, leader_hint });
        }
        if self.pending.len() >= proposals_max {
            return Err(RaftError::Backpressure { group });
        }
        match self.step_proposal(data, context)? {
            Ok(()) => {}
            Err(raft::Error::ProposalDropped) => return Err(RaftError::Dropped { group }),
            Err(e) => {
                let reason = e.to_string();
                return Err(RaftError::Raft { group, reason });
            }
        }
        let index = RaftIndex(self.node.raft.raft_log.last_index());
        let term = self.term();
        self.pending.insert(
            index,
            Pending {
                id,
                term,
                ack,
                answered: false,
            },
        );
        Ok(())
    }

    /// Hands a data entry to the leader through raft-rs's proposal forwarding, without
    /// tracking it: the caller observes the outcome in the applied log (the controller's
    /// commands are checked against the state they produce).
    pub fn forward(&mut self, payload: Bytes, record_count: u32) -> Result<(), RaftError> {
        let group = self.id;
        if self.fenced {
            return Err(RaftError::Fenced { group });
        }
        let context = Bytes::copy_from_slice(&entry::data_context(record_count));
        match self.step_proposal(payload, context)? {
            Ok(()) => Ok(()),
            Err(raft::Error::ProposalDropped) => Err(RaftError::NotLeader {
                group,
                leader_hint: self.leader(),
            }),
            Err(e) => Err(RaftError::Raft {
                group,
                reason: e.to_string(),
            }),
        }
    }

    /// Builds a data entry (refused when malformed) and steps it as a `MsgPropose`: on the
    /// leader raft-rs appends it, on a follower it forwards it. RawNode::propose takes a
    /// Vec<u8>; stepping the message keeps the payload's `Bytes`.
    fn step_proposal(
        &mut self,
        data: Bytes,
        context: Bytes,
    ) -> Result<raft::Result<()>, RaftError> {
        let e = Entry {
            data,
            context,
            ..Entry::default()
        };
        if let Err(why) = entry::classify(&e) {
            return Err(RaftError::InvalidProposal {
                group: self.id,
                why,
            });
        }
        let mut m = Message::default();
        m.set_msg_type(MessageType::MsgPropose);
        m.from = self.node.raft.id;
        m.mut_entries().push(e);
        Ok(self.node.raft.step(m))
    }

    /// Phase 1 of a turn: see the module doc.
    pub fn begin_ready(&mut self, fx: &mut Effects<'_>) {
        // One persistence in flight at a time: the next `Ready` waits for it.
        if self.fenced || self.in_flight_async.is_some() || !self.node.has_ready() {
            return;
        }
        let mut rd = self.node.ready();
        fx.outbox.push(self.id, rd.take_messages());
        let mut wrote = false;
        if !rd.snapshot().is_empty() {
            let restored = compaction_point_of(rd.snapshot()).and_then(|point| {
                let conf_state = rd.snapshot().get_metadata().get_conf_state().clone();
                let state = crate::storage::snapshot_state(rd.snapshot());
                self.store_mut().restore(point, &conf_state, state)?;
                Ok(point)
            });
            match restored {
                Ok(point) => self.applied = self.applied.max(point.index),
                Err(e) => return self.fence(e, fx),
            }
            wrote = true;
        }
        let committed = rd.take_committed_entries();
        let last_committed = committed.last().map(|e| e.index);
        self.apply(committed, fx);
        if self.fenced {
            return;
        }
        // (After a snapshot the point is not persisted yet, so raft-rs would refuse to
        // advance the applied index; that Ready waits for `advance_apply` at the finish.)
        let applied_now = last_committed.filter(|_| rd.snapshot().is_empty());
        if !rd.entries().is_empty() {
            if let Err(e) = self.store_mut().append(rd.entries()) {
                return self.fence(e, fx);
            }
            self.answer_appended(rd.entries(), fx);
            wrote = true;
        }
        if let Some(hs) = rd.hs() {
            let hs = hs.clone();
            self.store_mut().set_hard_state(&hs);
            wrote = true;
        }
        if self.async_persist {
            // raft-rs's asynchronous-ready path: the entries are in the store's memory
            // (logically appended), so the Ready is advanced now and the node may step and
            // propose while the disk works; `on_persist_ready` follows the fsync.
            let number = rd.number();
            let persisted = rd.take_persisted_messages();
            self.node.advance_append_async(rd);
            // raft-rs's applied index follows at once, not when the write finishes: a tick
            // or a MsgHup meanwhile reads the entries after it, which the store keeps in
            // memory only until they are applied. Only after the Ready is advanced: applying
            // a joint configuration makes a leader append the entry that leaves it, which
            // must come after the Ready's own entries (raft-rs asserts it).
            if let Some(last) = applied_now {
                self.node.advance_apply_to(last);
            }
            self.in_flight_async = Some((number, wrote, persisted));
        } else {
            // Nothing steps this group before `finish_ready`, whose `advance_apply` follows
            // `advance_append` (see above for why not before).
            self.in_flight = Some((rd, wrote));
        }
    }

    /// Phase 2 of a turn: see the module doc.
    pub fn finish_ready(&mut self, fx: &mut Effects<'_>) {
        let Some((mut rd, wrote)) = self.in_flight.take() else {
            return;
        };
        if wrote {
            if let Err(e) = self.store_mut().sync() {
                return self.fence(e, fx);
            }
        }
        fx.outbox.push(self.id, rd.take_persisted_messages());
        let mut light = self.node.advance_append(rd);
        if let Some(commit) = light.commit_index() {
            // Durable with the next sync; a commit index lost in a crash is relearned.
            let mut hs = self.store().hard_state();
            hs.commit = commit;
            self.store_mut().set_hard_state(&hs);
        }
        fx.outbox.push(self.id, light.take_messages());
        self.apply(light.take_committed_entries(), fx);
        self.node.advance_apply();
        self.observe_role(fx.rng);
        self.fail_pending_unless_leader(fx);
    }

    /// Phase 2 when the store persisted asynchronously while the node kept stepping
    /// messages and proposals (the broker): raft-rs's asynchronous-ready path, so messages
    /// a follower generated meanwhile wait for the next `Ready` (after their own
    /// persistence) instead of breaking `advance_append`'s contract. The commit this
    /// enables surfaces in the next `Ready`.
    pub fn finish_ready_async(&mut self, fx: &mut Effects<'_>) {
        let Some((number, wrote, persisted)) = self.in_flight_async.take() else {
            return;
        };
        if wrote {
            if let Err(e) = self.store_mut().sync() {
                return self.fence(e, fx);
            }
        }
        fx.outbox.push(self.id, persisted);
        self.node.on_persist_ready(number);
        self.node.advance_apply();
        self.observe_role(fx.rng);
        self.fail_pending_unless_leader(fx);
    }

    /// As leader: the other voters not in sync (Kafka's ISR sense): behind the commit
    /// index, or `silent` (the driver's node liveness: not heard from within an election
    /// timeout). `None` when not leading.
    pub fn lagging_voters(&self, silent: impl Fn(NodeId) -> bool) -> Option<usize> {
        let progress = self.voter_progress(silent)?;
        Some(
            progress
                .iter()
                .filter(|&&(_, caught_up, active)| !(caught_up && active))
                .count(),
        )
    }

    /// As leader: each other replica (voter or learner) with whether it has every committed
    /// entry and whether it was heard from within the last election timeout (not
    /// `silent`; not raft-rs's `recent_active`, which check-quorum clears every election
    /// timeout, so it reads false until the next response). `None` when not leading.
    pub fn voter_progress(
        &self,
        silent: impl Fn(NodeId) -> bool,
    ) -> Option<Vec<(NodeId, bool, bool)>> {
        if !self.is_leader() {
            return None;
        }
        let r = &self.node.raft;
        let committed = r.raft_log.committed;
        Some(
            r.prs()
                .iter()
                .filter(|(id, _)| **id != r.id)
                .map(|(id, pr)| {
                    let node = NodeId(*id);
                    (node, pr.matched >= committed, !silent(node))
                })
                .collect(),
        )
    }

    /// As leader: whether voter `node` has every committed entry and is not `silent` (a
    /// safe target for a leadership transfer).
    pub fn voter_in_sync(&self, node: NodeId, silent: impl Fn(NodeId) -> bool) -> bool {
        let r = &self.node.raft;
        self.is_leader()
            && r.prs().conf().voters().contains(node.0)
            && !silent(node)
            && r.prs()
                .get(node.0)
                .is_some_and(|pr| pr.matched >= r.raft_log.committed)
    }

    /// As leader, proposes adding `node` as a learner (it receives the log, never votes)
    /// or, with `learner` false, removing it as a learner: how a node that joined the
    /// cluster follows the controller, and stops when it is removed from the cluster. A
    /// no-op when nothing would change; refused when not leading, for a voter, or while
    /// another configuration change is in flight.
    pub fn set_learner(&mut self, node: NodeId, learner: bool) -> Result<(), RaftError> {
        let group = self.id;
        if !self.is_leader() {
            let leader_hint = self.leader();
            return Err(RaftError::NotLeader { group, leader_hint });
        }
        let r = &self.node.raft;
        let conf = r.prs().conf();
        if conf.voters().contains(node.0) {
            let why = "the node is a voter";
            return Err(RaftError::InvalidProposal { group, why });
        }
        if conf.learners().contains(&node.0) == learner {
            return Ok(());
        }
        if r.pending_conf_index > r.raft_log.applied {
            return Err(RaftError::Dropped { group });
        }
        use raft::eraftpb::ConfChangeType::{AddLearnerNode, RemoveNode};
        let kind = if learner { AddLearnerNode } else { RemoveNode };
        self.propose_changes(&[(kind, node.0)])
    }

    /// Proposes one configuration change of `changes` (joint consensus with automatic
    /// leave when there are several).
    fn propose_changes(
        &mut self,
        changes: &[(raft::eraftpb::ConfChangeType, u64)],
    ) -> Result<(), RaftError> {
        let mut cc = ConfChangeV2::default();
        for &(kind, node_id) in changes {
            let mut single = raft::eraftpb::ConfChangeSingle {
                node_id,
                ..Default::default()
            };
            single.set_change_type(kind);
            cc.mut_changes().push(single);
        }
        cc.set_transition(raft::eraftpb::ConfChangeTransition::Auto);
        let group = self.id;
        self.node
            .propose_conf_change(Vec::new(), cc)
            .map_err(|e| RaftError::Raft {
                group,
                reason: e.to_string(),
            })
    }

    /// As leader, takes the next step of moving the group's membership to the voters
    /// `target` (a partition reassignment), one configuration change at a time:
    /// 1. a target node outside the group joins as a learner;
    /// 2. once every target learner holds every committed entry and answers, they become
    ///    voters and every voter or learner outside the target except this leader leaves,
    ///    in one change (joint consensus with automatic leave when it is more than one);
    /// 3. a leader outside the target hands leadership to an in-sync target voter, whose
    ///    own step 2 then removes it.
    ///
    /// A new replica starts from the log's first entry, applying every configuration
    /// change in order, or from a snapshot when the leader compacted that prefix.
    /// `silent`: the driver's node liveness (see `voter_progress`). With `keep_learners`,
    /// learners outside the target stay and voters outside it become learners (the
    /// controller's group: every node follows it).
    #[expect(
        clippy::too_many_lines,
        reason = "longer than 70 lines when the lint came in (issue 27): split it when it next changes"
    )]
    pub fn move_members(
        &mut self,
        target: &[NodeId],
        silent: impl Fn(NodeId) -> bool,
        keep_learners: bool,
    ) -> Result<MembershipStep, RaftError> {
        let group = self.id;
        if !self.is_leader() {
            let leader_hint = self.leader();
            return Err(RaftError::NotLeader { group, leader_hint });
        }
        if target.is_empty() {
            let why = "a membership target needs at least one voter";
            return Err(RaftError::InvalidProposal { group, why });
        }
        let r = &self.node.raft;
        let me = r.id;
        let conf = r.prs().conf().to_conf_state();
        if !conf.voters_outgoing.is_empty() || r.pending_conf_index > r.raft_log.applied {
            return Ok(MembershipStep::Waiting(
                "a configuration change is in flight",
            ));
        }
        let (voters, learners) = (conf.voters, conf.learners);
        let wanted = |n: u64| target.iter().any(|t| t.0 == n);
        let member = |n: u64| voters.contains(&n) || learners.contains(&n);
        let committed = r.raft_log.committed;
        let in_sync = |n: u64| {
            r.prs()
                .get(n)
                .is_some_and(|pr| pr.matched >= committed && !silent(NodeId(n)))
        };
        use raft::eraftpb::ConfChangeType::{AddLearnerNode, AddNode, RemoveNode};
        let mut changes: Vec<(raft::eraftpb::ConfChangeType, u64)> = Vec::new();
        if let Some(n) = target.iter().map(|t| t.0).find(|&n| !member(n)) {
            changes.push((AddLearnerNode, n));
        } else {
            let catching_up = learners.iter().any(|&n| wanted(n) && !in_sync(n));
            if catching_up {
                return Ok(MembershipStep::Waiting("new replicas are catching up"));
            }
            changes.extend(
                learners
                    .iter()
                    .filter(|&&n| wanted(n))
                    .map(|&n| (AddNode, n)),
            );
            if keep_learners {
                // Voters outside the target become learners; learners stay.
                changes.extend(
                    voters
                        .iter()
                        .filter(|&&n| !wanted(n) && n != me)
                        .map(|&n| (AddLearnerNode, n)),
                );
            } else {
                changes.extend(
                    voters
                        .iter()
                        .chain(&learners)
                        .filter(|&&n| !wanted(n) && n != me)
                        .map(|&n| (RemoveNode, n)),
                );
            }
        }
        if changes.is_empty() {
            if wanted(me) {
                return Ok(MembershipStep::Done);
            }
            let to = target
                .iter()
                .copied()
                .find(|t| voters.contains(&t.0) && in_sync(t.0));
            return Ok(match to {
                Some(to) => {
                    self.node.transfer_leader(to.0);
                    MembershipStep::Transferring(to)
                }
                None => MembershipStep::Waiting("no target voter is in sync to lead"),
            });
        }
        self.propose_changes(&changes)?;
        Ok(MembershipStep::Proposed)
    }

    /// raft-rs's state of the group, for a simulator failure report.
    pub fn describe(&self) -> String {
        let r = &self.node.raft;
        let prs: Vec<String> = r
            .prs()
            .iter()
            .map(|(id, pr)| {
                format!(
                    "{id}:{:?} m{} n{} a{}",
                    pr.state, pr.matched, pr.next_idx, pr.recent_active
                )
            })
            .collect();
        format!(
            "fenced {} async {} term {} state {:?} lead {} commit {} last {} prs [{}]",
            self.fenced,
            self.in_flight_async.is_some(),
            r.term,
            r.state,
            r.leader_id,
            r.raft_log.committed,
            r.raft_log.last_index(),
            prs.join(", ")
        )
    }

    /// The voters and the learners of the group as this node applied them.
    pub fn members(&self) -> (Vec<u64>, Vec<u64>) {
        let c = self.store().conf_state();
        (c.voters, c.learners)
    }

    /// The group as this node sees it (see `GroupView`).
    pub fn view(&self) -> GroupView {
        let r = &self.node.raft;
        let (voters, learners) = self.members();
        let matched = if self.is_leader() {
            let mut m: Vec<(u64, u64)> = r.prs().iter().map(|(&id, pr)| (id, pr.matched)).collect();
            m.sort_unstable();
            m
        } else {
            Vec::new()
        };
        GroupView {
            leader: (r.leader_id != raft::INVALID_ID).then_some(r.leader_id),
            term: r.term,
            commit: r.raft_log.committed,
            last_index: r.raft_log.last_index(),
            applied: r.raft_log.applied,
            voters,
            learners,
            matched,
        }
    }

    /// Hands leadership to `node` (raft-rs leader transfer; proposals are refused meanwhile).
    pub fn transfer_leader(&mut self, node: NodeId) {
        if self.is_leader() {
            self.node.transfer_leader(node.0);
        }
    }

    /// As leader: whether a leader transfer is under way (raft-rs gives it up after an
    /// election timeout).
    pub fn transferring(&self) -> bool {
        self.is_leader() && self.node.raft.lead_transferee.is_some()
    }

    /// Whether raft-rs has work for the next turn.
    pub fn has_ready(&self) -> bool {
        !self.fenced && self.in_flight_async.is_none() && self.node.has_ready()
    }

    fn apply(&mut self, entries: Vec<Entry>, fx: &mut Effects<'_>) {
        for e in entries {
            let index = RaftIndex(e.index);
            assert!(
                index > self.applied,
                "applied went back: {index:?} <= {:?}",
                self.applied
            );
            if matches!(
                e.get_entry_type(),
                EntryType::EntryConfChange | EntryType::EntryConfChangeV2
            ) {
                if let Err(e) = self.apply_conf_change(&e) {
                    return self.fence(e, fx);
                }
            }
            if e.context.as_ref() == entry::LOG_START_CONTEXT {
                if let Ok(entry::EntryKind::LogStart { offset }) = entry::classify(&e) {
                    fx.log_starts.push((self.id, KafkaOffset(offset)));
                }
            }
            self.applied = index;
            self.complete_through(index, RaftTerm(e.term), fx);
        }
        let applied = self.applied;
        self.store_mut().applied_to(applied);
    }

    /// Whether a `Ready` is between the two phases.
    pub fn in_flight(&self) -> bool {
        self.in_flight.is_some() || self.in_flight_async.is_some()
    }

    /// Whether the `Ready` between the two phases wrote to the store (it needs a sync).
    pub fn needs_sync(&self) -> bool {
        matches!(self.in_flight, Some((_, true)))
            || matches!(self.in_flight_async, Some((_, true, _)))
    }

    /// Reads raft-rs waits for (see `GroupStorage::take_wanted`).
    pub fn has_wanted(&self) -> bool {
        self.node.store().has_wanted()
    }

    /// Hands every waiting read back to raft-rs once the store holds its entries; the
    /// appends it then sends go out with the next `Ready`.
    pub fn entries_fetched(&mut self) {
        for w in self.node.store().take_wanted() {
            if !self.fenced {
                self.node.on_entries_fetched(w.context);
            }
        }
    }

    /// The reads raft-rs waits for, as index ranges (the contexts stay until
    /// `entries_fetched`).
    pub fn wanted_ranges(&self) -> Vec<(RaftIndex, RaftIndex)> {
        let wanted = self.node.store().take_wanted();
        let ranges = wanted.iter().map(|w| (w.lo, w.hi)).collect();
        self.node.store().put_back_wanted(wanted);
        ranges
    }

    /// Completes the `Ack::Append` proposals among `entries`, just appended by this leader.
    fn answer_appended(&mut self, entries: &[Entry], fx: &mut Effects<'_>) {
        let group = self.id;
        let (Some(first), Some(last)) = (entries.first(), entries.last()) else {
            return;
        };
        let range = RaftIndex(first.index)..=RaftIndex(last.index);
        let index = self.node.store().store().index();
        for (&at, p) in self.pending.range_mut(range) {
            let term_here = entries
                .get(usize::try_from(at.0 - first.index).unwrap_or(usize::MAX))
                .map(|e| RaftTerm(e.term));
            if p.ack != Ack::Append || p.answered || term_here != Some(p.term) {
                continue;
            }
            p.answered = true;
            let result = index
                .kafka_base_of(at)
                .map_err(|source| RaftError::Store { group, source });
            fx.completions.push(Completion {
                id: p.id,
                group,
                result,
            });
        }
    }

    fn complete_through(&mut self, index: RaftIndex, term: RaftTerm, fx: &mut Effects<'_>) {
        let group = self.id;
        while let Some(first) = self.pending.first_entry() {
            if *first.key() > index {
                break;
            }
            let at = *first.key();
            let p = first.remove();
            if p.answered {
                continue;
            }
            let result = if at == index && p.term == term {
                self.store()
                    .index()
                    .kafka_base_of(index)
                    .map_err(|source| RaftError::Store { group, source })
            } else {
                Err(RaftError::Dropped { group })
            };
            fx.completions.push(Completion {
                id: p.id,
                group,
                result,
            });
        }
    }

    fn apply_conf_change(&mut self, e: &Entry) -> Result<(), StoreError> {
        let index = RaftIndex(e.index);
        let malformed = |why| StoreError::MalformedEntry { index, why };
        let conf_state = if e.get_entry_type() == EntryType::EntryConfChangeV2 {
            let cc = ConfChangeV2::parse_from_bytes(&e.data)
                .map_err(|_| malformed("undecodable ConfChangeV2"))?;
            self.node.apply_conf_change(&cc)
        } else {
            let cc = ConfChange::parse_from_bytes(&e.data)
                .map_err(|_| malformed("undecodable ConfChange"))?;
            self.node.apply_conf_change(&cc)
        }
        .map_err(|e| {
            tracing::error!(group = %self.id, %index, error = %e, conf = ?self.store().conf_state(), "raft-rs refused a committed configuration change");
            malformed("configuration change refused by raft-rs")
        })?;
        self.store_mut().set_conf_state(index, &conf_state);
        // A leader that applies its own removal (elected before it applied it) steps down
        // at once: raft-rs would keep it leading outside its configuration, drop every
        // proposal it makes, and panic on the next acknowledgement it counts.
        let r = &mut self.node.raft;
        if r.state == StateRole::Leader && r.prs().get(r.id).is_none() {
            let term = r.term;
            r.become_follower(term, raft::INVALID_ID);
        }
        // The configuration is persisted with a commit index that covers its entry: a
        // restart then begins past the entry instead of applying it again to a
        // configuration that already has it (raft-rs refuses that, e.g. entering a joint
        // configuration twice, and the group would be fenced). The commit index of a
        // `LightReady` is otherwise not persisted.
        let mut hs = self.store().hard_state();
        if hs.commit < index.0 {
            hs.commit = index.0;
            self.store_mut().set_hard_state(&hs);
        }
        Ok(())
    }

    /// A proposal waits only while this node leads: once it does not, the outcome is
    /// unknown to it and the producer must retry (Kafka's NOT_LEADER_OR_FOLLOWER).
    fn fail_pending_unless_leader(&mut self, fx: &mut Effects<'_>) {
        if self.pending.is_empty() || self.is_leader() {
            return;
        }
        let (group, leader_hint) = (self.id, self.leader());
        while let Some((_, p)) = self.pending.pop_first() {
            if p.answered {
                continue;
            }
            let result = Err(RaftError::NotLeader { group, leader_hint });
            fx.completions.push(Completion {
                id: p.id,
                group,
                result,
            });
        }
    }

    /// A heartbeat of the current (or a newer) term counts this node as holding entries past
    /// its log's end. A leader's heartbeat carries `min(what this node acknowledged, commit)`,
    /// and a node acknowledges only what it made durable, so the entries were lost after they
    /// were acknowledged: the data directory was wiped or restored from an older copy (raft-rs
    /// would panic on it). Such a node must not vote or acknowledge again as if it held them.
    fn lost_acknowledged(&self, message: &Message) -> Option<LostEntries> {
        let last = self.node.raft.raft_log.last_index();
        let counted = message.commit;
        (message.get_msg_type() == MessageType::MsgHeartbeat
            && message.term >= self.node.raft.term
            && counted > last)
            .then_some(LostEntries { counted, last })
    }

    /// While blank (see the module doc): a leader's message ends it; a vote or pre-vote
    /// request from a candidate whose log holds entries this one lacks is refused (dropped,
    /// as if this node were down). True when `message` is refused.
    fn refuses_while_blank(&mut self, message: &Message) -> bool {
        match message.get_msg_type() {
            MessageType::MsgAppend | MessageType::MsgHeartbeat | MessageType::MsgSnapshot
                if message.term >= self.node.raft.term =>
            {
                self.blank_until_leader = false;
                false
            }
            MessageType::MsgRequestVote | MessageType::MsgRequestPreVote => {
                let log = &self.node.raft.raft_log;
                let ours = (log.last_term(), log.last_index());
                if (message.log_term, message.index) <= ours {
                    return false;
                }
                if !self.blank_refusal_logged {
                    self.blank_refusal_logged = true;
                    tracing::warn!(
                        group = %self.id,
                        node = self.node.raft.id,
                        candidate = message.from,
                        candidate_log_ends_at = message.index,
                        "this replica holds no Raft state (new, or its data directory was \
                         wiped) and votes for a candidate holding entries it lacks only after \
                         a leader has reached it: it may have acknowledged entries the \
                         candidate lacks. Not voting until the group has a leader"
                    );
                }
                true
            }
            _ => false,
        }
    }

    fn fence(&mut self, error: StoreError, fx: &mut Effects<'_>) {
        tracing::error!(group = %self.id, %error, "log write failed, fencing the group");
        self.fence_quietly(fx);
    }

    /// Fences the group (see the module invariants) and fails what is pending.
    fn fence_quietly(&mut self, fx: &mut Effects<'_>) {
        self.fenced = true;
        self.in_flight = None;
        self.in_flight_async = None;
        let group = self.id;
        while let Some((_, p)) = self.pending.pop_first() {
            if p.answered {
                continue;
            }
            let result = Err(RaftError::Fenced { group });
            fx.completions.push(Completion {
                id: p.id,
                group,
                result,
            });
        }
    }
}

/// A group as one node sees it: for operators (Kafka's DescribeQuorum).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GroupView {
    /// The leader this node knows of.
    pub leader: Option<u64>,
    pub term: u64,
    /// Commit index.
    pub commit: u64,
    /// This node's last log index.
    pub last_index: u64,
    /// The index of the last entry applied here.
    pub applied: u64,
    pub voters: Vec<u64>,
    pub learners: Vec<u64>,
    /// On the leader: each member's highest index known to match the leader's log.
    pub matched: Vec<(u64, u64)>,
}

/// Entries a leader counts this node as holding that its log lacks.
struct LostEntries {
    /// The index the leader's heartbeat counts this node through.
    counted: u64,
    /// This node's last log index.
    last: u64,
}

/// Peer input check: every entry is one of ours, a snapshot carries a compaction point.
fn validate(message: &Message) -> Result<(), &'static str> {
    for e in message.get_entries() {
        entry::classify(e)?;
    }
    if message.has_snapshot() && !message.get_snapshot().is_empty() {
        compaction_point_of(message.get_snapshot()).map_err(|_| "malformed snapshot")?;
    }
    Ok(())
}
