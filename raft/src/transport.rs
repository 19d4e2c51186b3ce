//! `Transport`: how the driver sends Raft messages to other nodes. One `MessageBatch` per
//! destination node per loop turn carries the messages of every group (ARCHITECTURE.md,
//! Replication); the broker frames it as internal RPC (`rpc`), the simulator queues it.

use raft::eraftpb::Message;

use crate::types::{GroupId, NodeId};

/// Most messages one batch may carry. The RPC decoder rejects a larger count before
/// allocating; the driver splits its outbox to respect it. A turn of a shard with
/// thousands of groups produces at most a few messages per group per peer.
pub const MESSAGES_PER_BATCH_MAX: usize = 64 * 1024;

/// A Raft message of one group.
#[derive(Clone, Debug, PartialEq)]
pub struct GroupMessage {
    /// The group it belongs to.
    pub group: GroupId,
    /// The raft-rs message (`to` and `from` are node ids).
    pub message: Message,
}

/// The messages from one node to another in one loop turn.
#[derive(Clone, Debug, PartialEq)]
pub struct MessageBatch {
    /// Sender.
    pub from: NodeId,
    /// Destination.
    pub to: NodeId,
    /// At most `MESSAGES_PER_BATCH_MAX`.
    pub messages: Vec<GroupMessage>,
}

/// Sends batches to other nodes. Delivery may fail silently: Raft retries.
pub trait Transport {
    /// Queues `batch` for its destination; never blocks.
    fn send(&mut self, batch: MessageBatch);
}
