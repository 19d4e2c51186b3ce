//! The seam between the load loops and a protocol: [`Driver`] (set-up and sessions),
//! [`ProduceSession`] (pipelined sends) and [`ConsumeSession`] (long-poll fetches).
//!
//! Invariant: a driver never invents an outcome. A send resolves to the instant its
//! acknowledgement was read off the socket (or, for acks=0, the instant the request was
//! written), or to an error; a fetch returns what the broker sent. The load loops own
//! time-keeping, batching and statistics; drivers own the wire. `--protocol kafka` is
//! [`crate::kafka_driver`]; `--protocol native` waits for the strand-client crate.

use std::future::Future;
use std::pin::Pin;
use std::time::Instant;

use bytes::Bytes;

/// A boxed, sendable future (drivers are used behind `dyn`).
pub type BoxFut<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Why a driver call failed. [`DriverError::kind`] is the label errors are counted by.
#[derive(Debug, thiserror::Error)]
pub enum DriverError {
    /// Connecting, reading or writing the socket failed.
    #[error("i/o with {addr}: {source}")]
    Io {
        addr: String,
        #[source]
        source: std::io::Error,
    },
    /// The connection closed with this request outstanding.
    #[error("connection to {addr} closed")]
    ConnectionClosed { addr: String },
    /// The peer sent bytes we could not decode or that break the protocol.
    #[error("protocol error: {0}")]
    Protocol(String),
    /// The broker answered with an error code.
    #[error("broker error {name} ({code}) in {api}")]
    Broker {
        api: &'static str,
        code: i16,
        name: String,
    },
    /// No answer within the deadline.
    #[error("timed out: {0}")]
    Timeout(String),
    /// The broker lacks an API version we need, or a setting cannot be honoured.
    #[error("unsupported: {0}")]
    Unsupported(String),
}

impl DriverError {
    /// A short label to count errors by (bounded set: api and broker error name).
    pub fn kind(&self) -> String {
        match self {
            DriverError::Io { .. } => "io".to_string(),
            DriverError::ConnectionClosed { .. } => "connection closed".to_string(),
            DriverError::Protocol(_) => "protocol".to_string(),
            DriverError::Broker { api, name, .. } => format!("{api}: {name}"),
            DriverError::Timeout(_) => "timeout".to_string(),
            DriverError::Unsupported(_) => "unsupported".to_string(),
        }
    }
}

/// The topic a run writes and reads.
#[derive(Clone, Debug)]
pub struct TopicSpec {
    pub name: String,
    pub partitions: i32,
    /// -1: the broker's default.
    pub replication_factor: i16,
    /// Topic configs of a created topic (e.g. `cleanup.policy` = `compact`).
    pub configs: Vec<(String, String)>,
}

/// How a producer session sends.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum Acks {
    /// No acknowledgement: a send completes when written to the socket.
    None,
    /// The leader appended.
    Leader,
    /// Every in-sync replica has it.
    All,
}

impl Acks {
    /// Kafka's `acks` value.
    pub fn kafka_value(self) -> i16 {
        match self {
            Acks::None => 0,
            Acks::Leader => 1,
            Acks::All => -1,
        }
    }
}

/// Record batch compression.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum Codec {
    None,
    Zstd,
    Lz4,
}

/// Options of a producer session.
#[derive(Clone, Debug)]
pub struct ProducerOpts {
    pub topic: String,
    pub acks: Acks,
    pub codec: Codec,
    /// Requests sent and not yet answered, per connection.
    pub max_in_flight: usize,
}

/// One record to send.
#[derive(Clone, Debug)]
pub struct OutRecord {
    pub key: Option<Bytes>,
    pub value: Bytes,
}

/// Records for one partition, sent as one record batch.
#[derive(Clone, Debug)]
pub struct PartitionBatch {
    pub partition: i32,
    pub records: Vec<OutRecord>,
}

/// How one sent request ended.
#[derive(Debug)]
pub struct Acked {
    /// When the response was read off the socket (acks=0: when the request was written).
    pub at: Instant,
    /// Batches (indices into the slice given to `send`) the broker refused, with why.
    pub failed: Vec<(usize, DriverError)>,
}

/// A request on the wire: resolves when it is answered.
pub type InFlight = BoxFut<'static, Result<Acked, DriverError>>;

/// One request sent by [`ProduceSession::send`]: the batches it carries and its answer.
pub struct SentRequest {
    /// Indices into the slice given to `send`.
    pub batch_indices: Vec<usize>,
    /// When it was written to the socket.
    pub sent_at: Instant,
    pub answer: InFlight,
}

/// A producer's connections.
pub trait ProduceSession: Send {
    /// Groups `batches` into requests (one per partition leader), waits for an in-flight
    /// slot on each connection, writes them, and returns without waiting for the answers.
    fn send<'a>(
        &'a mut self,
        batches: &'a [PartitionBatch],
    ) -> BoxFut<'a, Result<Vec<SentRequest>, DriverError>>;
}

/// Where a consumer starts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StartAt {
    Earliest,
    Latest,
}

/// What one poll returned.
#[derive(Debug, Default)]
pub struct Fetched {
    /// When the (last) response was read off the socket.
    pub at: Option<Instant>,
    /// Record values (only when the session was asked to keep them).
    pub values: Vec<Bytes>,
    pub records: u64,
    pub bytes: u64,
    /// Partition-level errors reported by the broker.
    pub errors: Vec<DriverError>,
}

/// A consumer's connections and positions.
pub trait ConsumeSession: Send {
    /// One long-poll fetch of every assigned partition.
    fn poll(&mut self) -> BoxFut<'_, Result<Fetched, DriverError>>;
}

/// A protocol to load a broker through.
pub trait Driver: Send + Sync {
    /// Creates the topic unless it exists, then waits until every partition has a
    /// leader; returns the partition count.
    fn ensure_topic<'a>(&'a self, topic: &'a TopicSpec) -> BoxFut<'a, Result<i32, DriverError>>;
    /// Deletes the topic (what a suite wrote would otherwise stay on the broker's disk).
    fn delete_topic<'a>(&'a self, topic: &'a str) -> BoxFut<'a, Result<(), DriverError>>;
    /// A new producer with its own connections.
    fn producer<'a>(
        &'a self,
        opts: &'a ProducerOpts,
    ) -> BoxFut<'a, Result<Box<dyn ProduceSession>, DriverError>>;
    /// A new consumer of `partitions` with its own connections; `keep_values` keeps
    /// record values in [`Fetched::values`] (e2e reads their headers).
    fn consumer<'a>(
        &'a self,
        topic: &'a str,
        partitions: Vec<i32>,
        start: StartAt,
        keep_values: bool,
    ) -> BoxFut<'a, Result<Box<dyn ConsumeSession>, DriverError>>;
}

/// The protocol a run uses.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum, serde::Serialize, serde::Deserialize,
)]
pub enum Protocol {
    /// The Kafka wire protocol (any Kafka-compatible broker).
    Kafka,
    /// Strand's native protocol (the node's native port, 9093 by default).
    Native,
}

/// Connects a driver for `protocol`.
pub async fn connect(
    protocol: Protocol,
    bootstrap: &str,
) -> Result<std::sync::Arc<dyn Driver>, DriverError> {
    match protocol {
        Protocol::Kafka => Ok(std::sync::Arc::new(
            crate::kafka_driver::KafkaDriver::connect(bootstrap).await?,
        )),
        Protocol::Native => Ok(std::sync::Arc::new(
            crate::native_driver::NativeDriver::connect(bootstrap).await?,
        )),
    }
}
