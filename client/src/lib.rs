//! `strand-client`: the native, shard-aware Rust client for Strand
//! (ARCHITECTURE.md, Native protocol).
//!
//! A [`Client`] handshakes with a broker's native port (9093), learns which shard owns each
//! partition and each shard's port, and keeps one connection per shard it needs, so every
//! produce and fetch goes straight to the core that owns the partition: no cross-core hop
//! inside the broker. Records are Kafka RecordBatch v2 bytes, the broker's storage format:
//! what a [`Producer`] writes, any Kafka client reads, and the reverse.
//!
//! - [`Producer`]: per-partition batching (`linger`, `batch_size_bytes`), optional zstd,
//!   Kafka-compatible key partitioning (murmur2), idempotence (producer id + sequences,
//!   retries never duplicate), acks 0/1/all, a delivery future per record with its offset,
//!   retries on retriable errors, and shard-map refresh when the broker answers "moved".
//! - [`Consumer`]: assign partitions, seek, long-poll fetch, commit and fetch offsets.
//!
//! It runs on an ordinary tokio runtime; nothing in its API needs glommio. Against a
//! broker with `native_tls`, set `ClientConfig::tls` (e.g. from [`tls_config`] with the
//! broker's CA and, when it asks for one, a client certificate).
//!
//! ```no_run
//! use strand_client::{Client, ClientConfig, ProducerConfig, ProducerRecord};
//!
//! # async fn example() -> strand_client::Result<()> {
//! let client = Client::connect(ClientConfig::new("127.0.0.1:9093")).await?;
//! let producer = client.producer(ProducerConfig::default()).await?;
//! let delivery = producer
//!     .send(ProducerRecord::new("events").key("user-1").value("clicked"))
//!     .await?;
//! let written = delivery.await?;
//! println!("{}-{} @ {}", written.topic, written.partition, written.offset);
//! # Ok(()) }
//! ```
//!
//! Deliberately absent: consumer-group membership (join/sync/heartbeat; use `assign` and
//! commit offsets under a group id), transactions, and codecs other than zstd.

#![deny(missing_docs)]

mod client;
mod clock;
mod connection;
mod consumer;
mod error;
/// Kafka's default key partitioner (murmur2), as the producer uses it.
pub use strand_wire::partitioner;
mod producer;
mod records;
mod tls;

pub use client::{Client, ClientConfig, TopicBatch};
pub use consumer::{ConsumedRecord, Consumer, ConsumerConfig, Offset};
pub use error::{Error, Result};
pub use producer::{
    Acks, Compression, DeliveryFuture, Producer, ProducerConfig, ProducerRecord, RecordMetadata,
    BATCHES_IN_FLIGHT_IDEMPOTENT_MAX,
};
/// rustls, whose `ClientConfig` `ClientConfig::tls` takes.
pub use rustls;
pub use tls::tls_config;
