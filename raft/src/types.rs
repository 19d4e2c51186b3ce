//! Identifiers and positions used by the replication layer, as newtypes so that a Kafka
//! offset, a Raft index and a Raft term never mix (STYLE.md 3).
//!
//! `RaftIndex`, `RaftTerm` and `KafkaOffset` are `strand_wire::positions`' (the same types
//! `storage` uses: one definition, nothing to convert); the identifiers are this crate's.

use std::fmt;

/// A Strand node (a `strand` process) in the cluster; also the raft-rs peer id.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct NodeId(pub u64);

/// A shard (one core's event loop) of a node; internal RPC connections are per
/// (node, shard) pair (ARCHITECTURE.md, Replication).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ShardId(pub u32);

/// One Raft group (a partition, or the controller's group 0).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct GroupId(pub u64);

pub use strand_wire::positions::{KafkaOffset, RaftIndex, RaftTerm};

/// Raft's first term; raft-rs keeps term 0 for "no entry".
pub const FIRST_TERM: u64 = 1;

/// The Raft term of a stored frame's term: term 0 (a single node's frame from before the
/// cluster, an upgraded data directory) is term 1, Raft's first term, so that every replica
/// sees the same terms and raft-rs never reads a stored entry as "no entry".
pub fn raft_term(stored: RaftTerm) -> RaftTerm {
    RaftTerm(stored.0.max(FIRST_TERM))
}

impl fmt::Display for NodeId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "n{}", self.0)
    }
}

impl fmt::Display for ShardId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "s{}", self.0)
    }
}

impl fmt::Display for GroupId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "g{}", self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stored_term_zero_is_the_first_raft_term_and_others_are_kept() {
        assert_eq!(raft_term(RaftTerm(0)), RaftTerm(FIRST_TERM));
        assert_eq!(raft_term(RaftTerm(1)), RaftTerm(1));
        assert_eq!(raft_term(RaftTerm(7)), RaftTerm(7));
    }
}
