//! The client's errors: what failed, and whether retrying can help.

use std::net::SocketAddr;

/// Everything the client can fail with.
#[derive(Debug, Clone, thiserror::Error)]
pub enum Error {
    /// The address could not be resolved or connected.
    #[error("cannot connect to {addr}: {reason}")]
    Connect {
        /// The address.
        addr: String,
        /// What the OS said.
        reason: String,
    },
    /// The connection failed or closed while a request was outstanding.
    #[error("connection to {addr} closed: {reason}")]
    Closed {
        /// The peer.
        addr: SocketAddr,
        /// Why.
        reason: String,
    },
    /// The broker answered with an error code (Kafka's numbering).
    #[error("broker error {code}: {message}")]
    Broker {
        /// Kafka error code.
        code: i16,
        /// The broker's message.
        message: String,
        /// Whether the same request may succeed later.
        retriable: bool,
    },
    /// The broker does not speak our protocol version (or we do not speak its).
    #[error("protocol version mismatch: {0}")]
    UnsupportedVersion(String),
    /// TLS could not be set up (files, or the handshake with the broker).
    #[error("TLS: {0}")]
    Tls(String),
    /// The broker sent something that is not a valid answer.
    #[error("protocol error: {0}")]
    Protocol(String),
    /// No answer within the configured time.
    #[error("timed out after {timeout_ms} ms")]
    Timeout {
        /// The deadline that passed.
        timeout_ms: u64,
    },
    /// The topic does not exist (and was not created).
    #[error("unknown topic {0:?}")]
    UnknownTopic(String),
    /// The partition does not exist.
    #[error("unknown partition {topic}-{partition}")]
    UnknownPartition {
        /// Topic.
        topic: String,
        /// Partition.
        partition: i32,
    },
    /// A record batch could not be decoded.
    #[error("cannot decode records: {0}")]
    Records(String),
    /// A batch uses a codec this client does not have (it has zstd).
    #[error("unsupported compression codec {0}")]
    UnsupportedCompression(String),
    /// A configuration value is not allowed.
    #[error("invalid configuration: {0}")]
    Config(String),
    /// The producer or consumer was closed.
    #[error("the producer is closed")]
    ProducerClosed,
}

impl Error {
    /// Whether retrying the same operation may succeed.
    pub fn is_retriable(&self) -> bool {
        match self {
            Error::Broker { retriable, .. } => *retriable,
            Error::Closed { .. } | Error::Timeout { .. } | Error::Connect { .. } => true,
            _ => false,
        }
    }

    /// The Kafka error code, if the broker sent one.
    pub fn code(&self) -> Option<i16> {
        match self {
            Error::Broker { code, .. } => Some(*code),
            _ => None,
        }
    }

    pub(crate) fn from_wire(e: &strand_wire::native::generated::ErrorT) -> Error {
        Error::Broker {
            code: e.code,
            message: e.message.clone().unwrap_or_default(),
            retriable: e.retriable,
        }
    }
}

/// The client's result type.
pub type Result<T> = std::result::Result<T, Error>;
