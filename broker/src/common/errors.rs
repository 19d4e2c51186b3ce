//! Kafka error codes for every failure a request can meet, from one exhaustive match per
//! error type (STYLE.md 6).

use strand_storage::StorageError;
use strand_wire::BatchError;

/// A Kafka-level error for one partition or request.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum KafkaError {
    /// OFFSET_OUT_OF_RANGE (1).
    #[error("offset out of range")]
    OffsetOutOfRange,
    /// CORRUPT_MESSAGE (2).
    #[error("corrupt message: {0}")]
    CorruptMessage(String),
    /// UNKNOWN_TOPIC_OR_PARTITION (3).
    #[error("unknown topic or partition")]
    UnknownTopicOrPartition,
    /// NOT_LEADER_OR_FOLLOWER (6).
    #[error("not leader or follower")]
    NotLeader,
    /// REQUEST_TIMED_OUT (7).
    #[error("request timed out")]
    RequestTimedOut,
    /// MESSAGE_TOO_LARGE (10).
    #[error("message too large")]
    MessageTooLarge,
    /// INVALID_RECORD (87).
    #[error("invalid record: {0}")]
    InvalidRecord(String),
    /// UNSUPPORTED_COMPRESSION_TYPE (76).
    #[error("unsupported compression type")]
    UnsupportedCompression,
    /// KAFKA_STORAGE_ERROR (56).
    #[error("storage error: {0}")]
    Storage(String),
    /// OUT_OF_ORDER_SEQUENCE_NUMBER (45).
    #[error("out of order sequence number")]
    OutOfOrderSequence,
    /// INVALID_PRODUCER_EPOCH (47).
    #[error("invalid producer epoch")]
    InvalidProducerEpoch,
    /// FENCED_LEADER_EPOCH (74).
    #[error("fenced leader epoch")]
    FencedLeaderEpoch,
    /// UNKNOWN_LEADER_EPOCH (75).
    #[error("unknown leader epoch")]
    UnknownLeaderEpoch,
    /// INVALID_REQUEST (42).
    #[error("invalid request: {0}")]
    InvalidRequest(String),
}

impl KafkaError {
    /// The wire error code.
    pub fn code(&self) -> i16 {
        match self {
            KafkaError::OffsetOutOfRange => 1,
            KafkaError::CorruptMessage(_) => 2,
            KafkaError::UnknownTopicOrPartition => 3,
            KafkaError::NotLeader => 6,
            KafkaError::RequestTimedOut => 7,
            KafkaError::MessageTooLarge => 10,
            KafkaError::InvalidRequest(_) => 42,
            KafkaError::OutOfOrderSequence => 45,
            KafkaError::InvalidProducerEpoch => 47,
            KafkaError::FencedLeaderEpoch => 74,
            KafkaError::UnknownLeaderEpoch => 75,
            KafkaError::Storage(_) => 56,
            KafkaError::UnsupportedCompression => 76,
            KafkaError::InvalidRecord(_) => 87,
        }
    }

    /// How Kafka answers a bad produce batch.
    pub fn from_batch(e: BatchError) -> KafkaError {
        match e {
            BatchError::CrcMismatch { .. }
            | BatchError::Truncated { .. }
            | BatchError::LengthTooSmall { .. }
            | BatchError::LengthMismatch { .. } => KafkaError::CorruptMessage(e.to_string()),
            BatchError::TooLarge { .. } => KafkaError::MessageTooLarge,
            BatchError::UnknownCompression { .. } => KafkaError::UnsupportedCompression,
            BatchError::BadMagic { .. }
            | BatchError::RecordCount { .. }
            | BatchError::OffsetDeltaMismatch { .. }
            | BatchError::RecordCountExceedsBytes { .. }
            | BatchError::BaseOffsetNotZero { .. }
            | BatchError::ControlFromProducer
            | BatchError::BadSequence { .. } => KafkaError::InvalidRecord(e.to_string()),
        }
    }

    /// How a storage failure reaches a client.
    pub fn from_storage(e: StorageError) -> KafkaError {
        match e {
            StorageError::OffsetOutOfRange { .. } => KafkaError::OffsetOutOfRange,
            StorageError::BadBatch(b) => KafkaError::from_batch(b),
            StorageError::NoDirectIo { .. }
            | StorageError::NoSpace { .. }
            | StorageError::Io { .. }
            | StorageError::Corrupt { .. }
            | StorageError::Fenced { .. }
            | StorageError::IndexOutOfRange { .. }
            | StorageError::Usage(_)
            | StorageError::TailFull { .. }
            | StorageError::Environment(_) => KafkaError::Storage(e.to_string()),
        }
    }
}
