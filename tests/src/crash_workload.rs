//! The crash test's deterministic workload. Entry `i` of a run with seed `s` is a pure
//! function of `(s, i)`, and so is the number of entries appended per flush, so a child
//! restarted after SIGKILL continues the same log, and the parent recomputes every byte
//! that must have survived. Kafka offsets follow from the record counts: entry `i` starts
//! at the sum of the record counts of entries `1..i`.

use bytes::Bytes;
use strand_storage::{
    AppendEntry, FrameKind, KafkaOffset, Log, LogConfig, LogFrame, RaftIndex, RaftTerm,
};
use strand_wire::{BatchBuilder, RecordBatch};

use crate::seed::{mix, Rng};

/// Segment size: small, so a run of a few hundred milliseconds rolls segments and a kill
/// can land during a roll or while a closed segment is finalized.
pub const SEGMENT_BYTES: u64 = 256 * 1024;
/// fallocate step: larger than a segment, so an unfinished segment file carries zeros past
/// its logical end that recovery must treat as a clean end.
pub const PREALLOCATE_BYTES: u64 = 1024 * 1024;
/// Records per batch are drawn from `1..=RECORDS_PER_BATCH_MAX`.
pub const RECORDS_PER_BATCH_MAX: u64 = 8;
/// Entries per flush are drawn from `1..=ENTRIES_PER_FLUSH_MAX`.
pub const ENTRIES_PER_FLUSH_MAX: u64 = 8;
/// Most record values carry at most this many random bytes after their label...
pub const VALUE_BYTES_MAX: u64 = 300;
/// ...but one in `LARGE_VALUE_ONE_IN` carries up to this many, so some frames cross pages.
pub const LARGE_VALUE_BYTES_MAX: u64 = 6000;
/// See [`LARGE_VALUE_BYTES_MAX`].
pub const LARGE_VALUE_ONE_IN: u64 = 16;
/// Entries per Raft term: the term, and so the stored leader epoch, changes along the log.
pub const ENTRIES_PER_TERM: u64 = 250;
/// The crash child stops (with an error) once its log holds this much: a safety bound for a
/// child its parent failed to kill; a normal run writes a few MiB.
pub const LOG_BYTES_MAX: u64 = 512 * 1024 * 1024;
const TIMESTAMP_BASE_MS: i64 = 1_700_000_000_000;
/// Separates the per-flush stream from the per-entry stream of the same seed.
const ROUND_SALT: u64 = 0x0072_6f75_6e64;

/// The log configuration of the crash child and of the parent's check.
pub fn log_config() -> LogConfig {
    LogConfig {
        segment_bytes: SEGMENT_BYTES,
        preallocate_bytes: PREALLOCATE_BYTES,
        ..LogConfig::default()
    }
}

/// The term entry `index` is written in.
pub fn term_of(index: RaftIndex) -> RaftTerm {
    RaftTerm(1 + index.0 / ENTRIES_PER_TERM)
}

fn entry_rng(seed: u64, index: RaftIndex) -> Rng {
    Rng::new(mix(seed, index.0))
}

/// Records in entry `index`'s batch (its first draw, so this is cheap).
pub fn record_count(seed: u64, index: RaftIndex) -> u64 {
    1 + entry_rng(seed, index).below(RECORDS_PER_BATCH_MAX)
}

/// Entry `index`'s batch as a producer sends it (base offset 0, leader epoch -1). Every
/// value starts with `index=<i> record=<r>;` so a misplaced batch is recognisable by eye.
pub fn batch(seed: u64, index: RaftIndex) -> Bytes {
    let mut rng = entry_rng(seed, index);
    let records = 1 + rng.below(RECORDS_PER_BATCH_MAX);
    let ts = TIMESTAMP_BASE_MS + i64::try_from(index.0).expect("test index fits i64") * 10;
    let mut b = BatchBuilder::new(ts);
    let mut value = Vec::new();
    for r in 0..records {
        let len = if rng.one_in(LARGE_VALUE_ONE_IN) {
            rng.below(LARGE_VALUE_BYTES_MAX + 1)
        } else {
            rng.below(VALUE_BYTES_MAX + 1)
        };
        value.clear();
        value.extend_from_slice(format!("index={} record={r};", index.0).as_bytes());
        let label = value.len();
        value.resize(
            label + usize::try_from(len).expect("value length fits usize"),
            0,
        );
        rng.fill(&mut value[label..]);
        let key = format!("k{}", rng.below(16));
        let key = (r % 3 != 0).then_some(key.as_bytes());
        b.push(
            ts + i64::try_from(r).expect("record number fits i64"),
            key,
            Some(&value),
            &[],
        );
    }
    b.build()
}

/// Entry `index` to append.
pub fn entry(seed: u64, index: RaftIndex) -> AppendEntry {
    AppendEntry {
        term: term_of(index),
        kind: FrameKind::Data,
        body: batch(seed, index),
    }
}

/// Entry `index`'s body as the log stores it: base offset and leader epoch rewritten
/// (ARCHITECTURE.md, Storage).
pub fn stored_body(seed: u64, index: RaftIndex, base_offset: KafkaOffset) -> Bytes {
    let mut b = batch(seed, index).to_vec();
    strand_wire::set_base_offset(&mut b, base_offset.0).expect("a built batch has a header");
    let epoch = i32::try_from(term_of(index).0).expect("test terms fit i32");
    strand_wire::set_partition_leader_epoch(&mut b, epoch).expect("a built batch has a header");
    Bytes::from(b)
}

/// Entries appended before the flush that starts at `first` (1..=ENTRIES_PER_FLUSH_MAX).
pub fn entries_in_round(seed: u64, first: RaftIndex) -> u64 {
    1 + Rng::new(mix(seed ^ ROUND_SALT, first.0)).below(ENTRIES_PER_FLUSH_MAX)
}

/// Bytes per read while checking a log (bounds the check's memory).
pub const CHECK_READ_BYTES: usize = 1024 * 1024;

/// Checks `log` against the workload of `seed`: the whole log's shape (starts at index 1,
/// segment names and log end offset where the workload puts them), then every entry from
/// `from` to the end, read by Raft index (each frame is the workload's entry with its term
/// and Kafka offsets) and by Kafka offset (valid batches, dense offsets, the same bytes).
pub async fn check_entries(log: &Log, seed: u64, offsets: &mut Offsets, from: RaftIndex) {
    let last = log.last_index();
    assert_eq!(log.first_index(), RaftIndex(1), "log starts at index 1");
    assert_eq!(
        log.log_end_offset(),
        offsets.next_after(last),
        "log end offset of {last:?}"
    );
    for name in log.segment_names() {
        let index = name.raft_base_index;
        assert_eq!(
            name.kafka_base_offset,
            offsets.base_of(index),
            "segment {}",
            name.stem()
        );
        assert_eq!(name.term, term_of(index), "segment {}", name.stem());
    }
    let mut next = from;
    while next <= last {
        let frames = log.read_entries(next, last.next(), CHECK_READ_BYTES).await;
        let frames = frames.unwrap_or_else(|e| panic!("read entries from {next:?}: {e}"));
        assert!(!frames.is_empty(), "no frame at {next:?} of ..={last:?}");
        for f in &frames {
            check_frame(seed, offsets, next, f);
            next = next.next();
        }
    }
    check_batches_by_offset(log, seed, offsets, from).await;
}

/// The frame at `index` is the workload's entry, with its offsets and term.
fn check_frame(seed: u64, offsets: &mut Offsets, index: RaftIndex, f: &LogFrame) {
    let h = &f.header;
    assert_eq!(h.index, index, "raft indexes are dense");
    assert_eq!(h.kind, FrameKind::Data, "kind of {index:?}");
    assert_eq!(h.term, term_of(index), "term of {index:?}");
    let base = offsets.base_of(index);
    assert_eq!(h.kafka_base_offset, base, "kafka base offset of {index:?}");
    assert_eq!(
        h.next_offset(),
        offsets.next_after(index),
        "offset count of {index:?}"
    );
    let batch = RecordBatch::parse(f.body.clone()).expect("stored batch parses");
    batch
        .validate()
        .unwrap_or_else(|e| panic!("stored batch of {index:?} invalid: {e}"));
    assert!(
        f.body == stored_body(seed, index, base),
        "body of {index:?} differs"
    );
}

/// Reads every batch from entry `index` on by Kafka offset: dense offsets, valid batches,
/// the workload's bytes.
async fn check_batches_by_offset(log: &Log, seed: u64, offsets: &mut Offsets, index: RaftIndex) {
    let end = log.log_end_offset();
    let (mut from, mut index) = (offsets.base_of(index), index);
    while from < end {
        let r = log.read(from, end, CHECK_READ_BYTES, true).await;
        let r = r.unwrap_or_else(|e| panic!("read from {from:?}: {e}"));
        assert!(!r.batches.is_empty(), "no batch at {from:?} of ..{end:?}");
        for body in r.batches {
            let batch = RecordBatch::parse(body.clone()).expect("batch parses");
            batch.validate().expect("batch valid");
            assert_eq!(batch.base_offset(), from.0, "kafka offsets are dense");
            assert!(
                body == stored_body(seed, index, from),
                "batch at {from:?} differs"
            );
            from = KafkaOffset(batch.last_offset() + 1);
            assert_eq!(from, offsets.next_after(index), "last offset of {index:?}");
            index = index.next();
        }
    }
    assert_eq!(index, log.last_index().next(), "one batch per entry");
}

/// Kafka offsets of the workload, computed on demand: `next_after(i)` is one past the last
/// offset of entry `i` (`next_after(0)` is 0).
#[derive(Debug)]
pub struct Offsets {
    seed: u64,
    // Invariant: next[i] = sum of record counts of entries 1..=i.
    next: Vec<KafkaOffset>,
}

impl Offsets {
    /// For the workload of `seed`.
    pub fn new(seed: u64) -> Offsets {
        Offsets {
            seed,
            next: vec![KafkaOffset(0)],
        }
    }

    /// One past the last offset of entry `index`.
    pub fn next_after(&mut self, index: RaftIndex) -> KafkaOffset {
        let want = usize::try_from(index.0).expect("test index fits usize");
        while self.next.len() <= want {
            let i = RaftIndex(self.next.len() as u64);
            let prev = self.next[self.next.len() - 1];
            let count = i64::try_from(record_count(self.seed, i)).expect("count fits i64");
            self.next.push(KafkaOffset(prev.0 + count));
        }
        self.next[want]
    }

    /// First offset of entry `index` (>= 1).
    pub fn base_of(&mut self, index: RaftIndex) -> KafkaOffset {
        assert!(index.0 >= 1, "raft indexes start at 1");
        self.next_after(RaftIndex(index.0 - 1))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn workload_is_deterministic_and_valid() {
        for i in 1..50 {
            let index = RaftIndex(i);
            assert_eq!(batch(9, index), batch(9, index));
            let b = RecordBatch::parse(stored_body(9, index, KafkaOffset(77))).expect("parses");
            b.validate().expect("valid");
            assert_eq!(b.base_offset(), 77);
            assert_eq!(b.record_count() as u64, record_count(9, index));
        }
        let mut o = Offsets::new(9);
        let total: u64 = (1..=10).map(|i| record_count(9, RaftIndex(i))).sum();
        assert_eq!(o.next_after(RaftIndex(10)).0 as u64, total);
        assert_eq!(o.base_of(RaftIndex(1)), KafkaOffset(0));
    }
}
