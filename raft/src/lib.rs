//! placeholder
pub use raft;
