//! Fuzz target: see `strand_broker::fuzz::share_peer_answers`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| strand_broker::fuzz::share_peer_answers(data));
