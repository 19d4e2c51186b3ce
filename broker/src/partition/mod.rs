//! One partition on its shard: the log, the high watermark, group commit and the waiters
//! for durability (acks=all) and for appends (Fetch long-poll).
//!
//! Invariant: `high_watermark` only moves forward, to what the log reports durable (on one
//! node, committed = fdatasynced). At most one flush task runs per partition; every
//! append after it started is flushed by the next turn of the same task.
//!
//! The subsystem also holds the partition's idempotent-producer state (`producer_state`),
//! its checkpoints (`checkpoint`) and the lookups that decode records (`lookup`).
//!
//! May use: `common`, `runtime`. A replicated partition proposes through the [`RaftGroups`]
//! it is attached to, which the replication layer implements; a partition whose checkpoint
//! keeps its keyed records compacted (`compacted`: an offsets partition) is handed the
//! reader of its keys when it opens, so the record formats stay with their owners.

pub mod checkpoint;
pub mod cleaner;
pub mod codec;
pub mod compacted;
pub mod compaction;
pub mod lookup;
pub mod producer_state;
pub mod record_set;
pub mod stamp;
pub mod turns;
pub mod txn_index;

use std::cell::{Cell, RefCell};
use std::rc::{Rc, Weak};

use bytes::Bytes;
use futures::channel::oneshot;
use futures::future::LocalBoxFuture;
use strand_storage::{AppendEntry, FrameKind, KafkaOffset, Log, RaftIndex, RaftTerm, StorageError};
use strand_wire::RecordBatch;

use crate::common::errors::KafkaError;
use crate::common::logging::{RateLimit, STORAGE_ERROR_LOG_INTERVAL};
use crate::common::metrics::{ProduceStage, ShardMetrics};
use crate::partition::checkpoint::{
    Checkpoint, CheckpointError, CHECKPOINT_ADVANCE_BYTES, CHECKPOINT_INTERVAL_BYTES,
};
use crate::partition::compacted::{Compacted, KeyScope, PendingRecord, PendingTxnRecords};
use crate::partition::producer_state::{batch_ids, ProducerStates, Verdict, PENDING_OFFSET};
use crate::partition::turns::{Turn, Turns};
use crate::partition::txn_index::{AbortedTxn, TxnIndex};
use record_set::RecordSet;
use strand_raft::{Ack, GroupId};

thread_local! {
    /// A background checkpoint move runs on this shard (`Partition::maybe_checkpoint`).
    static SHARD_CHECKPOINT_MOVING: Cell<bool> = const { Cell::new(false) };
}

/// Durability waiters and append watchers are bounded by the requests in flight, which
/// the connection pipeline depth bounds; this caps one partition's list regardless.
pub const WAITERS_MAX: usize = 65_536;

/// When an append is answered, and what starts its flush.
#[derive(Clone, Copy, PartialEq, Eq)]
enum AnswerWhen {
    /// Once appended (acks=1); the append starts a flush.
    Appended,
    /// Once appended, and no flush of its own for `LAZY_FLUSH_DELAY` (`append_lazily`).
    AppendedLazily,
    /// Once durable (acks=all).
    Durable,
}

impl AnswerWhen {
    fn of(acks_all: bool) -> AnswerWhen {
        if acks_all {
            AnswerWhen::Durable
        } else {
            AnswerWhen::Appended
        }
    }
}

/// How long an append made with [`Partition::append_lazily`] waits for another flush of
/// its partition to take it along before it starts one of its own.
const LAZY_FLUSH_DELAY: std::time::Duration = std::time::Duration::from_millis(100);

/// After a flush failed for lack of space (the data stays pending), how long until it is
/// tried again: the data becomes durable and readable once space returns, also when
/// nothing else is written.
const FLUSH_RETRY_DELAY: std::time::Duration = std::time::Duration::from_secs(1);

/// A waiter list is swept of senders whose receivers are gone each time its length reaches
/// a power of two from this on (amortised O(1) per waiter).
const WAITERS_SWEEP_FLOOR: usize = 64;

/// Adds `tx` to a waiter list (append watchers, serving watchers) of at most `max`.
/// Senders whose receivers are gone (a fetch that timed out, a closed connection) are
/// swept out whenever the list's length reaches a power of two past `WAITERS_SWEEP_FLOOR`,
/// so dead waiters never pile up between wakes; with `max` live waiters the oldest is woken
/// early to make room (a spurious wake: it looks again and waits anew).
fn add_waiter(list: &mut Vec<oneshot::Sender<()>>, tx: oneshot::Sender<()>, max: usize) {
    let n = list.len();
    if n >= max || (n >= WAITERS_SWEEP_FLOOR && n.is_power_of_two()) {
        list.retain(|s| !s.is_canceled());
    }
    if !list.is_empty() && list.len() >= max {
        let _ = list.swap_remove(0).send(());
    }
    list.push(tx);
}

/// How often a checkpoint writer waiting for another one looks again.
const CHECKPOINT_LOCK_POLL: std::time::Duration = std::time::Duration::from_millis(1);
/// How long a produce to a newly elected leader waits for it to serve (its term's first
/// entry committed, its producer state rebuilt: normally a round trip and a write) before
/// it is answered NOT_LEADER_OR_FOLLOWER. Metadata names a leader from its election on,
/// and a Kafka leader takes writes from then on: a refusal would send the client into a
/// metadata refresh and a retry backoff for a wait of about a millisecond.
const NEW_LEADER_WAIT: std::time::Duration = if cfg!(test) {
    std::time::Duration::from_millis(200)
} else {
    std::time::Duration::from_secs(2)
};

/// What a replicated partition asks of the Raft driver that runs its group. The replication
/// layer implements it (`replication::Replicator`), so a partition never names that layer.
pub trait RaftGroups {
    /// The index through which this node applied `group`'s entries; `None` for a group
    /// the driver does not run.
    fn applied_index(&self, group: GroupId) -> Option<RaftIndex>;
    /// Retention on a replicated log: the closed segments through `through` leave the
    /// Raft log at the driver's next turn.
    fn compact_for_retention(&self, group: GroupId, through: RaftIndex);
    /// Moves the group's log start offset on every replica (DeleteRecords); resolves once
    /// committed and applied on this node.
    fn propose_log_start(
        &self,
        group: GroupId,
        offset: KafkaOffset,
    ) -> LocalBoxFuture<'_, Result<(), KafkaError>>;
    /// Proposes one producer batch; resolves with its base offset once committed
    /// (`Ack::Commit`) or once this leader appended it (`Ack::Append`).
    fn propose(
        &self,
        group: GroupId,
        batch: Bytes,
        record_count: u32,
        ack: Ack,
    ) -> LocalBoxFuture<'_, Result<KafkaOffset, KafkaError>>;
}

/// A produce waiting for its entry to become durable; told when the flush that made it
/// durable began (`None`: not known, e.g. a shutdown's flush).
type DurableWaiter = (
    RaftIndex,
    oneshot::Sender<Result<Option<std::time::Instant>, KafkaError>>,
);

/// Result of a produce to this partition.
#[derive(Clone, Copy, Debug)]
pub struct Produced {
    /// Offset of the batch's first record.
    pub base_offset: KafkaOffset,
    /// When its steps happened here (`None` for a duplicate, which is not traced).
    pub timing: Option<AppendTiming>,
    /// The time stamped into the batch when the topic has `LogAppendTime`.
    pub log_append_time_ms: Option<i64>,
}

/// When a produce's steps happened on its partition's shard: the partition's part of a
/// slow request's timeline (`gateway::kafka::slow_log`).
#[derive(Clone, Copy, Debug)]
pub struct AppendTiming {
    /// The partition began on the batch (after the hop to its shard).
    pub started: std::time::Instant,
    /// The batch was in the log's memory.
    pub appended: std::time::Instant,
    /// The flush that made it durable began (acks=all; after `appended` when the batch
    /// waited for a flush in flight, group commit).
    pub flush_started: Option<std::time::Instant>,
    /// It was durable (acks=all).
    pub durable: Option<std::time::Instant>,
    /// A replicated partition's: `appended` is when its Raft group answered (a majority
    /// had it for acks=all, the leader for acks=1); no flush of its own.
    pub replicated: bool,
}

/// A partition hosted on this shard.
pub struct Partition {
    /// Topic name.
    pub topic: String,
    /// Partition index.
    pub index: i32,
    log: Log,
    // Invariant: never decreases; <= log end offset.
    high_watermark: Cell<KafkaOffset>,
    flushing: Cell<bool>,
    /// A flush is scheduled (`flush_later`: a lazy append's own, or the retry of one that
    /// found the disk full).
    flush_armed: Cell<bool>,
    /// The last flush found the disk full: appends are refused (KAFKA_STORAGE_ERROR, as a
    /// Kafka broker refuses writes to a log directory that failed) until a flush succeeds,
    /// so acks=0/1 producers do not pile data up in memory meanwhile; what is pending
    /// stays, and its flush is retried every `FLUSH_RETRY_DELAY`.
    disk_full: Cell<bool>,
    durable_waiters: RefCell<Vec<DurableWaiter>>,
    append_watchers: RefCell<Vec<oneshot::Sender<()>>>,
    max_message_bytes: Cell<usize>,
    /// What the topic's configs make of a produced batch.
    batch_policy: Cell<stamp::BatchPolicy>,
    /// The topic's `min.insync.replicas` (checked by the shard before an acks=all append).
    min_insync_replicas: Cell<usize>,
    producers: RefCell<ProducerStates>,
    /// The arrival order of producers' transactional batches (`turns`).
    txn_turns: Turns,
    /// The transactions of the log as appended (leader state, rebuilt with `producers`).
    txns: RefCell<TxnIndex>,
    /// Partition state (producers; an offsets partition's records) of the committed log
    /// below the checkpoint's offset: what opening the partition, gaining its leadership
    /// or loading its groups starts from (`checkpoint`).
    checkpoint: RefCell<Checkpoint>,
    /// How the partition's record keys are read when its checkpoint keeps its keyed
    /// records compacted (an offsets partition's, read by the group layer); `None`: it
    /// keeps none. Set once, when the partition opens (`load_producer_state`).
    keyed: Cell<Option<KeyScope>>,
    /// A checkpoint advance is running (at most one per partition).
    checkpointing: Cell<bool>,
    /// The log's `bytes_appended` when the last checkpoint advance started.
    checkpoint_mark_bytes: Cell<u64>,
    /// The log's `bytes_appended` when the last advance that saved the checkpoint started.
    checkpoint_saved_mark_bytes: Cell<u64>,
    /// The offset of the checkpoint in the partition's file (saved, loaded or adopted):
    /// the one in memory moves more often than it is saved.
    checkpoint_saved: Cell<KafkaOffset>,
    metrics: Rc<ShardMetrics>,
    /// At most one storage-error log line per partition per interval.
    storage_error_log: RateLimit,
    /// Set when the partition is a Raft group (cluster mode): its replicator and group.
    replication: RefCell<Option<(Weak<dyn RaftGroups>, GroupId)>>,
    /// Cluster mode: whether this node leads the group and serves clients.
    leading: Cell<bool>,
    /// Cluster mode: whether the group elected this node (serving or not yet).
    elected: Cell<bool>,
    /// Requests waiting for this elected node to serve or to lose the election
    /// (`wait_serving`); woken at every change of `elected`, `leading` or `rebuilding`.
    serving_watchers: RefCell<Vec<oneshot::Sender<()>>>,
    /// Cluster mode: the group's current Raft term (the Kafka leader epoch).
    term: Cell<u64>,
    /// Cluster mode: idempotent-producer state is being rebuilt after a leader change.
    rebuilding: Cell<bool>,
    /// Cluster mode: the Kafka end of what this replica applied (committed data).
    applied_end: Cell<KafkaOffset>,
    /// Cluster mode: the number of the latest rebuild started. Only the latest installs
    /// its state and ends `rebuilding`: an earlier one, still reading when leadership was
    /// lost and gained again, read a log that other leaders have since added to.
    rebuild_generation: Cell<u64>,
    /// Cluster mode: run when this node becomes the leader (the group coordinator reloads
    /// the groups of an offsets partition, which followers do not apply).
    on_leader_gain: RefCell<Option<Box<dyn Fn()>>>,
    /// The topic's `cleanup.policy` and compaction settings.
    cleanup: Cell<cleaner::CleanupConfig>,
    /// How far this process compacted the log (`compaction`).
    progress: Cell<compaction::CleanerProgress>,
}

impl Partition {
    /// Wraps an opened log.
    pub fn new(
        topic: String,
        index: i32,
        log: Log,
        max_message_bytes: usize,
        metrics: Rc<ShardMetrics>,
    ) -> Partition {
        let hw = log.durable().next_offset;
        Partition {
            topic,
            index,
            log,
            high_watermark: Cell::new(hw),
            flushing: Cell::new(false),
            flush_armed: Cell::new(false),
            disk_full: Cell::new(false),
            durable_waiters: RefCell::new(Vec::new()),
            append_watchers: RefCell::new(Vec::new()),
            max_message_bytes: Cell::new(max_message_bytes),
            batch_policy: Cell::new(stamp::BatchPolicy::default()),
            min_insync_replicas: Cell::new(1),
            producers: RefCell::new(ProducerStates::default()),
            txn_turns: Turns::default(),
            txns: RefCell::new(TxnIndex::default()),
            checkpoint: RefCell::new(Checkpoint::default()),
            keyed: Cell::new(None),
            checkpointing: Cell::new(false),
            checkpoint_mark_bytes: Cell::new(0),
            checkpoint_saved_mark_bytes: Cell::new(0),
            checkpoint_saved: Cell::new(KafkaOffset(0)),
            metrics,
            storage_error_log: RateLimit::new(STORAGE_ERROR_LOG_INTERVAL),
            replication: RefCell::new(None),
            leading: Cell::new(false),
            elected: Cell::new(false),
            serving_watchers: RefCell::new(Vec::new()),
            term: Cell::new(0),
            rebuilding: Cell::new(false),
            rebuild_generation: Cell::new(0),
            applied_end: Cell::new(KafkaOffset(0)),
            on_leader_gain: RefCell::new(None),
            cleanup: Cell::new(cleaner::CleanupConfig::default()),
            progress: Cell::new(compaction::CleanerProgress::default()),
        }
    }

    /// Sets what runs when this node becomes the partition's leader (cluster mode).
    pub fn set_on_leader_gain(&self, f: Box<dyn Fn()>) {
        *self.on_leader_gain.borrow_mut() = Some(f);
    }

    /// Makes this partition a Raft group driven by `rep` (cluster mode): produce goes
    /// through Raft and the high watermark follows the group's commits. Its high
    /// watermark is unknown (log start) until this node leads.
    pub fn attach_replication(&self, rep: Weak<dyn RaftGroups>, group: GroupId) {
        *self.replication.borrow_mut() = Some((rep, group));
        self.high_watermark.set(self.log.log_start_offset());
    }

    /// Applies retention (`retention.ms`, `retention.bytes`): directly on an unreplicated
    /// log; on a replicated one (only what this node applied) through its Raft group, whose
    /// compaction point moves (and is persisted) before the segments go in the
    /// replicator's next turn. The partition-state checkpoint first moves past the data
    /// that goes, so the producers and groups that data built outlive it (here, and on a
    /// follower that gets the compaction point as a snapshot with the checkpoint).
    pub async fn apply_retention(&self) -> anyhow::Result<strand_storage::RetentionOutcome> {
        if !self.cleanup.get().delete {
            // Compact-only: old segments are compacted, never deleted (as Kafka).
            return Ok(strand_storage::RetentionOutcome::default());
        }
        let replication = self.replication.borrow().clone();
        let rep = match replication {
            None => None,
            Some((rep, group)) => match rep.upgrade() {
                Some(rep) => Some((rep, group)),
                None => return Ok(strand_storage::RetentionOutcome::default()),
            },
        };
        let max_index = match &rep {
            None => RaftIndex(u64::MAX),
            Some((rep, group)) => match rep.applied_index(*group) {
                Some(applied) => RaftIndex(applied.0),
                None => return Ok(strand_storage::RetentionOutcome::default()),
            },
        };
        let Some(cut) = self.log.retention_due(max_index)? else {
            return Ok(strand_storage::RetentionOutcome::default());
        };
        // Committed data: an unreplicated log's closed segments are durable, a replicated
        // one's are applied through `max_index`.
        self.checkpoint_before_delete(cut.offset, "retention").await;
        match rep {
            None => Ok(self.log.apply_retention_cut(cut).await?),
            Some((rep, group)) => {
                rep.compact_for_retention(group, cut.through);
                Ok(strand_storage::RetentionOutcome::default())
            }
        }
    }

    /// DeleteRecords on a replicated partition: the new log start offset goes through the
    /// Raft log so every replica (and any later leader) applies it. Resolves once committed
    /// and applied on this node.
    pub async fn propose_log_start(&self, offset: KafkaOffset) -> Result<(), KafkaError> {
        let replication = self.replication.borrow().clone();
        let (rep, group) = replication.ok_or(KafkaError::NotLeader)?;
        let rep = rep.upgrade().ok_or(KafkaError::NotLeader)?;
        if !self.leading.get() {
            return Err(KafkaError::NotLeader);
        }
        rep.propose_log_start(group, offset).await
    }

    /// Whether the partition is replicated (a Raft group).
    pub fn replicated(&self) -> bool {
        self.replication.borrow().is_some()
    }

    /// Whether this node serves the partition to clients: always without replication,
    /// else only as the group's leader with a high watermark of its own term.
    pub fn serving(&self) -> bool {
        !self.replicated() || self.leading.get()
    }

    /// The replicator's view after a turn: role (`elected`: Raft's leader), term and (as
    /// leader) the high watermark, which a leader has once its term's first entry commits.
    pub fn set_replica_role(
        self: &Rc<Self>,
        elected: bool,
        term: u64,
        hw: Option<strand_raft::KafkaOffset>,
        applied_end: Option<strand_raft::KafkaOffset>,
    ) {
        if let Some(end) = applied_end {
            self.applied_end.set(KafkaOffset(end.0));
            self.maybe_checkpoint(KafkaOffset(end.0));
        }
        let was = self.leading.get();
        let leading = elected && hw.is_some();
        let was_elected = self.elected.replace(elected);
        let changed = leading != was || elected != was_elected;
        let was_term = self.term.replace(term);
        // A new term is a new leadership even when no turn saw this node lose the last one.
        if leading && (!was || term != was_term) {
            // Rebuild idempotence state from the log this node now leads: it appended
            // batches as a follower without recording their producers.
            self.rebuilding.set(true);
            let generation = self.rebuild_generation.get() + 1;
            self.rebuild_generation.set(generation);
            let me = self.clone();
            crate::runtime::task::spawn_local(async move {
                let replayed = me.replay_producer_state().await;
                if me.rebuild_generation.get() != generation {
                    return;
                }
                match replayed {
                    Ok((states, mut txns)) => {
                        txns.settle(me.high_watermark.get().0);
                        *me.producers.borrow_mut() = states;
                        *me.txns.borrow_mut() = txns;
                    }
                    Err(e) => tracing::warn!(topic = %me.topic, partition = me.index,
                        error = %e, "rebuilding producer state after a leader change failed"),
                }
                me.rebuilding.set(false);
                me.wake_serving_watchers();
            });
            if let Some(f) = self.on_leader_gain.borrow().as_ref() {
                f();
            }
        }
        self.leading.set(leading);
        if changed {
            self.wake_serving_watchers();
        }
        if let Some(hw) = hw.filter(|_| leading) {
            let hw = KafkaOffset(hw.0);
            if hw != self.high_watermark.get() {
                self.high_watermark.set(hw);
                self.txns.borrow_mut().settle(hw.0);
                for w in self.append_watchers.borrow_mut().drain(..) {
                    let _ = w.send(());
                }
            }
        }
    }

    /// The log.
    /// The shard's metrics (the replication loop times this log's flushes into them).
    pub fn metrics(&self) -> &ShardMetrics {
        &self.metrics
    }

    pub fn log(&self) -> &Log {
        &self.log
    }

    /// End of committed (durable) data.
    pub fn high_watermark(&self) -> KafkaOffset {
        self.high_watermark.get()
    }

    /// Leader epoch: the Raft term (the last written one without replication).
    pub fn leader_epoch(&self) -> i32 {
        let term = if self.replicated() {
            self.term.get()
        } else {
            self.log.last_term().0
        };
        i32::try_from(term).unwrap_or(i32::MAX)
    }

    /// Where leader epoch `epoch` ends (OffsetForLeaderEpoch): the last epoch at or below
    /// it that the log holds and the offset after its last record; `None` when the log
    /// holds no epoch at or below it. In a replicated log a batch written before the
    /// cluster (epoch 0) belongs to epoch 1, as its copies on other replicas do (see
    /// `strand_raft::raft_term`), so every replica answers alike.
    pub async fn epoch_end(&self, epoch: u64) -> Result<Option<(u64, KafkaOffset)>, StorageError> {
        if !self.replicated() {
            let end = self.log.epoch_end_offset(RaftTerm(epoch)).await?;
            return Ok(end.map(|(t, o)| (t.0, o)));
        }
        let end = self
            .log
            .epoch_end_offset(strand_raft::raft_term(RaftTerm(epoch)))
            .await?;
        Ok(end.map(|(t, o)| (strand_raft::raft_term(t).0, o)))
    }

    /// Validates and appends one producer batch; with `acks_all`, waits until durable. A
    /// transactional batch is refused (INVALID_TRANSACTION_STATE): only
    /// [`Self::produce_transactional`] takes one.
    pub async fn produce(
        self: &Rc<Self>,
        batch: Bytes,
        acks_all: bool,
    ) -> Result<Produced, KafkaError> {
        self.produce_checked(batch, AnswerWhen::of(acks_all), None)
            .await
    }

    /// [`Self::produce`] with acks=1 of a batch whose durability nothing waits for and
    /// that a later append can take along (a coordinator's record whose loss only repeats
    /// work): it starts no flush of its own for `LAZY_FLUSH_DELAY`, so the partition's
    /// next durable append (usually the same transactional id's next change, a moment
    /// later) does not wait for a flush of this one before its own. Its flush is at most
    /// that late, and shutdown flushes it. A replicated partition appends it as any other.
    pub async fn append_lazily(self: &Rc<Self>, batch: Bytes) -> Result<Produced, KafkaError> {
        self.produce_checked(batch, AnswerWhen::AppendedLazily, None)
            .await
    }

    /// [`Self::produce`] for a batch that may be transactional: the caller verified with
    /// the transaction's coordinator that this partition is in its producer's open
    /// transaction (KIP-890 part 1, so no transaction is left hanging). Its sequence is
    /// checked in its `turn` (taken with [`Self::txn_turn`] when the batch arrived, before
    /// the verification), after the producer's batches that arrived before it.
    pub async fn produce_transactional(
        self: &Rc<Self>,
        batch: Bytes,
        acks_all: bool,
        turn: Turn,
    ) -> Result<Produced, KafkaError> {
        self.produce_checked(batch, AnswerWhen::of(acks_all), Some(turn))
            .await
    }

    /// The turn of `producer_id`'s transactional batch of `epoch` starting at `first_seq`:
    /// taken when the batch arrives, before anything awaits (see [`turns`]).
    pub fn txn_turn(&self, producer_id: i64, epoch: i16, first_seq: i32) -> Turn {
        self.txn_turns.take(producer_id, epoch, first_seq)
    }

    /// `verified`: the turn of a batch verified with its transaction's coordinator.
    async fn produce_checked(
        self: &Rc<Self>,
        batch: Bytes,
        ack: AnswerWhen,
        mut verified: Option<Turn>,
    ) -> Result<Produced, KafkaError> {
        let started = crate::common::clock::now();
        if let Some(turn) = &mut verified {
            turn.wait().await?;
        }
        if batch.len() > self.max_message_bytes.get() {
            return Err(KafkaError::MessageTooLarge);
        }
        let view = RecordBatch::parse(batch.clone()).map_err(KafkaError::from_batch)?;
        view.validate().map_err(KafkaError::from_batch)?;
        view.validate_produce().map_err(KafkaError::from_batch)?;
        if view.attributes().is_transactional() && verified.is_none() {
            // Not verified with a coordinator: this partition is in no transaction of the
            // producer's (KIP-890: refused, never left hanging; Kafka's
            // InvalidTxnStateException).
            return Err(KafkaError::InvalidTxnState);
        }
        self.require_keys(&view)?;
        let ids = batch_ids(&view);
        let stamped =
            self.batch_policy
                .get()
                .apply(batch, view, crate::common::clock::wall_ms())?;
        if stamped.batch.len() > self.max_message_bytes.get() {
            // Re-compressed with the topic's codec, it grew past the limit.
            return Err(KafkaError::MessageTooLarge);
        }
        let mut produced = self
            .append_batch(stamped.batch, &stamped.view, ids, ack, started, verified)
            .await?;
        if produced.timing.is_some() {
            // Appended now (not the retry of an earlier append, which Kafka answers -1).
            produced.log_append_time_ms = stamped.log_append_time_ms;
        }
        Ok(produced)
    }

    /// Applies the topic's `message.timestamp.type` and `compression.type`.
    pub fn set_batch_policy(&self, policy: stamp::BatchPolicy) {
        self.batch_policy.set(policy);
    }

    /// Applies the topic's `min.insync.replicas`.
    pub fn set_min_insync_replicas(&self, min: usize) {
        self.min_insync_replicas.set(min);
    }

    /// The topic's `min.insync.replicas`.
    pub fn min_insync_replicas(&self) -> usize {
        self.min_insync_replicas.get()
    }

    /// Appends a transactional batch a coordinator built (TxnOffsetCommit's offsets in
    /// `__consumer_offsets`) and waits until durable. Its sequence is not checked: as in
    /// Kafka, a coordinator's append has none. Returns its base offset.
    pub async fn append_coordinator_batch(
        self: &Rc<Self>,
        batch: Bytes,
    ) -> Result<KafkaOffset, KafkaError> {
        let started = crate::common::clock::now();
        let view = RecordBatch::parse(batch.clone()).map_err(KafkaError::from_batch)?;
        let p = self
            .append_batch(batch, &view, None, AnswerWhen::Durable, started, None)
            .await?;
        Ok(p.base_offset)
    }

    /// Appends the marker that ends producer `producer_id`'s transaction (what a
    /// transaction coordinator's WriteTxnMarkers asks of a partition leader) and waits
    /// until it is durable. Returns its offset.
    pub async fn append_marker(
        self: &Rc<Self>,
        producer_id: i64,
        producer_epoch: i16,
        marker: strand_wire::Marker,
    ) -> Result<KafkaOffset, KafkaError> {
        let started = crate::common::clock::now();
        let ts = crate::common::clock::wall_ms();
        let batch = strand_wire::marker_batch(producer_id, producer_epoch, marker, ts);
        let view = RecordBatch::parse(batch.clone()).map_err(KafkaError::from_batch)?;
        self.producers
            .borrow()
            .check_marker(producer_id, producer_epoch)?;
        let p = self
            .append_batch(batch, &view, None, AnswerWhen::Durable, started, None)
            .await?;
        Ok(p.base_offset)
    }

    /// Appends a checked batch (a producer's with its idempotence fields `ids`, a marker,
    /// or a coordinator's), answered as `ack` says. A transactional batch's `turn` ends
    /// once its sequence is checked and recorded (it fails if it is not). A replicated
    /// partition's appends are persisted by its replicator (`AppendedLazily` is `Appended`).
    async fn append_batch(
        self: &Rc<Self>,
        batch: Bytes,
        view: &RecordBatch,
        ids: Option<(i64, i16, i32, i32)>,
        ack: AnswerWhen,
        started: std::time::Instant,
        mut turn: Option<Turn>,
    ) -> Result<Produced, KafkaError> {
        let acks_all = ack == AnswerWhen::Durable;
        let replication = self.replication.borrow().clone();
        if let Some(rep) = replication {
            return self
                .produce_replicated(rep, batch, view, ids, acks_all, turn)
                .await;
        }
        if let Some(base_offset) = self.check_sequence(ids, &mut turn)? {
            if acks_all {
                self.wait_original_durable(KafkaOffset(base_offset)).await?;
            }
            return Ok(Produced {
                base_offset: KafkaOffset(base_offset),
                timing: None,
                log_append_time_ms: None,
            });
        }
        if self.disk_full.get() {
            // The failed flush was logged.
            return Err(KafkaError::Storage(format!(
                "disk full under {}: writes refused until space returns",
                self.log.dir().display()
            )));
        }
        let (batch_bytes, records) = (batch.len(), u64::try_from(view.record_count()).unwrap_or(0));
        let entry = AppendEntry {
            term: RaftTerm(0),
            kind: FrameKind::Data,
            body: batch,
        };
        let append_started = crate::common::clock::now();
        let appended = self
            .log
            .append_one(&entry)
            .map_err(|e| self.storage_error(e))?;
        let append_done = crate::common::clock::now();
        self.metrics.storage_append(append_done - append_started);
        self.metrics
            .produce_stage(ProduceStage::Append, append_done - started);
        self.metrics.produced(batch_bytes, records);
        self.record_sequence(ids, appended.kafka_base_offset.0, turn);
        self.note_transactional(view, appended.kafka_base_offset);
        let durable = acks_all.then(|| self.wait_durable(appended.index));
        let backpressure = (!acks_all)
            .then(|| self.backpressure(appended.pending_bytes))
            .flatten();
        if ack == AnswerWhen::AppendedLazily {
            self.flush_later(LAZY_FLUSH_DELAY);
        } else {
            self.ensure_flushing();
        }
        if let Some(rx) = backpressure {
            // The answer is the append's; only its timing waits for the disk.
            let _ = rx.await;
        }
        let (flush_started, durable) = match durable {
            Some(rx) => self.durable_at(rx, append_done).await?,
            None => (None, None),
        };
        Ok(Produced {
            base_offset: appended.kafka_base_offset,
            timing: Some(AppendTiming {
                started,
                appended: append_done,
                flush_started,
                durable,
                replicated: false,
            }),
            log_append_time_ms: None,
        })
    }

    /// The producer-state check of a batch with idempotence fields `ids`: `Some(base
    /// offset)` of the batch it retries (then its `turn` ends: it is recorded), `None` to
    /// append it.
    fn check_sequence(
        &self,
        ids: Option<(i64, i16, i32, i32)>,
        turn: &mut Option<Turn>,
    ) -> Result<Option<i64>, KafkaError> {
        let Some((pid, epoch, first, last)) = ids else {
            return Ok(None);
        };
        match self.producers.borrow().check(pid, epoch, first, last)? {
            Verdict::Append => Ok(None),
            Verdict::Duplicate { base_offset } => {
                if let Some(t) = turn.take() {
                    t.pass();
                }
                Ok(Some(base_offset))
            }
        }
    }

    /// Records a checked batch's sequences at `base_offset` (`PENDING_OFFSET`: proposed);
    /// its `turn` ends.
    fn record_sequence(
        &self,
        ids: Option<(i64, i16, i32, i32)>,
        base_offset: i64,
        turn: Option<Turn>,
    ) {
        if let Some((pid, epoch, first, last)) = ids {
            self.producers
                .borrow_mut()
                .record(pid, epoch, first, last, base_offset);
        }
        if let Some(t) = turn {
            t.pass();
        }
    }

    /// Waits for an append made at `appended` to be durable: when its flush began and
    /// when it was durable (the produce's flush stage).
    async fn durable_at(
        &self,
        rx: oneshot::Receiver<Result<Option<std::time::Instant>, KafkaError>>,
        appended: std::time::Instant,
    ) -> Result<(Option<std::time::Instant>, Option<std::time::Instant>), KafkaError> {
        let flush_started = rx.await.map_err(|_| KafkaError::NotLeader)??;
        let now = crate::common::clock::now();
        self.metrics
            .produce_stage(ProduceStage::Flush, now - appended);
        Ok((flush_started, Some(now)))
    }

    /// Takes an appended batch at `base` into the transaction index, and a marker's epoch
    /// into the producer state (a newer one fences the older); a plain batch changes
    /// neither.
    fn note_transactional(&self, view: &RecordBatch, base: KafkaOffset) {
        if view.attributes().is_control() {
            self.producers
                .borrow_mut()
                .record_marker(view.producer_id(), view.producer_epoch());
        }
        self.txns.borrow_mut().apply(view, base.0);
    }

    /// Cluster mode: proposes the batch to the partition's Raft group and answers once a
    /// majority has it (acks=all), or once this leader appended it (acks=1: as in Kafka,
    /// lost if this leader fails before a majority has it; consumers see it only when
    /// committed).
    async fn produce_replicated(
        self: &Rc<Self>,
        (rep, group): (Weak<dyn RaftGroups>, GroupId),
        batch: Bytes,
        view: &RecordBatch,
        ids: Option<(i64, i16, i32, i32)>,
        acks_all: bool,
        mut turn: Option<Turn>,
    ) -> Result<Produced, KafkaError> {
        let started = crate::common::clock::now();
        self.wait_serving().await?;
        let rep = rep.upgrade().ok_or(KafkaError::NotLeader)?;
        match self.check_sequence(ids, &mut turn)? {
            // A retry of a batch still in flight: answered retriable, the next retry
            // finds its offset.
            Some(PENDING_OFFSET) => return Err(KafkaError::RequestTimedOut),
            Some(base_offset) => {
                self.wait_committed(KafkaOffset(base_offset)).await;
                return Ok(Produced {
                    base_offset: KafkaOffset(base_offset),
                    timing: None,
                    log_append_time_ms: None,
                });
            }
            // Recorded at proposal, so pipelined batches of the producer follow it.
            None => self.record_sequence(ids, PENDING_OFFSET, turn),
        }
        let records = u32::try_from(view.record_count()).unwrap_or(0).max(1);
        let batch_bytes = batch.len();
        // A transactional batch enters the transaction index when this leader appends it,
        // before it can commit: the LSO must hold at its first offset from the moment the
        // high watermark could pass it.
        let transactional = view.attributes().is_transactional();
        let ack = if acks_all && !transactional {
            Ack::Commit
        } else {
            Ack::Append
        };
        let r = rep.propose(group, batch, records, ack).await;
        let base = match r {
            Ok(base) => KafkaOffset(base.0),
            Err(e) => {
                if let Some((pid, _, first, _)) = ids {
                    self.producers.borrow_mut().forget_from(pid, first);
                }
                return Err(e);
            }
        };
        self.metrics.produced(batch_bytes, u64::from(records));
        self.metrics
            .produce_stage(ProduceStage::Flush, crate::common::clock::now() - started);
        if let Some((pid, _, first, _)) = ids {
            self.producers.borrow_mut().settle(pid, first, base.0);
        }
        if transactional {
            self.note_transactional(view, base);
            if acks_all {
                let last = base.0 + i64::from(view.last_offset_delta());
                self.wait_committed(KafkaOffset(last)).await;
            }
        }
        Ok(Produced {
            base_offset: base,
            timing: Some(AppendTiming {
                started,
                appended: crate::common::clock::now(),
                flush_started: None,
                durable: None,
                replicated: true,
            }),
            log_append_time_ms: None,
        })
    }

    /// Waits until a retried batch's original, appended to this (unreplicated) log at
    /// `offset`, is durable. A failed flush fails the wait as it fails the original's
    /// (KAFKA_STORAGE_ERROR on a full disk: the client retries, and a retry after space
    /// returned finds it durable) instead of holding the request until the client gives up.
    async fn wait_original_durable(self: &Rc<Self>, offset: KafkaOffset) -> Result<(), KafkaError> {
        if self.high_watermark.get() > offset {
            return Ok(());
        }
        // Everything appended so far, the original included.
        let rx = self.wait_durable(self.log.last_index());
        self.ensure_flushing();
        rx.await.map_err(|_| KafkaError::NotLeader)??;
        Ok(())
    }

    /// Waits until the high watermark passes `offset` (a retried batch's original).
    async fn wait_committed(self: &Rc<Self>, offset: KafkaOffset) {
        while self.high_watermark.get() <= offset {
            let rx = self.watch_appends();
            self.ensure_flushing();
            let _ = crate::runtime::task::timeout(std::time::Duration::from_secs(30), rx).await;
        }
    }

    /// Loads the partition-state checkpoint saved with the log (or starts from an empty
    /// one) and rebuilds the live state from it: called once, when the partition opens
    /// (`replicated`: it will be a Raft group's log; see `Checkpoint::load`). With `keyed`,
    /// the checkpoint also keeps the partition's keyed records compacted, their keys read
    /// by it (`compacted`).
    pub async fn load_producer_state(
        &self,
        replicated: bool,
        keyed: Option<KeyScope>,
    ) -> Result<(), StorageError> {
        self.keyed.set(keyed);
        let loaded = Checkpoint::load(&self.log, keyed, replicated).await;
        self.checkpoint_saved.set(loaded.offset);
        *self.checkpoint.borrow_mut() = loaded;
        self.rebuild_producer_state().await
    }

    /// Rebuilds idempotent-producer state from the checkpoint and the batch headers of
    /// the log after it, so a producer retrying across a restart or a leader change gets
    /// no duplicates. Reads at most about `CHECKPOINT_INTERVAL_BYTES` plus what is not
    /// committed yet.
    pub async fn rebuild_producer_state(&self) -> Result<(), StorageError> {
        let (states, mut txns) = self.replay_producer_state().await?;
        txns.settle(self.high_watermark.get().0);
        *self.producers.borrow_mut() = states;
        *self.txns.borrow_mut() = txns;
        Ok(())
    }

    /// The idempotent-producer state and the transactions of the checkpoint and the batch
    /// headers of the log after it, through the log end when called
    /// (`rebuild_producer_state`).
    async fn replay_producer_state(&self) -> Result<(ProducerStates, TxnIndex), StorageError> {
        let started = crate::common::clock::now();
        // The producers only: an offsets partition's records are the coordinator's.
        let mut live = {
            let c = self.checkpoint.borrow();
            Checkpoint {
                offset: c.offset,
                states: c.states.clone(),
                txns: c.txns.clone(),
                records: None,
                pending: PendingTxnRecords::default(),
            }
        };
        let from = live.offset;
        let bytes = live.advance(&self.log, self.log.log_end_offset()).await?;
        self.metrics.state_replayed(bytes);
        tracing::debug!(topic = %self.topic, partition = self.index, from = from.0,
            bytes, elapsed_us = (crate::common::clock::now() - started).as_micros() as u64,
            "producer state rebuilt");
        Ok((live.states, live.txns))
    }

    /// The checkpoint's compacted keyed records and the offset the log continues from
    /// (`None` records for a partition that keeps none, or before the checkpoint was
    /// loaded).
    pub fn compacted_checkpoint(&self) -> (KafkaOffset, Option<Compacted>) {
        let c = self.checkpoint.borrow();
        (c.offset, c.records.clone())
    }

    /// Transactions open here (first batch appended, marker not yet).
    pub fn open_transactions(&self) -> u64 {
        self.txns.borrow().open().count() as u64
    }

    /// Whether producer `producer_id` has an open transaction here at `epoch` (its first
    /// batch was appended and no marker yet): its coordinator verified this partition then.
    /// A batch at another epoch asks the coordinator again (transaction version 2 bumps the
    /// epoch at every transaction's end: its next transaction is not this one).
    pub fn has_open_txn(&self, producer_id: i64, epoch: i16) -> bool {
        self.txns.borrow().open().any(|(pid, _)| pid == producer_id)
            && self.producers.borrow().epoch_of(producer_id) == Some(epoch)
    }

    /// DescribeProducers: every remembered producer, with the first offset of its open
    /// transaction (-1 for none).
    pub fn producers(&self) -> Vec<(crate::partition::producer_state::ProducerView, i64)> {
        let open: std::collections::HashMap<i64, i64> = self.txns.borrow().open().collect();
        self.producers
            .borrow()
            .views()
            .into_iter()
            .map(|v| (v, open.get(&v.producer_id).copied().unwrap_or(-1)))
            .collect()
    }

    /// The checkpoint's keyed records of transactions open at its offset, by producer id
    /// (an offsets partition's TxnOffsetCommits: its groups stage them on a replay).
    pub fn pending_checkpoint_records(&self) -> Vec<(i64, PendingRecord)> {
        self.checkpoint
            .borrow()
            .pending
            .iter()
            .map(|(pid, r)| (pid, r.clone()))
            .collect()
    }

    /// Moves the checkpoint up to `committed_end` in the background once
    /// `CHECKPOINT_ADVANCE_BYTES` were appended since the last move, and saves it once
    /// `CHECKPOINT_INTERVAL_BYTES` were appended since the last save.
    ///
    /// A move replays what was appended since the last one: 2 MiB, which the batch cache
    /// still holds under load (16 MiB moves read it back from disk). One background move at
    /// a time per shard (`SHARD_CHECKPOINT_MOVING`): partitions loaded alike reach their
    /// interval together — 16 partitions moving at once held a shard's produce answers for
    /// ~20 ms every 256 MiB written (open loop, 70k rec/s of 1 KiB: p99.9 of each such
    /// second ~100 ms). A partition that finds a move running tries again at its next flush.
    fn maybe_checkpoint(self: &Rc<Self>, committed_end: KafkaOffset) {
        let appended = self.log.stats().bytes_appended;
        let since = appended.saturating_sub(self.checkpoint_mark_bytes.get());
        if self.checkpointing.get()
            || since < CHECKPOINT_ADVANCE_BYTES
            || committed_end <= self.checkpoint.borrow().offset
            || SHARD_CHECKPOINT_MOVING.get()
        {
            return;
        }
        let save = appended.saturating_sub(self.checkpoint_saved_mark_bytes.get())
            >= CHECKPOINT_INTERVAL_BYTES;
        SHARD_CHECKPOINT_MOVING.set(true);
        self.checkpointing.set(true);
        self.checkpoint_mark_bytes.set(appended);
        if save {
            self.checkpoint_saved_mark_bytes.set(appended);
        }
        let me = self.clone();
        crate::runtime::task::spawn_local(async move {
            if let Err(e) = me.advance_checkpoint(committed_end, save).await {
                tracing::warn!(topic = %me.topic, partition = me.index, error = %e,
                    "partition-state checkpoint not moved; the next one retries");
            }
            me.checkpointing.set(false);
            SHARD_CHECKPOINT_MOVING.set(false);
        });
    }

    /// Moves the checkpoint up to `committed_end` now (after a background move running)
    /// and saves it unless the saved one is there already.
    async fn checkpoint_through(&self, committed_end: KafkaOffset) -> Result<(), StorageError> {
        self.lock_checkpoint().await;
        let r = self.advance_checkpoint(committed_end, true).await;
        self.checkpointing.set(false);
        r
    }

    /// One log compaction pass (`cleaner::clean_once`) over the closed segments of
    /// committed data (applied, on a replica) whose records are all older than
    /// `min_lag_ms`. The partition-state checkpoint first moves past them, so the
    /// producers and groups they built survive the cleaning; the pass stops if it cannot.
    pub async fn compact(
        &self,
        map: &mut cleaner::OffsetMap,
        budget: &mut strand_storage::IoBudget,
        now_ms: i64,
        min_lag_ms: i64,
        delete_retention_ms: i64,
    ) -> Result<cleaner::CleanOutcome, StorageError> {
        let committed = self.committed_end();
        let young = now_ms.saturating_sub(min_lag_ms);
        let lag_end = self
            .log
            .segments_info()
            .into_iter()
            .find(|s| s.max_timestamp_ms > young)
            .map_or(KafkaOffset(i64::MAX), |s| s.base_offset);
        let clean_end = committed.min(lag_end);
        self.checkpoint_through(clean_end).await?;
        let (clean_end, producer_last_batches, producers, aborted) = {
            let c = self.checkpoint.borrow();
            // Not past the first record of a transaction open at the checkpoint: it may
            // yet abort (Kafka's cleaner stops at the first unstable offset). The
            // checkpoint knows the transactions on every replica, a follower's included.
            let stable = KafkaOffset(c.txns.last_stable_offset(c.offset.0));
            let end = clean_end.min(c.offset).min(stable);
            let aborted = c.txns.aborted_between(0, end.0);
            (end, c.states.last_batch_offsets(), c.states.ids(), aborted)
        };
        let ctx = cleaner::CleanContext {
            now_ms,
            delete_retention_ms,
            producer_last_batches,
            producers,
            clean_end,
            map_from: self.progress.get().cleaned_to,
            aborted: cleaner::AbortedRanges::of(&aborted),
        };
        let out = cleaner::clean_once(&self.log, map, budget, &ctx).await?;
        if !out.aborts_removed.is_empty() {
            // The checkpoint saves the shorter list at its next move; until then a restart
            // reads the longer one, whose extra entries cover no record.
            self.txns.borrow_mut().forget_aborted(&out.aborts_removed);
            (self.checkpoint.borrow_mut().txns).forget_aborted(&out.aborts_removed);
        }
        Ok(out)
    }

    /// Moves the checkpoint past `end` before `what` deletes the records below it. A
    /// failure (a full disk, perhaps the reason to delete) does not stop the deletion,
    /// which frees the disk: it is logged, and the state those records built survives
    /// only in memory (a rebuild after a restart or on another replica lacks it).
    pub async fn checkpoint_before_delete(&self, end: KafkaOffset, what: &str) {
        if let Err(e) = self.checkpoint_through(end).await {
            tracing::warn!(topic = %self.topic, partition = self.index, error = %e, what,
                "partition-state checkpoint not moved before deleting records");
        }
    }

    /// Waits until no checkpoint move runs, then marks one running (`checkpointing`: one
    /// writer of the checkpoint and its file at a time); the caller clears it.
    async fn lock_checkpoint(&self) {
        while self.checkpointing.get() {
            crate::runtime::task::sleep(CHECKPOINT_LOCK_POLL).await;
        }
        self.checkpointing.set(true);
    }

    /// Replays the committed log up to `committed_end` into a copy of the checkpoint and
    /// keeps it; with `save`, then saves it unless the saved one is as far. The caller
    /// holds `checkpointing`.
    async fn advance_checkpoint(
        &self,
        committed_end: KafkaOffset,
        save: bool,
    ) -> Result<(), StorageError> {
        if committed_end > self.checkpoint.borrow().offset {
            let mut next = self.checkpoint.borrow().clone();
            next.advance(&self.log, committed_end).await?;
            next.txns.settle(next.offset.0);
            *self.checkpoint.borrow_mut() = next;
            // Aborted transactions wholly below the log start can no longer be fetched.
            self.txns
                .borrow_mut()
                .trim_below(self.log.log_start_offset().0);
        }
        if !save || self.checkpoint.borrow().offset <= self.checkpoint_saved.get() {
            return Ok(());
        }
        let current = self.checkpoint.borrow().clone();
        current.save(self.log.dir()).await?;
        self.checkpoint_saved.set(current.offset);
        Ok(())
    }

    /// The checkpoint, for a snapshot of the compaction point to ship (`RaftLogStore`): it
    /// covers the data before the point, since retention moves it first.
    pub fn snapshot_state(&self) -> Bytes {
        Bytes::from(self.checkpoint.borrow().encode())
    }

    /// Takes the checkpoint a leader's snapshot shipped (this follower's log is replaced by
    /// one that starts after the leader's compaction point): checked like a saved one and
    /// kept when it covers more than the one held, then saved. One that cannot be used is
    /// logged and dropped (the state of the data before the point is then unknown here, as
    /// before snapshots carried it); a failed save is logged and the next move saves it.
    pub async fn adopt_checkpoint(&self, bytes: &[u8]) {
        let shipped = match Checkpoint::decode(bytes, self.keyed.get()) {
            Ok(c) => c,
            Err(CheckpointError::Kind(_)) => {
                tracing::warn!(topic = %self.topic, partition = self.index,
                    "snapshot's partition state is of another kind of partition; dropped");
                return;
            }
            Err(e) => {
                tracing::warn!(topic = %self.topic, partition = self.index, error = %e,
                    "snapshot's partition state refused");
                return;
            }
        };
        self.lock_checkpoint().await;
        if shipped.offset > self.checkpoint.borrow().offset {
            *self.checkpoint.borrow_mut() = shipped.clone();
            match shipped.save(self.log.dir()).await {
                Ok(()) => {
                    self.checkpoint_saved.set(shipped.offset);
                    tracing::info!(topic = %self.topic, partition = self.index,
                    offset = shipped.offset.0, "partition state taken from the leader's snapshot");
                }
                Err(e) => tracing::warn!(topic = %self.topic, partition = self.index, error = %e,
                    "snapshot's partition state not saved; the next checkpoint save saves it"),
            }
        }
        self.checkpointing.set(false);
    }

    /// For a write that does not wait for durability (acks=0/1), when the log holds
    /// `pending_bytes` unflushed, more than `TAIL_PENDING_BYTES_WAIT`: a wait for the next
    /// flush to complete,
    /// so producers go at the disk's rate instead of filling the tail until appends fail
    /// (TailFull, KAFKA_STORAGE_ERROR). Waiting for that flush, not for the write's own,
    /// keeps the producer appending while the disk writes what came before.
    fn backpressure(
        &self,
        pending_bytes: u64,
    ) -> Option<oneshot::Receiver<Result<Option<std::time::Instant>, KafkaError>>> {
        if pending_bytes <= strand_storage::TAIL_PENDING_BYTES_WAIT
            || self.durable_waiters.borrow().len() >= WAITERS_MAX
        {
            return None;
        }
        Some(self.wait_durable(self.log.durable().last_index.next()))
    }

    fn wait_durable(
        &self,
        index: RaftIndex,
    ) -> oneshot::Receiver<Result<Option<std::time::Instant>, KafkaError>> {
        let (tx, rx) = oneshot::channel();
        let mut w = self.durable_waiters.borrow_mut();
        if w.len() < WAITERS_MAX {
            w.push((index, tx));
        } else {
            let _ = tx.send(Err(KafkaError::RequestTimedOut));
        }
        rx
    }

    /// Resolves once this node serves the partition as its leader; as a newly elected
    /// leader not serving yet, waits up to `NEW_LEADER_WAIT` for it; NOT_LEADER_OR_FOLLOWER
    /// when not elected, on losing the election, or when the wait runs out.
    async fn wait_serving(&self) -> Result<(), KafkaError> {
        let deadline = crate::common::clock::now() + NEW_LEADER_WAIT;
        loop {
            if self.leading.get() && !self.rebuilding.get() {
                return Ok(());
            }
            let left = deadline.saturating_duration_since(crate::common::clock::now());
            if !self.elected.get() || left.is_zero() {
                return Err(KafkaError::NotLeader);
            }
            let (tx, rx) = oneshot::channel();
            add_waiter(&mut self.serving_watchers.borrow_mut(), tx, WAITERS_MAX);
            let _ = crate::runtime::task::timeout(left, rx).await;
        }
    }

    fn wake_serving_watchers(&self) {
        for w in self.serving_watchers.borrow_mut().drain(..) {
            let _ = w.send(());
        }
    }

    /// A future that resolves at the next advance of the high watermark.
    pub fn watch_appends(&self) -> oneshot::Receiver<()> {
        let (tx, rx) = oneshot::channel();
        add_waiter(&mut self.append_watchers.borrow_mut(), tx, WAITERS_MAX);
        rx
    }

    /// Starts a flush `delay` from now unless one is scheduled already (a flush started
    /// sooner takes the pending appends along; this one then finds nothing). A partition
    /// removed meanwhile (its topic deleted) is not kept alive for it.
    fn flush_later(self: &Rc<Self>, delay: std::time::Duration) {
        if self.flush_armed.replace(true) {
            return;
        }
        let me = Rc::downgrade(self);
        crate::runtime::task::spawn_local(async move {
            crate::runtime::task::sleep(delay).await;
            if let Some(me) = me.upgrade() {
                me.flush_armed.set(false);
                me.ensure_flushing();
            }
        });
    }

    fn ensure_flushing(self: &Rc<Self>) {
        if self.replicated() {
            // The replicator persists replicated logs.
            return;
        }
        if self.flushing.replace(true) {
            return;
        }
        let me = self.clone();
        crate::runtime::task::spawn_local(async move { me.flush_loop().await });
    }

    /// Group commit: flushes until nothing is pending, waking waiters after each flush.
    /// With the log's `flush_min_interval_us`, a flush that would start sooner than that
    /// after the previous one started waits out the rest first, taking the appends made
    /// meanwhile with it (fewer, larger I/Os; a lone flush never waits).
    async fn flush_loop(self: Rc<Self>) {
        let mut last_start: Option<std::time::Instant> = None;
        loop {
            if let Some(started) = last_start {
                let pace = self.log.flush_min_interval();
                let since = crate::common::clock::now().saturating_duration_since(started);
                if since < pace {
                    crate::runtime::task::sleep(pace - since).await;
                }
            }
            last_start = Some(crate::common::clock::now());
            let job = match self.log.begin_flush() {
                Ok(Some(job)) => job,
                Ok(None) => {
                    // Nothing pending: nothing known to fail for want of space either.
                    self.disk_full.set(false);
                    break;
                }
                Err(e) => {
                    self.flush_failed(e);
                    break;
                }
            };
            let flush_started = crate::common::clock::now();
            let outcome = job.run().await;
            self.metrics
                .storage_flush(crate::common::clock::now() - flush_started);
            match self.log.complete_flush(outcome) {
                Ok(d) => {
                    self.disk_full.set(false);
                    self.on_durable(d.last_index, d.next_offset, Some(flush_started));
                    self.maybe_checkpoint(d.next_offset);
                }
                Err(e) => {
                    self.flush_failed(e);
                    break;
                }
            }
        }
        self.flushing.set(false);
    }

    /// Advances the high watermark to `next_offset` and answers the produces waiting for
    /// entries up to `index`, telling them when their flush began (`flush_started`).
    fn on_durable(
        &self,
        index: RaftIndex,
        next_offset: KafkaOffset,
        flush_started: Option<std::time::Instant>,
    ) {
        if next_offset > self.high_watermark.get() {
            self.high_watermark.set(next_offset);
            self.txns.borrow_mut().settle(next_offset.0);
            for w in self.append_watchers.borrow_mut().drain(..) {
                let _ = w.send(());
            }
        }
        let mut waiters = self.durable_waiters.borrow_mut();
        let mut k = 0;
        while k < waiters.len() {
            if waiters[k].0 <= index {
                let (_, tx) = waiters.swap_remove(k);
                let _ = tx.send(Ok(flush_started));
            } else {
                k += 1;
            }
        }
    }

    /// A failed flush fails the produces waiting for it; on a full disk the data stays
    /// pending and the flush is tried again `FLUSH_RETRY_DELAY` later.
    fn flush_failed(self: &Rc<Self>, e: StorageError) {
        let full = matches!(e, StorageError::NoSpace { .. });
        let e = self.storage_error(e);
        self.fail_waiters(e);
        if full {
            self.disk_full.set(true);
            self.flush_later(FLUSH_RETRY_DELAY);
        }
    }

    fn fail_waiters(&self, e: KafkaError) {
        for (_, tx) in self.durable_waiters.borrow_mut().drain(..) {
            let _ = tx.send(Err(e.clone()));
        }
    }

    /// The last stable offset: the high watermark, or the first offset of the earliest
    /// transaction whose outcome is not committed (`txn_index`).
    pub fn last_stable_offset(&self) -> KafkaOffset {
        let hw = self.high_watermark.get();
        KafkaOffset(self.txns.borrow().last_stable_offset(hw.0))
    }

    /// Reads whole batches from `offset` up to the high watermark (`read_committed`: the
    /// last stable offset), each where the read left it; read_committed also gets the
    /// aborted transactions of the range read (`None` otherwise).
    pub async fn fetch(
        &self,
        offset: KafkaOffset,
        max_bytes: usize,
        min_one: bool,
        read_committed: bool,
    ) -> Result<(RecordSet, Option<Vec<AbortedTxn>>), KafkaError> {
        if !self.serving() {
            return Err(KafkaError::NotLeader);
        }
        let end = if read_committed {
            self.last_stable_offset()
        } else {
            self.high_watermark.get()
        };
        let nothing = || Ok((RecordSet::default(), read_committed.then(Vec::new)));
        if offset == end {
            return nothing();
        }
        if offset > end && offset <= self.log.log_end_offset() {
            // Appended but not yet committed (or stable): nothing to return yet, not out
            // of range.
            return nothing();
        }
        let r = self.log.read(offset, end, max_bytes, min_one).await;
        let r = r.map_err(|e| self.storage_error(e))?;
        let aborted = read_committed.then(|| {
            self.txns
                .borrow()
                .aborted_between(offset.0, r.next_offset.0)
        });
        Ok((RecordSet::from_batches(r.batches), aborted))
    }

    /// The Kafka error for a storage failure of this partition; one that reaches the
    /// client as KAFKA_STORAGE_ERROR is logged, rate-limited (STYLE.md 11).
    pub(crate) fn storage_error(&self, e: StorageError) -> KafkaError {
        let k = KafkaError::from_storage(e);
        if let KafkaError::Storage(reason) = &k {
            if let Some(suppressed) = self.storage_error_log.allow(crate::common::clock::now()) {
                tracing::error!(topic = %self.topic, partition = self.index, error = %reason,
                    suppressed, "storage error answered as KAFKA_STORAGE_ERROR");
            }
        }
        k
    }

    /// Applies changed topic configs.
    pub fn set_config(&self, lc: strand_storage::LogConfig, max_message_bytes: usize) {
        if let Err(e) = self.log.set_config(lc) {
            tracing::warn!(topic = %self.topic, partition = self.index, error = %e, "config not applied");
        }
        self.max_message_bytes.set(max_message_bytes);
    }

    /// Flushes what is pending (shutdown).
    pub async fn flush(&self) -> Result<(), StorageError> {
        if self.flushing.get() || self.replicated() {
            return Ok(());
        }
        let d = self.log.flush().await?;
        self.on_durable(d.last_index, d.next_offset, None);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn dead_waiters_are_swept_and_never_pile_up() {
        let mut list = Vec::new();
        // Many short fetches on a quiet partition: each waiter gives up (its receiver is
        // dropped) before any append.
        for _ in 0..100_000 {
            let (tx, rx) = oneshot::channel();
            add_waiter(&mut list, tx, WAITERS_MAX);
            drop(rx);
            assert!(list.len() <= 2 * WAITERS_SWEEP_FLOOR, "{}", list.len());
        }
        // A long poll after them still waits: its sender is kept, not dropped.
        let (tx, mut rx) = oneshot::channel::<()>();
        add_waiter(&mut list, tx, WAITERS_MAX);
        assert_eq!(
            rx.try_recv(),
            Ok(None),
            "the new waiter is neither woken nor dropped"
        );
    }

    #[test]
    fn a_full_list_of_live_waiters_wakes_its_oldest_to_make_room() {
        let mut list = Vec::new();
        let mut rxs = Vec::new();
        for _ in 0..4 {
            let (tx, rx) = oneshot::channel();
            add_waiter(&mut list, tx, 4);
            rxs.push(rx);
        }
        let (tx, mut newest) = oneshot::channel();
        add_waiter(&mut list, tx, 4);
        assert_eq!(list.len(), 4);
        assert_eq!(rxs[0].try_recv(), Ok(Some(())), "the oldest is woken early");
        assert_eq!(newest.try_recv(), Ok(None), "the newest waits");
    }

    use super::*;
    use crate::partition::checkpoint::CHECKPOINT_FILE;
    use std::path::Path;
    use strand_storage::{BatchCache, LogConfig, SystemClock};

    /// Bytes of each record: enough batches of it cross `CHECKPOINT_INTERVAL_BYTES`.
    const VALUE_BYTES: usize = 64 << 10;

    async fn open(dir: &Path) -> Rc<Partition> {
        open_with(dir, LogConfig::default(), None).await
    }

    /// `name/...` keys in scope `name`, its own key `name/`.
    fn slash_scope(key: &[u8]) -> Option<(String, bool)> {
        let key = std::str::from_utf8(key).ok()?;
        let (scope, rest) = key.split_once('/')?;
        Some((scope.to_string(), rest.is_empty()))
    }

    /// A partition whose checkpoint keeps its `slash_scope` records.
    async fn open_keyed(dir: &Path) -> Rc<Partition> {
        open_with(dir, LogConfig::default(), Some(slash_scope)).await
    }

    async fn open_with(dir: &Path, lc: LogConfig, keyed: Option<KeyScope>) -> Rc<Partition> {
        let lc = LogConfig {
            allow_buffered_io: true,
            ..lc
        };
        let cache = Rc::new(BatchCache::new(1 << 20));
        let log = Log::open(dir, lc, Rc::new(SystemClock), cache)
            .await
            .expect("open log");
        let metrics = Rc::new(crate::common::metrics::ShardMetrics::new(1));
        let part = Rc::new(Partition::new("t".into(), 0, log, 1 << 20, metrics));
        part.load_producer_state(false, keyed)
            .await
            .expect("producer state");
        part
    }

    fn batch(pid: i64, seq: i32) -> Bytes {
        let mut b = strand_wire::BatchBuilder::new(1).producer(pid, 0, seq);
        b.push(0, None, Some(&vec![b'x'; VALUE_BYTES]), &[]);
        b.build()
    }

    async fn produce(part: &Rc<Partition>, pid: i64, seq: i32) -> i64 {
        part.produce(batch(pid, seq), true)
            .await
            .expect("produced")
            .base_offset
            .0
    }

    /// A retry of each producer's last batch is answered with its first offset and
    /// appends nothing.
    async fn retries_are_duplicates(part: &Rc<Partition>, last: &[(i64, i32, i64)]) {
        let end = part.log().log_end_offset();
        for &(pid, seq, offset) in last {
            assert_eq!(produce(part, pid, seq).await, offset, "producer {pid}");
        }
        assert_eq!(part.log().log_end_offset(), end, "a retry appended");
    }

    /// An acks=1 producer faster than the flushes waits for them once its log holds
    /// `TAIL_PENDING_BYTES_WAIT` unflushed, rather than filling the tail until appends
    /// fail with KAFKA_STORAGE_ERROR (found with `strand-bench produce --acks 1` on a
    /// disk slower than the producer).
    #[test]
    fn acks_1_producers_wait_for_flushes_past_the_unflushed_bound() {
        const BATCH_BYTES: usize = 512 << 10;
        let tmp = tempfile::tempdir().expect("tempdir");
        let dir = tmp.path().join("t-0");
        strand_storage::io_runtime::block_on("partition-test", 1, async {
            // Flushes at most every 100 ms: without the bound the appends below would
            // all be pending at once.
            let lc = LogConfig {
                flush_min_interval_us: 100_000,
                ..LogConfig::default()
            };
            let part = open_with(&dir, lc, None).await;
            let value = vec![b'x'; BATCH_BYTES];
            let batches = 2 * strand_storage::TAIL_PENDING_BYTES_WAIT as usize / BATCH_BYTES;
            let mut most = 0;
            for _ in 0..batches {
                let mut b = strand_wire::BatchBuilder::new(1);
                b.push(0, None, Some(&value), &[]);
                part.produce(b.build(), false).await.expect("produced");
                most = most.max(part.log().pending_bytes());
            }
            let bound = strand_storage::TAIL_PENDING_BYTES_WAIT + 2 * BATCH_BYTES as u64;
            assert!(
                most <= bound,
                "{most} bytes unflushed after an acks=1 answer"
            );
            assert_eq!(part.log().log_end_offset().0, batches as i64);
        })
        .expect("executor");
    }

    /// A produce reaching a newly elected leader before it serves waits for it (its
    /// term's first commit, then its producer state) instead of being refused; a node
    /// that loses the election, or never serves within `NEW_LEADER_WAIT`, refuses.
    #[test]
    fn a_newly_elected_leader_holds_requests_until_it_serves() {
        use std::time::Duration;
        let tmp = tempfile::tempdir().expect("tempdir");
        let dir = tmp.path().join("t-0");
        strand_storage::io_runtime::block_on("partition-test", 1, async {
            let part = open(&dir).await;
            let waiting = |part: &Rc<Partition>| {
                let (tx, rx) = oneshot::channel();
                let p = part.clone();
                crate::runtime::task::spawn_local(async move {
                    let _ = tx.send(p.wait_serving().await);
                });
                rx
            };
            let hw = Some(strand_raft::KafkaOffset(0));
            assert_eq!(part.wait_serving().await, Err(KafkaError::NotLeader));

            // Elected in term 2; the first entry of the term commits 20 ms later.
            part.set_replica_role(true, 2, None, None);
            let mut rx = waiting(&part);
            crate::runtime::task::sleep(Duration::from_millis(20)).await;
            assert_eq!(rx.try_recv(), Ok(None), "answered before serving");
            part.set_replica_role(true, 2, hw, None);
            let served = crate::runtime::task::timeout(Duration::from_secs(5), rx).await;
            assert_eq!(served, Some(Ok(Ok(()))));
            assert_eq!(part.wait_serving().await, Ok(()));

            // Elected in term 3, then another node wins term 4.
            part.set_replica_role(false, 3, None, None);
            part.set_replica_role(true, 3, None, None);
            let rx = waiting(&part);
            crate::runtime::task::sleep(Duration::from_millis(5)).await;
            part.set_replica_role(false, 4, None, None);
            let refused = crate::runtime::task::timeout(Duration::from_millis(50), rx).await;
            assert_eq!(refused, Some(Ok(Err(KafkaError::NotLeader))), "not at once");

            // Elected in term 5 and never serving: refused after the wait.
            part.set_replica_role(true, 5, None, None);
            let started = crate::common::clock::now();
            assert_eq!(part.wait_serving().await, Err(KafkaError::NotLeader));
            assert!(crate::common::clock::now() - started >= NEW_LEADER_WAIT);
        })
        .expect("runtime");
    }

    /// A leader of a new term rebuilds its producer state even when no role update saw
    /// it lose the last term: batches another leader appended in between (here straight
    /// to the log, as a follower appends them) are duplicates to it, not new batches.
    #[test]
    fn a_leader_of_a_new_term_rebuilds_its_producer_state() {
        use std::time::Duration;
        let tmp = tempfile::tempdir().expect("tempdir");
        let dir = tmp.path().join("t-0");
        strand_storage::io_runtime::block_on("partition-test", 1, async {
            let part = open(&dir).await;
            let hw = Some(strand_raft::KafkaOffset(0));
            part.set_replica_role(true, 2, hw, None);
            crate::runtime::task::timeout(Duration::from_secs(5), part.wait_serving())
                .await
                .expect("serves in term 2")
                .expect("serving");
            let entry = AppendEntry {
                term: RaftTerm(3),
                kind: FrameKind::Data,
                body: batch(7, 0),
            };
            let appended = part.log().append_one(&entry).expect("appended");
            part.set_replica_role(true, 4, hw, None);
            crate::runtime::task::timeout(Duration::from_secs(5), part.wait_serving())
                .await
                .expect("serves in term 4")
                .expect("serving");
            let verdict = part.producers.borrow().check(7, 0, 0, 0);
            let base_offset = appended.kafka_base_offset.0;
            assert_eq!(verdict, Ok(Verdict::Duplicate { base_offset }));
        })
        .expect("runtime");
    }

    /// The offsets of every record the partition's log still holds.
    async fn offsets_left(part: &Partition) -> Vec<i64> {
        let r = part
            .log()
            .read(
                KafkaOffset(0),
                part.log().log_end_offset(),
                usize::MAX,
                true,
            )
            .await
            .expect("read");
        let mut left = Vec::new();
        for b in r.batches {
            let v = RecordBatch::parse(b).expect("parses");
            for rec in codec::records_of(&v).expect("records") {
                left.push(v.base_offset() + i64::from(rec.offset_delta));
            }
        }
        left
    }

    /// A compaction pass keeps the latest value of each key at its offset and moves the
    /// checkpoint first, so a retry of a producer's last batch is still answered as a
    /// duplicate, before and after a reopen.
    #[test]
    fn compaction_keeps_the_latest_values_and_the_producer_state() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let dir = tmp.path().join("t-0");
        let lc = LogConfig {
            segment_bytes: 8192,
            ..LogConfig::default()
        };
        strand_storage::io_runtime::block_on("partition-test", 1, async {
            let part = open_with(&dir, lc.clone(), None).await;
            let mut offsets = Vec::new();
            for seq in 0..40 {
                let mut b = strand_wire::BatchBuilder::new(1).producer(1, 0, seq);
                let key = format!("k{}", seq % 3);
                b.push(1, Some(key.as_bytes()), Some(&[seq as u8; 500]), &[]);
                offsets.push(
                    part.produce(b.build(), true)
                        .await
                        .expect("produced")
                        .base_offset
                        .0,
                );
            }
            let mut map = cleaner::OffsetMap::with_memory(1 << 16);
            let out = part
                .compact(
                    &mut map,
                    &mut strand_storage::IoBudget::unlimited(),
                    10_000,
                    0,
                    1_000,
                )
                .await
                .expect("compacted");
            assert!(out.segments >= 2 && out.records_removed > 20, "{out:?}");
            let left = offsets_left(&part).await;
            // Below the map's end each key keeps its latest record; past it all stay.
            let below: Vec<i64> = offsets
                .iter()
                .copied()
                .filter(|&o| o < out.map_end.0)
                .collect();
            let latest: Vec<i64> = below
                .iter()
                .copied()
                .filter(|&o| !below.contains(&(o + 3)))
                .collect();
            let want: Vec<i64> = latest
                .into_iter()
                .chain(offsets.iter().copied().filter(|&o| o >= out.map_end.0))
                .collect();
            assert_eq!(left, want);
            let last = [(1, 39, offsets[39])];
            retries_are_duplicates(&part, &last).await;
            drop(part);
            let part = open_with(&dir, lc, None).await;
            retries_are_duplicates(&part, &last).await;
        })
        .expect("runtime");
    }

    /// The values of `key` a read_uncommitted fetch of the whole log returns, in order.
    async fn values_of(part: &Rc<Partition>, key: &[u8]) -> Vec<Vec<u8>> {
        let (set, _) = part
            .fetch(KafkaOffset(0), usize::MAX, true, false)
            .await
            .expect("fetch");
        let mut out = Vec::new();
        for b in set.batches() {
            let view = RecordBatch::parse(b.clone()).expect("batch");
            if view.attributes().is_control() {
                continue;
            }
            for r in codec::records_of(&view).expect("records") {
                if r.key.as_deref() == Some(key) {
                    out.push(r.value.map(|v| v.to_vec()).unwrap_or_default());
                }
            }
        }
        out
    }

    /// Appends a transactional batch of producer `pid` (epoch 0) at `seq` setting key `k`.
    async fn append_keyed_txn(
        part: &Rc<Partition>,
        (pid, seq): (i64, i32),
        value: &[u8],
        now_ms: i64,
    ) {
        append_txn(part, (pid, seq), (b"k", value), now_ms).await;
    }

    /// Appends a transactional batch of producer `pid` (epoch 0) at `seq` of one record.
    async fn append_txn(
        part: &Rc<Partition>,
        (pid, seq): (i64, i32),
        (key, value): (&[u8], &[u8]),
        now_ms: i64,
    ) {
        let mut b = strand_wire::BatchBuilder::new(now_ms)
            .producer(pid, 0, seq)
            .transactional();
        b.push(now_ms, Some(key), Some(value), &[]);
        let b = b.build();
        let turn = turn_of(part, &b);
        part.produce_transactional(b, true, turn)
            .await
            .expect("appended");
    }

    /// The log's transaction markers: (offset, producer, delete horizon stamped).
    async fn markers_of(part: &Rc<Partition>) -> Vec<(i64, i64, bool)> {
        let (set, _) = part
            .fetch(KafkaOffset(0), usize::MAX, true, false)
            .await
            .expect("fetch");
        set.batches()
            .iter()
            .map(|b| RecordBatch::parse(b.clone()).expect("batch"))
            .filter(|v| v.attributes().is_control())
            .map(|v| {
                let stamped = v.attributes().has_delete_horizon();
                (v.base_offset(), v.producer_id(), stamped)
            })
            .collect()
    }

    /// Twelve records of three other keys: enough to roll 4 KiB segments.
    async fn fill_other_keys(part: &Rc<Partition>, now_ms: i64) {
        for i in 0..12 {
            let mut b = strand_wire::BatchBuilder::new(now_ms);
            b.push(
                now_ms,
                Some(format!("f{}", i % 3).as_bytes()),
                Some(&[7u8; 700]),
                &[],
            );
            part.produce(b.build(), true).await.expect("filler");
        }
    }

    fn marker(kind: strand_wire::MarkerKind) -> strand_wire::Marker {
        strand_wire::Marker {
            kind,
            coordinator_epoch: 0,
        }
    }

    /// A compact-only partition in `parent` with 4 KiB segments.
    async fn open_compacted(parent: &Path, delete_retention_ms: i64) -> Rc<Partition> {
        let lc = LogConfig {
            segment_bytes: 4096,
            ..LogConfig::default()
        };
        let part = open_with(&parent.join("t-0"), lc, None).await;
        part.set_cleanup(cleaner::CleanupConfig {
            compact: true,
            delete: false,
            delete_retention_ms,
            ..cleaner::CleanupConfig::default()
        });
        part
    }

    /// Records of aborted transactions never supersede the committed value of their key,
    /// and a pass removes them; a transaction still open bounds the pass, so its record
    /// does not supersede the committed one either, and goes once it aborted.
    #[test]
    fn the_cleaner_keeps_committed_values_over_aborted_ones_and_drops_the_aborted() {
        let tmp = tempfile::tempdir().expect("tempdir");
        strand_storage::io_runtime::block_on("partition-test", 1, async {
            let delete_retention_ms = cleaner::CleanupConfig::default().delete_retention_ms;
            let part = open_compacted(tmp.path(), delete_retention_ms).await;
            let now_ms = crate::common::clock::wall_ms();
            append_keyed_txn(&part, (1, 0), b"committed", now_ms).await;
            part.append_marker(1, 0, marker(strand_wire::MarkerKind::Commit))
                .await
                .expect("commit");
            append_keyed_txn(&part, (1, 1), b"aborted", now_ms).await;
            part.append_marker(1, 0, marker(strand_wire::MarkerKind::Abort))
                .await
                .expect("abort");
            fill_other_keys(&part, now_ms).await;
            append_keyed_txn(&part, (2, 0), b"open", now_ms).await;
            fill_other_keys(&part, now_ms).await;
            assert_eq!(
                values_of(&part, b"k").await,
                [&b"committed"[..], b"aborted", b"open"]
            );

            let mut map = cleaner::OffsetMap::with_memory(1 << 16);
            let mut budget = strand_storage::IoBudget::unlimited();
            let out = part
                .compact_now(&mut map, &mut budget, now_ms + 1_000)
                .await
                .expect("pass");
            assert!(out.records_removed > 0, "{out:?}");
            assert_eq!(values_of(&part, b"k").await, [&b"committed"[..], b"open"]);

            part.append_marker(2, 0, marker(strand_wire::MarkerKind::Abort))
                .await
                .expect("abort");
            fill_other_keys(&part, now_ms).await;
            part.compact_now(&mut map, &mut budget, now_ms + 2_000)
                .await
                .expect("pass");
            assert_eq!(values_of(&part, b"k").await, [&b"committed"[..]]);
        })
        .expect("runtime");
    }

    /// The transactions of `the_cleaner_removes_the_markers_of_transactions_without_batches`;
    /// returns their markers' offsets.
    async fn write_marker_cases(part: &Rc<Partition>, now_ms: i64) -> [i64; 6] {
        let end = |pid, kind| {
            let part = part.clone();
            async move {
                part.append_marker(pid, 0, marker(kind))
                    .await
                    .expect("marker")
                    .0
            }
        };
        use strand_wire::MarkerKind::{Abort, Commit};
        // Producer 1: k=a1, then k=a2 (the first transaction loses its record).
        append_txn(part, (1, 0), (b"k", b"a1"), now_ms).await;
        let m1 = end(1, Commit).await;
        append_txn(part, (1, 1), (b"k", b"a2"), now_ms).await;
        let m2 = end(1, Commit).await;
        // Producer 3: an aborted j, then a committed x.
        append_txn(part, (3, 0), (b"j", b"aborted"), now_ms).await;
        let m3 = end(3, Abort).await;
        append_txn(part, (3, 1), (b"x", b"x1"), now_ms).await;
        let m4 = end(3, Commit).await;
        // Producer 5: y=y1, superseded by a plain record; it writes nothing after.
        append_txn(part, (5, 0), (b"y", b"y1"), now_ms).await;
        let m5 = end(5, Commit).await;
        let plain = async |key: &[u8], value: &[u8]| {
            let mut b = strand_wire::BatchBuilder::new(now_ms);
            b.push(now_ms, Some(key), Some(value), &[]);
            part.produce(b.build(), true).await.expect("plain");
        };
        plain(b"y", b"y2").await;
        // Producer 7: w=w1 ended by a marker that bumps its epoch (transaction
        // version 2), so the partition remembers no batch of it; w superseded.
        append_txn(part, (7, 0), (b"w", b"w1"), now_ms).await;
        let m7 = part
            .append_marker(7, 1, marker(Commit))
            .await
            .expect("marker")
            .0;
        plain(b"w", b"w2").await;
        fill_other_keys(part, now_ms).await;
        [m1, m2, m3, m4, m5, m7]
    }

    /// A transaction marker goes once its transaction has no batch left and it is not its
    /// producer's last entry: the pass after its transaction's last batch went stamps its
    /// delete horizon, a pass past the horizon removes it. Markers whose transactions keep
    /// a record or an emptied batch stay, and so does each producer's last marker.
    #[test]
    fn the_cleaner_removes_the_markers_of_transactions_without_batches() {
        let tmp = tempfile::tempdir().expect("tempdir");
        strand_storage::io_runtime::block_on("partition-test", 1, async {
            let retention_ms = 60_000;
            let part = open_compacted(tmp.path(), retention_ms).await;
            let now_ms = crate::common::clock::wall_ms();
            let [m1, m2, m3, m4, m5, m7] = write_marker_cases(&part, now_ms).await;

            let mut map = cleaner::OffsetMap::with_memory(1 << 16);
            let mut pass = async |at_ms| {
                let mut budget = strand_storage::IoBudget::unlimited();
                part.compact_now(&mut map, &mut budget, at_ms)
                    .await
                    .expect("pass")
            };
            // The first pass removes the records, and stamps the markers of the
            // transactions it emptied (m1, m3); m2's and m4's keep a record, m5's keeps
            // producer 5's last batch, emptied; m7 is producer 7's last entry.
            let out = pass(now_ms + 1_000).await;
            assert_eq!(out.markers_removed, 0, "{out:?}");
            assert_eq!(out.earliest_horizon_ms, now_ms + 1_000 + retention_ms);
            let stamped = [
                (m1, 1, true),
                (m2, 1, false),
                (m3, 3, true),
                (m4, 3, false),
                (m5, 5, false),
                (m7, 7, false),
            ];
            assert_eq!(markers_of(&part).await, stamped);
            assert_eq!(values_of(&part, b"k").await, [b"a2".to_vec()]);
            assert_eq!(values_of(&part, b"j").await, Vec::<Vec<u8>>::new());

            // Before the horizon they stay; past it they go.
            let out = pass(now_ms + 3_000).await;
            assert_eq!(out.markers_removed, 0, "{out:?}");
            assert_eq!(markers_of(&part).await, stamped);
            assert_eq!(part.txns.borrow().aborted_between(0, i64::MAX).len(), 1);
            let out = pass(now_ms + 1_000 + retention_ms).await;
            assert_eq!(out.markers_removed, 2, "{out:?}");
            assert_eq!(out.aborts_removed, [m3], "{out:?}");
            assert_eq!(part.txns.borrow().aborted_between(0, i64::MAX), []);
            assert_eq!(out.earliest_horizon_ms, i64::MAX, "{out:?}");
            assert_eq!(
                markers_of(&part).await,
                [
                    (m2, 1, false),
                    (m4, 3, false),
                    (m5, 5, false),
                    (m7, 7, false)
                ]
            );
            for (key, value) in [(b"k", b"a2"), (b"x", b"x1"), (b"y", b"y2"), (b"w", b"w2")] {
                assert_eq!(values_of(&part, key).await, [value.to_vec()], "{key:?}");
            }
            assert_eq!(part.last_stable_offset(), part.high_watermark());
        })
        .expect("runtime");
    }

    /// A compacted partition refuses keyless records, is due for a pass once its closed
    /// segments hold uncleaned data (not while they are younger than the minimum lag),
    /// and is no longer due after the pass until a tombstone's horizon passes.
    #[test]
    fn a_compacted_partition_is_cleaned_when_due() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let dir = tmp.path().join("t-0");
        let lc = LogConfig {
            segment_bytes: 4096,
            ..LogConfig::default()
        };
        strand_storage::io_runtime::block_on("partition-test", 1, async {
            let part = open_with(&dir, lc, None).await;
            let mut c = cleaner::CleanupConfig {
                compact: true,
                delete: false,
                delete_retention_ms: 60_000,
                ..cleaner::CleanupConfig::default()
            };
            part.set_cleanup(c);
            let mut keyless = strand_wire::BatchBuilder::new(1);
            keyless.push(1, None, Some(b"v"), &[]);
            let r = part.produce(keyless.build(), true).await;
            assert!(
                matches!(&r, Err(KafkaError::RecordErrors { records, .. }) if records.len() == 1 && records[0].0 == 0),
                "{r:?}"
            );
            let now_ms = crate::common::clock::wall_ms();
            for i in 0..30 {
                let mut b = strand_wire::BatchBuilder::new(1);
                let bytes = [i as u8; 400];
                let value = (i < 29).then_some(&bytes[..]);
                b.push(now_ms, Some(format!("k{}", i % 2).as_bytes()), value, &[]);
                part.produce(b.build(), true).await.expect("produced");
            }
            part.set_cleanup(cleaner::CleanupConfig {
                min_compaction_lag_ms: 3_600_000,
                ..c
            });
            assert_eq!(
                part.compaction_due(now_ms + 1_000),
                None,
                "younger than the lag"
            );
            c.min_compaction_lag_ms = 0;
            part.set_cleanup(c);
            let due = part.compaction_due(now_ms + 1_000).expect("due");
            assert_eq!(due.dirty_ratio, 1.0);
            let mut map = cleaner::OffsetMap::with_memory(1 << 16);
            let out = part
                .compact_now(&mut map, &mut strand_storage::IoBudget::unlimited(), now_ms + 1_000)
                .await
                .expect("pass");
            assert!(out.records_removed > 10, "{out:?}");
            assert_eq!(part.compaction_due(now_ms + 2_000), None, "nothing dirty");
            assert!(part.last_clean_ms() > 0);
            // A pass that kept a tombstone (k1's last record, if cleaned) is due again once
            // its horizon passes.
            if out.earliest_horizon_ms < i64::MAX {
                let due = part
                    .compaction_due(out.earliest_horizon_ms)
                    .expect("horizon");
                assert!(due.must);
            }
            c.compact = false;
            part.set_cleanup(c);
            assert_eq!(part.compaction_due(now_ms + 1_000_000_000), None);
        })
        .expect("runtime");
    }

    /// Waits for a background checkpoint move to end.
    async fn checkpoint_settled(part: &Partition) {
        while part.checkpointing.get() {
            crate::runtime::task::sleep(std::time::Duration::from_millis(1)).await;
        }
    }

    #[test]
    fn the_checkpoint_moves_in_memory_often_and_is_saved_every_interval() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let dir = tmp.path().join("t-0");
        strand_storage::io_runtime::block_on("partition-test", 1, async {
            let part = open(&dir).await;
            let saved = || async { Checkpoint::load(part.log(), None, false).await.offset };
            // A few moves' worth: the checkpoint in memory moves, the file stays as opened.
            let moves = (3 * CHECKPOINT_ADVANCE_BYTES as usize / VALUE_BYTES) as i32;
            for seq in 0..moves {
                produce(&part, 1, seq).await;
                checkpoint_settled(&part).await;
            }
            let in_memory = part.checkpoint.borrow().offset;
            assert!(in_memory.0 > 0, "the checkpoint moved in memory");
            assert_eq!(saved().await, KafkaOffset(0), "and was not saved yet");
            // Deleting records below it saves it first (the file must cover them).
            part.checkpoint_before_delete(in_memory, "test").await;
            assert_eq!(saved().await, in_memory);
            // Past the interval since the last save, a move saves it.
            let interval = (CHECKPOINT_INTERVAL_BYTES as usize / VALUE_BYTES) as i32;
            for seq in moves..moves + interval + 2 * moves {
                produce(&part, 1, seq).await;
                checkpoint_settled(&part).await;
            }
            let after = saved().await;
            assert!(
                after > in_memory,
                "saved again: {after:?} after {in_memory:?}"
            );
            assert!(after <= part.checkpoint.borrow().offset);
        })
        .expect("runtime");
    }

    #[test]
    fn producer_state_survives_a_reopen_from_its_checkpoint() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let dir = tmp.path().join("t-0");
        strand_storage::io_runtime::block_on("partition-test", 1, async {
            let part = open(&dir).await;
            let limit = (2 * CHECKPOINT_INTERVAL_BYTES as usize / VALUE_BYTES) as i32;
            let (mut seq, mut first) = (0, 0);
            // Until a saved checkpoint covers producer 1's last batch (it moves in the
            // background once enough was appended).
            while Checkpoint::load(part.log(), None, false).await.offset.0 <= first {
                assert!(seq < limit, "no checkpoint after {seq} batches");
                first = produce(&part, 1, seq).await;
                seq += 1;
                checkpoint_settled(&part).await;
            }
            let second = produce(&part, 2, 0).await;
            let last = [(1, seq - 1, first), (2, 0, second)];
            retries_are_duplicates(&part, &last).await;
            // Records before the checkpoint deleted: only the checkpoint knows producer 1.
            let start = part.checkpoint.borrow().offset;
            part.log().set_log_start(start).await.expect("log start");
            drop(part);

            let part = open(&dir).await;
            assert_eq!(part.log().log_start_offset(), start);
            retries_are_duplicates(&part, &last).await;
            drop(part);

            // A corrupt checkpoint is refused and the whole log (from its start) replayed.
            let path = dir.join(CHECKPOINT_FILE);
            let mut bytes = std::fs::read(&path).expect("checkpoint");
            let at = bytes.len() / 2;
            bytes[at] ^= 1;
            std::fs::write(&path, bytes).expect("corrupt it");
            let part = open(&dir).await;
            assert_eq!(
                part.checkpoint.borrow().offset,
                start,
                "the empty one at log start"
            );
            retries_are_duplicates(&part, &last[1..]).await;
        })
        .expect("runtime");
    }

    /// A transactional batch of producer `pid`.
    fn txn_batch(pid: i64) -> Bytes {
        txn_batch_at(pid, 0)
    }

    /// A transactional batch of producer `pid` at sequence `seq`.
    fn txn_batch_at(pid: i64, seq: i32) -> Bytes {
        let plain = RecordBatch::parse(batch(pid, seq)).expect("batch");
        strand_wire::BatchHeader {
            attributes: strand_wire::Attributes::from_raw(strand_wire::Attributes::TRANSACTIONAL),
            ..strand_wire::BatchHeader::of(&plain)
        }
        .encode(&plain.as_bytes()[strand_wire::BATCH_HEADER_BYTES..])
    }

    /// Appends `txn_batch(pid)` as a Produce the coordinator verified does.
    async fn append_txn_data(part: &Rc<Partition>, pid: i64) -> i64 {
        let b = txn_batch(pid);
        let view = RecordBatch::parse(b.clone()).expect("batch");
        let turn = part.txn_turn(pid, view.producer_epoch(), view.base_sequence());
        let p = part
            .produce_transactional(b, true, turn)
            .await
            .expect("appended");
        p.base_offset.0
    }

    /// The turn of a transactional batch, taken as it arrives.
    fn turn_of(part: &Partition, b: &Bytes) -> Turn {
        let view = RecordBatch::parse(b.clone()).expect("batch");
        part.txn_turn(
            view.producer_id(),
            view.producer_epoch(),
            view.base_sequence(),
        )
    }

    /// A producer's transactional batches land in the order they arrived, whichever's
    /// coordinator check ends first; once one fails, the later ones of its epoch are out
    /// of order until its retry lands (a client retries them after it).
    #[test]
    fn transactional_batches_land_in_arrival_order() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let dir = tmp.path().join("t-0");
        strand_storage::io_runtime::block_on("partition-test", 1, async {
            let part = open(&dir).await;
            let (first, second) = (txn_batch_at(9, 0), txn_batch_at(9, 1));
            let (t1, t2) = (turn_of(&part, &first), turn_of(&part, &second));
            // The second's check ended first: it waits for the first.
            let p = part.clone();
            let (tx, second_done) = oneshot::channel();
            crate::runtime::task::spawn_local(async move {
                let _ = tx.send(p.produce_transactional(second, true, t2).await);
            });
            crate::runtime::task::sleep(std::time::Duration::from_millis(20)).await;
            assert_eq!(part.log().log_end_offset(), KafkaOffset(0), "it went first");
            let one = part.produce_transactional(first, true, t1).await;
            assert_eq!(one.expect("first").base_offset, KafkaOffset(0));
            let two = second_done.await.expect("answered").expect("second");
            assert_eq!(two.base_offset, KafkaOffset(1));

            // Batches 2 and 3 arrive; 2 fails its check (its turn ends unrecorded).
            let (b2, b3) = (txn_batch_at(9, 2), txn_batch_at(9, 3));
            let (t2, t3) = (turn_of(&part, &b2), turn_of(&part, &b3));
            drop(t2);
            let refused = part.produce_transactional(b3.clone(), true, t3).await;
            assert_eq!(refused.err(), Some(KafkaError::OutOfOrderSequence));
            // The retries, in order, land.
            let (t2, t3) = (turn_of(&part, &b2), turn_of(&part, &b3));
            let two = part.produce_transactional(b2, true, t2).await;
            assert_eq!(two.expect("retry of 2").base_offset, KafkaOffset(2));
            let three = part.produce_transactional(b3, true, t3).await;
            assert_eq!(three.expect("retry of 3").base_offset, KafkaOffset(3));
        })
        .expect("runtime");
    }

    /// Offsets of the batches fetched (each element one whole batch).
    fn fetched_offsets(set: RecordSet) -> Vec<i64> {
        set.batches()
            .iter()
            .map(|b| {
                RecordBatch::parse(b.clone())
                    .expect("one whole batch")
                    .base_offset()
            })
            .collect()
    }

    /// The LSO holds at an open transaction's first offset; read_committed reads stop
    /// there and, once an abort marker is durable, get the aborted transaction with the
    /// data; read_uncommitted reads get everything and no list (null); a reopen rebuilds
    /// the same from the log; a client's transactional batch is refused.
    #[test]
    fn transactions_hold_the_last_stable_offset_and_aborts_are_listed() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let dir = tmp.path().join("t-0");
        strand_storage::io_runtime::block_on("partition-test", 1, async {
            let part = open(&dir).await;
            assert_eq!(produce(&part, 1, 0).await, 0);
            assert_eq!(append_txn_data(&part, 5).await, 1);
            assert_eq!(produce(&part, 1, 1).await, 2);
            assert_eq!(part.high_watermark().0, 3);
            assert_eq!(part.last_stable_offset().0, 1);
            let (bytes, aborted) = part
                .fetch(KafkaOffset(0), 1 << 30, true, true)
                .await
                .expect("fetch");
            assert_eq!((fetched_offsets(bytes), aborted), (vec![0], Some(vec![])));
            let (bytes, aborted) = part
                .fetch(KafkaOffset(1), 1 << 30, true, true)
                .await
                .expect("fetch");
            assert_eq!(
                (bytes.len(), aborted),
                (0, Some(vec![])),
                "nothing stable at 1"
            );
            let (bytes, aborted) = part
                .fetch(KafkaOffset(0), 1 << 30, true, false)
                .await
                .expect("fetch");
            assert_eq!((fetched_offsets(bytes), aborted), (vec![0, 1, 2], None));

            let marker = strand_wire::Marker {
                kind: strand_wire::MarkerKind::Abort,
                coordinator_epoch: 0,
            };
            assert_eq!(part.append_marker(5, 0, marker).await.expect("marker").0, 3);
            let expect = |part: Rc<Partition>| async move {
                assert_eq!(part.last_stable_offset().0, 4);
                let (bytes, aborted) = part
                    .fetch(KafkaOffset(0), 1 << 30, true, true)
                    .await
                    .expect("fetch");
                let txn = AbortedTxn {
                    producer_id: 5,
                    first_offset: 1,
                    last_offset: 3,
                };
                assert_eq!(
                    (fetched_offsets(bytes), aborted),
                    (vec![0, 1, 2, 3], Some(vec![txn]))
                );
                let (_, aborted) = part
                    .fetch(KafkaOffset(4), 1 << 30, true, true)
                    .await
                    .expect("fetch");
                assert_eq!(aborted, Some(vec![]));
            };
            expect(part.clone()).await;
            drop(part);
            let part = open(&dir).await;
            expect(part.clone()).await;

            assert_eq!(
                part.produce(txn_batch(7), true)
                    .await
                    .map(|p| p.base_offset),
                Err(KafkaError::InvalidTxnState)
            );
        })
        .expect("runtime");
    }

    /// A marker at a newer epoch fences the producer's older one, also after a reopen (the
    /// replay applies markers); a marker at an older epoch is refused.
    #[test]
    fn a_marker_fences_older_epochs_across_a_reopen() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let dir = tmp.path().join("t-0");
        strand_storage::io_runtime::block_on("partition-test", 1, async {
            let part = open(&dir).await;
            assert_eq!(produce(&part, 1, 0).await, 0);
            let fence = strand_wire::Marker {
                kind: strand_wire::MarkerKind::Abort,
                coordinator_epoch: 0,
            };
            part.append_marker(1, 1, fence).await.expect("marker");
            assert_eq!(
                part.append_marker(1, 0, fence).await,
                Err(KafkaError::InvalidProducerEpoch)
            );
            drop(part);
            let part = open(&dir).await;
            assert_eq!(
                part.produce(batch(1, 1), true).await.map(|p| p.base_offset),
                Err(KafkaError::InvalidProducerEpoch)
            );
        })
        .expect("runtime");
    }

    /// Retention deletes the only batch of producer 1 long before a checkpoint would be
    /// due by size: the checkpoint moves past the deleted data first, so producer 1's retry
    /// is still a duplicate after a reopen.
    #[test]
    fn retention_moves_the_checkpoint_past_what_it_deletes() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let dir = tmp.path().join("t-0");
        let lc = LogConfig {
            segment_bytes: 2 * VALUE_BYTES as u64,
            retention_bytes: 4 * VALUE_BYTES as i64,
            ..LogConfig::default()
        };
        strand_storage::io_runtime::block_on("partition-test", 1, async {
            let part = open_with(&dir, lc.clone(), None).await;
            let first = produce(&part, 1, 0).await;
            for seq in 0..12 {
                produce(&part, 2, seq).await;
            }
            let out = part.apply_retention().await.expect("retention");
            assert!(out.segments_deleted > 0);
            assert!(part.log().log_start_offset().0 > first);
            assert!(part.checkpoint.borrow().offset >= part.log().log_start_offset());
            drop(part);

            let part = open_with(&dir, lc.clone(), None).await;
            retries_are_duplicates(&part, &[(1, 0, first)]).await;

            // A checkpoint that cannot be saved (here its path is taken by a directory; on
            // a full disk, the write fails) does not stop retention from freeing the disk.
            std::fs::remove_file(dir.join(CHECKPOINT_FILE)).expect("remove checkpoint");
            std::fs::create_dir_all(dir.join(CHECKPOINT_FILE).join("taken")).expect("dir");
            let start = part.log().log_start_offset();
            for seq in 12..24 {
                produce(&part, 2, seq).await;
            }
            let out = part.apply_retention().await.expect("retention");
            assert!(out.segments_deleted > 0);
            assert!(part.log().log_start_offset() > start);
            // The state is still right in memory.
            retries_are_duplicates(&part, &[(1, 0, first)]).await;
        })
        .expect("runtime");
    }

    #[test]
    fn keyed_records_survive_a_reopen_in_the_checkpoint() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let dir = tmp.path().join("keyed-0");
        // Record n sets key `g/p{n % 4}` to `n`, padded with VALUE_BYTES bytes.
        let commit = |partition: i32, offset: i64| {
            let key = format!("g/p{partition}");
            let value = format!("{offset} {}", "m".repeat(VALUE_BYTES));
            let mut b = strand_wire::BatchBuilder::new(1);
            b.push(0, Some(key.as_bytes()), Some(value.as_bytes()), &[]);
            b.build()
        };
        let offsets_of = |part: &Partition| {
            let mut got: Vec<(i32, i64)> = part
                .compacted_checkpoint()
                .1
                .map(|r| {
                    r.records()
                        .map(|(k, v)| {
                            let k = std::str::from_utf8(k).expect("key");
                            let p = k.trim_start_matches("g/p").parse().expect("partition");
                            let v = std::str::from_utf8(v).expect("value");
                            let (offset, _) = v.split_once(' ').expect("offset and padding");
                            (p, offset.parse().expect("offset"))
                        })
                        .collect()
                })
                .unwrap_or_default();
            got.sort();
            got
        };
        strand_storage::io_runtime::block_on("partition-test", 1, async {
            let part = open_keyed(&dir).await;
            let limit = 2 * CHECKPOINT_INTERVAL_BYTES as i64 / VALUE_BYTES as i64;
            let mut n = 0;
            // Commits of partitions 0..4 until a saved checkpoint covers them all.
            while Checkpoint::load(part.log(), Some(slash_scope), false)
                .await
                .offset
                .0
                < 4
                || n < 4
            {
                assert!(n < limit, "no checkpoint after {n} commits");
                part.produce(commit((n % 4) as i32, n), true)
                    .await
                    .expect("produced");
                n += 1;
                checkpoint_settled(&part).await;
            }
            let start = part.checkpoint.borrow().offset;
            let expect: Vec<(i32, i64)> = (0..4)
                .map(|p| {
                    (
                        p,
                        (0..start.0)
                            .filter(|k| k % 4 == p as i64)
                            .max()
                            .unwrap_or(-1),
                    )
                })
                .filter(|&(_, o)| o >= 0)
                .collect();
            assert_eq!(offsets_of(&part), expect);
            // The records before the checkpoint deleted: only the checkpoint has them.
            part.log().set_log_start(start).await.expect("log start");
            drop(part);
            let part = open_keyed(&dir).await;
            assert_eq!(part.compacted_checkpoint().0, start);
            assert_eq!(offsets_of(&part), expect);
        })
        .expect("runtime");
    }
}
