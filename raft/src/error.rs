//! Errors of the replication layer (STYLE.md 6): `StoreError` from a `LogStore`,
//! `RaftError` from the driver to its callers.

use crate::types::{GroupId, NodeId, RaftIndex};

/// A `LogStore` failure.
#[derive(Debug, thiserror::Error, Clone, PartialEq, Eq)]
pub enum StoreError {
    /// The index lies before the compaction point.
    #[error("raft index {index:?} is compacted (first index {first:?})")]
    Compacted { index: RaftIndex, first: RaftIndex },
    /// The entry is sealed (committed and applied long ago): its Kafka offsets are not
    /// held in memory any more, nor can it be truncated.
    #[error("raft index {index:?} is sealed (base {base:?})")]
    Sealed { index: RaftIndex, base: RaftIndex },
    /// The index lies past the last entry.
    #[error("raft index {index:?} is past the last index {last:?}")]
    Unavailable { index: RaftIndex, last: RaftIndex },
    /// An append would leave a hole or rewrite the compacted prefix.
    #[error("append at raft index {index:?} does not follow last index {last:?}")]
    NotContiguous { index: RaftIndex, last: RaftIndex },
    /// An entry is not one of ours (see `entry`): corrupt or from a bad peer.
    #[error("malformed entry at raft index {index:?}: {why}")]
    MalformedEntry { index: RaftIndex, why: &'static str },
    /// The entries are on disk but not in memory; the store reads them asynchronously
    /// (raft-rs `LogTemporarilyUnavailable`) and the driver retries when they arrive.
    #[error("raft index {index:?} is not in memory; fetching it")]
    NotInMemory { index: RaftIndex },
    /// fdatasync (or the write before it) failed; what is on disk is unknown.
    #[error("sync failed: {why}")]
    SyncFailed { why: &'static str },
}

/// Why a proposal or a query was not served.
#[derive(Debug, thiserror::Error, Clone, PartialEq, Eq)]
pub enum RaftError {
    /// This node does not lead the group; `leader_hint` is the leader it knows of.
    #[error("not leader of {group}, leader hint {leader_hint:?}")]
    NotLeader {
        group: GroupId,
        leader_hint: Option<NodeId>,
    },
    /// The proposal will not be committed (its entry was overwritten, or raft-rs dropped it).
    #[error("proposal to {group} dropped")]
    Dropped { group: GroupId },
    /// The group's log failed to sync; the group serves nothing until the node restarts.
    #[error("{group} is fenced on this node (a failed log write, or a log that lost entries it had acknowledged; see the error log)")]
    Fenced { group: GroupId },
    /// No such group on this node.
    #[error("unknown group {group}")]
    UnknownGroup { group: GroupId },
    /// The payload breaks a limit or is empty.
    #[error("invalid proposal to {group}: {why}")]
    InvalidProposal { group: GroupId, why: &'static str },
    /// Too many proposals are waiting for commit in this group.
    #[error("too many proposals in flight in {group}")]
    Backpressure { group: GroupId },
    /// A storage error while creating or driving a group.
    #[error("storage error in {group}: {source}")]
    Store { group: GroupId, source: StoreError },
    /// raft-rs refused a group's configuration.
    #[error("raft-rs error in {group}: {reason}")]
    Raft { group: GroupId, reason: String },
}
