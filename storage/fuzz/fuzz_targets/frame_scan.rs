//! Fuzz target: see `strand_storage::fuzz::frame_scan`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| strand_storage::fuzz::frame_scan(data));
