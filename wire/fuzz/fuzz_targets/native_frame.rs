#![no_main]
//! Native protocol frames: see `strand_wire::fuzz::native_frame`.
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| strand_wire::fuzz::native_frame(data));
