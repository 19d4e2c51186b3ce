//! Idempotent-producer state of one partition: per producer id, its epoch and the last
//! `BATCHES_PER_PRODUCER` batches' sequence ranges and offsets (ARCHITECTURE.md, Kafka
//! gateway). Pure: the partition calls `check` before appending and `record` after, with
//! no await in between, and replays the log through `record` on open.
//!
//! Invariant: for each producer, `batches` holds at most `BATCHES_PER_PRODUCER` entries in
//! append order, all of the current epoch, with consecutive sequence ranges. `by_age` maps
//! each producer's `last_write` to its id, one entry per producer (eviction of the least
//! recently written at the cap is a lookup, not a scan).

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};

use crate::common::errors::KafkaError;

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
    /// A transaction marker set this epoch and no batch followed yet: the next batch
    /// must start at sequence 0 (Kafka's check for a producer with no sequence yet).
    awaiting_first: bool,
}

/// Encoded bytes of a producer without batches (id, epoch, batch count).
const PRODUCER_BYTES_MIN: usize = 8 + 2 + 1;

/// Why an encoded producer state was refused.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum StateDecodeError {
    /// The bytes ended inside a field.
    #[error("producer state truncated")]
    Truncated,
    /// A producer count beyond the limit or the bytes left.
    #[error("producer count {0} is beyond the limit or the bytes left")]
    Count(usize),
    /// A producer with a negative id, too many batches, a negative offset or sequence,
    /// or listed twice.
    #[error("producer {0} is malformed")]
    Producer(i64),
}

/// Takes `N` bytes from the front of `buf`.
fn take<const N: usize>(buf: &mut &[u8]) -> Result<[u8; N], StateDecodeError> {
    let (head, rest) = buf
        .split_first_chunk::<N>()
        .ok_or(StateDecodeError::Truncated)?;
    *buf = rest;
    Ok(*head)
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
#[derive(Clone, Debug, Default)]
pub struct ProducerStates {
    producers: HashMap<i64, Producer>,
    by_age: BTreeMap<u64, i64>,
    clock: u64,
}

/// Idempotence fields of a batch: (producer id, epoch, first sequence, last sequence);
/// `None` for a batch without a producer id, and for a control batch (a transaction
/// marker has no sequence: Kafka checks only its epoch).
pub fn batch_ids(view: &strand_wire::RecordBatch) -> Option<(i64, i16, i32, i32)> {
    let pid = view.producer_id();
    if pid < 0 || view.attributes().is_control() {
        return None;
    }
    let first = view.base_sequence();
    let last = (i64::from(first) + i64::from(view.last_offset_delta())) % (i64::from(i32::MAX) + 1);
    Some((
        pid,
        view.producer_epoch(),
        first,
        i32::try_from(last).unwrap_or(0),
    ))
}

/// The sequence after `seq` (sequences wrap at i32::MAX to 0, as Kafka's do).
fn next_seq(seq: i32) -> i32 {
    if seq == i32::MAX {
        0
    } else {
        seq + 1
    }
}

/// What DescribeProducers shows of one producer of a partition.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProducerView {
    /// Producer id.
    pub producer_id: i64,
    /// Its epoch.
    pub epoch: i16,
    /// The last sequence of its newest remembered batch (-1: none since a marker).
    pub last_sequence: i32,
}

impl ProducerStates {
    /// Every remembered producer, by id.
    pub fn views(&self) -> Vec<ProducerView> {
        let mut out: Vec<ProducerView> = self
            .producers
            .iter()
            .map(|(id, p)| ProducerView {
                producer_id: *id,
                epoch: p.epoch,
                last_sequence: p.batches.back().map_or(-1, |b| b.last_seq),
            })
            .collect();
        out.sort_by_key(|v| v.producer_id);
        out
    }

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
            None if p.awaiting_first && first_seq != 0 => Err(KafkaError::OutOfOrderSequence),
            None => Ok(Verdict::Append),
            Some(_) => Err(KafkaError::OutOfOrderSequence),
        }
    }

    /// The epoch `producer_id` last wrote at, if remembered.
    pub fn epoch_of(&self, producer_id: i64) -> Option<i16> {
        self.producers.get(&producer_id).map(|p| p.epoch)
    }

    /// Checks a transaction marker of `producer_id` at `epoch` (Kafka's
    /// `appendEndTxnMarker`): refused when the producer is known at a newer epoch, as a
    /// marker of a fenced producer or a stale coordinator.
    pub fn check_marker(&self, producer_id: i64, epoch: i16) -> Result<(), KafkaError> {
        match self.producers.get(&producer_id) {
            Some(p) if epoch < p.epoch => Err(KafkaError::InvalidProducerEpoch),
            _ => Ok(()),
        }
    }

    /// Records a transaction marker of `producer_id` at `epoch`: a newer epoch fences the
    /// older one (its batches are forgotten; the producer's next batch at the new epoch
    /// starts at sequence 0), and an unknown producer is remembered at that epoch.
    pub fn record_marker(&mut self, producer_id: i64, epoch: i16) {
        let known = self.producers.contains_key(&producer_id);
        let p = self.touch(producer_id, epoch);
        if !known || epoch > p.epoch {
            p.awaiting_first = true;
        }
        if epoch > p.epoch {
            p.epoch = epoch;
            p.batches.clear();
        }
    }

    /// The entry of `producer_id` (a new one at `epoch` when unknown, after forgetting the
    /// least recently written at the cap), marked as the most recently written.
    fn touch(&mut self, producer_id: i64, epoch: i16) -> &mut Producer {
        self.clock += 1;
        let clock = self.clock;
        if !self.producers.contains_key(&producer_id)
            && self.producers.len() >= PRODUCERS_PER_PARTITION_MAX
        {
            if let Some((_, oldest)) = self.by_age.pop_first() {
                self.producers.remove(&oldest);
            }
        }
        let p = self.producers.entry(producer_id).or_insert(Producer {
            epoch,
            batches: VecDeque::new(),
            last_write: clock,
            awaiting_first: false,
        });
        self.by_age.remove(&p.last_write);
        self.by_age.insert(clock, producer_id);
        p.last_write = clock;
        p
    }

    /// The producers remembered.
    pub fn ids(&self) -> HashSet<i64> {
        self.producers.keys().copied().collect()
    }

    /// Each producer's last batch by base offset (settled batches only): the log cleaner
    /// keeps those batches, emptied if need be, so sequence checks survive compaction.
    pub fn last_batch_offsets(&self) -> HashMap<i64, i64> {
        self.producers
            .iter()
            .filter_map(|(&id, p)| {
                p.batches
                    .back()
                    .filter(|b| b.base_offset != PENDING_OFFSET)
                    .map(|b| (id, b.base_offset))
            })
            .collect()
    }

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

    /// Appends the state to `out` (see `decode`): producers least recently written first,
    /// each as id, epoch, batch count and its batches. Pending batches (`PENDING_OFFSET`)
    /// are the caller's to avoid: a checkpoint holds committed batches only.
    pub fn encode(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&(self.by_age.len() as u32).to_be_bytes());
        let order = self
            .by_age
            .values()
            .filter_map(|id| self.producers.get(id).map(|p| (id, p)));
        for (id, p) in order {
            out.extend_from_slice(&id.to_be_bytes());
            out.extend_from_slice(&p.epoch.to_be_bytes());
            out.push(p.batches.len() as u8);
            for b in &p.batches {
                out.extend_from_slice(&b.first_seq.to_be_bytes());
                out.extend_from_slice(&b.last_seq.to_be_bytes());
                out.extend_from_slice(&b.base_offset.to_be_bytes());
            }
        }
    }

    /// Reads a state written by `encode`, checking every count against the bytes that
    /// remain and the limits before using it. Returns the state and the bytes after it.
    pub fn decode(mut buf: &[u8]) -> Result<(ProducerStates, &[u8]), StateDecodeError> {
        let count = u32::from_be_bytes(take(&mut buf)?) as usize;
        if count > PRODUCERS_PER_PARTITION_MAX || count * PRODUCER_BYTES_MIN > buf.len() {
            return Err(StateDecodeError::Count(count));
        }
        let mut states = ProducerStates::default();
        for _ in 0..count {
            let id = i64::from_be_bytes(take(&mut buf)?);
            let epoch = i16::from_be_bytes(take(&mut buf)?);
            let [n] = take::<1>(&mut buf)?;
            if usize::from(n) > BATCHES_PER_PRODUCER || id < 0 {
                return Err(StateDecodeError::Producer(id));
            }
            let mut batches = VecDeque::with_capacity(usize::from(n));
            for _ in 0..n {
                let b = Batch {
                    first_seq: i32::from_be_bytes(take(&mut buf)?),
                    last_seq: i32::from_be_bytes(take(&mut buf)?),
                    base_offset: i64::from_be_bytes(take(&mut buf)?),
                };
                if b.base_offset < 0 || b.first_seq < 0 || b.last_seq < 0 {
                    return Err(StateDecodeError::Producer(id));
                }
                batches.push_back(b);
            }
            states.clock += 1;
            // A checkpoint holds committed batches only, so a producer without any was
            // set by a transaction marker.
            let awaiting_first = batches.is_empty();
            let p = Producer {
                epoch,
                batches,
                last_write: states.clock,
                awaiting_first,
            };
            if states.producers.insert(id, p).is_some() {
                return Err(StateDecodeError::Producer(id));
            }
            states.by_age.insert(states.clock, id);
        }
        Ok((states, buf))
    }

    /// Records an appended batch (also used to replay the log).
    pub fn record(
        &mut self,
        producer_id: i64,
        epoch: i16,
        first_seq: i32,
        last_seq: i32,
        base_offset: i64,
    ) {
        let p = self.touch(producer_id, epoch);
        if epoch != p.epoch {
            p.epoch = epoch;
            p.batches.clear();
        }
        p.awaiting_first = false;
        if p.batches.len() == BATCHES_PER_PRODUCER {
            p.batches.pop_front();
        }
        p.batches.push_back(Batch {
            first_seq,
            last_seq,
            base_offset,
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_marker_with_a_newer_epoch_fences_the_older_one() {
        let mut s = ProducerStates::default();
        s.record(7, 0, 0, 4, 100);
        assert_eq!(s.check_marker(7, 0), Ok(()));
        s.record_marker(7, 1);
        assert_eq!(s.check(7, 0, 5, 9), Err(KafkaError::InvalidProducerEpoch));
        assert_eq!(s.check(7, 1, 5, 9), Err(KafkaError::OutOfOrderSequence));
        assert_eq!(
            s.check(7, 1, 0, 0),
            Ok(Verdict::Append),
            "sequence 0 at the new epoch"
        );
        assert_eq!(s.check_marker(7, 0), Err(KafkaError::InvalidProducerEpoch));
        // An unknown producer is remembered at the marker's epoch.
        s.record_marker(9, 3);
        assert_eq!(s.check(9, 2, 0, 0), Err(KafkaError::InvalidProducerEpoch));
        let mut bytes = Vec::new();
        s.encode(&mut bytes);
        let (back, _) = ProducerStates::decode(&bytes).expect("decodes");
        assert_eq!(
            back.check(9, 2, 0, 0),
            Err(KafkaError::InvalidProducerEpoch)
        );
    }

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

    #[test]
    fn the_least_recently_written_producer_is_forgotten_at_the_cap() {
        let mut s = ProducerStates::default();
        for pid in 0..PRODUCERS_PER_PARTITION_MAX as i64 {
            s.record(pid, 0, 0, 0, pid);
        }
        // Producer 0 writes again: producer 1 is now the least recently written.
        s.record(0, 0, 1, 1, 1_000_000);
        s.record(1 << 40, 0, 0, 0, 2_000_000);
        assert_eq!(s.producers.len(), PRODUCERS_PER_PARTITION_MAX);
        assert_eq!(s.by_age.len(), PRODUCERS_PER_PARTITION_MAX);
        assert!(!s.producers.contains_key(&1), "1 was forgotten");
        assert!(s.producers.contains_key(&0) && s.producers.contains_key(&(1 << 40)));
        let mut bytes = Vec::new();
        s.encode(&mut bytes);
        let (mut back, rest) = ProducerStates::decode(&bytes).expect("decodes");
        assert!(rest.is_empty());
        // The order survives the round trip: producer 2 goes next.
        back.record(1 << 41, 0, 0, 0, 3_000_000);
        assert!(!back.producers.contains_key(&2) && back.producers.contains_key(&3));
    }
}
