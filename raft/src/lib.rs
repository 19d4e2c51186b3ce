//! Strand's replication layer: every partition is a Raft group (raft-rs `RawNode`) whose
//! log is the partition log (ARCHITECTURE.md, Replication and Offsets).
//!
//! - [`LogStore`]: what a group needs from its log; [`MemLogStore`] models durability in
//!   memory. [`GroupStorage`] is raft-rs's `Storage` over it.
//! - [`MultiRaft`]: the per-shard driver: ticks, steps, drains `Ready`s, batches messages
//!   per node, reports proposal completions with Kafka base offsets and the high watermark.
//! - [`Clock`], [`Transport`]: how the driver sees time and the network.
//! - [`rpc`]: the internal RPC frames that carry a [`MessageBatch`] between nodes.
//! - [`fuzz`]: the bodies of the fuzz targets, shared by `cargo fuzz` and stable tests.
//! - `sim` (feature `sim`): the deterministic simulator.
//!
//! This crate never does I/O itself, never reads wall-clock time or OS randomness, and
//! never names glommio: the broker supplies the traits.

pub mod clock;
pub mod conf_history;
pub mod entry;
pub mod error;
pub mod fuzz;
mod group;
pub mod log_bridge;
pub mod log_index;
pub mod log_store;
pub mod mem_store;
pub mod multi_raft;
pub mod rpc;
pub mod seed;
#[cfg(feature = "sim")]
pub mod sim;
pub mod storage;
pub mod transport;
pub mod types;

pub use clock::Clock;
pub use conf_history::ConfHistory;
pub use error::{RaftError, StoreError};
pub use group::{GroupView, MembershipStep};
pub use log_index::{CompactionPoint, LogIndex};
pub use log_store::LogStore;
pub use mem_store::{DurableImage, MemLogStore, SyncBehaviour};
pub use multi_raft::{Ack, Completion, DriverConfig, MultiRaft, ProposalId, StepOutcome};
pub use rpc::{Encoded, Hello, RpcError, RpcFrame};
pub use storage::GroupStorage;
pub use transport::{GroupMessage, MessageBatch, Transport};
pub use types::{
    raft_term, GroupId, KafkaOffset, NodeId, RaftIndex, RaftTerm, ShardId, FIRST_TERM,
};
