//! `StorageError`: every way the partition log can fail, with the values that explain it.

use std::path::PathBuf;

use crate::types::{FilePos, KafkaOffset, RaftIndex};

/// An error from the storage engine.
#[derive(Debug, thiserror::Error)]
pub enum StorageError {
    /// The data directory's filesystem cannot do O_DIRECT and buffered I/O was not allowed.
    #[error(
        "data directory {path} does not support O_DIRECT ({detail}); put the data directory on \
         a filesystem that does (ext4, xfs) or start with buffered I/O allowed \
         (`--allow-buffered-io`, slower and without predictable latency)"
    )]
    NoDirectIo {
        /// The directory probed.
        path: PathBuf,
        /// What the probe saw.
        detail: String,
    },
    /// The disk is full; nothing acknowledged was lost and the flush can be retried.
    #[error("disk full writing {path}: unflushed data kept in memory, retry when space returns")]
    NoSpace {
        /// The file being written.
        path: PathBuf,
    },
    /// An I/O error that leaves the on-disk state known (e.g. open, read).
    #[error("i/o error on {path}: {source}")]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// The operating system error.
        source: std::io::Error,
    },
    /// A frame in a closed segment (or inside the tail, before valid frames) is corrupt.
    #[error("corrupt frame in {path} at {pos:?}: {reason}")]
    Corrupt {
        /// The segment file.
        path: PathBuf,
        /// Where the bad frame starts.
        pos: FilePos,
        /// Which check failed.
        reason: String,
    },
    /// The log refused the operation because an earlier fault left its on-disk state unknown.
    #[error("partition log {dir} is fenced: {reason}")]
    Fenced {
        /// The partition directory.
        dir: PathBuf,
        /// The fault that fenced it.
        reason: String,
    },
    /// The requested Kafka offset is outside `log_start_offset..=log_end_offset`.
    #[error("offset {requested:?} out of range {start:?}..={end:?}")]
    OffsetOutOfRange {
        /// What was asked.
        requested: KafkaOffset,
        /// The log start offset.
        start: KafkaOffset,
        /// The log end offset.
        end: KafkaOffset,
    },
    /// The requested Raft index is not in the log (compacted away or not yet written).
    #[error("raft index {requested:?} not in log {first:?}..={last:?}")]
    IndexOutOfRange {
        /// What was asked.
        requested: RaftIndex,
        /// First index present.
        first: RaftIndex,
        /// Last index present.
        last: RaftIndex,
    },
    /// The caller broke the log's usage contract (e.g. two flushes at once).
    #[error("invalid use of partition log: {0}")]
    Usage(&'static str),
    /// A data entry's body is not a well-formed record batch.
    #[error("bad record batch: {0}")]
    BadBatch(#[from] strand_wire::BatchError),
    /// Unflushed bytes exceed the tail limit; flush before appending more.
    #[error("unflushed tail holds {pending_bytes} bytes, limit {limit_bytes}: flush first")]
    TailFull {
        /// Bytes appended but not yet durable.
        pending_bytes: u64,
        /// The limit.
        limit_bytes: u64,
    },
    /// The executor could not be started or its locked memory is too small.
    #[error("{0}")]
    Environment(String),
}

impl StorageError {
    /// Wraps an I/O error with the path it happened on.
    pub fn io(path: impl Into<PathBuf>, source: std::io::Error) -> StorageError {
        StorageError::Io {
            path: path.into(),
            source,
        }
    }
}
