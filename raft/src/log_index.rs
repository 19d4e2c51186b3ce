//! The in-memory index of one group's log: each entry's term and the Kafka offsets it
//! occupies, so that raft-rs's `term()` and the high watermark are answered without I/O
//! (ARCHITECTURE.md, Replication and Offsets).
//!
//! Invariant: `ends[k]` describes Raft index `snapshot_index + 1 + k`; `ends[k].kafka_end`
//! is the Kafka offset just past every data entry up to and including that index, so
//! Kafka offsets are dense over the log and a no-op or configuration entry repeats its
//! predecessor's end. Terms never decrease along the log.

use std::collections::VecDeque;

use crate::error::StoreError;
use crate::types::{KafkaOffset, RaftIndex, RaftTerm};

/// One entry's indexed facts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Indexed {
    term: RaftTerm,
    kafka_end: KafkaOffset,
}

/// The compaction point: the last index no longer held as an entry.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CompactionPoint {
    /// Last compacted Raft index (0 when nothing was compacted).
    pub index: RaftIndex,
    /// Its term.
    pub term: RaftTerm,
    /// Kafka offset just past the data up to and including `index` (the log start offset).
    pub kafka_end: KafkaOffset,
}

/// Terms and Kafka offsets of a group's entries. See the module doc for the invariant.
#[derive(Clone, Debug, Default)]
pub struct LogIndex {
    // Invariant: see the module doc.
    point: CompactionPoint,
    ends: VecDeque<Indexed>,
}

impl LogIndex {
    /// An index whose log starts after `point`.
    pub fn new(point: CompactionPoint) -> Self {
        Self {
            point,
            ends: VecDeque::new(),
        }
    }

    /// The compaction point.
    pub fn compaction_point(&self) -> CompactionPoint {
        self.point
    }

    /// First index held as an entry (one past the compaction point).
    pub fn first_index(&self) -> RaftIndex {
        RaftIndex(self.point.index.0 + 1)
    }

    /// Last index in the log (the compaction point when the log holds no entry).
    pub fn last_index(&self) -> RaftIndex {
        RaftIndex(self.point.index.0 + self.ends.len() as u64)
    }

    /// Checks that `lo..hi` can be read: `Compacted` before the first entry, `Unavailable`
    /// past one after the last.
    pub fn check_range(&self, lo: RaftIndex, hi: RaftIndex) -> Result<(), StoreError> {
        let first = self.first_index();
        if lo < first {
            return Err(StoreError::Compacted { index: lo, first });
        }
        let last = self.last_index();
        if hi.0 > last.0 + 1 {
            return Err(StoreError::Unavailable { index: hi, last });
        }
        Ok(())
    }

    /// Next Kafka offset to assign (`log_end_offset`), counting uncommitted entries.
    pub fn log_end_offset(&self) -> KafkaOffset {
        self.ends
            .back()
            .map_or(self.point.kafka_end, |e| e.kafka_end)
    }

    fn position(&self, index: RaftIndex) -> Result<Option<usize>, StoreError> {
        if index == self.point.index {
            return Ok(None);
        }
        if index < self.point.index {
            let first = self.first_index();
            return Err(StoreError::Compacted { index, first });
        }
        let last = self.last_index();
        if index > last {
            return Err(StoreError::Unavailable { index, last });
        }
        let k = usize::try_from(index.0 - self.point.index.0 - 1)
            .expect("an index within the log fits in usize: ends is a VecDeque");
        Ok(Some(k))
    }

    /// Term of `index` (the compaction point's term at the compaction point).
    pub fn term_of(&self, index: RaftIndex) -> Result<RaftTerm, StoreError> {
        Ok(match self.position(index)? {
            None => self.point.term,
            Some(k) => self.ends[k].term,
        })
    }

    /// Kafka offset just past the data up to and including `index`.
    pub fn kafka_end_at(&self, index: RaftIndex) -> Result<KafkaOffset, StoreError> {
        Ok(match self.position(index)? {
            None => self.point.kafka_end,
            Some(k) => self.ends[k].kafka_end,
        })
    }

    /// Kafka base offset of the entry at `index` (where its records start).
    pub fn kafka_base_of(&self, index: RaftIndex) -> Result<KafkaOffset, StoreError> {
        if index <= self.point.index {
            let first = self.first_index();
            return Err(StoreError::Compacted { index, first });
        }
        self.kafka_end_at(RaftIndex(index.0 - 1))
    }

    /// Appends the entry at `index`, which must be `last_index() + 1`.
    pub fn push(
        &mut self,
        index: RaftIndex,
        term: RaftTerm,
        record_count: u32,
    ) -> Result<(), StoreError> {
        let last = self.last_index();
        if index.0 != last.0 + 1 {
            return Err(StoreError::NotContiguous { index, last });
        }
        let prev_term = self.ends.back().map_or(self.point.term, |e| e.term);
        assert!(
            term >= prev_term,
            "term went back at {index:?}: {term:?} < {prev_term:?}"
        );
        let kafka_end = KafkaOffset(self.log_end_offset().0 + i64::from(record_count));
        self.ends.push_back(Indexed { term, kafka_end });
        Ok(())
    }

    /// Removes every entry from `index` on (`index` past the last entry is a no-op).
    pub fn truncate_from(&mut self, index: RaftIndex) -> Result<(), StoreError> {
        if index <= self.point.index {
            let first = self.first_index();
            return Err(StoreError::Compacted { index, first });
        }
        let keep = index.0 - self.point.index.0 - 1;
        self.ends
            .truncate(usize::try_from(keep).unwrap_or(usize::MAX));
        Ok(())
    }

    /// Drops the entries up to and including `through`, which becomes the compaction point.
    pub fn compact_through(&mut self, through: RaftIndex) -> Result<(), StoreError> {
        let term = self.term_of(through)?;
        let kafka_end = self.kafka_end_at(through)?;
        let drop = usize::try_from(through.0 - self.point.index.0)
            .expect("a position within the log fits in usize");
        self.ends.drain(..drop);
        self.point = CompactionPoint {
            index: through,
            term,
            kafka_end,
        };
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Builds an index from `(term, record_count)` entries starting after `point`.
    fn build(point: CompactionPoint, entries: &[(u64, u32)]) -> LogIndex {
        let mut ix = LogIndex::new(point);
        for (k, &(term, count)) in entries.iter().enumerate() {
            let index = RaftIndex(point.index.0 + 1 + k as u64);
            ix.push(index, RaftTerm(term), count).expect("contiguous");
        }
        ix
    }

    fn check(ix: &LogIndex, index: u64, expected: Result<(u64, i64), StoreError>) {
        let got = ix
            .term_of(RaftIndex(index))
            .and_then(|t| Ok((t.0, ix.kafka_end_at(RaftIndex(index))?.0)));
        assert_eq!(got, expected, "index {index}");
    }

    #[test]
    fn offsets_are_dense_and_skip_non_data() {
        // no-op (0 records), 3 records, config (0), 2 records
        let ix = build(
            CompactionPoint::default(),
            &[(1, 0), (1, 3), (2, 0), (2, 2)],
        );
        check(&ix, 0, Ok((0, 0)));
        check(&ix, 1, Ok((1, 0)));
        check(&ix, 2, Ok((1, 3)));
        check(&ix, 3, Ok((2, 3)));
        check(&ix, 4, Ok((2, 5)));
        let last = RaftIndex(4);
        check(
            &ix,
            5,
            Err(StoreError::Unavailable {
                index: RaftIndex(5),
                last,
            }),
        );
        assert_eq!(ix.kafka_base_of(RaftIndex(4)), Ok(KafkaOffset(3)));
        assert_eq!(ix.log_end_offset(), KafkaOffset(5));
    }

    #[test]
    fn truncate_and_compact() {
        let mut ix = build(
            CompactionPoint::default(),
            &[(1, 1), (1, 1), (1, 1), (2, 1)],
        );
        ix.truncate_from(RaftIndex(3))
            .expect("above the compaction point");
        assert_eq!(ix.last_index(), RaftIndex(2));
        assert_eq!(ix.log_end_offset(), KafkaOffset(2));
        ix.compact_through(RaftIndex(1)).expect("within the log");
        let first = RaftIndex(2);
        check(
            &ix,
            0,
            Err(StoreError::Compacted {
                index: RaftIndex(0),
                first,
            }),
        );
        check(&ix, 1, Ok((1, 1)));
        check(&ix, 2, Ok((1, 2)));
        assert!(ix.push(RaftIndex(4), RaftTerm(3), 1).is_err());
        ix.push(RaftIndex(3), RaftTerm(3), 4).expect("contiguous");
        check(&ix, 3, Ok((3, 6)));
    }
}
