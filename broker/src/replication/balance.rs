//! Preferred-leader balancing: every `LEADER_BALANCE_INTERVAL` a shard hands the leadership
//! of the groups it leads but does not prefer back to their preferred replica (the first
//! in the placement) once that one is in sync, as Kafka's `auto.leader.rebalance.enable`
//! does, so leaders spread over the nodes again after a failover.
//!
//! Invariant: at most `LEADER_MOVES_PER_ROUND_MAX` transfers per round; only an in-sync
//! voter is offered the leadership.

use std::time::Duration;

use strand_raft::{GroupId, NodeId};

use super::Replicator;

/// How often a shard hands the leadership of its groups back to their preferred replicas
/// (Kafka: auto.leader.rebalance.enable, leader.imbalance.check.interval.seconds = 300).
pub const LEADER_BALANCE_INTERVAL: Duration = Duration::from_secs(10);
/// Most leaderships handed back per round: each transfer is an election whose votes are
/// fsynced on every replica, and thousands at once (after creating or restarting 10,000
/// partitions) stall the nodes long enough for check-quorum to depose their leaders.
pub const LEADER_MOVES_PER_ROUND_MAX: usize = 128;
impl Replicator {
    /// Hands leadership of every group this node leads but does not prefer to its
    /// preferred replica when that one is in sync, so leaders spread over the nodes again
    /// after a failover (placement spreads the preferred replicas).
    pub(super) fn balance_leaders(&self) {
        let moves: Vec<(GroupId, NodeId)> = {
            let d = self.driver.borrow();
            self.hosted
                .borrow()
                .iter()
                .filter(|(&g, h)| {
                    h.preferred != self.me && d.is_leader(g) && d.voter_in_sync(g, h.preferred)
                })
                .map(|(&g, h)| (g, h.preferred))
                .take(LEADER_MOVES_PER_ROUND_MAX)
                .collect()
        };
        if moves.is_empty() {
            return;
        }
        tracing::info!(
            groups = moves.len(),
            "handing leadership back to preferred replicas"
        );
        let mut d = self.driver.borrow_mut();
        for (g, to) in moves {
            d.transfer_leader(g, to);
        }
        drop(d);
        self.wake();
    }
}
