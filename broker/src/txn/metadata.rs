//! One transactional id's state at its coordinator, and the transitions Kafka's
//! transaction coordinator allows (`TransactionMetadata`): Empty → Ongoing →
//! PrepareCommit/PrepareAbort → CompleteCommit/CompleteAbort, and PrepareEpochFence when a
//! re-initialising producer fences an open transaction.
//!
//! Invariants:
//! - A transition never mutates: it returns the next metadata, which the coordinator
//!   persists (a record in `__transaction_state`) before it installs it, so a crash leaves
//!   either state, never half of one.
//! - Only the current producer id and epoch may change an ongoing transaction; an older
//!   epoch gets PRODUCER_FENCED, another producer id INVALID_PRODUCER_ID_MAPPING.
//! - While a transaction is between Prepare* and Complete* (its markers being written),
//!   every request that would change it gets CONCURRENT_TRANSACTIONS (retriable), except a
//!   retry of the same EndTxn, which is answered as done once complete.
//! - Epochs stay below `i16::MAX`: the bump that would reach it takes a new producer id at
//!   epoch 0 instead (transaction version 2: its markers are written at `i16::MAX` with
//!   the old id, and the completion moves to the new id).
//! - Transaction version 2 (KIP-890 part 2, EndTxn v5+): every EndTxn bumps the epoch in
//!   its Prepare* record, so the markers fence the transaction's late writes; the client
//!   gets the new epoch in the answer, and a retry (the epoch one below) is recognised.

use std::collections::BTreeSet;

use crate::common::errors::code;

/// The highest epoch a producer id is used with (Kafka: `Short.MaxValue - 1`).
const EPOCH_MAX: i16 = i16::MAX - 1;

/// Where a transactional id's transaction is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum TxnState {
    /// No transaction since the producer was initialised.
    Empty,
    /// Partitions were added: a transaction is open.
    Ongoing,
    /// EndTxn(commit) accepted; commit markers being written.
    PrepareCommit,
    /// EndTxn(abort) accepted (or a timeout or a fence); abort markers being written.
    PrepareAbort,
    /// The last transaction committed.
    CompleteCommit,
    /// The last transaction aborted.
    CompleteAbort,
    /// The id expired; its metadata is being removed.
    Dead,
    /// An open transaction is being aborted because its producer was fenced.
    PrepareEpochFence,
}

impl TxnState {
    /// The name DescribeTransactions and ListTransactions show (Kafka's `TransactionState`).
    pub const fn name(self) -> &'static str {
        match self {
            TxnState::Empty => "Empty",
            TxnState::Ongoing => "Ongoing",
            TxnState::PrepareCommit => "PrepareCommit",
            TxnState::PrepareAbort => "PrepareAbort",
            TxnState::CompleteCommit => "CompleteCommit",
            TxnState::CompleteAbort => "CompleteAbort",
            TxnState::Dead => "Dead",
            TxnState::PrepareEpochFence => "PrepareEpochFence",
        }
    }

    /// Whether markers are being written (the transaction has an outcome, not complete).
    pub const fn is_preparing(self) -> bool {
        matches!(
            self,
            TxnState::PrepareCommit | TxnState::PrepareAbort | TxnState::PrepareEpochFence
        )
    }
}

/// Why the coordinator refused a request for a transactional id.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum TxnError {
    /// CONCURRENT_TRANSACTIONS: the last transaction is still completing; retry.
    #[error("a transaction of this id is still completing")]
    ConcurrentTransactions,
    /// INVALID_PRODUCER_ID_MAPPING: the producer id is not this id's.
    #[error("the producer id does not belong to this transactional id")]
    InvalidProducerIdMapping,
    /// PRODUCER_FENCED: a newer producer with the same transactional id exists.
    #[error("there is a newer producer with the same transactional id")]
    ProducerFenced,
    /// INVALID_TXN_STATE: the request does not fit the transaction's state.
    #[error("the request does not fit the transaction's state")]
    InvalidTxnState,
    /// INVALID_TRANSACTION_TIMEOUT: above `transaction.max.timeout.ms`, or not positive.
    #[error("transaction timeout out of range")]
    InvalidTransactionTimeout,
}

impl TxnError {
    /// The Kafka error code.
    pub const fn code(self) -> i16 {
        match self {
            TxnError::ConcurrentTransactions => code::CONCURRENT_TRANSACTIONS,
            TxnError::InvalidProducerIdMapping => code::INVALID_PRODUCER_ID_MAPPING,
            TxnError::ProducerFenced => code::PRODUCER_FENCED,
            TxnError::InvalidTxnState => code::INVALID_TXN_STATE,
            TxnError::InvalidTransactionTimeout => code::INVALID_TRANSACTION_TIMEOUT,
        }
    }
}

/// A transactional id's metadata (Kafka's `TransactionMetadata`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TxnMetadata {
    /// The id.
    pub transactional_id: String,
    /// Its producer id.
    pub producer_id: i64,
    /// Its current epoch.
    pub producer_epoch: i16,
    /// The epoch before the last bump (-1 for none): a retried InitProducerId names it.
    pub last_producer_epoch: i16,
    /// `transaction.timeout.ms` the producer asked for.
    pub timeout_ms: i32,
    /// Where its transaction is.
    pub state: TxnState,
    /// The partitions of the open (or completing) transaction.
    pub partitions: BTreeSet<(String, i32)>,
    /// When the open transaction began (-1 when none is open).
    pub start_ms: i64,
    /// When this metadata last changed.
    pub last_update_ms: i64,
    /// Transaction version 2: the producer id an EndTxn at the last epoch allocated, taken
    /// when the transaction completes (-1 for none).
    pub next_producer_id: i64,
    /// The producer id before the last such rotation (-1 for none): a retried EndTxn of
    /// the old producer names it.
    pub prev_producer_id: i64,
}

/// What InitProducerId does to an existing id.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum InitOutcome {
    /// Persist this and answer with its producer id and epoch.
    Ready(TxnMetadata),
    /// The open transaction is fenced: persist this (PrepareEpochFence, the epoch
    /// bumped), abort the transaction with it, and answer CONCURRENT_TRANSACTIONS so the
    /// producer retries once the abort is complete.
    AbortFirst(TxnMetadata),
}

/// What EndTxn does.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum EndOutcome {
    /// Persist this (Prepare*), write its markers, then persist `complete()`.
    Prepare(TxnMetadata),
    /// A retry of an EndTxn already complete: answer success, change nothing.
    AlreadyDone,
}

impl TxnMetadata {
    /// A new id's metadata: producer id `producer_id` at epoch 0, nothing open.
    pub fn new(transactional_id: &str, producer_id: i64, timeout_ms: i32, now_ms: i64) -> Self {
        TxnMetadata {
            transactional_id: transactional_id.to_string(),
            producer_id,
            producer_epoch: 0,
            last_producer_epoch: -1,
            timeout_ms,
            state: TxnState::Empty,
            partitions: BTreeSet::new(),
            start_ms: -1,
            last_update_ms: now_ms,
            next_producer_id: -1,
            prev_producer_id: -1,
        }
    }

    /// Whether the next epoch bump needs a new producer id (the epoch is exhausted).
    pub fn epoch_exhausted(&self) -> bool {
        self.producer_epoch >= EPOCH_MAX
    }

    /// Checks a requested `transaction.timeout.ms` against `max_ms`.
    pub fn check_timeout(timeout_ms: i32, max_ms: i32) -> Result<(), TxnError> {
        if timeout_ms <= 0 || timeout_ms > max_ms {
            return Err(TxnError::InvalidTransactionTimeout);
        }
        Ok(())
    }

    /// This metadata with the epoch bumped (a new producer id from `new_pid` at epoch 0
    /// when the epoch is exhausted).
    fn bumped(&self, new_pid: impl FnOnce() -> i64) -> TxnMetadata {
        let mut next = self.clone();
        if self.producer_epoch >= EPOCH_MAX {
            next.producer_id = new_pid();
            next.producer_epoch = 0;
            next.last_producer_epoch = -1;
        } else {
            next.last_producer_epoch = self.producer_epoch;
            next.producer_epoch = self.producer_epoch + 1;
        }
        next
    }

    /// This metadata with the epoch bumped within the same producer id, to fence the
    /// producer of an open transaction with its abort markers (with no epoch left, the
    /// current one: Kafka does the same).
    fn fencing(&self) -> TxnMetadata {
        let mut next = self.clone();
        if self.producer_epoch < EPOCH_MAX {
            next.last_producer_epoch = self.producer_epoch;
            next.producer_epoch = self.producer_epoch + 1;
        }
        next
    }

    /// InitProducerId for this existing id: `expected` is the producer id and epoch the
    /// request names (KIP-360; `None` for -1/-1), `new_pid` allocates a producer id when
    /// the epoch is exhausted.
    pub fn init_producer_id(
        &self,
        timeout_ms: i32,
        expected: Option<(i64, i16)>,
        now_ms: i64,
        new_pid: impl FnOnce() -> i64,
    ) -> Result<InitOutcome, TxnError> {
        if let Some((pid, epoch)) = expected {
            let current = pid == self.producer_id
                && (epoch == self.producer_epoch || epoch == self.last_producer_epoch);
            if !current {
                return Err(TxnError::ProducerFenced);
            }
            // A retry of the InitProducerId that made the current epoch: its answer was
            // lost, so it is answered again without another bump.
            let settled = matches!(
                self.state,
                TxnState::Empty | TxnState::CompleteCommit | TxnState::CompleteAbort
            );
            if settled && epoch == self.last_producer_epoch && self.last_producer_epoch >= 0 {
                return Ok(InitOutcome::Ready(self.clone()));
            }
        }
        match self.state {
            TxnState::PrepareCommit
            | TxnState::PrepareAbort
            | TxnState::PrepareEpochFence
            | TxnState::Dead => Err(TxnError::ConcurrentTransactions),
            TxnState::Empty | TxnState::CompleteCommit | TxnState::CompleteAbort => {
                let mut next = self.bumped(new_pid);
                next.timeout_ms = timeout_ms;
                next.state = TxnState::Empty;
                next.partitions.clear();
                next.start_ms = -1;
                next.last_update_ms = now_ms;
                Ok(InitOutcome::Ready(next))
            }
            TxnState::Ongoing => {
                // The open transaction's markers carry the bumped epoch, so the old
                // producer's further writes are fenced at every partition.
                let mut next = self.fencing();
                next.state = TxnState::PrepareEpochFence;
                next.last_update_ms = now_ms;
                Ok(InitOutcome::AbortFirst(next))
            }
        }
    }

    /// Checks that `producer_id` at `epoch` is this id's current producer.
    fn check_producer(&self, producer_id: i64, epoch: i16) -> Result<(), TxnError> {
        if producer_id != self.producer_id {
            return Err(TxnError::InvalidProducerIdMapping);
        }
        if epoch != self.producer_epoch {
            return Err(TxnError::ProducerFenced);
        }
        Ok(())
    }

    /// AddPartitionsToTxn (and the implicit add of transaction version 2): `None` when
    /// every partition is already in the open transaction (nothing to persist).
    pub fn add_partitions(
        &self,
        producer_id: i64,
        epoch: i16,
        partitions: &[(String, i32)],
        now_ms: i64,
    ) -> Result<Option<TxnMetadata>, TxnError> {
        self.check_producer(producer_id, epoch)?;
        match self.state {
            TxnState::PrepareCommit | TxnState::PrepareAbort | TxnState::PrepareEpochFence => {
                Err(TxnError::ConcurrentTransactions)
            }
            TxnState::Dead => Err(TxnError::InvalidTxnState),
            TxnState::Ongoing if partitions.iter().all(|p| self.partitions.contains(p)) => Ok(None),
            TxnState::Ongoing
            | TxnState::Empty
            | TxnState::CompleteCommit
            | TxnState::CompleteAbort => {
                let mut next = self.clone();
                if self.state != TxnState::Ongoing {
                    next.partitions.clear();
                    next.start_ms = now_ms;
                }
                next.state = TxnState::Ongoing;
                next.partitions.extend(partitions.iter().cloned());
                next.last_update_ms = now_ms;
                Ok(Some(next))
            }
        }
    }

    /// EndTxn: commit (`true`) or abort the open transaction.
    pub fn end_txn(
        &self,
        producer_id: i64,
        epoch: i16,
        commit: bool,
        now_ms: i64,
    ) -> Result<EndOutcome, TxnError> {
        self.check_producer(producer_id, epoch)?;
        match (self.state, commit) {
            (TxnState::Ongoing, _) => {
                let mut next = self.clone();
                next.state = if commit {
                    TxnState::PrepareCommit
                } else {
                    TxnState::PrepareAbort
                };
                next.last_update_ms = now_ms;
                Ok(EndOutcome::Prepare(next))
            }
            (TxnState::CompleteCommit, true) | (TxnState::CompleteAbort, false) => {
                Ok(EndOutcome::AlreadyDone)
            }
            (TxnState::PrepareCommit, true) | (TxnState::PrepareAbort, false) => {
                Err(TxnError::ConcurrentTransactions)
            }
            // Kafka lets an abort with nothing open succeed (the producer aborts after an
            // error before it added any partition).
            (TxnState::Empty, false) => Ok(EndOutcome::AlreadyDone),
            _ => Err(TxnError::InvalidTxnState),
        }
    }

    /// EndTxn of transaction version 2 (v5+): the Prepare* record bumps the epoch (with
    /// `fresh_pid`, allocated by the caller when `epoch_exhausted`, as the next producer
    /// id); an abort with nothing open bumps it too; a retry of an EndTxn that already
    /// bumped (its epoch one below, or the old id after a rotation) is answered as done
    /// (Kafka's `TransactionCoordinator.endTransaction` table).
    pub fn end_txn_v2(
        &self,
        (producer_id, epoch): (i64, i16),
        commit: bool,
        now_ms: i64,
        fresh_pid: Option<i64>,
    ) -> Result<EndOutcome, TxnError> {
        let retry_overflow = producer_id == self.prev_producer_id
            && producer_id != self.producer_id
            && epoch == EPOCH_MAX
            && self.producer_epoch == 0;
        if producer_id != self.producer_id && !retry_overflow {
            return Err(TxnError::InvalidProducerIdMapping);
        }
        let retry = retry_overflow || epoch.checked_add(1) == Some(self.producer_epoch);
        let current = !retry_overflow && epoch == self.producer_epoch;
        let prepare = |state: TxnState| {
            let mut next = self.clone();
            if state == TxnState::PrepareAbort && self.state != TxnState::Ongoing {
                next.partitions.clear();
                next.start_ms = now_ms;
            }
            next.state = state;
            next.last_producer_epoch = self.producer_epoch;
            next.producer_epoch = self.producer_epoch.saturating_add(1);
            if self.epoch_exhausted() {
                next.next_producer_id = fresh_pid.unwrap_or(-1);
            }
            next.last_update_ms = now_ms;
            EndOutcome::Prepare(next)
        };
        let outcome = if commit {
            TxnState::PrepareCommit
        } else {
            TxnState::PrepareAbort
        };
        match self.state {
            TxnState::Ongoing if current => Ok(prepare(outcome)),
            TxnState::PrepareCommit | TxnState::PrepareAbort if retry => {
                if self.state == outcome {
                    Err(TxnError::ConcurrentTransactions)
                } else {
                    Err(TxnError::InvalidTxnState)
                }
            }
            TxnState::PrepareEpochFence => Err(TxnError::ConcurrentTransactions),
            TxnState::Empty | TxnState::CompleteCommit | TxnState::CompleteAbort if current => {
                if commit {
                    Err(TxnError::InvalidTxnState)
                } else {
                    Ok(prepare(TxnState::PrepareAbort))
                }
            }
            TxnState::CompleteCommit | TxnState::CompleteAbort if retry => {
                let done = (self.state == TxnState::CompleteCommit) == commit;
                if done {
                    Ok(EndOutcome::AlreadyDone)
                } else {
                    Err(TxnError::InvalidTxnState)
                }
            }
            TxnState::Dead => Err(TxnError::InvalidTxnState),
            _ => Err(TxnError::ProducerFenced),
        }
    }

    /// The Complete* metadata after every marker of a Prepare* one is written.
    pub fn complete(&self, now_ms: i64) -> TxnMetadata {
        let mut next = self.clone();
        if self.next_producer_id >= 0 {
            // Transaction version 2 at the last epoch: the next transaction is the new
            // producer id's, from epoch 0.
            next.prev_producer_id = self.producer_id;
            next.producer_id = self.next_producer_id;
            next.producer_epoch = 0;
            next.last_producer_epoch = -1;
            next.next_producer_id = -1;
        }
        next.state = match self.state {
            TxnState::PrepareCommit => TxnState::CompleteCommit,
            _ => TxnState::CompleteAbort,
        };
        next.partitions.clear();
        next.start_ms = -1;
        next.last_update_ms = now_ms;
        next
    }

    /// Whether no transaction is open and nothing changed since before `horizon_ms`
    /// (transactional id expiry).
    pub fn idle_since(&self, horizon_ms: i64) -> bool {
        matches!(
            self.state,
            TxnState::Empty | TxnState::CompleteCommit | TxnState::CompleteAbort
        ) && self.last_update_ms <= horizon_ms
    }

    /// Whether the open transaction has outlived its timeout at `now_ms`.
    pub fn timed_out(&self, now_ms: i64) -> bool {
        self.state == TxnState::Ongoing
            && now_ms.saturating_sub(self.start_ms) > i64::from(self.timeout_ms)
    }

    /// The abort of a timed-out transaction: the epoch is bumped first (Kafka fences the
    /// producer that let it time out), then PrepareAbort.
    pub fn abort_timed_out(&self, now_ms: i64) -> TxnMetadata {
        let mut next = self.fencing();
        next.state = TxnState::PrepareAbort;
        next.last_update_ms = now_ms;
        next
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parts(names: &[(&str, i32)]) -> Vec<(String, i32)> {
        names.iter().map(|(t, p)| (t.to_string(), *p)).collect()
    }

    fn no_pid() -> i64 {
        panic!("no new producer id expected")
    }

    fn ready(o: Result<InitOutcome, TxnError>) -> TxnMetadata {
        match o {
            Ok(InitOutcome::Ready(m)) => m,
            other => panic!("expected Ready, got {other:?}"),
        }
    }

    fn prepared(o: Result<EndOutcome, TxnError>) -> TxnMetadata {
        match o {
            Ok(EndOutcome::Prepare(m)) => m,
            other => panic!("expected Prepare, got {other:?}"),
        }
    }

    #[test]
    fn a_transaction_goes_from_empty_to_complete() {
        let m = TxnMetadata::new("t", 7, 60_000, 0);
        let m = m
            .add_partitions(7, 0, &parts(&[("a", 0), ("b", 1)]), 10)
            .expect("add")
            .expect("changed");
        assert_eq!(
            (m.state, m.start_ms, m.partitions.len()),
            (TxnState::Ongoing, 10, 2)
        );
        assert_eq!(
            m.add_partitions(7, 0, &parts(&[("a", 0)]), 11),
            Ok(None),
            "already in"
        );
        let p = prepared(m.end_txn(7, 0, true, 20));
        assert_eq!(p.state, TxnState::PrepareCommit);
        assert_eq!(p.partitions.len(), 2, "the markers go to these");
        assert_eq!(
            p.end_txn(7, 0, true, 21),
            Err(TxnError::ConcurrentTransactions)
        );
        assert_eq!(
            p.add_partitions(7, 0, &parts(&[("c", 0)]), 21),
            Err(TxnError::ConcurrentTransactions)
        );
        let c = p.complete(30);
        assert_eq!(
            (c.state, c.partitions.len(), c.start_ms),
            (TxnState::CompleteCommit, 0, -1)
        );
        assert_eq!(
            c.end_txn(7, 0, true, 31),
            Ok(EndOutcome::AlreadyDone),
            "a retry"
        );
        assert_eq!(c.end_txn(7, 0, false, 31), Err(TxnError::InvalidTxnState));
        // The next transaction starts afresh.
        let n = c
            .add_partitions(7, 0, &parts(&[("c", 0)]), 40)
            .expect("add")
            .expect("changed");
        assert_eq!(
            (n.state, n.start_ms, n.partitions.len()),
            (TxnState::Ongoing, 40, 1)
        );
    }

    #[test]
    fn version_2_bumps_the_epoch_at_every_end_and_knows_a_retry() {
        let m = TxnMetadata::new("t", 7, 60_000, 0);
        let open = m
            .add_partitions(7, 0, &parts(&[("a", 0)]), 1)
            .expect("add")
            .expect("changed");
        let p = prepared(open.end_txn_v2((7, 0), true, 2, None));
        assert_eq!(
            (p.state, p.producer_epoch, p.last_producer_epoch),
            (TxnState::PrepareCommit, 1, 0),
            "the markers carry the bumped epoch"
        );
        assert_eq!(
            p.end_txn_v2((7, 0), true, 3, None),
            Err(TxnError::ConcurrentTransactions),
            "a retry while the markers are written"
        );
        assert_eq!(
            p.end_txn_v2((7, 0), false, 3, None),
            Err(TxnError::InvalidTxnState)
        );
        let c = p.complete(4);
        assert_eq!((c.state, c.producer_epoch), (TxnState::CompleteCommit, 1));
        assert_eq!(
            c.end_txn_v2((7, 0), true, 5, None),
            Ok(EndOutcome::AlreadyDone),
            "a retry after completion"
        );
        assert_eq!(
            c.end_txn_v2((7, 0), false, 5, None),
            Err(TxnError::InvalidTxnState)
        );
        assert_eq!(
            c.end_txn_v2((7, 1), true, 5, None),
            Err(TxnError::InvalidTxnState),
            "nothing open to commit"
        );
        assert_eq!(
            c.end_txn_v2((7, 2), true, 5, None),
            Err(TxnError::ProducerFenced)
        );
        assert_eq!(
            c.end_txn_v2((8, 1), true, 5, None),
            Err(TxnError::InvalidProducerIdMapping)
        );
        // An abort with nothing open bumps the epoch too, with no markers to write.
        let a = prepared(c.end_txn_v2((7, 1), false, 6, None));
        assert_eq!(
            (a.state, a.producer_epoch, a.partitions.len()),
            (TxnState::PrepareAbort, 2, 0)
        );
        let a = a.complete(7);
        assert_eq!(
            a.end_txn_v2((7, 1), false, 8, None),
            Ok(EndOutcome::AlreadyDone)
        );
        // The next transaction is added at the new epoch; the old one is fenced.
        assert_eq!(
            a.add_partitions(7, 1, &parts(&[("a", 0)]), 9),
            Err(TxnError::ProducerFenced)
        );
        assert!(a.add_partitions(7, 2, &parts(&[("a", 0)]), 9).is_ok());
        // From Empty: a retry is fenced (there was no EndTxn to retry).
        let e = TxnMetadata::new("t", 7, 60_000, 0);
        let e = ready(e.init_producer_id(60_000, None, 1, no_pid));
        assert_eq!(
            e.end_txn_v2((7, 0), false, 2, None),
            Err(TxnError::ProducerFenced)
        );
    }

    #[test]
    fn version_2_moves_to_a_new_producer_id_at_the_last_epoch() {
        let mut m = TxnMetadata::new("t", 7, 60_000, 0);
        m.producer_epoch = EPOCH_MAX;
        let open = m
            .add_partitions(7, EPOCH_MAX, &parts(&[("a", 0)]), 1)
            .expect("add")
            .expect("changed");
        let p = prepared(open.end_txn_v2((7, EPOCH_MAX), true, 2, Some(99)));
        assert_eq!(
            (p.producer_id, p.producer_epoch, p.next_producer_id),
            (7, i16::MAX, 99),
            "the markers are the old id's, at the highest epoch"
        );
        let c = p.complete(3);
        assert_eq!(
            (
                c.producer_id,
                c.producer_epoch,
                c.prev_producer_id,
                c.next_producer_id
            ),
            (99, 0, 7, -1)
        );
        assert_eq!(
            c.end_txn_v2((7, EPOCH_MAX), true, 4, None),
            Ok(EndOutcome::AlreadyDone),
            "the old producer's retry"
        );
        assert_eq!(
            c.end_txn_v2((7, EPOCH_MAX), false, 4, None),
            Err(TxnError::InvalidTxnState)
        );
        assert!(c.add_partitions(99, 0, &parts(&[("a", 0)]), 5).is_ok());
    }

    #[test]
    fn only_the_current_producer_changes_a_transaction() {
        let m = TxnMetadata::new("t", 7, 60_000, 0);
        let m = ready(m.init_producer_id(60_000, None, 1, no_pid));
        assert_eq!(
            (m.producer_id, m.producer_epoch, m.last_producer_epoch),
            (7, 1, 0)
        );
        assert_eq!(
            m.add_partitions(8, 1, &parts(&[("a", 0)]), 2),
            Err(TxnError::InvalidProducerIdMapping)
        );
        assert_eq!(
            m.add_partitions(7, 0, &parts(&[("a", 0)]), 2),
            Err(TxnError::ProducerFenced)
        );
        assert_eq!(m.end_txn(7, 0, false, 2), Err(TxnError::ProducerFenced));
        assert_eq!(
            m.end_txn(7, 1, true, 2),
            Err(TxnError::InvalidTxnState),
            "nothing open"
        );
        assert_eq!(m.end_txn(7, 1, false, 2), Ok(EndOutcome::AlreadyDone));
    }

    #[test]
    fn a_reinitialising_producer_fences_and_aborts_the_open_transaction() {
        let m = TxnMetadata::new("t", 7, 60_000, 0);
        let open = m
            .add_partitions(7, 0, &parts(&[("a", 0)]), 1)
            .expect("add")
            .expect("changed");
        let fence = match open.init_producer_id(60_000, None, 2, no_pid) {
            Ok(InitOutcome::AbortFirst(f)) => f,
            other => panic!("expected AbortFirst, got {other:?}"),
        };
        assert_eq!(
            (fence.state, fence.producer_epoch),
            (TxnState::PrepareEpochFence, 1)
        );
        assert_eq!(fence.partitions.len(), 1, "its markers go there");
        assert_eq!(
            fence.init_producer_id(60_000, None, 3, no_pid),
            Err(TxnError::ConcurrentTransactions)
        );
        let done = fence.complete(4);
        assert_eq!(done.state, TxnState::CompleteAbort);
        // The old producer (epoch 0) is fenced; the retry of the new one gets epoch 2.
        assert_eq!(
            done.add_partitions(7, 0, &parts(&[("a", 0)]), 5),
            Err(TxnError::ProducerFenced)
        );
        let again = ready(done.init_producer_id(60_000, None, 6, no_pid));
        assert_eq!((again.state, again.producer_epoch), (TxnState::Empty, 2));
    }

    #[test]
    fn a_retried_init_with_the_last_epoch_is_answered_again() {
        let m =
            ready(TxnMetadata::new("t", 7, 60_000, 0).init_producer_id(60_000, None, 1, no_pid));
        assert_eq!(m.producer_epoch, 1);
        // The producer never saw epoch 1: it retries naming epoch 0.
        let retry = ready(m.init_producer_id(60_000, Some((7, 0)), 2, no_pid));
        assert_eq!(retry.producer_epoch, 1);
        // Naming the current epoch bumps (KIP-360: recovering from an abortable error).
        let bumped = ready(m.init_producer_id(60_000, Some((7, 1)), 3, no_pid));
        assert_eq!(bumped.producer_epoch, 2);
        assert_eq!(
            m.init_producer_id(60_000, Some((9, 1)), 3, no_pid),
            Err(TxnError::ProducerFenced)
        );
    }

    #[test]
    fn an_exhausted_epoch_takes_a_new_producer_id() {
        let mut m = TxnMetadata::new("t", 7, 60_000, 0);
        m.producer_epoch = EPOCH_MAX;
        let next = ready(m.init_producer_id(60_000, None, 1, || 99));
        assert_eq!((next.producer_id, next.producer_epoch), (99, 0));
    }

    #[test]
    fn a_transaction_times_out_and_is_aborted_with_a_bumped_epoch() {
        let m = TxnMetadata::new("t", 7, 1_000, 0);
        let open = m
            .add_partitions(7, 0, &parts(&[("a", 0)]), 100)
            .expect("add")
            .expect("changed");
        assert!(!open.timed_out(1_100));
        assert!(open.timed_out(1_101));
        let abort = open.abort_timed_out(1_101);
        assert_eq!(
            (abort.state, abort.producer_epoch),
            (TxnState::PrepareAbort, 1)
        );
        assert_eq!(
            abort.end_txn(7, 0, true, 1_102),
            Err(TxnError::ProducerFenced),
            "the producer that let it time out"
        );
    }

    #[test]
    fn timeouts_above_the_maximum_are_refused() {
        let max = crate::common::config::TRANSACTION_MAX_TIMEOUT_MS_DEFAULT as i32;
        assert_eq!(TxnMetadata::check_timeout(max, max), Ok(()));
        assert_eq!(
            TxnMetadata::check_timeout(max + 1, max),
            Err(TxnError::InvalidTransactionTimeout)
        );
        assert_eq!(
            TxnMetadata::check_timeout(0, max),
            Err(TxnError::InvalidTransactionTimeout)
        );
    }
}
