//! Moving leaderships on purpose:
//! - Preferred-leader balancing: every `LEADER_BALANCE_INTERVAL` a shard hands the
//!   leadership of the groups it leads but does not prefer back to their preferred replica
//!   (the first in the placement) once that one is in sync, as Kafka's
//!   `auto.leader.rebalance.enable` does, so leaders spread over the nodes again after a
//!   failover.
//! - Controlled shutdown (Kafka's `controlled.shutdown.enable`): a node told to stop first
//!   hands every leadership it can to an in-sync voter (its preferred replica when that one
//!   is), waiting at most `LEADERSHIP_DRAIN_TIMEOUT`, so its partitions change leader in an
//!   election round instead of after an election timeout, while it still answers clients
//!   (NOT_LEADER_OR_FOLLOWER sends them to the new leader).
//!
//! Invariant: at most `LEADER_MOVES_PER_ROUND_MAX` transfers per round; only an in-sync
//! voter is offered the leadership; a draining node is offered none back.

use std::collections::HashMap;
use std::time::Duration;

use strand_raft::{GroupId, NodeId, RaftTerm};

use super::Replicator;

/// How often a shard hands the leadership of its groups back to their preferred replicas
/// (Kafka: auto.leader.rebalance.enable, leader.imbalance.check.interval.seconds = 300).
pub const LEADER_BALANCE_INTERVAL: Duration = Duration::from_secs(10);
/// Most leaderships handed back per round: each transfer is an election whose votes are
/// fsynced on every replica, and thousands at once (after creating or restarting 10,000
/// partitions) stall the nodes long enough for check-quorum to depose their leaders.
pub const LEADER_MOVES_PER_ROUND_MAX: usize = 128;
/// Longest a stopping node waits for its leaderships to move before it stops anyway (the
/// rest then move by election, as after a crash).
pub const LEADERSHIP_DRAIN_TIMEOUT: Duration = Duration::from_secs(5);
/// How often a draining node looks again at the groups it still leads.
const LEADERSHIP_DRAIN_POLL: Duration = Duration::from_millis(20);

impl Replicator {
    /// Controlled shutdown (see the module doc): hands away, once each, every leadership
    /// this shard holds that an in-sync voter can take, and waits until each handover
    /// ended (the leadership moved, came back at a later term because that node stops too,
    /// or raft-rs gave the transfer up) or `LEADERSHIP_DRAIN_TIMEOUT` passed. Groups
    /// without such a voter (one replica, or the others behind) stay. Returns how many
    /// groups were still being handed away or could have been.
    pub async fn drain_leadership(&self) -> usize {
        self.draining.set(true);
        let started = crate::common::clock::now();
        // Each group handed away, with its term then: handed away once only, so nodes that
        // all stop at once do not pass leaderships round until the timeout.
        let mut handed: HashMap<GroupId, RaftTerm> = HashMap::new();
        loop {
            let (moves, waiting) = self.drain_moves(&handed);
            let timed_out = crate::common::clock::now() >= started + LEADERSHIP_DRAIN_TIMEOUT;
            if (moves.is_empty() && waiting == 0) || timed_out {
                let left = moves.len() + waiting;
                let waited_ms = started.elapsed().as_millis() as u64;
                if left > 0 {
                    tracing::warn!(
                        groups = left,
                        waited_ms,
                        "stopping with leaderships not handed away: they move by election"
                    );
                } else if !handed.is_empty() {
                    tracing::info!(
                        groups = handed.len(),
                        waited_ms,
                        "leaderships handed away before stopping"
                    );
                }
                return left;
            }
            {
                let mut d = self.driver.borrow_mut();
                for &(g, to) in &moves {
                    if let Some(term) = d.term(g) {
                        handed.insert(g, term);
                        d.transfer_leader(g, to);
                    }
                }
            }
            self.wake();
            crate::runtime::task::sleep(LEADERSHIP_DRAIN_POLL).await;
        }
    }

    /// The groups this shard leads and has not handed away yet, each with a voter in sync
    /// to take over (the preferred replica when it is one, else the first in sync); and
    /// how many handed away are still being transferred.
    fn drain_moves(&self, handed: &HashMap<GroupId, RaftTerm>) -> (Vec<(GroupId, NodeId)>, usize) {
        let d = self.driver.borrow();
        let hosted = self.hosted.borrow();
        let mut waiting = 0;
        let mut moves = Vec::new();
        for g in d.groups().filter(|&g| d.is_leader(g)) {
            if let Some(&term) = handed.get(&g) {
                waiting += usize::from(d.term(g) == Some(term) && d.transferring(g));
                continue;
            }
            let in_sync: Vec<NodeId> = d
                .voter_progress(g)
                .unwrap_or_default()
                .into_iter()
                .map(|(n, _, _)| n)
                .filter(|&n| n != self.me && d.voter_in_sync(g, n))
                .collect();
            let preferred = hosted.get(&g).map(|h| h.preferred);
            if let Some(to) = preferred
                .filter(|p| in_sync.contains(p))
                .or_else(|| in_sync.first().copied())
            {
                moves.push((g, to));
            }
        }
        (moves, waiting)
    }

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
