//! The foundation every subsystem stands on: the clock, the configuration, the Kafka error
//! codes, logging, the shard-local metrics, and a byte cursor for the broker's own formats.
//!
//! May use: nothing else in the broker (the crates below it, `strand_storage`,
//! `strand_raft`, `strand_wire`, are fine). Everything may use it.

pub mod clock;
pub mod config;
pub mod cursor;
pub mod errors;
pub mod listeners;
pub mod logging;
pub mod metrics;
