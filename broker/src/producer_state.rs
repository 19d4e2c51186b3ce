//! Idempotent-producer state of one partition: per producer id, its epoch and the last
//! `BATCHES_PER_PRODUCER` batches' sequence ranges and offsets (ARCHITECTURE.md, Kafka
//! gateway). Pure: the partition calls `check` before appending and `record` after, with
//! no await in between, and replays the log through `record` on open.
//!
//! Invariant: for each producer, `batches` holds at most `BATCHES_PER_PRODUCER` entries in
//! append order, all of the current epoch, with consecutive sequence ranges.

use std::collections::{HashMap, VecDeque};

use crate::errors::KafkaError;

/// Batches remembered per producer (Kafka's `max.in.flight.requests.per.connection` cap
/// for idempotence is 5).
pub const BATCHES_PER_PRODUCER: usize = 5;
/// Base offset of a batch recorded when it was proposed to Raft, before its commit
/// assigned its offset (cluster mode: pipelined batches are checked against it).
pub const PENDING_OFFSET: i64 = -1;
/// Producers remembered per partition; the least recently written is forgotten beyond
/// this (it then restarts like an unknown producer). Bounds memory per partition.
pub const PRODUCERS_PER_PARTITION_MAX: usize = 100_000;

/// One remembered batch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Batch {
    first_seq: i32,
    last_seq: i32,
    base_offset: i64,
}

#[derive(Clone, Debug)]
struct Producer {
    epoch: i16,
    batches: VecDeque<Batch>,
    last_write: u64,
}

/// What to do with an incoming batch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Append it.
    Append,
    /// A retry of a batch already in the log at this base offset: answer, do not append.
    Duplicate {
        /// The original base offset.
        base_offset: i64,
    },
}

/// All producers of a partition.
#[derive(Debug, Default)]
pub struct ProducerStates {
    producers: HashMap<i64, Producer>,
    clock: u64,
}

/// The sequence after `seq` (sequences wrap at i32::MAX to 0, as Kafka's do).
fn next_seq(seq: i32) -> i32 {
    if seq == i32::MAX {
        0
    } else {
        seq + 1
    }
}

impl ProducerStates {
    /// Decides whether a batch from `producer_id`/`epoch` with sequences
    /// `first_seq..=last_seq` is appended, answered as a duplicate, or refused.
    pub fn check(
        &self,
        producer_id: i64,
        epoch: i16,
        first_seq: i32,
        last_seq: i32,
    ) -> Result<Verdict, KafkaError> {
        let Some(p) = self.producers.get(&producer_id) else {
            // Unknown producer (new, or its state was lost to retention): accept.
            return Ok(Verdict::Append);
        };
        if epoch < p.epoch {
            return Err(KafkaError::InvalidProducerEpoch);
        }
        if epoch > p.epoch {
            return if first_seq == 0 {
                Ok(Verdict::Append)
            } else {
                Err(KafkaError::OutOfOrderSequence)
            };
        }
        if let Some(b) = p
            .batches
            .iter()
            .find(|b| b.first_seq == first_seq && b.last_seq == last_seq)
        {
            return Ok(Verdict::Duplicate {
                base_offset: b.base_offset,
            });
        }
        match p.batches.back() {
            Some(last) if first_seq == next_seq(last.last_seq) => Ok(Verdict::Append),
            None => Ok(Verdict::Append),
            Some(_) => Err(KafkaError::OutOfOrderSequence),
        }
    }

    /// Records an appended batch (also used to replay the log on open).
    /// Sets the base offset of a batch recorded as pending once it committed.
    pub fn settle(&mut self, producer_id: i64, first_seq: i32, base_offset: i64) {
        if let Some(b) = self
            .producers
            .get_mut(&producer_id)
            .and_then(|p| p.batches.iter_mut().find(|b| b.first_seq == first_seq))
        {
            b.base_offset = base_offset;
        }
    }

    /// Forgets a pending batch that did not commit, and every batch after it.
    pub fn forget_from(&mut self, producer_id: i64, first_seq: i32) {
        if let Some(p) = self.producers.get_mut(&producer_id) {
            if let Some(k) = p.batches.iter().position(|b| b.first_seq == first_seq) {
                p.batches.truncate(k);
            }
        }
    }

    pub fn record(
        &mut self,
        producer_id: i64,
        epoch: i16,
        first_seq: i32,
        last_seq: i32,
        base_offset: i64,
    ) {
        self.clock += 1;
        let clock = self.clock;
        if !self.producers.contains_key(&producer_id)
            && self.producers.len() >= PRODUCERS_PER_PARTITION_MAX
        {
            if let Some(oldest) = self
                .producers
                .iter()
                .min_by_key(|(_, p)| p.last_write)
                .map(|(id, _)| *id)
            {
                self.producers.remove(&oldest);
            }
        }
        let p = self.producers.entry(producer_id).or_insert(Producer {
            epoch,
            batches: VecDeque::new(),
            last_write: clock,
        });
        if epoch != p.epoch {
            p.epoch = epoch;
            p.batches.clear();
        }
        if p.batches.len() == BATCHES_PER_PRODUCER {
            p.batches.pop_front();
        }
        p.batches.push_back(Batch {
            first_seq,
            last_seq,
            base_offset,
        });
        p.last_write = clock;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sequences_duplicates_and_epochs() {
        let mut s = ProducerStates::default();
        let check = |s: &ProducerStates, e, a, b| s.check(7, e, a, b);
        assert_eq!(check(&s, 0, 0, 4), Ok(Verdict::Append));
        s.record(7, 0, 0, 4, 100);
        assert_eq!(
            check(&s, 0, 0, 4),
            Ok(Verdict::Duplicate { base_offset: 100 })
        );
        assert_eq!(
            check(&s, 0, 6, 9),
            Err(KafkaError::OutOfOrderSequence),
            "gap"
        );
        assert_eq!(check(&s, 0, 5, 9), Ok(Verdict::Append));
        for k in 1..=6 {
            s.record(7, 0, 5 * k, 5 * k + 4, 100 + 5 * i64::from(k));
        }
        assert_eq!(
            check(&s, 0, 0, 4),
            Err(KafkaError::OutOfOrderSequence),
            "older than 5 batches"
        );
        assert_eq!(
            check(&s, 0, 30, 34),
            Ok(Verdict::Duplicate { base_offset: 130 })
        );
        assert_eq!(
            check(&s, 1, 3, 3),
            Err(KafkaError::OutOfOrderSequence),
            "new epoch starts at 0"
        );
        assert_eq!(check(&s, 1, 0, 0), Ok(Verdict::Append));
        s.record(7, 1, 0, 0, 200);
        assert_eq!(check(&s, 0, 35, 35), Err(KafkaError::InvalidProducerEpoch));
        assert_eq!(
            s.check(8, 0, 42, 42),
            Ok(Verdict::Append),
            "unknown producer"
        );
    }
}
