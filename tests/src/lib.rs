//! Shared code of Strand's multi-process and crash-safety tests (`tests/tests/*.rs`) and of
//! the child processes they start (`src/bin/`).
//!
//! Main items: [`seed`] (the seeded PRNG, `STRAND_SEED` replay, knobs from the
//! environment), [`clock`] (deadlines for waiting on children), [`harness`] (running
//! storage code on an executor), [`crash_workload`] (the deterministic log workload the
//! crash child writes and its parent checks) and [`broker`] (the real `strand` binary as a
//! child process, and a small synchronous Kafka client for it); [`mount`] (a small loop-mounted
//! file system to fill).
//!
//! This crate holds no production code and nothing depends on it. Time and entropy come
//! only from `clock` and `seed` (STYLE.md 1 and 9).

pub mod broker;
pub mod clock;
pub mod crash_workload;
pub mod harness;
pub mod mount;
pub mod seed;
