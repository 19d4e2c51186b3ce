#![no_main]
//! Kafka request frames (header and body of every API and version): see
//! `wire/fuzz/kafka_request.rs`.
use libfuzzer_sys::fuzz_target;

#[path = "../kafka_request.rs"]
mod kafka_request;

fuzz_target!(|data: &[u8]| {
    kafka_request::kafka_request(data);
});
