//! The simulated network: batches in flight with a delivery time, and the faults the
//! simulator injects into them: drop, duplication, delay (which reorders), and cut links
//! (partitions). Single-threaded; all randomness from the run's `Prng`.
//!
//! Invariant: a batch is delivered at most at its scheduled time and only if its link is
//! up both when it was sent and when it arrives; `(time, seq)` keys make the order total.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use crate::seed::Prng;
use crate::transport::{MessageBatch, Transport};
use crate::types::NodeId;

/// Network fault rates and delays.
#[derive(Clone, Debug)]
pub struct NetworkFaults {
    /// Batches lost, per mille.
    pub drop_per_mille: u32,
    /// Batches delivered twice, per mille.
    pub duplicate_per_mille: u32,
    /// Batches held back by a long delay (reordering them), per mille.
    pub slow_per_mille: u32,
    /// Ordinary one-way delay range, in milliseconds.
    pub delay_ms: (u64, u64),
    /// Long delay range, in milliseconds.
    pub slow_delay_ms: (u64, u64),
}

impl NetworkFaults {
    /// A network that loses, duplicates and reorders a few percent of batches.
    pub fn lossy() -> Self {
        Self {
            drop_per_mille: 20,
            duplicate_per_mille: 10,
            slow_per_mille: 30,
            delay_ms: (1, 8),
            slow_delay_ms: (20, 300),
        }
    }

    /// A network that only delays (the liveness phase).
    pub fn reliable() -> Self {
        Self {
            drop_per_mille: 0,
            duplicate_per_mille: 0,
            slow_per_mille: 0,
            delay_ms: (1, 8),
            slow_delay_ms: (1, 8),
        }
    }
}

/// What a node's driver sends into: a queue the simulator drains after each turn.
#[derive(Debug, Default)]
pub struct SimTransport {
    sent: Vec<MessageBatch>,
}

impl SimTransport {
    /// Takes what was sent since the last call.
    pub fn take(&mut self) -> Vec<MessageBatch> {
        std::mem::take(&mut self.sent)
    }
}

impl Transport for SimTransport {
    fn send(&mut self, batch: MessageBatch) {
        self.sent.push(batch);
    }
}

/// See the module doc.
#[derive(Debug)]
pub struct Network {
    faults: NetworkFaults,
    in_flight: BTreeMap<(Duration, u64), MessageBatch>,
    next_seq: u64,
    /// Cut links, stored as (lower id, higher id): a cut is symmetric.
    cut: BTreeSet<(NodeId, NodeId)>,
}

fn link(a: NodeId, b: NodeId) -> (NodeId, NodeId) {
    (a.min(b), a.max(b))
}

impl Network {
    pub fn new(faults: NetworkFaults) -> Self {
        Self {
            faults,
            in_flight: BTreeMap::new(),
            next_seq: 0,
            cut: BTreeSet::new(),
        }
    }

    pub fn set_faults(&mut self, faults: NetworkFaults) {
        self.faults = faults;
    }

    /// Whether `a` and `b` can talk.
    pub fn connected(&self, a: NodeId, b: NodeId) -> bool {
        !self.cut.contains(&link(a, b))
    }

    pub fn cut(&mut self, a: NodeId, b: NodeId) {
        self.cut.insert(link(a, b));
    }

    pub fn heal(&mut self) {
        self.cut.clear();
    }

    /// Queues `batch` sent at `now`, applying the fault rates.
    pub fn send(&mut self, now: Duration, batch: MessageBatch, rng: &mut Prng) {
        if !self.connected(batch.from, batch.to) || rng.chance(self.faults.drop_per_mille) {
            return;
        }
        let copies = if rng.chance(self.faults.duplicate_per_mille) {
            2
        } else {
            1
        };
        for _ in 0..copies {
            let (lo, hi) = if rng.chance(self.faults.slow_per_mille) {
                self.faults.slow_delay_ms
            } else {
                self.faults.delay_ms
            };
            let at = now + Duration::from_millis(rng.range(lo, hi + 1));
            self.in_flight.insert((at, self.next_seq), batch.clone());
            self.next_seq += 1;
        }
    }

    /// When the next batch arrives.
    pub fn next_delivery(&self) -> Option<Duration> {
        self.in_flight.keys().next().map(|&(at, _)| at)
    }

    /// The next batch due at or before `now`, if its link is still up.
    pub fn deliver(&mut self, now: Duration) -> Option<MessageBatch> {
        loop {
            let entry = self.in_flight.first_entry()?;
            if entry.key().0 > now {
                return None;
            }
            let batch = entry.remove();
            if self.connected(batch.from, batch.to) {
                return Some(batch);
            }
        }
    }
}
