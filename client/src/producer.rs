//! The producer: per-partition batching, partitioning, idempotence and retries.
//!
//! One background task (the accumulator) owns every partition's open batch and queue;
//! [`Producer::send`] hands it a record and returns a [`DeliveryFuture`]. A batch is sealed
//! when it reaches `batch_size_bytes` or has waited `linger`, and sent to the connection of
//! the shard that owns its partition: the batches sent in one turn go as one request per
//! shard (at most one batch per partition in a request), and up to
//! `max_in_flight_per_partition` batches of a partition are in flight at once.
//!
//! Invariants: a partition's batches are queued on the connection in sequence order by the
//! accumulator itself (never by racing tasks), and its flights are kept in that order.
//! With idempotence at most `BATCHES_IN_FLIGHT_IDEMPOTENT_MAX` batches of a partition are
//! in flight (what the broker remembers per producer), sequence numbers are assigned when a
//! batch is first sent, and a retry resends the same bytes (same producer id and
//! sequence), so the broker answers a duplicate with the original offset. A batch answered
//! retriably (or out of order while an earlier batch of its partition is unresolved) is
//! sent again once nothing of its partition is in flight, one batch at a time, in order,
//! before any new batch. After a batch fails for good, the producer takes a new producer
//! id before sending more and resends its unacknowledged batches renumbered under it, so
//! no later batch can be mistaken for the failed one. Buffered record bytes are bounded
//! by `buffer_bytes_max` (then `send` waits).

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

use crate::client::{Client, TopicBatch};
use crate::clock;
use crate::error::{Error, Result};
use strand_wire::partitioner::partition_for_key;

/// Records queued between `send` and the accumulator before `send` waits.
const COMMAND_QUEUE_RECORDS: usize = 1024;
/// Completions queued from sender tasks to the accumulator.
const COMPLETION_QUEUE: usize = 1024;
/// Batches of one partition in flight at most with idempotence: the broker remembers the
/// last five batches of each producer (Kafka's cap for `max.in.flight.requests.per.connection`
/// with idempotence), so a retry of any of them is recognised as a duplicate.
pub const BATCHES_IN_FLIGHT_IDEMPOTENT_MAX: usize = 5;

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
    /// Batches of one partition in flight (at most `BATCHES_IN_FLIGHT_IDEMPOTENT_MAX` when
    /// idempotent).
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
            next_flight_id: 0,
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

/// A batch sent and not yet acknowledged or failed for good.
struct Flight {
    /// Names the flight in its completion.
    id: u64,
    records: i32,
    /// The bytes as sent (a retry sends them again).
    batch: Bytes,
    waiters: Vec<Waiter>,
    bytes: usize,
    deadline: tokio::time::Instant,
    /// Its answer is awaited (false: answered retriably, to be sent again).
    out: bool,
}

#[derive(Default)]
struct PartQueue {
    open: Option<OpenBatch>,
    sealed: VecDeque<Sealed>,
    /// Sent batches not yet acknowledged or failed for good, in the order sent.
    flights: VecDeque<Flight>,
    next_sequence: i32,
    /// A batch to send again waits until then (the retry backoff).
    resend_after: Option<tokio::time::Instant>,
}

impl PartQueue {
    fn out(&self) -> usize {
        self.flights.iter().filter(|f| f.out).count()
    }

    /// Some batch was answered retriably and waits to be sent again.
    fn recovering(&self) -> bool {
        self.flights.iter().any(|f| !f.out)
    }
}

struct Completion {
    topic: String,
    partition: i32,
    id: u64,
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
    next_flight_id: u64,
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
            let resend_deadline = self
                .parts
                .values()
                .filter(|q| q.recovering() && q.out() == 0)
                .filter_map(|q| q.resend_after)
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
                _ = sleep_until(resend_deadline), if resend_deadline.is_some() => {}
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
            .all(|q| q.open.is_none() && q.sealed.is_empty() && q.flights.is_empty())
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

    /// Batches of one partition in flight at most.
    fn in_flight_limit(&self) -> usize {
        let limit = self.config.max_in_flight_per_partition.max(1);
        if self.config.idempotent {
            limit.min(BATCHES_IN_FLIGHT_IDEMPOTENT_MAX)
        } else {
            limit
        }
    }

    /// Sends what may go now: each recovering partition's next batch to send again (once
    /// nothing of it is in flight and its backoff passed), and sealed batches of the
    /// others up to the in-flight limit; in rounds of at most one batch per partition, one
    /// request per shard each, queued in order.
    async fn dispatch(&mut self) {
        if !self.producer_id_current().await {
            return;
        }
        let now = clock::now();
        let plan = self.plan(now);
        for (key, id) in plan.expired {
            let e = Error::Timeout {
                timeout_ms: u64::try_from(self.config.delivery_timeout.as_millis())
                    .unwrap_or(u64::MAX),
            };
            self.fail_flight(&key, id, e);
        }
        if !plan.refresh.is_empty() {
            // The shard map may be stale (moved partition, restarted broker with new shard
            // ports). Best effort: if this fails, the resend fails and is retried too.
            let topics: Vec<&str> = plan.refresh.iter().map(String::as_str).collect();
            let _ = self.client.refresh_metadata(&topics).await;
        }
        for round in plan.rounds {
            self.send_round(round, now).await;
        }
    }

    /// Whether batches may be sent under the current producer id: takes a new one when a
    /// batch failed for good and nothing is in flight any more (false while waiting).
    async fn producer_id_current(&mut self) -> bool {
        if !self.renew_producer_id {
            return true;
        }
        if self.parts.values().any(|q| q.out() > 0) {
            return false; // wait for in-flight batches of the old producer id
        }
        let waiting = self
            .parts
            .values()
            .any(|q| !q.sealed.is_empty() || !q.flights.is_empty());
        if !waiting {
            return false;
        }
        match init_producer_id(&self.client).await {
            Ok(id) => {
                self.renumber(id);
                true
            }
            Err(e) => {
                self.fail_unsent(&e);
                false
            }
        }
    }

    /// What to send now (and which resends ran out of time, which topics to look up).
    fn plan(&mut self, now: tokio::time::Instant) -> Plan {
        let limit = self.in_flight_limit();
        let zstd_level = match self.config.compression {
            Compression::None => None,
            Compression::Zstd { level } => Some(level),
        };
        let mut plan = Plan::default();
        for (key, q) in self.parts.iter_mut() {
            if q.recovering() {
                if q.out() > 0 || q.resend_after.is_some_and(|t| now < t) {
                    continue;
                }
                let Some(f) = q.flights.iter_mut().find(|f| !f.out) else {
                    continue;
                };
                if now >= f.deadline {
                    plan.expired.push((key.clone(), f.id));
                    continue;
                }
                f.out = true;
                if !plan.refresh.contains(&key.0) {
                    plan.refresh.push(key.0.clone());
                }
                plan.push(0, Outgoing::of(key, f));
                continue;
            }
            let mut round = 0;
            while q.out() < limit {
                let Some(s) = q.sealed.pop_front() else { break };
                let records = s.builder.len();
                let builder = match self.producer_id {
                    Some((id, epoch)) => s.builder.producer(id, epoch, q.next_sequence),
                    None => s.builder,
                };
                let batch = match crate::records::build(&builder, zstd_level) {
                    Ok(b) => b,
                    Err(e) => {
                        self.buffered_bytes = self.buffered_bytes.saturating_sub(s.bytes);
                        for (w, _) in s.waiters {
                            let _ = w.send(Err(e.clone()));
                        }
                        continue;
                    }
                };
                // Kafka sequences wrap from i32::MAX to 0.
                q.next_sequence = q.next_sequence.wrapping_add(records) & i32::MAX;
                let f = Flight {
                    id: self.next_flight_id,
                    records,
                    batch,
                    waiters: s.waiters,
                    bytes: s.bytes,
                    deadline: s.deadline,
                    out: true,
                };
                self.next_flight_id += 1;
                plan.push(round, Outgoing::of(key, &f));
                round += 1;
                q.flights.push_back(f);
            }
        }
        plan
    }

    /// Queues one round on the connections (in order) and leaves its answers to a task.
    async fn send_round(&self, round: Vec<Outgoing>, now: tokio::time::Instant) {
        let deadline = round.iter().map(|o| o.deadline).min().unwrap_or(now);
        let timeout = self
            .client
            .request_timeout()
            .min(deadline.saturating_duration_since(now))
            .max(Duration::from_millis(1));
        let batches: Vec<TopicBatch<'_>> = round
            .iter()
            .map(|o| TopicBatch {
                topic: &o.key.0,
                partition: o.key.1,
                batch: o.batch.clone(),
            })
            .collect();
        let sent = self
            .client
            .send_produce(self.config.acks, &batches, timeout)
            .await;
        let done = self.done_tx.clone();
        let ids: Vec<((String, i32), u64)> = round.into_iter().map(|o| (o.key, o.id)).collect();
        tokio::spawn(async move {
            let results = sent.answers(timeout).await;
            for (((topic, partition), id), result) in ids.into_iter().zip(results) {
                let c = Completion {
                    topic,
                    partition,
                    id,
                    result,
                };
                if done.send(c).await.is_err() {
                    return;
                }
            }
        });
    }

    /// Takes the new producer id and renumbers every partition's unacknowledged batches
    /// under it, in order, to be sent again; sealed batches follow them.
    fn renumber(&mut self, (id, epoch): (i64, i16)) {
        self.producer_id = Some((id, epoch));
        self.renew_producer_id = false;
        let mut failed: Vec<((String, i32), u64, Error)> = Vec::new();
        for (key, q) in self.parts.iter_mut() {
            q.next_sequence = 0;
            q.resend_after = None;
            for f in q.flights.iter_mut() {
                let mut bytes = f.batch.to_vec();
                match strand_wire::set_producer(&mut bytes, id, epoch, q.next_sequence) {
                    Ok(()) => {
                        f.batch = Bytes::from(bytes);
                        f.out = false;
                        q.next_sequence = q.next_sequence.wrapping_add(f.records) & i32::MAX;
                    }
                    Err(e) => failed.push((key.clone(), f.id, Error::Records(e.to_string()))),
                }
            }
        }
        for (key, id, e) in failed {
            self.fail_flight(&key, id, e);
        }
    }

    /// Fails every batch not in flight (sealed, or waiting to be sent again) with `e`.
    fn fail_unsent(&mut self, e: &Error) {
        for q in self.parts.values_mut() {
            let mut failed: Vec<(Vec<Waiter>, usize)> = Vec::new();
            q.flights.retain_mut(|f| {
                if !f.out {
                    failed.push((std::mem::take(&mut f.waiters), f.bytes));
                }
                f.out
            });
            failed.extend(q.sealed.drain(..).map(|s| (s.waiters, s.bytes)));
            for (waiters, bytes) in failed {
                self.buffered_bytes = self.buffered_bytes.saturating_sub(bytes);
                for (w, _) in waiters {
                    let _ = w.send(Err(e.clone()));
                }
            }
        }
    }

    /// Fails flight `id` of partition `key` for good with `e`; with idempotence, the
    /// batches after it go under a new producer id.
    fn fail_flight(&mut self, key: &(String, i32), id: u64, e: Error) {
        let Some(q) = self.parts.get_mut(key) else {
            return;
        };
        let Some(pos) = q.flights.iter().position(|f| f.id == id) else {
            return;
        };
        let Some(f) = q.flights.remove(pos) else {
            return;
        };
        self.buffered_bytes = self.buffered_bytes.saturating_sub(f.bytes);
        if self.config.idempotent {
            // The batch may or may not be in the log: later batches must not reuse its
            // sequence numbers under this producer id.
            self.renew_producer_id = true;
        }
        for (w, _) in f.waiters {
            let _ = w.send(Err(e.clone()));
        }
    }

    fn complete(&mut self, c: Completion) {
        let key = (c.topic, c.partition);
        let idempotent = self.config.idempotent;
        let renewing = self.renew_producer_id;
        let backoff = self.config.retry_backoff;
        let Some(q) = self.parts.get_mut(&key) else {
            return;
        };
        let Some(pos) = q.flights.iter().position(|f| f.id == c.id) else {
            return;
        };
        let e = match c.result {
            Ok(base) => {
                let Some(f) = q.flights.remove(pos) else {
                    return;
                };
                self.buffered_bytes = self.buffered_bytes.saturating_sub(f.bytes);
                for (i, (w, ts)) in f.waiters.into_iter().enumerate() {
                    let offset = if base < 0 { -1 } else { base + i as i64 };
                    let _ = w.send(Ok(RecordMetadata {
                        topic: key.0.clone(),
                        partition: key.1,
                        offset,
                        timestamp_ms: ts,
                    }));
                }
                return;
            }
            Err(e) => e,
        };
        let now = clock::now();
        let Some(f) = q.flights.get_mut(pos) else {
            return;
        };
        // Out of order while an earlier batch of the partition is unresolved (or failed
        // for good, its successors to be renumbered): this one waits for that one.
        let behind = idempotent
            && e.code() == Some(codes::OUT_OF_ORDER_SEQUENCE_NUMBER)
            && (pos > 0 || renewing);
        if (e.is_retriable() || behind) && now + backoff < f.deadline {
            f.out = false;
            q.resend_after = Some(now + backoff);
            return;
        }
        self.fail_flight(&key, c.id, e);
    }
}

/// One batch to send: its partition, flight and bytes.
struct Outgoing {
    key: (String, i32),
    id: u64,
    batch: Bytes,
    deadline: tokio::time::Instant,
}

impl Outgoing {
    fn of(key: &(String, i32), f: &Flight) -> Outgoing {
        Outgoing {
            key: key.clone(),
            id: f.id,
            batch: f.batch.clone(),
            deadline: f.deadline,
        }
    }
}

/// What one dispatch sends, in rounds of at most one batch per partition (a partition's
/// r-th batch in round r), and what it found.
#[derive(Default)]
struct Plan {
    rounds: Vec<Vec<Outgoing>>,
    /// Resends whose delivery timeout passed: (partition, flight id).
    expired: Vec<((String, i32), u64)>,
    /// Topics whose shard map to look up again before resending.
    refresh: Vec<String>,
}

impl Plan {
    fn push(&mut self, round: usize, o: Outgoing) {
        while self.rounds.len() <= round {
            self.rounds.push(Vec::new());
        }
        if let Some(r) = self.rounds.get_mut(round) {
            r.push(o);
        }
    }
}

async fn sleep_until(deadline: Option<tokio::time::Instant>) {
    match deadline {
        Some(d) => tokio::time::sleep_until(d).await,
        None => std::future::pending().await,
    }
}
