//! Strand's protocol codecs: bytes in, typed values out, and back.
//!
//! Main types:
//! - [`RecordBatch`]: a zero-copy view of one Kafka RecordBatch v2 over [`bytes::Bytes`],
//!   with header getters, [`RecordBatch::validate`] (magic, CRC32C, counts) and the two
//!   in-place rewrites the broker makes ([`set_base_offset`], [`set_partition_leader_epoch`]).
//! - [`batches`] / [`BatchIter`]: splits a Produce request's `records` field into batches
//!   without copying.
//! - [`BatchError`]: every way bytes can fail to be an acceptable batch, with the values seen.
//! - [`BatchBuilder`]: encodes uncompressed batches for producers (client, bench, tests);
//!   [`BatchHeader`] and [`empty_batch`] write the batches the log cleaner keeps.
//! - [`native`]: the native protocol's frame header and flatbuffers messages.
//! - [`records`]: decodes the records of a batch for consumers, and encodes them back.
//! - [`control`]: transaction markers (commit/abort control batches), written and read.
//! - [`partitioner`]: Kafka's murmur2 key partitioner, shared by every producer we ship.
//! - [`fuzz`]: the bodies of the fuzz targets, shared by `cargo fuzz` and a stable-Rust
//!   replay test.
//!
//! This crate never does I/O, never spawns or awaits (no async runtime), and never panics
//! on peer input: every length is checked against a named limit before it is used, and
//! malformed bytes give an `Err`. The hot path (parse, validate, getters) does not allocate.
//! It knows nothing of Raft, storage or sockets (ARCHITECTURE.md, "Layout").

#![deny(missing_docs)]

// flatc-generated code (native::generated) names `alloc::` paths.
extern crate alloc;

pub mod batch_builder;
pub mod control;
pub mod fuzz;
pub mod native;
pub mod partitioner;
pub mod positions;
pub mod record_batch;
pub mod records;

pub use batch_builder::{empty_batch, BatchBuilder, BatchHeader};
pub use control::{marker_batch, ControlError, Marker, MarkerKind};
pub use positions::{KafkaOffset, RaftIndex, RaftTerm};
pub use record_batch::{
    batches, set_base_offset, set_partition_leader_epoch, set_producer, Attributes, BatchError,
    BatchIter, Compression, RecordBatch, TimestampType, BATCH_BYTES_MAX, BATCH_HEADER_BYTES,
    BATCH_LENGTH_FIELD_END,
};
