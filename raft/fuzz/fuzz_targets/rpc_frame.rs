//! Fuzz target: internal RPC frames, see `strand_raft::fuzz::rpc_frame`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| strand_raft::fuzz::rpc_frame(data));
