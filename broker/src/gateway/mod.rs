//! The protocol gateways: the Kafka protocol (`kafka`) and the native flatbuffers protocol
//! (`native`). Each owns its connections (accept, framing, pipelining, response order) and
//! turns requests into work on the shards that own the data, then encodes the answers.
//!
//! May use: every subsystem below it (`common`, `runtime`, `partition`, `replication`,
//! `cluster`, `group`, `shard`). Nothing imports `gateway` but the start-up (`start`).

pub mod kafka;
pub mod native;
