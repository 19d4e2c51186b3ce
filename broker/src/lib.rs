//! The Strand broker (ARCHITECTURE.md): its subsystems as a library, so that the `strand`
//! binary (`main.rs`), the fuzz targets (`fuzz`, `broker/fuzz/`) and the tests reach the
//! same code. The layering of the subsystems is in `broker/ARCHITECTURE.md`.

pub mod admin;
pub mod cluster;
pub mod common;
pub mod fuzz;
pub mod gateway;
pub mod group;
pub mod partition;
pub mod replication;
pub mod runtime;
pub mod security;
pub mod shard;
pub mod share;
pub mod start;
pub mod txn;
