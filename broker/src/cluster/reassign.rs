//! Partition moves (Kafka's partition reassignment) on a cluster. The controller records a
//! move (`Command::ReassignPartition`); on every shard a loop looks at the moves of the
//! partitions it hosts, and where this node leads the partition's Raft group it takes the
//! next membership step (`Replicator::move_members`: new replicas join as learners, catch
//! up from the log, become voters while the replicas outside the target leave, leadership
//! moves into the target) and, once the group's voters are exactly the target, commits
//! `FinishReassignment`.
//!
//! Invariants: only the group's current leader changes its membership, one Raft
//! configuration change at a time; the metadata's replicas shrink to the target (and a
//! removed node deletes its copy) only after the group's voters are exactly the target, so
//! every member of the group keeps hosting it until it has left.

use std::cell::RefCell;
use std::collections::BTreeSet;
use std::rc::Rc;
use std::time::Duration;

use strand_raft::{GroupId, MembershipStep, RaftError};

use crate::cluster::metadata::Command;
use crate::cluster::ClusterHost;
use crate::runtime::task::sleep;

/// How often a shard looks at the moves of the partitions it leads.
pub const MOVE_CHECK_INTERVAL: Duration = Duration::from_millis(500);

/// Starts this shard's move loop (cluster mode).
pub fn spawn<H: ClusterHost>(shard: &Rc<H>) {
    let weak = Rc::downgrade(shard);
    crate::runtime::task::spawn_local(async move {
        // Groups whose move raft-rs or the log refused, reported once each.
        let refused: RefCell<BTreeSet<GroupId>> = RefCell::default();
        loop {
            sleep(MOVE_CHECK_INTERVAL).await;
            match weak.upgrade() {
                Some(s) if !s.stopping() => step(&s, &refused).await,
                _ => return,
            }
        }
    });
}

/// One look at every move of a partition this shard hosts.
async fn step<H: ClusterHost>(shard: &Rc<H>, refused: &RefCell<BTreeSet<GroupId>>) {
    let Some(rep) = shard.replicator() else {
        return;
    };
    let meta = shard.metadata();
    let mut finished = Vec::new();
    for (name, t) in &meta.topics {
        for (&p, m) in &t.moving {
            if t.shards.get(p as usize).map(|&s| s as usize) != Some(shard.shard_id()) {
                continue;
            }
            let group = GroupId(t.group_of(p));
            match rep.move_members(group, &m.target) {
                Ok(MembershipStep::Done) => finished.push(Command::FinishReassignment {
                    name: name.clone(),
                    partition: p,
                    target: m.target.clone(),
                }),
                Ok(MembershipStep::Proposed) => {
                    tracing::info!(topic = %name, partition = p, target = ?m.target,
                        "moving partition: proposed the next membership change");
                }
                Ok(MembershipStep::Transferring(to)) => {
                    tracing::info!(topic = %name, partition = p, to = to.0,
                        "moving partition: handing leadership to a target replica");
                }
                Ok(MembershipStep::Waiting(why)) => {
                    tracing::debug!(topic = %name, partition = p, why, "moving partition");
                }
                Err(RaftError::NotLeader { .. } | RaftError::UnknownGroup { .. }) => {}
                Err(e) => {
                    if refused.borrow_mut().insert(group) {
                        tracing::error!(topic = %name, partition = p, error = %e,
                            "cannot move partition (cancel the reassignment)");
                    }
                }
            }
        }
    }
    if finished.is_empty() {
        return;
    }
    let outcomes = crate::cluster::meta_commands(shard, finished.clone()).await;
    for (c, r) in finished.iter().zip(outcomes) {
        let Command::FinishReassignment {
            name, partition, ..
        } = c
        else {
            continue;
        };
        match r {
            Ok(()) => tracing::info!(topic = %name, partition, "partition move finished"),
            Err(e) => tracing::warn!(topic = %name, partition, error = %e,
                "partition move finished, not recorded yet"),
        }
    }
}
