//! Kafka error codes for every failure a request can meet, from one exhaustive match per
//! error type (STYLE.md 6).

use strand_storage::StorageError;
use strand_wire::BatchError;

/// Kafka's error codes by their Kafka names, taken from kafka-protocol's `ResponseError`:
/// the one source of error numbers in the broker (a handler never writes a bare number).
pub mod code {
    use kafka_protocol::error::ResponseError as E;

    /// NONE: no error.
    pub const NONE: i16 = 0;
    /// TOPIC_AUTHORIZATION_FAILED.
    pub const TOPIC_AUTHORIZATION_FAILED: i16 = E::TopicAuthorizationFailed.code();
    /// GROUP_AUTHORIZATION_FAILED.
    pub const GROUP_AUTHORIZATION_FAILED: i16 = E::GroupAuthorizationFailed.code();
    /// CLUSTER_AUTHORIZATION_FAILED.
    pub const CLUSTER_AUTHORIZATION_FAILED: i16 = E::ClusterAuthorizationFailed.code();
    /// TRANSACTIONAL_ID_AUTHORIZATION_FAILED.
    pub const TRANSACTIONAL_ID_AUTHORIZATION_FAILED: i16 =
        E::TransactionalIdAuthorizationFailed.code();
    /// INVALID_TOPIC_EXCEPTION.
    pub const INVALID_TOPIC_EXCEPTION: i16 = E::InvalidTopicException.code();
    /// UNKNOWN_SERVER_ERROR.
    pub const UNKNOWN_SERVER_ERROR: i16 = E::UnknownServerError.code();
    /// SECURITY_DISABLED: no authorizer is configured.
    pub const SECURITY_DISABLED: i16 = E::SecurityDisabled.code();
    /// OFFSET_OUT_OF_RANGE.
    pub const OFFSET_OUT_OF_RANGE: i16 = E::OffsetOutOfRange.code();
    /// CORRUPT_MESSAGE.
    pub const CORRUPT_MESSAGE: i16 = E::CorruptMessage.code();
    /// UNKNOWN_TOPIC_OR_PARTITION.
    pub const UNKNOWN_TOPIC_OR_PARTITION: i16 = E::UnknownTopicOrPartition.code();
    /// UNKNOWN_TOPIC_ID.
    pub const UNKNOWN_TOPIC_ID: i16 = E::UnknownTopicId.code();
    /// LEADER_NOT_AVAILABLE.
    pub const LEADER_NOT_AVAILABLE: i16 = E::LeaderNotAvailable.code();
    /// INVALID_PARTITIONS.
    pub const INVALID_PARTITIONS: i16 = E::InvalidPartitions.code();
    /// INVALID_REPLICATION_FACTOR.
    pub const INVALID_REPLICATION_FACTOR: i16 = E::InvalidReplicationFactor.code();
    /// INVALID_REPLICA_ASSIGNMENT.
    pub const INVALID_REPLICA_ASSIGNMENT: i16 = E::InvalidReplicaAssignment.code();
    /// NOT_LEADER_OR_FOLLOWER.
    pub const NOT_LEADER_OR_FOLLOWER: i16 = E::NotLeaderOrFollower.code();
    /// REQUEST_TIMED_OUT.
    pub const REQUEST_TIMED_OUT: i16 = E::RequestTimedOut.code();
    /// NOT_ENOUGH_REPLICAS.
    pub const NOT_ENOUGH_REPLICAS: i16 = E::NotEnoughReplicas.code();
    /// MESSAGE_TOO_LARGE.
    pub const MESSAGE_TOO_LARGE: i16 = E::MessageTooLarge.code();
    /// OFFSET_METADATA_TOO_LARGE.
    pub const OFFSET_METADATA_TOO_LARGE: i16 = E::OffsetMetadataTooLarge.code();
    /// COORDINATOR_LOAD_IN_PROGRESS.
    pub const COORDINATOR_LOAD_IN_PROGRESS: i16 = E::CoordinatorLoadInProgress.code();
    /// COORDINATOR_NOT_AVAILABLE.
    pub const COORDINATOR_NOT_AVAILABLE: i16 = E::CoordinatorNotAvailable.code();
    /// NOT_COORDINATOR.
    pub const NOT_COORDINATOR: i16 = E::NotCoordinator.code();
    /// INVALID_REQUIRED_ACKS.
    pub const INVALID_REQUIRED_ACKS: i16 = E::InvalidRequiredAcks.code();
    /// ILLEGAL_GENERATION.
    pub const ILLEGAL_GENERATION: i16 = E::IllegalGeneration.code();
    /// INCONSISTENT_GROUP_PROTOCOL.
    pub const INCONSISTENT_GROUP_PROTOCOL: i16 = E::InconsistentGroupProtocol.code();
    /// INVALID_GROUP_ID.
    pub const INVALID_GROUP_ID: i16 = E::InvalidGroupId.code();
    /// UNKNOWN_MEMBER_ID.
    pub const UNKNOWN_MEMBER_ID: i16 = E::UnknownMemberId.code();
    /// INVALID_SESSION_TIMEOUT.
    pub const INVALID_SESSION_TIMEOUT: i16 = E::InvalidSessionTimeout.code();
    /// REBALANCE_IN_PROGRESS.
    pub const REBALANCE_IN_PROGRESS: i16 = E::RebalanceInProgress.code();
    /// FENCED_INSTANCE_ID.
    pub const FENCED_INSTANCE_ID: i16 = E::FencedInstanceId.code();
    /// GROUP_MAX_SIZE_REACHED.
    pub const GROUP_MAX_SIZE_REACHED: i16 = E::GroupMaxSizeReached.code();
    /// UNSUPPORTED_VERSION.
    pub const UNSUPPORTED_VERSION: i16 = E::UnsupportedVersion.code();
    /// INVALID_CONFIG.
    pub const INVALID_CONFIG: i16 = E::InvalidConfig.code();
    /// INVALID_REQUEST.
    pub const INVALID_REQUEST: i16 = E::InvalidRequest.code();
    /// OUT_OF_ORDER_SEQUENCE_NUMBER.
    pub const OUT_OF_ORDER_SEQUENCE_NUMBER: i16 = E::OutOfOrderSequenceNumber.code();
    /// INVALID_PRODUCER_EPOCH.
    pub const INVALID_PRODUCER_EPOCH: i16 = E::InvalidProducerEpoch.code();
    /// INVALID_TXN_STATE.
    pub const INVALID_TXN_STATE: i16 = E::InvalidTxnState.code();
    /// CONCURRENT_TRANSACTIONS.
    pub const CONCURRENT_TRANSACTIONS: i16 = E::ConcurrentTransactions.code();
    /// INVALID_PRODUCER_ID_MAPPING.
    pub const INVALID_PRODUCER_ID_MAPPING: i16 = E::InvalidProducerIdMapping.code();
    /// OPERATION_NOT_ATTEMPTED.
    pub const OPERATION_NOT_ATTEMPTED: i16 = E::OperationNotAttempted.code();
    /// UNSTABLE_OFFSET_COMMIT.
    pub const UNSTABLE_OFFSET_COMMIT: i16 = E::UnstableOffsetCommit.code();
    /// TRANSACTIONAL_ID_NOT_FOUND.
    pub const TRANSACTIONAL_ID_NOT_FOUND: i16 = E::TransactionalIdNotFound.code();
    /// PRODUCER_FENCED.
    pub const PRODUCER_FENCED: i16 = E::ProducerFenced.code();
    /// INVALID_TRANSACTION_TIMEOUT.
    pub const INVALID_TRANSACTION_TIMEOUT: i16 = E::InvalidTransactionTimeout.code();
    /// KAFKA_STORAGE_ERROR.
    pub const KAFKA_STORAGE_ERROR: i16 = E::KafkaStorageError.code();
    /// NON_EMPTY_GROUP.
    pub const NON_EMPTY_GROUP: i16 = E::NonEmptyGroup.code();
    /// GROUP_ID_NOT_FOUND.
    pub const GROUP_ID_NOT_FOUND: i16 = E::GroupIdNotFound.code();
    /// FENCED_LEADER_EPOCH.
    pub const FENCED_LEADER_EPOCH: i16 = E::FencedLeaderEpoch.code();
    /// UNKNOWN_LEADER_EPOCH.
    pub const UNKNOWN_LEADER_EPOCH: i16 = E::UnknownLeaderEpoch.code();
    /// UNSUPPORTED_COMPRESSION_TYPE.
    pub const UNSUPPORTED_COMPRESSION_TYPE: i16 = E::UnsupportedCompressionType.code();
    /// MEMBER_ID_REQUIRED.
    pub const MEMBER_ID_REQUIRED: i16 = E::MemberIdRequired.code();
    /// GROUP_SUBSCRIBED_TO_TOPIC.
    pub const GROUP_SUBSCRIBED_TO_TOPIC: i16 = E::GroupSubscribedToTopic.code();
    /// POLICY_VIOLATION.
    pub const POLICY_VIOLATION: i16 = E::PolicyViolation.code();
    /// INVALID_RECORD.
    pub const INVALID_RECORD: i16 = E::InvalidRecord.code();
    /// INCONSISTENT_CLUSTER_ID.
    pub const INCONSISTENT_CLUSTER_ID: i16 = E::InconsistentClusterId.code();
    /// DUPLICATE_VOTER.
    pub const DUPLICATE_VOTER: i16 = E::DuplicateVoter.code();
    /// VOTER_NOT_FOUND.
    pub const VOTER_NOT_FOUND: i16 = E::VoterNotFound.code();
    /// FENCED_MEMBER_EPOCH (KIP-848).
    pub const FENCED_MEMBER_EPOCH: i16 = E::FencedMemberEpoch.code();
    /// UNRELEASED_INSTANCE_ID (KIP-848).
    pub const UNRELEASED_INSTANCE_ID: i16 = E::UnreleasedInstanceId.code();
    /// UNSUPPORTED_ASSIGNOR (KIP-848).
    pub const UNSUPPORTED_ASSIGNOR: i16 = E::UnsupportedAssignor.code();
    /// INVALID_REGULAR_EXPRESSION (KIP-848).
    pub const INVALID_REGULAR_EXPRESSION: i16 = E::InvalidRegularExpression.code();
    /// INVALID_RECORD_STATE (KIP-932).
    pub const INVALID_RECORD_STATE: i16 = E::InvalidRecordState.code();
    /// SHARE_SESSION_NOT_FOUND (KIP-932).
    pub const SHARE_SESSION_NOT_FOUND: i16 = E::ShareSessionNotFound.code();
    /// SHARE_SESSION_LIMIT_REACHED (KIP-932).
    pub const SHARE_SESSION_LIMIT_REACHED: i16 = E::ShareSessionLimitReached.code();
    /// INVALID_SHARE_SESSION_EPOCH (KIP-932).
    pub const INVALID_SHARE_SESSION_EPOCH: i16 = E::InvalidShareSessionEpoch.code();
    /// STALE_MEMBER_EPOCH (KIP-848).
    pub const STALE_MEMBER_EPOCH: i16 = E::StaleMemberEpoch.code();
}

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
    /// TOPIC_AUTHORIZATION_FAILED (29): the principal may not do this to the topic.
    #[error("topic authorization failed")]
    TopicAuthorizationFailed,
    /// TRANSACTIONAL_ID_AUTHORIZATION_FAILED (53): the principal may not write with the
    /// request's transactional id.
    #[error("transactional id authorization failed")]
    TransactionalIdAuthorizationFailed,
    /// NOT_LEADER_OR_FOLLOWER (6).
    #[error("not leader or follower")]
    NotLeader,
    /// REQUEST_TIMED_OUT (7).
    #[error("request timed out")]
    RequestTimedOut,
    /// MESSAGE_TOO_LARGE (10).
    #[error("message too large")]
    MessageTooLarge,
    /// NOT_ENOUGH_REPLICAS (19): an acks=all produce while fewer replicas are in sync than
    /// the topic's `min.insync.replicas`.
    #[error("{in_sync} replicas in sync, fewer than min.insync.replicas {min}")]
    NotEnoughReplicas {
        /// Replicas in sync now.
        in_sync: usize,
        /// The topic's `min.insync.replicas`.
        min: usize,
    },
    /// INVALID_RECORD (87).
    #[error("invalid record: {0}")]
    InvalidRecord(String),
    /// INVALID_RECORD (87) naming the records at fault (KIP-467: Produce v8+ lists them,
    /// by index in the batch with a message each, and a client fails only those).
    #[error("{message}")]
    RecordErrors {
        /// The partition-level message.
        message: String,
        /// (index of the record in its batch, why it was refused).
        records: Vec<(i32, String)>,
    },
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
    /// INVALID_TXN_STATE (48): e.g. a transactional append to a partition that is in no
    /// transaction.
    #[error("the producer attempted a transactional operation in an invalid state")]
    InvalidTxnState,
    /// FENCED_LEADER_EPOCH (74).
    #[error("fenced leader epoch")]
    FencedLeaderEpoch,
    /// UNKNOWN_LEADER_EPOCH (75).
    #[error("unknown leader epoch")]
    UnknownLeaderEpoch,
    /// INVALID_REQUEST (42).
    #[error("invalid request: {0}")]
    InvalidRequest(String),
    /// UNKNOWN_TOPIC_ID (100): a request named a topic by an id no topic has.
    #[error("unknown topic id")]
    UnknownTopicId,
    /// POLICY_VIOLATION (44): e.g. DeleteRecords on a compact-only topic.
    #[error("policy violation: {0}")]
    PolicyViolation(String),
    /// A transactional batch the transaction coordinator did not verify (KIP-890): the
    /// coordinator's code (INVALID_TXN_STATE, INVALID_PRODUCER_EPOCH, NOT_COORDINATOR…).
    #[error("transaction verification failed with error code {0}")]
    TxnVerification(i16),
}

impl KafkaError {
    /// The wire error code.
    pub fn code(&self) -> i16 {
        match self {
            KafkaError::OffsetOutOfRange => code::OFFSET_OUT_OF_RANGE,
            KafkaError::CorruptMessage(_) => code::CORRUPT_MESSAGE,
            KafkaError::UnknownTopicOrPartition => code::UNKNOWN_TOPIC_OR_PARTITION,
            KafkaError::TopicAuthorizationFailed => code::TOPIC_AUTHORIZATION_FAILED,
            KafkaError::TransactionalIdAuthorizationFailed => {
                code::TRANSACTIONAL_ID_AUTHORIZATION_FAILED
            }
            KafkaError::NotLeader => code::NOT_LEADER_OR_FOLLOWER,
            KafkaError::RequestTimedOut => code::REQUEST_TIMED_OUT,
            KafkaError::MessageTooLarge => code::MESSAGE_TOO_LARGE,
            KafkaError::NotEnoughReplicas { .. } => code::NOT_ENOUGH_REPLICAS,
            KafkaError::InvalidRequest(_) => code::INVALID_REQUEST,
            KafkaError::OutOfOrderSequence => code::OUT_OF_ORDER_SEQUENCE_NUMBER,
            KafkaError::InvalidProducerEpoch => code::INVALID_PRODUCER_EPOCH,
            KafkaError::InvalidTxnState => code::INVALID_TXN_STATE,
            KafkaError::FencedLeaderEpoch => code::FENCED_LEADER_EPOCH,
            KafkaError::UnknownLeaderEpoch => code::UNKNOWN_LEADER_EPOCH,
            KafkaError::Storage(_) => code::KAFKA_STORAGE_ERROR,
            KafkaError::UnsupportedCompression => code::UNSUPPORTED_COMPRESSION_TYPE,
            KafkaError::InvalidRecord(_) | KafkaError::RecordErrors { .. } => code::INVALID_RECORD,
            KafkaError::UnknownTopicId => code::UNKNOWN_TOPIC_ID,
            KafkaError::PolicyViolation(_) => code::POLICY_VIOLATION,
            KafkaError::TxnVerification(c) => *c,
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
