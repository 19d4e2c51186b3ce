//! The in-memory index of one group's log: each entry's term and the Kafka offsets it
//! occupies, so that raft-rs's `term()` and the high watermark are answered without I/O
//! (ARCHITECTURE.md, Replication and Offsets).
//!
//! Entries after the `base` are held one by one (term and Kafka end); entries from the
//! compaction point up to the base are *sealed*: only their term runs are kept, so a long
//! log costs memory per term change, not per entry. Sealed entries are committed and
//! applied (the store seals behind its applied index), so their Kafka offsets are no
//! longer asked for; the base's own Kafka end is kept.
//!
//! Invariant: `ends[k]` describes Raft index `base.index + 1 + k`; `ends[k].kafka_end` is
//! the Kafka offset just past every data entry up to and including that index, so Kafka
//! offsets are dense over the log and a no-op or configuration entry repeats its
//! predecessor's end. `sealed` holds the term runs `(first index, term)` of
//! `point.index + 1 ..= base.index`, first indexes increasing, the first one at
//! `point.index + 1` (empty when `base == point`). Terms never decrease along the log.

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
    sealed: Vec<(RaftIndex, RaftTerm)>,
    /// The last sealed entry, in the same shape as the point (the point when none is).
    base: CompactionPoint,
    ends: VecDeque<Indexed>,
}

impl LogIndex {
    /// An index whose log starts after `point`.
    pub fn new(point: CompactionPoint) -> Self {
        Self {
            point,
            sealed: Vec::new(),
            base: point,
            ends: VecDeque::new(),
        }
    }

    /// An index whose entries after `point` up to `base` are sealed with the term runs
    /// `runs` (as a log opened without reading those entries). Refuses runs that break
    /// the module invariant.
    pub fn sealed(
        point: CompactionPoint,
        runs: Vec<(RaftIndex, RaftTerm)>,
        base: CompactionPoint,
    ) -> Result<Self, StoreError> {
        let bad = |why| {
            Err(StoreError::MalformedEntry {
                index: base.index,
                why,
            })
        };
        if base.index < point.index || base.kafka_end < point.kafka_end {
            return bad("sealed base before the compaction point");
        }
        if base.index == point.index {
            if !runs.is_empty() || base != point {
                return bad("sealed runs without sealed entries");
            }
            return Ok(Self::new(point));
        }
        if runs.first().map(|r| r.0) != Some(RaftIndex(point.index.0 + 1)) {
            return bad("sealed runs do not start after the compaction point");
        }
        let ordered = runs.windows(2).all(|w| w[0].0 < w[1].0 && w[0].1 <= w[1].1);
        let last = runs[runs.len() - 1];
        if !ordered || runs[0].1 < point.term || last.0 > base.index || last.1 != base.term {
            return bad("sealed runs out of order or not ending at the base");
        }
        Ok(Self {
            point,
            sealed: runs,
            base,
            ends: VecDeque::new(),
        })
    }

    /// The compaction point.
    pub fn compaction_point(&self) -> CompactionPoint {
        self.point
    }

    /// The last sealed entry (the compaction point when none is sealed).
    pub fn base(&self) -> CompactionPoint {
        self.base
    }

    /// First index held as an entry (one past the compaction point).
    pub fn first_index(&self) -> RaftIndex {
        RaftIndex(self.point.index.0 + 1)
    }

    /// Last index in the log (the compaction point when the log holds no entry).
    pub fn last_index(&self) -> RaftIndex {
        RaftIndex(self.base.index.0 + self.ends.len() as u64)
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
            .map_or(self.base.kafka_end, |e| e.kafka_end)
    }

    /// Where `index` is: `Ok(None)` at or before the base (within the log), else its
    /// position in `ends`.
    fn position(&self, index: RaftIndex) -> Result<Option<usize>, StoreError> {
        if index < self.point.index {
            let first = self.first_index();
            return Err(StoreError::Compacted { index, first });
        }
        if index <= self.base.index {
            return Ok(None);
        }
        let last = self.last_index();
        if index > last {
            return Err(StoreError::Unavailable { index, last });
        }
        let k = usize::try_from(index.0 - self.base.index.0 - 1)
            .expect("an index within the log fits in usize: ends is a VecDeque");
        Ok(Some(k))
    }

    /// Term of `index` (the compaction point's term at the compaction point).
    pub fn term_of(&self, index: RaftIndex) -> Result<RaftTerm, StoreError> {
        Ok(match self.position(index)? {
            Some(k) => self.ends[k].term,
            None if index == self.point.index => self.point.term,
            None => {
                let runs = self.sealed.partition_point(|&(start, _)| start <= index);
                self.sealed[runs - 1].1
            }
        })
    }

    /// Kafka offset just past the data up to and including `index`. `Sealed` for an entry
    /// before the base.
    pub fn kafka_end_at(&self, index: RaftIndex) -> Result<KafkaOffset, StoreError> {
        match self.position(index)? {
            Some(k) => Ok(self.ends[k].kafka_end),
            None if index == self.base.index => Ok(self.base.kafka_end),
            None if index == self.point.index => Ok(self.point.kafka_end),
            None => Err(StoreError::Sealed {
                index,
                base: self.base.index,
            }),
        }
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
        let prev_term = self.ends.back().map_or(self.base.term, |e| e.term);
        assert!(
            term >= prev_term,
            "term went back at {index:?}: {term:?} < {prev_term:?}"
        );
        let kafka_end = KafkaOffset(self.log_end_offset().0 + i64::from(record_count));
        self.ends.push_back(Indexed { term, kafka_end });
        Ok(())
    }

    /// Removes every entry from `index` on (`index` past the last entry is a no-op).
    /// Sealed entries are committed and are never removed.
    pub fn truncate_from(&mut self, index: RaftIndex) -> Result<(), StoreError> {
        if index <= self.point.index {
            let first = self.first_index();
            return Err(StoreError::Compacted { index, first });
        }
        if index <= self.base.index {
            return Err(StoreError::Sealed {
                index,
                base: self.base.index,
            });
        }
        let keep = index.0 - self.base.index.0 - 1;
        self.ends
            .truncate(usize::try_from(keep).unwrap_or(usize::MAX));
        Ok(())
    }

    /// Seals the entries up to and including `through` (clamped to the last index): their
    /// Kafka offsets are forgotten, their terms kept as runs.
    pub fn seal_through(&mut self, through: RaftIndex) {
        let through = through.min(self.last_index());
        while self.base.index < through {
            let Some(e) = self.ends.pop_front() else {
                break;
            };
            let index = RaftIndex(self.base.index.0 + 1);
            if self.sealed.last().is_none_or(|&(_, t)| t != e.term) {
                self.sealed.push((index, e.term));
            }
            self.base = CompactionPoint {
                index,
                term: e.term,
                kafka_end: e.kafka_end,
            };
        }
    }

    /// Drops the entries up to and including `through`, which becomes the compaction point.
    /// `Sealed` when `through` is a sealed entry, whose Kafka offset is not held: see
    /// `compact_to`.
    pub fn compact_through(&mut self, through: RaftIndex) -> Result<(), StoreError> {
        let term = self.term_of(through)?;
        let kafka_end = self.kafka_end_at(through)?;
        self.compact_to(CompactionPoint {
            index: through,
            term,
            kafka_end,
        })
    }

    /// Drops the entries up to and including `point.index`, which becomes the compaction
    /// point with the given Kafka end (the caller's, for a sealed entry). Refused outside
    /// the log or when the term disagrees.
    pub fn compact_to(&mut self, point: CompactionPoint) -> Result<(), StoreError> {
        let term = self.term_of(point.index)?;
        if term != point.term || point.index < self.point.index {
            return Err(StoreError::MalformedEntry {
                index: point.index,
                why: "compaction point disagrees with the log",
            });
        }
        if point.index >= self.base.index {
            let drop = usize::try_from(point.index.0 - self.base.index.0)
                .expect("a position within the log fits in usize");
            self.ends.drain(..drop);
            self.sealed.clear();
            self.base = point;
        } else {
            let next = RaftIndex(point.index.0 + 1);
            let next_term = self.term_of(next)?;
            self.sealed.retain(|&(start, _)| start > next);
            self.sealed.insert(0, (next, next_term));
        }
        self.point = point;
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

    #[test]
    fn sealed_entries_keep_terms_and_the_base_offset() {
        // Terms 1 1 2 2 2 3, one record each.
        let entries = [(1, 1), (1, 1), (2, 1), (2, 1), (2, 1), (3, 1)];
        let dense = build(CompactionPoint::default(), &entries);
        let mut ix = dense.clone();
        ix.seal_through(RaftIndex(4));
        assert_eq!(ix.base().index, RaftIndex(4));
        for i in 0..=6 {
            assert_eq!(
                ix.term_of(RaftIndex(i)),
                dense.term_of(RaftIndex(i)),
                "term {i}"
            );
        }
        for i in [0, 4, 5, 6] {
            assert_eq!(
                ix.kafka_end_at(RaftIndex(i)),
                dense.kafka_end_at(RaftIndex(i))
            );
        }
        let sealed = Err(StoreError::Sealed {
            index: RaftIndex(2),
            base: RaftIndex(4),
        });
        assert_eq!(ix.kafka_end_at(RaftIndex(2)), sealed);
        assert_eq!(ix.kafka_base_of(RaftIndex(5)), Ok(KafkaOffset(4)));
        assert!(
            ix.truncate_from(RaftIndex(4)).is_err(),
            "sealed is committed"
        );
        ix.truncate_from(RaftIndex(6)).expect("after the base");
        ix.push(RaftIndex(6), RaftTerm(4), 2).expect("contiguous");
        check(&ix, 6, Ok((4, 7)));
        assert_eq!(ix.log_end_offset(), KafkaOffset(7));
        // Sealing past the end stops at the last entry.
        ix.seal_through(RaftIndex(99));
        assert_eq!(
            (ix.base().index, ix.log_end_offset()),
            (RaftIndex(6), KafkaOffset(7))
        );
        check(&ix, 6, Ok((4, 7)));
        assert_eq!(ix.term_of(RaftIndex(3)), Ok(RaftTerm(2)));
    }

    #[test]
    fn compaction_inside_the_sealed_entries_takes_the_callers_offset() {
        let entries = [(1, 1), (1, 1), (2, 1), (2, 1), (2, 1), (3, 1)];
        let mut ix = build(CompactionPoint::default(), &entries);
        ix.seal_through(RaftIndex(5));
        assert!(ix.compact_through(RaftIndex(3)).is_err(), "offset not held");
        let wrong = CompactionPoint {
            index: RaftIndex(3),
            term: RaftTerm(1),
            kafka_end: KafkaOffset(3),
        };
        assert!(ix.compact_to(wrong).is_err(), "term disagrees");
        let point = CompactionPoint {
            term: RaftTerm(2),
            ..wrong
        };
        ix.compact_to(point).expect("compacts");
        assert_eq!(ix.first_index(), RaftIndex(4));
        check(&ix, 3, Ok((2, 3)));
        assert_eq!(ix.term_of(RaftIndex(4)), Ok(RaftTerm(2)));
        check(&ix, 5, Ok((2, 5)));
        check(&ix, 6, Ok((3, 6)));
        // Past the base: the sealed runs go.
        ix.compact_through(RaftIndex(6)).expect("compacts");
        assert_eq!(
            (ix.first_index(), ix.last_index()),
            (RaftIndex(7), RaftIndex(6))
        );
        check(&ix, 6, Ok((3, 6)));
    }

    #[test]
    fn a_sealed_index_is_built_from_term_runs() {
        let point = CompactionPoint {
            index: RaftIndex(10),
            term: RaftTerm(2),
            kafka_end: KafkaOffset(100),
        };
        let base = CompactionPoint {
            index: RaftIndex(20),
            term: RaftTerm(3),
            kafka_end: KafkaOffset(150),
        };
        let runs = vec![(RaftIndex(11), RaftTerm(2)), (RaftIndex(15), RaftTerm(3))];
        let mut ix = LogIndex::sealed(point, runs.clone(), base).expect("valid");
        assert_eq!(ix.term_of(RaftIndex(14)), Ok(RaftTerm(2)));
        assert_eq!(ix.term_of(RaftIndex(15)), Ok(RaftTerm(3)));
        ix.push(RaftIndex(21), RaftTerm(3), 5)
            .expect("after the base");
        check(&ix, 21, Ok((3, 155)));
        for (runs, base) in [
            (vec![(RaftIndex(12), RaftTerm(2))], base),
            (vec![(RaftIndex(11), RaftTerm(1))], base),
            (
                vec![(RaftIndex(11), RaftTerm(3)), (RaftIndex(15), RaftTerm(2))],
                base,
            ),
            (
                runs.clone(),
                CompactionPoint {
                    term: RaftTerm(4),
                    ..base
                },
            ),
            (Vec::new(), base),
        ] {
            assert!(LogIndex::sealed(point, runs, base).is_err());
        }
        let empty = LogIndex::sealed(point, Vec::new(), point).expect("nothing sealed");
        assert_eq!(empty.last_index(), RaftIndex(10));
    }
}
