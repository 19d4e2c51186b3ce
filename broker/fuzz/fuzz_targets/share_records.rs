//! Fuzz target: see `strand_broker::fuzz::share_records`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| strand_broker::fuzz::share_records(data));
