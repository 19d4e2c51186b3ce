//! The transactions of one partition as its log shows them (Kafka's producer-state
//! transactions and aborted-transaction index): the open transaction of each producer (its
//! first offset), the transactions whose marker is not below the high watermark yet, and
//! the aborted ones. From them come the last stable offset (LSO) and the aborted list a
//! read_committed Fetch returns with its data.
//!
//! Invariants:
//! - It is fed every transactional batch of the log in offset order (`apply`), from the log
//!   start or from a checkpoint's state; non-transactional batches change nothing.
//! - The LSO is the least of the high watermark and the first offset of every transaction
//!   that is open or whose marker is not below the high watermark (as Kafka's
//!   `firstUnstableOffset`): it never passes the first record of a transaction whose
//!   outcome is not committed, and never moves backwards as batches are appended.
//! - `aborted` is ordered by marker offset.
//! - A decoded index has every count checked against the bytes before allocating.

use std::collections::{BTreeMap, VecDeque};

use strand_wire::{Marker, MarkerKind, RecordBatch};

use crate::common::cursor::Cursor;

/// Bytes of one open transaction when encoded: producer id and first offset.
const OPEN_BYTES: usize = 16;
/// Bytes of one aborted transaction when encoded: producer id, first and last offset.
const ABORTED_BYTES: usize = 24;

/// An aborted transaction: what a read_committed consumer skips (Fetch's
/// `aborted_transactions`: the producer's records from `first_offset` up to the marker).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AbortedTxn {
    /// The transaction's producer.
    pub producer_id: i64,
    /// Offset of its first batch in this partition.
    pub first_offset: i64,
    /// Offset of its abort marker.
    pub last_offset: i64,
}

/// Why an encoded index was refused.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum TxnDecodeError {
    /// The bytes end inside the index.
    #[error("transaction index truncated")]
    Truncated,
    /// A count larger than the bytes left can hold.
    #[error("transaction index count {0} larger than its bytes")]
    Count(usize),
    /// A negative offset or producer id, or aborted transactions out of order.
    #[error("transaction index entry out of range")]
    Range,
}

/// See the module doc.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TxnIndex {
    /// Producer id to the first offset of its open transaction.
    open: BTreeMap<i64, i64>,
    /// Ended transactions whose marker may not be committed yet: (first offset, marker).
    ending: VecDeque<(i64, i64)>,
    /// Aborted transactions, by marker offset.
    aborted: VecDeque<AbortedTxn>,
}

impl TxnIndex {
    /// Takes one batch of the log, stored at `base_offset`, into account. A control batch
    /// that is not a transaction marker changes nothing (Kafka's other control records).
    pub fn apply(&mut self, batch: &RecordBatch, base_offset: i64) {
        let a = batch.attributes();
        let pid = batch.producer_id();
        if !a.is_transactional() || pid < 0 {
            return;
        }
        let at = base_offset;
        if !a.is_control() {
            self.open.entry(pid).or_insert(at);
            return;
        }
        let Ok(marker) = Marker::of(batch) else {
            return;
        };
        // A marker with no data before it (e.g. sent again by a new coordinator) ends an
        // empty transaction at its own offset, as in Kafka.
        let first = self.open.remove(&pid).unwrap_or(at);
        self.ending.push_back((first, at));
        if marker.kind == MarkerKind::Abort {
            let t = AbortedTxn {
                producer_id: pid,
                first_offset: first,
                last_offset: at,
            };
            let i = self.aborted.partition_point(|x| x.last_offset <= at);
            self.aborted.insert(i, t);
        }
    }

    /// Forgets the ended transactions whose marker is below `high_watermark` (committed):
    /// they no longer hold the LSO back.
    pub fn settle(&mut self, high_watermark: i64) {
        self.ending.retain(|(_, marker)| *marker >= high_watermark);
    }

    /// The last stable offset under `high_watermark`.
    pub fn last_stable_offset(&self, high_watermark: i64) -> i64 {
        let open = self.open.values().copied().min();
        let ending = self
            .ending
            .iter()
            .filter(|(_, marker)| *marker >= high_watermark)
            .map(|(first, _)| *first)
            .min();
        [open, ending]
            .into_iter()
            .flatten()
            .fold(high_watermark, i64::min)
    }

    /// Whether any transaction is open (its marker not appended yet).
    pub fn has_open(&self) -> bool {
        !self.open.is_empty()
    }

    /// Open transactions: producer id and first offset, by producer id.
    pub fn open(&self) -> impl Iterator<Item = (i64, i64)> + '_ {
        self.open.iter().map(|(p, f)| (*p, *f))
    }

    /// The aborted transactions a Fetch of `[from, to)` returns: those whose marker is at
    /// or after `from` and whose first offset is before `to` (Kafka's
    /// `collectAbortedTxns`).
    pub fn aborted_between(&self, from: i64, to: i64) -> Vec<AbortedTxn> {
        let start = self.aborted.partition_point(|t| t.last_offset < from);
        self.aborted
            .iter()
            .skip(start)
            .filter(|t| t.first_offset < to)
            .copied()
            .collect()
    }

    /// Forgets the aborted transactions whose abort marker was at one of `markers`
    /// (ascending): log compaction removed their records and then their markers.
    pub fn forget_aborted(&mut self, markers: &[i64]) {
        self.aborted
            .retain(|t| markers.binary_search(&t.last_offset).is_err());
    }

    /// Drops what lies wholly below `log_start` (deleted by retention or DeleteRecords).
    pub fn trim_below(&mut self, log_start: i64) {
        while self
            .aborted
            .front()
            .is_some_and(|t| t.last_offset < log_start)
        {
            self.aborted.pop_front();
        }
        self.ending.retain(|(_, marker)| *marker >= log_start);
    }

    /// Appends the committed state (open and aborted transactions; `ending` is empty for a
    /// state of committed batches once settled) to `out`.
    pub fn encode(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&(self.open.len() as u32).to_be_bytes());
        for (pid, first) in &self.open {
            out.extend_from_slice(&pid.to_be_bytes());
            out.extend_from_slice(&first.to_be_bytes());
        }
        out.extend_from_slice(&(self.aborted.len() as u32).to_be_bytes());
        for t in &self.aborted {
            out.extend_from_slice(&t.producer_id.to_be_bytes());
            out.extend_from_slice(&t.first_offset.to_be_bytes());
            out.extend_from_slice(&t.last_offset.to_be_bytes());
        }
    }

    /// Reads what `encode` wrote; returns the index and the bytes after it.
    pub fn decode(bytes: &[u8]) -> Result<(TxnIndex, &[u8]), TxnDecodeError> {
        let mut r = Cursor::new(bytes);
        let mut idx = TxnIndex::default();
        let n = count(&mut r, OPEN_BYTES)?;
        for _ in 0..n {
            let (pid, first) = (i64_of(&mut r)?, i64_of(&mut r)?);
            if pid < 0 || first < 0 {
                return Err(TxnDecodeError::Range);
            }
            idx.open.insert(pid, first);
        }
        let n = count(&mut r, ABORTED_BYTES)?;
        idx.aborted.reserve(n);
        for _ in 0..n {
            let t = AbortedTxn {
                producer_id: i64_of(&mut r)?,
                first_offset: i64_of(&mut r)?,
                last_offset: i64_of(&mut r)?,
            };
            let ordered = idx
                .aborted
                .back()
                .is_none_or(|b| b.last_offset <= t.last_offset);
            if t.producer_id < 0 || t.first_offset < 0 || t.last_offset < t.first_offset || !ordered
            {
                return Err(TxnDecodeError::Range);
            }
            idx.aborted.push_back(t);
        }
        Ok((idx, r.rest()))
    }
}

fn i64_of(r: &mut Cursor<'_>) -> Result<i64, TxnDecodeError> {
    r.i64().ok_or(TxnDecodeError::Truncated)
}

/// A u32 count of entries of `entry_bytes` each, checked against the bytes left.
fn count(r: &mut Cursor<'_>, entry_bytes: usize) -> Result<usize, TxnDecodeError> {
    let n = r
        .take::<4>()
        .map(u32::from_be_bytes)
        .ok_or(TxnDecodeError::Truncated)?;
    if !r.fits(i64::from(n), entry_bytes) {
        return Err(TxnDecodeError::Count(n as usize));
    }
    Ok(n as usize)
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;
    use proptest::prelude::*;
    use strand_wire::{marker_batch, set_base_offset, Attributes, BatchHeader};

    /// A transactional data batch of `records` records of producer `pid` at `offset`.
    fn data(pid: i64, offset: i64, records: i32) -> RecordBatch {
        let mut b = strand_wire::BatchBuilder::new(0).producer(pid, 0, 0);
        for _ in 0..records {
            b.push(0, Some(b"k"), Some(b"v"), &[]);
        }
        let plain = RecordBatch::parse(b.build()).expect("batch");
        let header = BatchHeader {
            base_offset: offset,
            attributes: Attributes::from_raw(Attributes::TRANSACTIONAL),
            ..BatchHeader::of(&plain)
        };
        RecordBatch::parse(header.encode(&plain.as_bytes()[strand_wire::BATCH_HEADER_BYTES..]))
            .expect("batch")
    }

    fn marker(pid: i64, offset: i64, kind: MarkerKind) -> RecordBatch {
        let m = Marker {
            kind,
            coordinator_epoch: 0,
        };
        let mut b = marker_batch(pid, 0, m, 0).to_vec();
        set_base_offset(&mut b, offset).expect("header");
        RecordBatch::parse(Bytes::from(b)).expect("batch")
    }

    /// Applies a batch at the offset it carries.
    fn feed(t: &mut TxnIndex, b: RecordBatch) {
        t.apply(&b, b.base_offset());
    }

    #[test]
    fn the_lso_holds_at_an_open_transaction_until_its_marker_commits() {
        let mut t = TxnIndex::default();
        feed(&mut t, data(1, 10, 2)); // 10..11
        feed(&mut t, data(2, 12, 1)); // 12
        feed(&mut t, data(1, 13, 1)); // 13, same transaction
        assert_eq!(t.last_stable_offset(14), 10);
        feed(&mut t, marker(1, 14, MarkerKind::Commit));
        // The marker is appended, not committed: the LSO still waits for it.
        assert_eq!(t.last_stable_offset(14), 10);
        t.settle(15);
        assert_eq!(t.last_stable_offset(15), 12, "producer 2 is still open");
        feed(&mut t, marker(2, 15, MarkerKind::Abort));
        t.settle(16);
        assert_eq!(t.last_stable_offset(16), 16);
        assert!(!t.has_open());
        assert_eq!(
            t.aborted_between(0, 16),
            vec![AbortedTxn {
                producer_id: 2,
                first_offset: 12,
                last_offset: 15
            }]
        );
    }

    #[test]
    fn a_fetch_gets_the_aborted_transactions_overlapping_its_range() {
        let mut t = TxnIndex::default();
        for (pid, first, last) in [(1, 0, 5), (2, 3, 9), (3, 10, 12)] {
            feed(&mut t, data(pid, first, 1));
            feed(&mut t, marker(pid, last, MarkerKind::Abort));
        }
        let pids = |v: Vec<AbortedTxn>| v.iter().map(|a| a.producer_id).collect::<Vec<_>>();
        assert_eq!(pids(t.aborted_between(0, 100)), [1, 2, 3]);
        assert_eq!(
            pids(t.aborted_between(6, 100)),
            [2, 3],
            "marker 5 is before 6"
        );
        assert_eq!(pids(t.aborted_between(6, 10)), [2], "3 starts at the end");
        assert_eq!(pids(t.aborted_between(13, 100)), Vec::<i64>::new());
        t.trim_below(6);
        assert_eq!(pids(t.aborted_between(0, 100)), [2, 3]);
    }

    #[test]
    fn plain_batches_and_other_control_records_change_nothing() {
        let mut t = TxnIndex::default();
        let plain = strand_wire::BatchBuilder::new(0).producer(4, 0, 0);
        let mut plain = plain;
        plain.push(0, None, Some(b"v"), &[]);
        feed(&mut t, RecordBatch::parse(plain.build()).expect("batch"));
        assert_eq!(t, TxnIndex::default());
        assert_eq!(t.last_stable_offset(7), 7);
    }

    #[test]
    fn a_marker_without_data_ends_an_empty_transaction() {
        let mut t = TxnIndex::default();
        feed(&mut t, marker(9, 4, MarkerKind::Abort));
        t.settle(5);
        assert_eq!(t.last_stable_offset(5), 5);
        assert_eq!(t.aborted_between(0, 5).len(), 1);
    }

    #[test]
    fn counts_are_checked_before_allocating() {
        let mut b = Vec::new();
        b.extend_from_slice(&u32::MAX.to_be_bytes());
        assert_eq!(
            TxnIndex::decode(&b).map(|(t, _)| t),
            Err(TxnDecodeError::Count(u32::MAX as usize))
        );
    }

    proptest! {
        #[test]
        fn an_index_round_trips(events in proptest::collection::vec((0i64..6, any::<bool>(), any::<bool>()), 0..40)) {
            let mut t = TxnIndex::default();
            for (offset, (pid, is_marker, commit)) in events.into_iter().enumerate() {
                let offset = offset as i64;
                if is_marker {
                    let kind = if commit { MarkerKind::Commit } else { MarkerKind::Abort };
                    feed(&mut t, marker(pid, offset, kind));
                } else {
                    feed(&mut t, data(pid, offset, 1));
                }
            }
            t.settle(i64::MAX);
            let mut bytes = Vec::new();
            t.encode(&mut bytes);
            bytes.push(0xAB);
            let (back, rest) = TxnIndex::decode(&bytes).expect("decodes");
            prop_assert_eq!(rest, &[0xAB][..]);
            prop_assert_eq!(back, t);
        }

        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..256)) {
            let _ = TxnIndex::decode(&bytes);
        }
    }
}
