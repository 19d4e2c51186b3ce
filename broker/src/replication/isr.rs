//! Kafka's in-sync replica set (ISR) of a partition this node leads, from its Raft progress.
//!
//! Invariant: a replica leaves the set when the leader has not heard from it within an
//! election timeout, or when it has lacked committed entries for longer than
//! [`REPLICA_LAG_TIME_MAX`] (Kafka's `replica.lag.time.max.ms`); it returns only once it
//! has every committed entry again and is heard from (Kafka's hysteresis: out needs a lag,
//! in needs a catch-up). A new leader starts with every replica in the set, each lag clock
//! starting at the election, as Kafka keeps the ISR across leader changes.
//!
//! Raft commits with a majority whatever the set says: it is what Metadata reports
//! (`isr_nodes`), not a condition of `acks=all`.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use strand_raft::NodeId;

/// Kafka's `replica.lag.time.max.ms` default: how long an active replica may lack
/// committed entries before it leaves the in-sync set.
pub const REPLICA_LAG_TIME_MAX: Duration = Duration::from_secs(30);

/// One replica as the leader tracks it.
#[derive(Clone, Copy, Debug)]
struct Replica {
    in_sync: bool,
    /// Last time it had every committed entry (or the election).
    caught_up_at: Instant,
}

/// The in-sync set of one led partition. See the module doc.
#[derive(Debug, Default)]
pub struct IsrTracker {
    replicas: HashMap<NodeId, Replica>,
}

impl IsrTracker {
    /// Takes the leader's view of the other replicas at `now` (each: has every committed
    /// entry, heard from within an election timeout; see `MultiRaft::voter_progress`) and
    /// returns the node ids out of the set, sorted.
    pub fn update(&mut self, progress: &[(NodeId, bool, bool)], now: Instant) -> Vec<i32> {
        self.replicas
            .retain(|n, _| progress.iter().any(|(p, _, _)| p == n));
        let mut out = Vec::new();
        for &(node, caught_up, active) in progress {
            let r = self.replicas.entry(node).or_insert(Replica {
                in_sync: true,
                caught_up_at: now,
            });
            if caught_up {
                r.caught_up_at = now;
            }
            let lagged = now.saturating_duration_since(r.caught_up_at) > REPLICA_LAG_TIME_MAX;
            r.in_sync = if r.in_sync {
                active && !lagged
            } else {
                active && caught_up
            };
            if !r.in_sync {
                out.push(i32::try_from(node.0).unwrap_or(i32::MAX));
            }
        }
        out.sort_unstable();
        out
    }

    /// This node no longer leads: the next leadership starts afresh.
    pub fn reset(&mut self) {
        self.replicas.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: NodeId = NodeId(2);
    const B: NodeId = NodeId(3);

    #[test]
    fn a_new_leader_starts_with_every_replica_in_sync() {
        let mut t = IsrTracker::default();
        let now = crate::common::clock::now();
        assert!(t
            .update(&[(A, false, true), (B, true, true)], now)
            .is_empty());
    }

    #[test]
    fn a_silent_replica_leaves_at_once_and_returns_only_caught_up() {
        let mut t = IsrTracker::default();
        let now = crate::common::clock::now();
        t.update(&[(A, true, true), (B, true, true)], now);
        assert_eq!(
            t.update(&[(A, true, true), (B, false, false)], now),
            vec![3]
        );
        // Heard from again but still behind: stays out.
        assert_eq!(t.update(&[(A, true, true), (B, false, true)], now), vec![3]);
        assert!(t
            .update(&[(A, true, true), (B, true, true)], now)
            .is_empty());
    }

    #[test]
    fn an_active_replica_leaves_only_after_the_lag_time() {
        let mut t = IsrTracker::default();
        let start = crate::common::clock::now();
        t.update(&[(A, true, true)], start);
        let within = start + REPLICA_LAG_TIME_MAX;
        assert!(t.update(&[(A, false, true)], within).is_empty());
        let past = within + Duration::from_millis(1);
        assert_eq!(t.update(&[(A, false, true)], past), vec![2]);
    }

    #[test]
    fn reset_forgets_the_previous_leadership() {
        let mut t = IsrTracker::default();
        let now = crate::common::clock::now();
        assert_eq!(t.update(&[(A, false, false)], now), vec![2]);
        t.reset();
        assert!(t.update(&[(A, false, true)], now).is_empty());
    }
}
