//! The thread-per-core runtime's primitives: tasks and timers on the current shard, the
//! CPUs a shard may be pinned to, the io_uring probe and the start-up checks, termination
//! signals, the crash evidence a fatal signal leaves, and an encoder buffer that keeps
//! large slices as references (`piece_buf`: implementing `BufMut` takes `unsafe`, kept
//! here). One of the homes of glommio names (STYLE.md 1).
//!
//! May use: `common`. Knows nothing of partitions, Raft, Kafka or groups.

pub mod cpus;
pub mod crash;
pub mod piece_buf;
pub mod preflight;
pub mod probe;
pub mod signals;
pub mod stall;
pub mod task;
