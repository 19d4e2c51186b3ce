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
