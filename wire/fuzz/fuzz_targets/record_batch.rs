//! Fuzz target: Kafka RecordBatch v2 framing, validation and in-place rewrites.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| strand_wire::fuzz::record_batch(data));
