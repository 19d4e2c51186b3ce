//! The producer: per-partition batching, partitioning, idempotence and retries.
//!
//! One background task (the accumulator) owns every partition's open batch and queue;
//! [`Producer::send`] hands it a record and returns a [`DeliveryFuture`]. A batch is sealed
//! when it reaches `batch_size_bytes` or has waited `linger`, and sent to the connection of
//! the shard that owns its partition, one request per batch.
//!
//! Invariants: with idempotence, at most one batch per partition is in flight, and its
//! sequence numbers are assigned when it is sent; a retry resends the same bytes (same
//! producer id and sequence), so the broker answers a duplicate with the original offset.
//! After a batch fails for good, the producer takes a new producer id before sending more,
//! so no later batch can be mistaken for it. Buffered record bytes are bounded by
//! `buffer_bytes_max` (then `send` waits).

use std::collections::{HashMap, VecDeque};
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use strand_wire::native::codes;
use strand_wire::native::generated::*;
use strand_wire::BatchBuilder;
use tokio::sync::{mpsc, oneshot};

use crate::client::Client;
use crate::clock;
use crate::error::{Error, Result};
use strand_wire::partitioner::partition_for_key;

/// Records queued between `send` and the accumulator before `send` waits.
const COMMAND_QUEUE_RECORDS: usize = 1024;
/// Completions queued from sender tasks to the accumulator.
const COMPLETION_QUEUE: usize = 1024;

/// How many replicas must have a batch before it counts as written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Acks {
    /// No answer at all (offsets are reported as -1).
    None,
    /// The partition leader appended it.
    Leader,
    /// Committed: durable on the leader (and, with replication, a majority).
    All,
}

impl Acks {
    pub(crate) fn wire(self) -> i8 {
        match self {
            Acks::None => 0,
            Acks::Leader => 1,
            Acks::All => -1,
        }
    }
}

/// Batch compression.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Compression {
    /// Uncompressed.
    None,
    /// zstd at this level (1-22; 3 is zstd's default).
    Zstd {
        /// Compression level.
        level: i32,
    },
}

/// Producer settings.
#[derive(Debug, Clone)]
pub struct ProducerConfig {
    /// Durability to wait for.
    pub acks: Acks,
    /// How long a batch waits for more records before it is sent.
    pub linger: Duration,
    /// A batch is sent once it reaches this size.
    pub batch_size_bytes: usize,
    /// Batch compression.
    pub compression: Compression,
    /// Producer id + sequence numbers: retries never duplicate (needs `acks = All`).
    pub idempotent: bool,
    /// Batches of one partition in flight (1 when idempotent).
    pub max_in_flight_per_partition: usize,
    /// How long a record may take from `send` to acknowledged, retries included.
    pub delivery_timeout: Duration,
    /// Wait between retries.
    pub retry_backoff: Duration,
    /// Record bytes buffered in the producer before `send` waits.
    pub buffer_bytes_max: usize,
}

impl Default for ProducerConfig {
    fn default() -> Self {
        ProducerConfig {
            acks: Acks::All,
            linger: Duration::from_millis(1),
            batch_size_bytes: 16 * 1024,
            compression: Compression::None,
            idempotent: true,
            max_in_flight_per_partition: 5,
            delivery_timeout: Duration::from_secs(120),
            retry_backoff: Duration::from_millis(100),
            buffer_bytes_max: 32 * 1024 * 1024,
        }
    }
}

/// A record to send.
#[derive(Debug, Clone, Default)]
pub struct ProducerRecord {
    /// Topic.
    pub topic: String,
    /// Partition; `None` = by key (murmur2, as Kafka), or sticky when there is no key.
    pub partition: Option<i32>,
    /// Key.
    pub key: Option<Bytes>,
    /// Value (`None` = tombstone).
    pub value: Option<Bytes>,
    /// Headers.
    pub headers: Vec<(String, Option<Bytes>)>,
    /// Create time in ms; `None` = now.
    pub timestamp_ms: Option<i64>,
}

impl ProducerRecord {
    /// A record for `topic` with no key and no value yet.
    pub fn new(topic: impl Into<String>) -> ProducerRecord {
        ProducerRecord {
            topic: topic.into(),
            ..ProducerRecord::default()
        }
    }
    /// Sets the key.
    pub fn key(mut self, key: impl Into<Bytes>) -> Self {
        self.key = Some(key.into());
        self
    }
    /// Sets the value.
    pub fn value(mut self, value: impl Into<Bytes>) -> Self {
        self.value = Some(value.into());
        self
    }
    /// Adds a header.
    pub fn header(mut self, key: impl Into<String>, value: impl Into<Bytes>) -> Self {
        self.headers.push((key.into(), Some(value.into())));
        self
    }
    /// Pins the partition.
    pub fn partition(mut self, partition: i32) -> Self {
        self.partition = Some(partition);
        self
    }
    /// Sets the create time.
    pub fn timestamp_ms(mut self, timestamp_ms: i64) -> Self {
        self.timestamp_ms = Some(timestamp_ms);
        self
    }
    fn size_bytes(&self) -> usize {
        let h: usize = self
            .headers
            .iter()
            .map(|(k, v)| k.len() + v.as_ref().map_or(0, Bytes::len) + 4)
            .sum();
        self.key.as_ref().map_or(0, Bytes::len) + self.value.as_ref().map_or(0, Bytes::len) + h + 24
    }
}

/// Where a record was written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordMetadata {
    /// Topic.
    pub topic: String,
    /// Partition.
    pub partition: i32,
    /// Offset (-1 with `Acks::None`).
    pub offset: i64,
    /// The record's timestamp.
    pub timestamp_ms: i64,
}

/// Resolves when the record is acknowledged (or failed for good).
#[derive(Debug)]
pub struct DeliveryFuture(oneshot::Receiver<Result<RecordMetadata>>);

impl Future for DeliveryFuture {
    type Output = Result<RecordMetadata>;
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        Pin::new(&mut self.0)
            .poll(cx)
            .map(|r| r.unwrap_or(Err(Error::ProducerClosed)))
    }
}

type Waiter = (oneshot::Sender<Result<RecordMetadata>>, i64);

enum Command {
    Record(ProducerRecord, oneshot::Sender<Result<RecordMetadata>>),
    Flush(oneshot::Sender<()>),
}

/// Sends records; cheap to clone (all clones feed one accumulator).
#[derive(Debug, Clone)]
pub struct Producer {
    tx: mpsc::Sender<Command>,
}

impl Producer {
    pub(crate) async fn start(client: Client, config: ProducerConfig) -> Result<Producer> {
        if config.idempotent && config.acks != Acks::All {
            return Err(Error::Config(
                "idempotence needs acks = All (as in Kafka)".into(),
            ));
        }
        if config.batch_size_bytes == 0 || config.buffer_bytes_max < config.batch_size_bytes {
            return Err(Error::Config(
                "batch_size_bytes must be positive and at most buffer_bytes_max".into(),
            ));
        }
        let producer_id = if config.idempotent {
            Some(init_producer_id(&client).await?)
        } else {
            None
        };
        let (tx, rx) = mpsc::channel(COMMAND_QUEUE_RECORDS);
        let (done_tx, done_rx) = mpsc::channel(COMPLETION_QUEUE);
        let acc = Accumulator {
            client,
            config,
            producer_id,
            renew_producer_id: false,
            parts: HashMap::new(),
            sticky: HashMap::new(),
            buffered_bytes: 0,
            done_tx,
            flush_waiters: Vec::new(),
        };
        tokio::spawn(acc.run(rx, done_rx));
        Ok(Producer { tx })
    }

    /// Queues `record`; the returned future resolves when it is acknowledged. Waits when
    /// the producer's buffer is full.
    pub async fn send(&self, record: ProducerRecord) -> Result<DeliveryFuture> {
        let (tx, rx) = oneshot::channel();
        self.tx
            .send(Command::Record(record, tx))
            .await
            .map_err(|_| Error::ProducerClosed)?;
        Ok(DeliveryFuture(rx))
    }

    /// Sends every buffered record now and waits until all are acknowledged or failed.
    pub async fn flush(&self) -> Result<()> {
        let (tx, rx) = oneshot::channel();
        self.tx
            .send(Command::Flush(tx))
            .await
            .map_err(|_| Error::ProducerClosed)?;
        rx.await.map_err(|_| Error::ProducerClosed)
    }
}

async fn init_producer_id(client: &Client) -> Result<(i64, i16)> {
    let conn = client.control().await?;
    let req = BodyT::InitProducerIdRequest(Box::default());
    match conn.request(req, client.request_timeout()).await? {
        BodyT::InitProducerIdResponse(r) => match r.error.as_deref() {
            Some(e) => Err(Error::from_wire(e)),
            None => Ok((r.producer_id, r.producer_epoch)),
        },
        _ => Err(Error::Protocol(
            "producer id request answered with another message".into(),
        )),
    }
}

struct OpenBatch {
    builder: BatchBuilder,
    waiters: Vec<Waiter>,
    bytes: usize,
    opened_at: tokio::time::Instant,
}

struct Sealed {
    builder: BatchBuilder,
    waiters: Vec<Waiter>,
    bytes: usize,
    deadline: tokio::time::Instant,
}

#[derive(Default)]
struct PartQueue {
    open: Option<OpenBatch>,
    sealed: VecDeque<Sealed>,
    in_flight: usize,
    next_sequence: i32,
}

struct Completion {
    topic: String,
    partition: i32,
    waiters: Vec<Waiter>,
    bytes: usize,
    records: i32,
    result: Result<i64>,
}

struct Accumulator {
    client: Client,
    config: ProducerConfig,
    producer_id: Option<(i64, i16)>,
    renew_producer_id: bool,
    parts: HashMap<(String, i32), PartQueue>,
    /// Keyless records of a topic go to one partition until its batch is sealed:
    /// (current partition, partition count).
    sticky: HashMap<String, (u32, u32)>,
    buffered_bytes: usize,
    done_tx: mpsc::Sender<Completion>,
    flush_waiters: Vec<oneshot::Sender<()>>,
}

impl Accumulator {
    async fn run(
        mut self,
        mut rx: mpsc::Receiver<Command>,
        mut done_rx: mpsc::Receiver<Completion>,
    ) {
        let mut open = true;
        loop {
            let linger_deadline = self
                .parts
                .values()
                .filter_map(|q| q.open.as_ref().map(|b| b.opened_at + self.config.linger))
                .min();
            let room = self.buffered_bytes < self.config.buffer_bytes_max;
            tokio::select! {
                cmd = rx.recv(), if open && room => match cmd {
                    Some(Command::Record(rec, tx)) => self.add(rec, tx).await,
                    Some(Command::Flush(tx)) => {
                        self.seal_all();
                        self.flush_waiters.push(tx);
                    }
                    None => {
                        open = false;
                        self.seal_all();
                    }
                },
                Some(done) = done_rx.recv() => self.complete(done),
                _ = sleep_until(linger_deadline), if linger_deadline.is_some() => self.seal_expired(),
            }
            self.dispatch().await;
            if self.idle() {
                for w in self.flush_waiters.drain(..) {
                    let _ = w.send(());
                }
                if !open {
                    return;
                }
            }
        }
    }

    fn idle(&self) -> bool {
        self.parts
            .values()
            .all(|q| q.open.is_none() && q.sealed.is_empty() && q.in_flight == 0)
    }

    async fn add(&mut self, rec: ProducerRecord, tx: oneshot::Sender<Result<RecordMetadata>>) {
        let size = rec.size_bytes();
        let limit = self.client.batch_bytes_max();
        if size + strand_wire::BATCH_HEADER_BYTES > limit {
            let _ = tx.send(Err(Error::Broker {
                code: codes::MESSAGE_TOO_LARGE,
                message: format!("record of {size} bytes exceeds the broker's {limit}"),
                retriable: false,
            }));
            return;
        }
        let partition = match self.partition_for(&rec).await {
            Ok(p) => p,
            Err(e) => {
                let _ = tx.send(Err(e));
                return;
            }
        };
        let key = (rec.topic.clone(), partition);
        let batch_limit = self.config.batch_size_bytes.min(limit);
        let full = self
            .parts
            .get(&key)
            .and_then(|q| q.open.as_ref())
            .is_some_and(|b| b.builder.size_bytes() + size > batch_limit);
        if full {
            self.seal(&key);
        }
        let ts = rec.timestamp_ms.unwrap_or_else(clock::unix_ms);
        let q = self.parts.entry(key.clone()).or_default();
        let b = q.open.get_or_insert_with(|| OpenBatch {
            builder: BatchBuilder::new(ts),
            waiters: Vec::new(),
            bytes: 0,
            opened_at: clock::now(),
        });
        let headers: Vec<(&str, Option<&[u8]>)> = rec
            .headers
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_deref()))
            .collect();
        b.builder
            .push(ts, rec.key.as_deref(), rec.value.as_deref(), &headers);
        b.waiters.push((tx, ts));
        b.bytes += size;
        self.buffered_bytes += size;
        if b.builder.size_bytes() >= batch_limit {
            self.seal(&key);
        }
    }

    async fn partition_for(&mut self, rec: &ProducerRecord) -> Result<i32> {
        let count = self.client.partition_count(&rec.topic).await?;
        if let Some(p) = rec.partition {
            return match u32::try_from(p) {
                Ok(u) if u < count => Ok(p),
                _ => Err(Error::UnknownPartition {
                    topic: rec.topic.clone(),
                    partition: p,
                }),
            };
        }
        let p = match &rec.key {
            Some(k) => partition_for_key(k, count),
            None => {
                // Topics start on different partitions so their batches spread.
                let first = u32::try_from(self.sticky.len()).unwrap_or(0) % count;
                let entry = self
                    .sticky
                    .entry(rec.topic.clone())
                    .or_insert((first, count));
                entry.1 = count;
                entry.0 % count
            }
        };
        i32::try_from(p).map_err(|_| Error::Protocol("partition index".into()))
    }

    fn seal(&mut self, key: &(String, i32)) {
        let Some(q) = self.parts.get_mut(key) else {
            return;
        };
        let Some(b) = q.open.take() else {
            return;
        };
        q.sealed.push_back(Sealed {
            builder: b.builder,
            waiters: b.waiters,
            bytes: b.bytes,
            deadline: b.opened_at + self.config.delivery_timeout,
        });
        // Sticky partitioning moves on once a keyless batch is sealed.
        if let Some((p, n)) = self.sticky.get_mut(&key.0) {
            if i32::try_from(*p) == Ok(key.1) {
                *p = (*p + 1) % (*n).max(1);
            }
        }
    }

    fn seal_all(&mut self) {
        let keys: Vec<_> = self
            .parts
            .iter()
            .filter(|(_, q)| q.open.is_some())
            .map(|(k, _)| k.clone())
            .collect();
        for k in keys {
            self.seal(&k);
        }
    }

    fn seal_expired(&mut self) {
        let now = clock::now();
        let keys: Vec<_> = self
            .parts
            .iter()
            .filter(|(_, q)| {
                q.open
                    .as_ref()
                    .is_some_and(|b| b.opened_at + self.config.linger <= now)
            })
            .map(|(k, _)| k.clone())
            .collect();
        for k in keys {
            self.seal(&k);
        }
    }

    async fn dispatch(&mut self) {
        let limit = if self.config.idempotent {
            1
        } else {
            self.config.max_in_flight_per_partition.max(1)
        };
        let ready = self
            .parts
            .values()
            .any(|q| !q.sealed.is_empty() && q.in_flight < limit);
        if !ready {
            return;
        }
        if self.renew_producer_id && self.parts.values().all(|q| q.in_flight == 0) {
            match init_producer_id(&self.client).await {
                Ok(id) => {
                    self.producer_id = Some(id);
                    self.renew_producer_id = false;
                    for q in self.parts.values_mut() {
                        q.next_sequence = 0;
                    }
                }
                Err(e) => {
                    self.fail_sealed(&e);
                    return;
                }
            }
        }
        if self.renew_producer_id {
            return; // wait for in-flight batches of the old producer id
        }
        let zstd_level = match self.config.compression {
            Compression::None => None,
            Compression::Zstd { level } => Some(level),
        };
        for ((topic, partition), q) in self.parts.iter_mut() {
            while q.in_flight < limit {
                let Some(s) = q.sealed.pop_front() else { break };
                let records = s.builder.len();
                let builder = match self.producer_id {
                    Some((id, epoch)) => s.builder.producer(id, epoch, q.next_sequence),
                    None => s.builder,
                };
                q.in_flight += 1;
                let done = self.done_tx.clone();
                let (topic, partition) = (topic.clone(), *partition);
                let client = self.client.clone();
                let config = self.config.clone();
                let bytes = crate::records::build(&builder, zstd_level);
                tokio::spawn(async move {
                    let result = match bytes {
                        Ok(b) => deliver(&client, &config, &topic, partition, b, s.deadline).await,
                        Err(e) => Err(e),
                    };
                    let _ = done
                        .send(Completion {
                            topic,
                            partition,
                            waiters: s.waiters,
                            bytes: s.bytes,
                            records,
                            result,
                        })
                        .await;
                });
            }
        }
    }

    fn fail_sealed(&mut self, e: &Error) {
        for q in self.parts.values_mut() {
            for s in q.sealed.drain(..) {
                self.buffered_bytes = self.buffered_bytes.saturating_sub(s.bytes);
                for (w, _) in s.waiters {
                    let _ = w.send(Err(e.clone()));
                }
            }
        }
    }

    fn complete(&mut self, c: Completion) {
        self.buffered_bytes = self.buffered_bytes.saturating_sub(c.bytes);
        let key = (c.topic.clone(), c.partition);
        if let Some(q) = self.parts.get_mut(&key) {
            q.in_flight = q.in_flight.saturating_sub(1);
            if c.result.is_ok() {
                // Kafka sequences wrap from i32::MAX to 0.
                q.next_sequence = q.next_sequence.wrapping_add(c.records) & i32::MAX;
            }
        }
        match c.result {
            Ok(base) => {
                for (i, (w, ts)) in c.waiters.into_iter().enumerate() {
                    let offset = if base < 0 { -1 } else { base + i as i64 };
                    let _ = w.send(Ok(RecordMetadata {
                        topic: c.topic.clone(),
                        partition: c.partition,
                        offset,
                        timestamp_ms: ts,
                    }));
                }
            }
            Err(e) => {
                if self.config.idempotent {
                    // The batch may or may not be in the log: later batches must not
                    // reuse its sequence numbers under this producer id.
                    self.renew_producer_id = true;
                }
                for (w, _) in c.waiters {
                    let _ = w.send(Err(e.clone()));
                }
            }
        }
    }
}

async fn sleep_until(deadline: Option<tokio::time::Instant>) {
    match deadline {
        Some(d) => tokio::time::sleep_until(d).await,
        None => std::future::pending().await,
    }
}

/// Sends one batch until it is acknowledged, fails for good, or `deadline` passes.
async fn deliver(
    client: &Client,
    config: &ProducerConfig,
    topic: &str,
    partition: i32,
    batch: Bytes,
    deadline: tokio::time::Instant,
) -> Result<i64> {
    loop {
        let now = clock::now();
        let timeout = client
            .request_timeout()
            .min(deadline.saturating_duration_since(now))
            .max(Duration::from_millis(1));
        let err = match client
            .produce_batch(topic, partition, config.acks, batch.clone(), timeout)
            .await
        {
            Ok(offset) => return Ok(offset),
            Err(e) => e,
        };
        if !err.is_retriable() || clock::now() + config.retry_backoff >= deadline {
            return Err(err);
        }
        tokio::time::sleep(config.retry_backoff).await;
        // The shard map may be stale (moved partition, restarted broker with new shard
        // ports). Best effort: if this fails, the next attempt fails and retries too.
        let _ = client.refresh_metadata(&[topic]).await;
    }
}
