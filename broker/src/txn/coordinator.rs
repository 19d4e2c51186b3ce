//! The transaction coordinator's requests (Kafka's `TransactionCoordinator`, transaction
//! protocol versions 1 and 2): InitProducerId with a transactional id, AddPartitionsToTxn,
//! AddOffsetsToTxn (an add of the group's `__consumer_offsets` partition), EndTxn, the
//! verification a partition leader asks before it takes a transactional batch (KIP-890
//! part 1), and the abort of transactions that outlived their timeout. It runs on the
//! shard that owns the transactional id's `__transaction_state` partition, through
//! [`TxnHost`].
//!
//! Invariants:
//! - Every transition is a record in `__transaction_state`, durable (acks=all) before the
//!   coordinator installs it and before it answers (`persist`), except Complete*, which is
//!   installed once appended and flushed lazily (`persist_completion`: losing it only
//!   repeats the markers).
//! - One change per transactional id at a time: a request finding the id `busy` (a change
//!   being persisted, or markers being written) is answered CONCURRENT_TRANSACTIONS, which
//!   clients retry (an add waits up to ADD_BUSY_WAIT first).
//! - A Prepare* state is always driven to its Complete* state by `complete`: it writes
//!   the markers of every partition of the transaction until each one is written (or the
//!   node stops coordinating the id; the next coordinator finishes it after its load).

use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;
use std::sync::Arc;
use std::task::{Poll, Waker};
use std::time::Duration;

use bytes::Bytes;
use futures::future::LocalBoxFuture;
use strand_wire::BatchBuilder;

use super::metadata::{EndOutcome, InitOutcome, TxnMetadata, TxnState};
use crate::cluster::metadata::Metadata;
use crate::common::errors::code;
use crate::partition::Partition;
use crate::runtime::task::sleep;

pub use crate::cluster::markers::Markers;
pub use crate::common::config::TXN_STATE_TOPIC;

/// First wait before markers or a completion record are written again after a failure.
const RETRY_BACKOFF_MIN: Duration = Duration::from_millis(50);
/// Longest wait between such retries.
const RETRY_BACKOFF_MAX: Duration = Duration::from_secs(1);
/// How long an add waits for another change of its id to end before it is answered
/// CONCURRENT_TRANSACTIONS.
const ADD_BUSY_WAIT: Duration = Duration::from_millis(50);
/// How long EndTxn waits for the markers before it answers anyway (the outcome is
/// durable once Prepare* is: the markers follow, and a client retrying EndTxn is answered
/// CONCURRENT_TRANSACTIONS until they are written).
pub const END_TXN_WAIT: Duration = Duration::from_secs(10);

/// What the coordinator uses of the shard it runs on (`shard::Shard` implements it).
pub trait TxnHost: 'static {
    /// The transactional ids this shard coordinates (loaded from its partitions).
    fn txns(&self) -> &RefCell<HashMap<String, TxnMetadata>>;
    /// Ids with a change in progress, each with the tasks waiting for it to end.
    fn txns_busy(&self) -> &BusyIds;
    /// `transaction.max.timeout.ms`.
    fn txn_max_timeout_ms(&self) -> i32;
    /// The metadata snapshot this shard applied.
    fn metadata(&self) -> Arc<Metadata>;
    /// Partition `index` of `topic`, if open on this shard.
    fn partition(&self, topic: &str, index: i32) -> Option<Rc<Partition>>;
    /// Whether this node coordinates `transactional_id` now: NOT_COORDINATOR or
    /// COORDINATOR_LOAD_IN_PROGRESS otherwise.
    fn txn_coordinator_check(&self, transactional_id: &str) -> Result<(), i16>;
    /// A producer id never handed out before.
    fn new_producer_id(self: &Rc<Self>) -> LocalBoxFuture<'_, Result<i64, i16>>;
    /// Writes `markers` at each partition's leader; an error code per partition, in order.
    fn write_markers(self: &Rc<Self>, markers: Markers) -> LocalBoxFuture<'_, Vec<i16>>;
    /// A transaction ended (committed or aborted) `duration` after it began.
    fn txn_ended(&self, committed: bool, duration: Duration);
}

/// Transactional ids with a change in progress, each with the wakers of the tasks waiting
/// to take it ([`Busy::wait_take`]), woken when it ends.
pub type BusyIds = RefCell<HashMap<String, Vec<Waker>>>;

/// Marks `id` busy in `ids`; false when it already is.
fn mark_busy(ids: &BusyIds, id: &str) -> bool {
    let mut busy = ids.borrow_mut();
    if busy.contains_key(id) {
        return false;
    }
    busy.insert(id.to_string(), Vec::new());
    true
}

/// Marks `id` busy in `ids` once it is not, waiting up to `max`: woken when the change in
/// progress ends (not polled), so the next change starts at once. False on timeout.
async fn mark_busy_within(ids: &BusyIds, id: &str, max: Duration) -> bool {
    let take = futures::future::poll_fn(|cx| {
        if mark_busy(ids, id) {
            return Poll::Ready(());
        }
        if let Some(waiters) = ids.borrow_mut().get_mut(id) {
            if !waiters.iter().any(|w| w.will_wake(cx.waker())) {
                waiters.push(cx.waker().clone());
            }
        }
        Poll::Pending
    });
    crate::runtime::task::timeout(max, take).await.is_some()
}

/// Unmarks `id` and wakes the tasks waiting for it: each looks again, one takes it, the
/// others wait on.
fn unmark_busy(ids: &BusyIds, id: &str) {
    let waiters = ids.borrow_mut().remove(id);
    waiters.into_iter().flatten().for_each(Waker::wake);
}

/// A transactional id marked busy; unmarked when dropped.
pub struct Busy<H: TxnHost> {
    host: Rc<H>,
    id: String,
}

impl<H: TxnHost> Busy<H> {
    /// Marks `id` busy, or `None` when it already is.
    pub fn take(host: &Rc<H>, id: &str) -> Option<Busy<H>> {
        mark_busy(host.txns_busy(), id).then(|| Busy {
            host: host.clone(),
            id: id.to_string(),
        })
    }

    /// Marks `id` busy once it is not (the change in progress ends), waiting up to `max`:
    /// a partition leader's add for each partition of a transaction's first batches
    /// (transaction version 2) arrive together, and each is persisted in turn instead of
    /// sending all but one back to retry.
    pub async fn wait_take(host: &Rc<H>, id: &str, max: Duration) -> Option<Busy<H>> {
        mark_busy_within(host.txns_busy(), id, max)
            .await
            .then(|| Busy {
                host: host.clone(),
                id: id.to_string(),
            })
    }
}

impl<H: TxnHost> Drop for Busy<H> {
    fn drop(&mut self) {
        unmark_busy(self.host.txns_busy(), &self.id);
    }
}

/// The `__transaction_state` partition of `transactional_id` among `partitions`.
pub fn partition_for(transactional_id: &str, partitions: usize) -> i32 {
    crate::group::partition_for(transactional_id, partitions)
}

/// The `__transaction_state` partition of `id`, if open on this shard.
fn state_partition<H: TxnHost>(host: &H, id: &str) -> Option<Rc<Partition>> {
    let n = host
        .metadata()
        .topics
        .get(TXN_STATE_TOPIC)
        .map_or(0, |t| t.shards.len());
    host.partition(TXN_STATE_TOPIC, partition_for(id, n))
}

/// Writes `m` to its id's `__transaction_state` partition, waits until durable, then
/// installs it.
async fn persist<H: TxnHost>(host: &H, m: &TxnMetadata) -> Result<(), i16> {
    write_state(host, m, true).await
}

/// Writes `m` to its id's `__transaction_state` partition and installs it; `durable`:
/// once durable (acks=all), else once appended on this node (acks=1), flushed lazily
/// (`Partition::append_lazily`: the id's next change, durable, takes it along).
async fn write_state<H: TxnHost>(host: &H, m: &TxnMetadata, durable: bool) -> Result<(), i16> {
    let Some(part) = state_partition(host, &m.transactional_id) else {
        return Err(code::NOT_COORDINATOR);
    };
    let now = crate::common::clock::wall_ms();
    let mut b = BatchBuilder::new(now);
    let key = super::records::encode_key(&m.transactional_id);
    let value = super::records::encode_value(m);
    b.push(now, Some(&key), Some(&value), &[]);
    let written = if durable {
        part.produce(b.build(), true).await
    } else {
        part.append_lazily(b.build()).await
    };
    if let Err(e) = written {
        tracing::warn!(transactional_id = %m.transactional_id, error = %e,
            "writing __transaction_state failed");
        return Err(code::COORDINATOR_NOT_AVAILABLE);
    }
    host.txns()
        .borrow_mut()
        .insert(m.transactional_id.clone(), m.clone());
    Ok(())
}

/// The metadata of `id` (INVALID_PRODUCER_ID_MAPPING for an unknown id, as Kafka).
fn current<H: TxnHost>(host: &H, id: &str) -> Result<TxnMetadata, i16> {
    host.txns()
        .borrow()
        .get(id)
        .cloned()
        .ok_or(code::INVALID_PRODUCER_ID_MAPPING)
}

/// InitProducerId with a transactional id: the producer id and epoch to use.
/// `expected` is the (producer id, epoch) the request names (KIP-360), `None` for -1/-1.
pub async fn init_producer_id<H: TxnHost>(
    host: &Rc<H>,
    id: &str,
    timeout_ms: i32,
    expected: Option<(i64, i16)>,
) -> Result<(i64, i16), i16> {
    host.txn_coordinator_check(id)?;
    TxnMetadata::check_timeout(timeout_ms, host.txn_max_timeout_ms()).map_err(|e| e.code())?;
    let busy = Busy::take(host, id).ok_or(code::CONCURRENT_TRANSACTIONS)?;
    let now = crate::common::clock::wall_ms();
    let existing = host.txns().borrow().get(id).cloned();
    let outcome = match existing {
        None => {
            if expected.is_some() {
                // Kafka: a producer naming an epoch for an id it never had is fenced.
                return Err(code::INVALID_PRODUCER_ID_MAPPING);
            }
            let pid = host.new_producer_id().await?;
            InitOutcome::Ready(TxnMetadata::new(id, pid, timeout_ms, now))
        }
        Some(m) => {
            let fresh = if m.epoch_exhausted() {
                Some(host.new_producer_id().await?)
            } else {
                None
            };
            let pid = m.producer_id;
            m.init_producer_id(timeout_ms, expected, now, || fresh.unwrap_or(pid))
                .map_err(|e| e.code())?
        }
    };
    match outcome {
        InitOutcome::Ready(next) => {
            persist(host.as_ref(), &next).await?;
            Ok((next.producer_id, next.producer_epoch))
        }
        InitOutcome::AbortFirst(next) => {
            persist(host.as_ref(), &next).await?;
            let host = host.clone();
            crate::runtime::task::spawn_local(async move { complete(&host, busy).await });
            Err(code::CONCURRENT_TRANSACTIONS)
        }
    }
}

/// AddPartitionsToTxn (and AddOffsetsToTxn, with the group's offsets partition): one
/// error code for all of them, or per partition when some do not exist
/// (UNKNOWN_TOPIC_OR_PARTITION for those, OPERATION_NOT_ATTEMPTED for the others).
pub async fn add_partitions<H: TxnHost>(
    host: &Rc<H>,
    id: &str,
    producer_id: i64,
    epoch: i16,
    partitions: &[(String, i32)],
) -> Result<(), AddError> {
    host.txn_coordinator_check(id).map_err(AddError::All)?;
    let meta = host.metadata();
    let unknown: Vec<bool> = partitions
        .iter()
        .map(|(t, p)| {
            meta.topics
                .get(t)
                .is_none_or(|topic| usize::try_from(*p).map_or(true, |p| p >= topic.shards.len()))
        })
        .collect();
    if unknown.iter().any(|u| *u) {
        return Err(AddError::Each(
            unknown
                .into_iter()
                .map(|u| {
                    if u {
                        code::UNKNOWN_TOPIC_OR_PARTITION
                    } else {
                        code::OPERATION_NOT_ATTEMPTED
                    }
                })
                .collect(),
        ));
    }
    let _busy = Busy::wait_take(host, id, ADD_BUSY_WAIT)
        .await
        .ok_or(AddError::All(code::CONCURRENT_TRANSACTIONS))?;
    let m = current(host.as_ref(), id).map_err(AddError::All)?;
    let now = crate::common::clock::wall_ms();
    match m.add_partitions(producer_id, epoch, partitions, now) {
        Ok(None) => Ok(()),
        Ok(Some(next)) => persist(host.as_ref(), &next).await.map_err(AddError::All),
        Err(e) => Err(AddError::All(e.code())),
    }
}

/// Why AddPartitionsToTxn failed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AddError {
    /// The same code for every partition.
    All(i16),
    /// A code per partition, in the request's order.
    Each(Vec<i16>),
}

/// EndTxn: persists the outcome (Prepare*), then writes the markers and Complete*; answers
/// once complete, or after `END_TXN_WAIT` (the outcome is durable either way). `v2`:
/// transaction version 2 (EndTxn v5+), whose Prepare* bumps the epoch. Returns the
/// producer id and epoch the producer goes on with (what EndTxn v5 answers).
pub async fn end_txn<H: TxnHost>(
    host: &Rc<H>,
    id: &str,
    (producer_id, epoch): (i64, i16),
    commit: bool,
    v2: bool,
) -> Result<(i64, i16), i16> {
    host.txn_coordinator_check(id)?;
    let busy = Busy::take(host, id).ok_or(code::CONCURRENT_TRANSACTIONS)?;
    let m = current(host.as_ref(), id)?;
    let now = crate::common::clock::wall_ms();
    let outcome = if v2 {
        let fresh = if m.epoch_exhausted() && m.producer_id == producer_id {
            Some(host.new_producer_id().await?)
        } else {
            None
        };
        m.end_txn_v2((producer_id, epoch), commit, now, fresh)
    } else {
        m.end_txn(producer_id, epoch, commit, now)
    };
    match outcome.map_err(|e| e.code())? {
        EndOutcome::AlreadyDone => Ok((m.producer_id, m.producer_epoch)),
        EndOutcome::Prepare(next) => {
            persist(host.as_ref(), &next).await?;
            let done = next.complete(now);
            let (tx, rx) = futures::channel::oneshot::channel::<()>();
            let host = host.clone();
            crate::runtime::task::spawn_local(async move {
                complete(&host, busy).await;
                let _ = tx.send(());
            });
            let _ = crate::runtime::task::timeout(END_TXN_WAIT, rx).await;
            Ok((done.producer_id, done.producer_epoch))
        }
    }
}

/// Drives a Prepare* transaction of the busy id to Complete*: writes the markers until
/// every partition has one, then persists the completion; gives up only when this node
/// stops coordinating the id (its next coordinator completes it after loading).
pub async fn complete<H: TxnHost>(host: &Rc<H>, busy: Busy<H>) {
    let id = busy.id.clone();
    let Ok(m) = current(host.as_ref(), &id) else {
        return;
    };
    if !m.state.is_preparing() {
        return;
    }
    let coordinator_epoch = state_partition(host.as_ref(), &id).map_or(0, |p| p.leader_epoch());
    let mut remaining: Vec<(String, i32)> = m.partitions.iter().cloned().collect();
    let mut backoff = RETRY_BACKOFF_MIN;
    while !remaining.is_empty() {
        let codes = host
            .write_markers(Markers {
                producer_id: m.producer_id,
                producer_epoch: m.producer_epoch,
                commit: m.state == TxnState::PrepareCommit,
                coordinator_epoch,
                partitions: remaining.clone(),
            })
            .await;
        let failed: Vec<((String, i32), i16)> = remaining
            .into_iter()
            .zip(
                codes
                    .into_iter()
                    .chain(std::iter::repeat(code::REQUEST_TIMED_OUT)),
            )
            .filter(|(_, c)| !marker_done(*c))
            .collect();
        if let Some(((t, p), c)) = failed.first() {
            tracing::debug!(transactional_id = %id, topic = %t, partition = p, code = c,
                failed = failed.len(), "transaction markers not all written; retrying");
        }
        remaining = failed.into_iter().map(|(tp, _)| tp).collect();
        if remaining.is_empty() {
            break;
        }
        if host.txn_coordinator_check(&id).is_err() {
            return;
        }
        sleep(backoff).await;
        backoff = (backoff * 2).min(RETRY_BACKOFF_MAX);
    }
    persist_completion(host, &id, &m).await;
}

/// Writes the Complete* metadata of `m` (retrying until it is appended, or until this node
/// stops coordinating `id`) and counts the transaction's duration. It is installed once
/// appended, without waiting until durable: the outcome was durable with Prepare* and
/// every marker is written, so losing this record only has the next coordinator write the
/// markers again; the id's next transition, durable, takes it along (one flush for both).
async fn persist_completion<H: TxnHost>(host: &Rc<H>, id: &str, m: &TxnMetadata) {
    let mut backoff = RETRY_BACKOFF_MIN;
    loop {
        let now_ms = crate::common::clock::wall_ms();
        let done = m.complete(now_ms);
        if write_state(host.as_ref(), &done, false).await.is_ok() {
            if m.start_ms >= 0 {
                let ms = u64::try_from(now_ms.saturating_sub(m.start_ms)).unwrap_or(0);
                host.txn_ended(
                    m.state == TxnState::PrepareCommit,
                    Duration::from_millis(ms),
                );
            }
            return;
        }
        if host.txn_coordinator_check(id).is_err() {
            return;
        }
        sleep(backoff).await;
        backoff = (backoff * 2).min(RETRY_BACKOFF_MAX);
    }
}

/// Whether a marker answer ends the marker's retries: written, or the partition is gone
/// (a deleted topic's partitions need none; Kafka drops them too).
fn marker_done(c: i16) -> bool {
    c == code::NONE || c == code::UNKNOWN_TOPIC_OR_PARTITION
}

/// Completes every Prepare* transaction of the ids this shard coordinates that no request
/// is completing (after a load: the previous coordinator's unfinished ones).
pub fn resume_completions<H: TxnHost>(host: &Rc<H>) {
    let preparing: Vec<String> = host
        .txns()
        .borrow()
        .values()
        .filter(|m| m.state.is_preparing())
        .map(|m| m.transactional_id.clone())
        .collect();
    for id in preparing {
        if host.txn_coordinator_check(&id).is_err() {
            continue;
        }
        if let Some(busy) = Busy::take(host, &id) {
            let host = host.clone();
            crate::runtime::task::spawn_local(async move { complete(&host, busy).await });
        }
    }
}

/// Aborts the open transactions that outlived their `transaction.timeout.ms`, fencing
/// their producer with the abort markers' bumped epoch (Kafka does the same).
pub fn abort_timed_out<H: TxnHost>(host: &Rc<H>) {
    let now = crate::common::clock::wall_ms();
    let expired: Vec<TxnMetadata> = host
        .txns()
        .borrow()
        .values()
        .filter(|m| m.timed_out(now))
        .cloned()
        .collect();
    for m in expired {
        if host.txn_coordinator_check(&m.transactional_id).is_err() {
            continue;
        }
        let Some(busy) = Busy::take(host, &m.transactional_id) else {
            continue;
        };
        tracing::info!(transactional_id = %m.transactional_id, producer_id = m.producer_id,
            timeout_ms = m.timeout_ms, "aborting a transaction that outlived its timeout");
        let next = m.abort_timed_out(now);
        let host = host.clone();
        crate::runtime::task::spawn_local(async move {
            if persist(host.as_ref(), &next).await.is_ok() {
                complete(&host, busy).await;
            }
        });
    }
}

/// Forgets the transactional ids this shard coordinates that have had no transaction open
/// and no change for `expiration_ms` (Kafka's `transactional.id.expiration.ms`): a
/// tombstone in `__transaction_state` each, durable before the id is removed; the id's
/// next InitProducerId starts afresh with a new producer id.
pub fn expire_idle<H: TxnHost>(host: &Rc<H>, expiration_ms: u64) {
    let now = crate::common::clock::wall_ms();
    let horizon = now.saturating_sub(i64::try_from(expiration_ms).unwrap_or(i64::MAX));
    let idle: Vec<String> = host
        .txns()
        .borrow()
        .values()
        .filter(|m| m.idle_since(horizon))
        .map(|m| m.transactional_id.clone())
        .collect();
    for id in idle {
        if host.txn_coordinator_check(&id).is_err() {
            continue;
        }
        let Some(busy) = Busy::take(host, &id) else {
            continue;
        };
        let host = host.clone();
        crate::runtime::task::spawn_local(async move {
            // Still idle now that it is ours (no request changed it meanwhile).
            let still_idle = current(host.as_ref(), &id).is_ok_and(|m| m.idle_since(horizon));
            if still_idle && write_tombstone(host.as_ref(), &id).await.is_ok() {
                host.txns().borrow_mut().remove(&id);
                tracing::info!(transactional_id = %id, "transactional id expired");
            }
            drop(busy);
        });
    }
}

/// Writes the tombstone of `id` to its `__transaction_state` partition, durable.
async fn write_tombstone<H: TxnHost>(host: &H, id: &str) -> Result<(), i16> {
    let part = state_partition(host, id).ok_or(code::NOT_COORDINATOR)?;
    let now = crate::common::clock::wall_ms();
    let mut b = BatchBuilder::new(now);
    let key = super::records::encode_key(id);
    b.push(now, Some(&key), None, &[]);
    part.produce(b.build(), true)
        .await
        .map(|_| ())
        .map_err(|e| {
            tracing::warn!(transactional_id = %id, error = %e,
            "writing a __transaction_state tombstone failed");
            code::COORDINATOR_NOT_AVAILABLE
        })
}

/// KIP-890 part 1: whether `producer_id` at `epoch` has an open transaction of `id` that
/// includes every partition named; the error a Produce (or TxnOffsetCommit) gets otherwise.
pub fn verify<H: TxnHost>(
    host: &H,
    id: &str,
    producer_id: i64,
    epoch: i16,
    partitions: &[(String, i32)],
) -> Result<(), i16> {
    host.txn_coordinator_check(id)?;
    let txns = host.txns().borrow();
    let Some(m) = txns.get(id) else {
        return Err(code::INVALID_PRODUCER_ID_MAPPING);
    };
    if m.producer_id != producer_id {
        return Err(code::INVALID_PRODUCER_ID_MAPPING);
    }
    if m.producer_epoch != epoch {
        return Err(code::INVALID_PRODUCER_EPOCH);
    }
    if m.state != TxnState::Ongoing || !partitions.iter().all(|p| m.partitions.contains(p)) {
        return Err(code::INVALID_TXN_STATE);
    }
    Ok(())
}

/// Rebuilds the transactional ids of one `__transaction_state` partition from a batch.
pub fn replay_batch(txns: &mut HashMap<String, TxnMetadata>, batch: Bytes) {
    crate::partition::lookup::for_each_keyed_record(batch, |k, v| {
        super::records::apply(txns, k, v)
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::task::{sleep, spawn_local};
    use std::cell::Cell;

    #[test]
    fn a_busy_id_is_taken_by_one_waiter_at_each_release() {
        strand_storage::io_runtime::block_on("txn-busy-test", 1, async {
            let ids: Rc<BusyIds> = Rc::default();
            assert!(mark_busy(&ids, "t"));
            assert!(!mark_busy(&ids, "t"), "busy already");
            assert!(mark_busy(&ids, "other"), "ids are apart");
            assert!(
                !mark_busy_within(&ids, "t", Duration::from_millis(20)).await,
                "held: the wait times out"
            );
            let taken = Rc::new(Cell::new(0));
            for _ in 0..2 {
                let (ids, taken) = (ids.clone(), taken.clone());
                spawn_local(async move {
                    if mark_busy_within(&ids, "t", Duration::from_secs(30)).await {
                        taken.set(taken.get() + 1);
                    }
                });
            }
            sleep(Duration::from_millis(5)).await;
            assert_eq!(taken.get(), 0);
            unmark_busy(&ids, "t");
            sleep(Duration::from_millis(5)).await;
            assert_eq!(taken.get(), 1, "one waiter takes it, the other waits on");
            unmark_busy(&ids, "t");
            sleep(Duration::from_millis(5)).await;
            assert_eq!(taken.get(), 2);
            assert!(ids.borrow().contains_key("t"), "the second waiter holds it");
        })
        .expect("executor");
    }
}
