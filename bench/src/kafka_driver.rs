//! [`Driver`] over the Kafka wire protocol (`kafka-protocol` codecs, tokio sockets):
//! ApiVersions negotiation, Metadata for leaders, CreateTopics for set-up, pipelined
//! Produce and long-poll Fetch.
//!
//! Invariant: every API is used at the highest version both sides support inside
//! [`OUR_VERSIONS`]; a broker without an overlap is refused at connect, never guessed at.
//! Leaders are looked up once per session (a benchmark does not survive leader changes;
//! errors are counted instead). Deliberately absent: idempotence, transactions, groups.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::create_topics_request::CreatableTopic;
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic};
use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::{
    ApiKey, ApiVersionsRequest, BrokerId, CreateTopicsRequest, DeleteTopicsRequest, FetchRequest,
    FetchResponse, ListOffsetsRequest, MetadataRequest, MetadataResponse, ProduceRequest,
    ProduceResponse, TopicName,
};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::records::{
    Compression, Record, RecordBatchDecoder, RecordBatchEncoder, RecordEncodeOptions, TimestampType,
};

use crate::driver::{
    Acked, BoxFut, Codec, ConsumeSession, Driver, DriverError, Fetched, InFlight, PartitionBatch,
    ProduceSession, ProducerOpts, SentRequest, StartAt, TopicSpec,
};
use crate::kafka_conn::{decode_response, Conn};

/// API versions this client can speak: (api, min, max). Fetch stops at 12 (13 names
/// topics by id); Produce at 9 (the last version naming topics by name only).
pub const OUR_VERSIONS: &[(ApiKey, i16, i16)] = &[
    (ApiKey::Produce, 3, 9),
    (ApiKey::Fetch, 4, 12),
    (ApiKey::ListOffsets, 1, 7),
    (ApiKey::Metadata, 1, 12),
    (ApiKey::CreateTopics, 2, 7),
];
/// APIs used when the broker has them: (api, min, max).
pub const OPTIONAL_VERSIONS: &[(ApiKey, i16, i16)] = &[(ApiKey::DeleteTopics, 1, 5)];
/// Bytes a fetch asks for in total (each partition: [`FETCH_PARTITION_BYTES_MAX`]).
pub const FETCH_BYTES_MAX: i32 = 64 << 20;
/// Bytes a fetch asks for per partition (Kafka's default `max.partition.fetch.bytes`).
const FETCH_PARTITION_BYTES_MAX: i32 = 1 << 20;
/// How long a fetch waits for data (long poll).
const FETCH_MAX_WAIT_MS: i32 = 100;
/// Broker-side timeout of a produce request and of topic creation.
const REQUEST_TIMEOUT_MS: i32 = 30_000;
/// How long set-up waits for every partition of a topic to have a leader.
const LEADERS_DEADLINE: Duration = Duration::from_secs(30);
/// Set-up requests (metadata, create, list offsets) in flight per connection.
const SETUP_IN_FLIGHT: usize = 1;

/// A Kafka-protocol broker (or cluster) reached through `bootstrap`.
pub struct KafkaDriver {
    bootstrap: String,
    versions: HashMap<i16, i16>,
}

fn broker_error(api: &'static str, code: i16) -> Option<DriverError> {
    ResponseError::try_from_code(code).map(|e| DriverError::Broker {
        api,
        code,
        name: e.to_string(),
    })
}

impl KafkaDriver {
    /// Connects to `bootstrap` and negotiates API versions.
    pub async fn connect(bootstrap: &str) -> Result<KafkaDriver, DriverError> {
        let conn = Conn::connect(bootstrap, SETUP_IN_FLIGHT).await?;
        // v0 is understood by every broker and lists all the others.
        let resp = conn.request(&ApiVersionsRequest::default(), 0).await?;
        if let Some(e) = broker_error("ApiVersions", resp.error_code) {
            return Err(e);
        }
        let mut versions = HashMap::new();
        for &(api, ours_min, ours_max) in OUR_VERSIONS {
            let key = api as i16;
            let Some(theirs) = resp.api_keys.iter().find(|k| k.api_key == key) else {
                return Err(DriverError::Unsupported(format!("broker lacks {api:?}")));
            };
            let v = ours_max.min(theirs.max_version);
            if v < ours_min.max(theirs.min_version) {
                return Err(DriverError::Unsupported(format!(
                    "{api:?}: broker speaks v{}..=v{}, we speak v{ours_min}..=v{ours_max}",
                    theirs.min_version, theirs.max_version
                )));
            }
            versions.insert(key, v);
        }
        for &(api, ours_min, ours_max) in OPTIONAL_VERSIONS {
            let key = api as i16;
            if let Some(theirs) = resp.api_keys.iter().find(|k| k.api_key == key) {
                let v = ours_max.min(theirs.max_version);
                if v >= ours_min.max(theirs.min_version) {
                    versions.insert(key, v);
                }
            }
        }
        Ok(KafkaDriver {
            bootstrap: bootstrap.to_string(),
            versions,
        })
    }

    fn version(&self, api: ApiKey) -> i16 {
        *self
            .versions
            .get(&(api as i16))
            .expect("every api in OUR_VERSIONS is negotiated at connect")
    }

    async fn metadata(&self, conn: &Conn, topic: &str) -> Result<MetadataResponse, DriverError> {
        let req = MetadataRequest::default()
            .with_topics(Some(vec![MetadataRequestTopic::default().with_name(Some(
                TopicName(StrBytes::from_string(topic.to_string())),
            ))]))
            .with_allow_auto_topic_creation(false);
        conn.request(&req, self.version(ApiKey::Metadata)).await
    }

    /// Partition → leader address, for `topic`; `Err` when any partition lacks a leader.
    async fn leaders(&self, conn: &Conn, topic: &str) -> Result<Leaders, DriverError> {
        let meta = self.metadata(conn, topic).await?;
        leaders_of(&meta, topic)
    }

    async fn create(&self, conn: &Conn, topic: &TopicSpec) -> Result<(), DriverError> {
        let version = self.version(ApiKey::CreateTopics);
        // Broker-default replication (-1) is understood from v4 on.
        let replication = if topic.replication_factor < 0 && version < 4 {
            1
        } else {
            topic.replication_factor
        };
        let req = CreateTopicsRequest::default()
            .with_topics(vec![CreatableTopic::default()
                .with_name(TopicName(StrBytes::from_string(topic.name.clone())))
                .with_num_partitions(topic.partitions)
                .with_replication_factor(replication)
                .with_configs(
                    topic
                        .configs
                        .iter()
                        .map(|(k, v)| {
                            kafka_protocol::messages::create_topics_request::CreatableTopicConfig::default()
                                .with_name(StrBytes::from_string(k.clone()))
                                .with_value(Some(StrBytes::from_string(v.clone())))
                        })
                        .collect(),
                )])
            .with_timeout_ms(REQUEST_TIMEOUT_MS);
        let resp = conn.request(&req, version).await?;
        for t in &resp.topics {
            // TOPIC_ALREADY_EXISTS: someone else made it; the metadata check decides.
            if t.error_code != 36 {
                if let Some(e) = broker_error("CreateTopics", t.error_code) {
                    return Err(e);
                }
            }
        }
        Ok(())
    }
}

/// Where each partition's leader is.
#[derive(Clone, Debug)]
struct Leaders {
    by_partition: BTreeMap<i32, String>,
}

fn leaders_of(meta: &MetadataResponse, topic: &str) -> Result<Leaders, DriverError> {
    let t = meta
        .topics
        .iter()
        .find(|t| t.name.as_ref().is_some_and(|n| n.0.as_str() == topic))
        .ok_or_else(|| DriverError::Protocol(format!("metadata without topic {topic}")))?;
    if let Some(e) = broker_error("Metadata", t.error_code) {
        return Err(e);
    }
    let brokers: HashMap<BrokerId, String> = meta
        .brokers
        .iter()
        .map(|b| (b.node_id, format!("{}:{}", b.host.as_str(), b.port)))
        .collect();
    let mut by_partition = BTreeMap::new();
    for p in &t.partitions {
        if let Some(e) = broker_error("Metadata", p.error_code) {
            return Err(e);
        }
        let addr = brokers.get(&p.leader_id).ok_or_else(|| {
            DriverError::Timeout(format!("partition {} has no leader yet", p.partition_index))
        })?;
        by_partition.insert(p.partition_index, addr.clone());
    }
    if by_partition.is_empty() {
        return Err(DriverError::Timeout(format!(
            "topic {topic} has no partitions yet"
        )));
    }
    Ok(Leaders { by_partition })
}

impl Driver for KafkaDriver {
    fn ensure_topic<'a>(&'a self, topic: &'a TopicSpec) -> BoxFut<'a, Result<i32, DriverError>> {
        Box::pin(async move {
            let conn = Conn::connect(&self.bootstrap, SETUP_IN_FLIGHT).await?;
            let meta = self.metadata(&conn, &topic.name).await?;
            let exists = meta.topics.iter().any(|t| {
                t.name.as_ref().is_some_and(|n| n.0.as_str() == topic.name)
                    && t.error_code == 0
                    && !t.partitions.is_empty()
            });
            if !exists {
                self.create(&conn, topic).await?;
            }
            let deadline = Instant::now() + LEADERS_DEADLINE;
            loop {
                match self.leaders(&conn, &topic.name).await {
                    Ok(l) if l.by_partition.len() >= topic.partitions as usize => {
                        return i32::try_from(l.by_partition.len())
                            .map_err(|_| DriverError::Protocol("partition count".into()));
                    }
                    Ok(l) if exists => {
                        return Err(DriverError::Unsupported(format!(
                            "topic {} exists with {} partitions, {} asked: delete it or pick \
                             another --topic",
                            topic.name,
                            l.by_partition.len(),
                            topic.partitions
                        )));
                    }
                    Ok(_) | Err(DriverError::Timeout(_)) | Err(DriverError::Broker { .. })
                        if Instant::now() < deadline =>
                    {
                        tokio::time::sleep(Duration::from_millis(50)).await;
                    }
                    Ok(l) => {
                        return Err(DriverError::Timeout(format!(
                            "{} of {} partitions of {} have a leader after {LEADERS_DEADLINE:?}",
                            l.by_partition.len(),
                            topic.partitions,
                            topic.name
                        )))
                    }
                    Err(e) => return Err(e),
                }
            }
        })
    }

    fn delete_topic<'a>(&'a self, topic: &'a str) -> BoxFut<'a, Result<(), DriverError>> {
        Box::pin(async move {
            let Some(&version) = self.versions.get(&(ApiKey::DeleteTopics as i16)) else {
                return Err(DriverError::Unsupported("broker lacks DeleteTopics".into()));
            };
            let conn = Conn::connect(&self.bootstrap, SETUP_IN_FLIGHT).await?;
            let req = DeleteTopicsRequest::default()
                .with_topic_names(vec![TopicName(StrBytes::from_string(topic.to_string()))])
                .with_timeout_ms(REQUEST_TIMEOUT_MS);
            let resp = conn.request(&req, version).await?;
            for r in &resp.responses {
                if let Some(e) = broker_error("DeleteTopics", r.error_code) {
                    return Err(e);
                }
            }
            Ok(())
        })
    }

    fn producer<'a>(
        &'a self,
        opts: &'a ProducerOpts,
    ) -> BoxFut<'a, Result<Box<dyn ProduceSession>, DriverError>> {
        Box::pin(async move {
            let setup = Conn::connect(&self.bootstrap, SETUP_IN_FLIGHT).await?;
            let leaders = self.leaders(&setup, &opts.topic).await?;
            let mut conns: HashMap<String, Arc<Conn>> = HashMap::new();
            for addr in leaders.by_partition.values() {
                if !conns.contains_key(addr) {
                    let c = Conn::connect(addr, opts.max_in_flight).await?;
                    conns.insert(addr.clone(), Arc::new(c));
                }
            }
            let s: Box<dyn ProduceSession> = Box::new(KafkaProducer {
                opts: opts.clone(),
                version: self.version(ApiKey::Produce),
                leaders,
                conns,
                topic_name: TopicName(StrBytes::from_string(opts.topic.clone())),
                encode_buf: BytesMut::new(),
            });
            Ok(s)
        })
    }

    fn consumer<'a>(
        &'a self,
        topic: &'a str,
        partitions: Vec<i32>,
        start: StartAt,
        keep_values: bool,
    ) -> BoxFut<'a, Result<Box<dyn ConsumeSession>, DriverError>> {
        Box::pin(async move {
            let setup = Conn::connect(&self.bootstrap, SETUP_IN_FLIGHT).await?;
            let leaders = self.leaders(&setup, topic).await?;
            let mut groups: BTreeMap<String, Vec<i32>> = BTreeMap::new();
            for p in partitions {
                let addr = leaders.by_partition.get(&p).ok_or_else(|| {
                    DriverError::Protocol(format!("partition {p} not in metadata"))
                })?;
                groups.entry(addr.clone()).or_default().push(p);
            }
            let mut fetchers = Vec::new();
            for (addr, parts) in groups {
                let conn = Arc::new(Conn::connect(&addr, SETUP_IN_FLIGHT).await?);
                let offsets = self.list_offsets(&conn, topic, &parts, start).await?;
                fetchers.push(Fetcher {
                    conn,
                    positions: parts.into_iter().zip(offsets).collect(),
                });
            }
            let s: Box<dyn ConsumeSession> = Box::new(KafkaConsumer {
                topic_name: TopicName(StrBytes::from_string(topic.to_string())),
                version: self.version(ApiKey::Fetch),
                fetchers,
                keep_values,
            });
            Ok(s)
        })
    }
}

impl KafkaDriver {
    async fn list_offsets(
        &self,
        conn: &Conn,
        topic: &str,
        partitions: &[i32],
        start: StartAt,
    ) -> Result<Vec<i64>, DriverError> {
        let timestamp = match start {
            StartAt::Earliest => -2,
            StartAt::Latest => -1,
        };
        let req = ListOffsetsRequest::default()
            .with_replica_id(BrokerId(-1))
            .with_topics(vec![ListOffsetsTopic::default()
                .with_name(TopicName(StrBytes::from_string(topic.to_string())))
                .with_partitions(
                    partitions
                        .iter()
                        .map(|&p| {
                            ListOffsetsPartition::default()
                                .with_partition_index(p)
                                .with_current_leader_epoch(-1)
                                .with_timestamp(timestamp)
                        })
                        .collect(),
                )]);
        let resp = conn
            .request(&req, self.version(ApiKey::ListOffsets))
            .await?;
        let mut out = Vec::with_capacity(partitions.len());
        for &p in partitions {
            let r = resp
                .topics
                .iter()
                .flat_map(|t| t.partitions.iter())
                .find(|r| r.partition_index == p)
                .ok_or_else(|| DriverError::Protocol(format!("no offset for partition {p}")))?;
            if let Some(e) = broker_error("ListOffsets", r.error_code) {
                return Err(e);
            }
            out.push(r.offset);
        }
        Ok(out)
    }
}

struct KafkaProducer {
    opts: ProducerOpts,
    version: i16,
    leaders: Leaders,
    conns: HashMap<String, Arc<Conn>>,
    topic_name: TopicName,
    encode_buf: BytesMut,
}

fn compression(codec: Codec) -> Compression {
    match codec {
        Codec::None => Compression::None,
        Codec::Zstd => Compression::Zstd,
        Codec::Lz4 => Compression::Lz4,
    }
}

impl KafkaProducer {
    fn encode_batch(&mut self, batch: &PartitionBatch) -> Result<Bytes, DriverError> {
        encode_batch(batch, self.opts.codec, &mut self.encode_buf)
    }
}

/// The producer fields of an encoded batch.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ProducerFields {
    pub id: i64,
    pub epoch: i16,
    /// The first record's sequence (-1: not idempotent).
    pub base_sequence: i32,
    pub transactional: bool,
}

impl ProducerFields {
    /// A plain producer: no id, no sequences.
    pub const NONE: ProducerFields = ProducerFields {
        id: -1,
        epoch: -1,
        base_sequence: -1,
        transactional: false,
    };
}

/// One partition's records as a Kafka RecordBatch v2 (kafka-protocol's encoder), the same
/// bytes whichever protocol carries them, so both protocols are loaded alike.
pub(crate) fn encode_batch(
    batch: &PartitionBatch,
    codec: Codec,
    buf: &mut BytesMut,
) -> Result<Bytes, DriverError> {
    let records = batch
        .records
        .iter()
        .map(|r| (r.key.clone(), r.value.clone()));
    encode_records(records, codec, ProducerFields::NONE, buf)
}

/// (key, value) records as one RecordBatch v2 of `producer`.
pub(crate) fn encode_records(
    records: impl Iterator<Item = (Option<Bytes>, Bytes)>,
    codec: Codec,
    producer: ProducerFields,
    buf: &mut BytesMut,
) -> Result<Bytes, DriverError> {
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX));
    let records: Vec<Record> = records
        .enumerate()
        .map(|(i, (key, value))| Record {
            transactional: producer.transactional,
            control: false,
            delete_horizon: false,
            partition_leader_epoch: -1,
            producer_id: producer.id,
            producer_epoch: producer.epoch,
            timestamp_type: TimestampType::Creation,
            offset: i as i64,
            // The encoder starts a new batch where offset - sequence changes, so the
            // sequence moves with the offset (base -1: no idempotence).
            sequence: producer.base_sequence.wrapping_add(i as i32),
            timestamp: now_ms,
            key,
            value: Some(value),
            headers: Default::default(),
        })
        .collect();
    buf.clear();
    let options = RecordEncodeOptions {
        version: 2,
        compression: compression(codec),
    };
    RecordBatchEncoder::encode(buf, &records, &options)
        .map_err(|e| DriverError::Protocol(format!("encoding record batch: {e}")))?;
    Ok(buf.split().freeze())
}

impl ProduceSession for KafkaProducer {
    fn send<'a>(
        &'a mut self,
        batches: &'a [PartitionBatch],
    ) -> BoxFut<'a, Result<Vec<SentRequest>, DriverError>> {
        Box::pin(async move {
            let mut by_leader: BTreeMap<String, Vec<usize>> = BTreeMap::new();
            for (i, b) in batches.iter().enumerate() {
                let addr = self.leaders.by_partition.get(&b.partition).ok_or_else(|| {
                    DriverError::Protocol(format!("partition {} has no leader", b.partition))
                })?;
                by_leader.entry(addr.clone()).or_default().push(i);
            }
            let mut sent = Vec::with_capacity(by_leader.len());
            for (addr, indices) in by_leader {
                let mut data = Vec::with_capacity(indices.len());
                for &i in &indices {
                    let records = self.encode_batch(&batches[i])?;
                    data.push(
                        PartitionProduceData::default()
                            .with_index(batches[i].partition)
                            .with_records(Some(records)),
                    );
                }
                let req = ProduceRequest::default()
                    .with_acks(self.opts.acks.kafka_value())
                    .with_timeout_ms(REQUEST_TIMEOUT_MS)
                    .with_topic_data(vec![TopicProduceData::default()
                        .with_name(self.topic_name.clone())
                        .with_partition_data(data)]);
                let conn = self
                    .conns
                    .get(&addr)
                    .expect("a connection per leader")
                    .clone();
                let expect_response = self.opts.acks.kafka_value() != 0;
                let (reply, sent_at) = conn.send(&req, self.version, expect_response).await?;
                let version = self.version;
                let partitions: Vec<(usize, i32)> =
                    indices.iter().map(|&i| (i, batches[i].partition)).collect();
                let answer: InFlight = Box::pin(async move {
                    let Some(reply) = reply else {
                        return Ok(Acked {
                            at: sent_at,
                            failed: Vec::new(),
                        });
                    };
                    let (frame, at) = reply.wait().await?;
                    let resp = decode_response::<ProduceRequest>(frame, version)?;
                    Ok(Acked {
                        at,
                        failed: produce_failures(&resp, &partitions),
                    })
                });
                sent.push(SentRequest {
                    batch_indices: indices,
                    sent_at,
                    answer,
                });
            }
            Ok(sent)
        })
    }
}

/// Batches the broker refused, or did not answer for.
fn produce_failures(resp: &ProduceResponse, sent: &[(usize, i32)]) -> Vec<(usize, DriverError)> {
    let mut failed = Vec::new();
    for &(i, partition) in sent {
        let answer = resp
            .responses
            .iter()
            .flat_map(|t| t.partition_responses.iter())
            .find(|p| p.index == partition);
        match answer {
            None => failed.push((
                i,
                DriverError::Protocol(format!("no produce answer for partition {partition}")),
            )),
            Some(p) => {
                if let Some(e) = broker_error("Produce", p.error_code) {
                    failed.push((i, e));
                }
            }
        }
    }
    failed
}

struct Fetcher {
    conn: Arc<Conn>,
    /// Partition → next offset to fetch.
    positions: BTreeMap<i32, i64>,
}

struct KafkaConsumer {
    topic_name: TopicName,
    version: i16,
    fetchers: Vec<Fetcher>,
    keep_values: bool,
}

impl ConsumeSession for KafkaConsumer {
    fn poll(&mut self) -> BoxFut<'_, Result<Fetched, DriverError>> {
        Box::pin(async move {
            let mut out = Fetched::default();
            let polls = self.fetchers.iter_mut().map(|f| {
                let req = fetch_request(&self.topic_name, &f.positions);
                let version = self.version;
                let keep = self.keep_values;
                async move {
                    let resp: FetchResponse = f.conn.request(&req, version).await?;
                    let at = Instant::now();
                    apply_fetch(f, &resp, keep).map(|r| (r, at))
                }
            });
            for r in futures::future::join_all(polls).await {
                let (mut got, at) = r?;
                out.at = Some(out.at.map_or(at, |a: Instant| a.max(at)));
                out.records += got.records;
                out.bytes += got.bytes;
                out.values.append(&mut got.values);
                out.errors.append(&mut got.errors);
            }
            Ok(out)
        })
    }
}

fn fetch_request(topic: &TopicName, positions: &BTreeMap<i32, i64>) -> FetchRequest {
    FetchRequest::default()
        .with_replica_id(BrokerId(-1))
        .with_max_wait_ms(FETCH_MAX_WAIT_MS)
        .with_min_bytes(1)
        .with_max_bytes(FETCH_BYTES_MAX)
        .with_session_id(0)
        .with_session_epoch(-1)
        .with_topics(vec![FetchTopic::default()
            .with_topic(topic.clone())
            .with_partitions(
                positions
                    .iter()
                    .map(|(&p, &o)| {
                        FetchPartition::default()
                            .with_partition(p)
                            .with_current_leader_epoch(-1)
                            .with_fetch_offset(o)
                            .with_log_start_offset(-1)
                            .with_partition_max_bytes(FETCH_PARTITION_BYTES_MAX)
                    })
                    .collect(),
            )])
}

/// Advances `f`'s positions past the complete batches of `resp`.
fn apply_fetch(
    f: &mut Fetcher,
    resp: &FetchResponse,
    keep_values: bool,
) -> Result<Fetched, DriverError> {
    let mut out = Fetched::default();
    if let Some(e) = broker_error("Fetch", resp.error_code) {
        return Err(e);
    }
    for p in resp.responses.iter().flat_map(|t| t.partitions.iter()) {
        if let Some(e) = broker_error("Fetch", p.error_code) {
            out.errors.push(e);
            continue;
        }
        let Some(pos) = f.positions.get_mut(&p.partition_index) else {
            return Err(DriverError::Protocol(format!(
                "fetch answered unasked partition {}",
                p.partition_index
            )));
        };
        let Some(records) = &p.records else { continue };
        for batch in complete_batches(records)? {
            let header = BatchHeader::parse(&batch)?;
            // A batch may start before the position (the broker sends whole batches).
            if header.next_offset <= *pos {
                continue;
            }
            out.bytes += batch.len() as u64;
            if keep_values {
                let mut b = batch.clone();
                let set = RecordBatchDecoder::decode(&mut b)
                    .map_err(|e| DriverError::Protocol(format!("record batch: {e}")))?;
                for r in set.records {
                    if r.offset >= *pos && !r.control {
                        out.records += 1;
                        if let Some(v) = r.value {
                            out.values.push(v);
                        }
                    }
                }
            } else {
                let skipped = (*pos - header.base_offset).max(0);
                out.records += u64::try_from(i64::from(header.record_count) - skipped).unwrap_or(0);
            }
            *pos = header.next_offset;
        }
    }
    Ok(out)
}

/// The fields of a record batch header we need.
struct BatchHeader {
    base_offset: i64,
    next_offset: i64,
    record_count: i32,
}

/// Bytes of a v2 record batch header.
const BATCH_HEADER_BYTES: usize = 61;

impl BatchHeader {
    fn parse(b: &[u8]) -> Result<BatchHeader, DriverError> {
        let field = |at: usize, n: usize| {
            b.get(at..at + n)
                .ok_or_else(|| DriverError::Protocol("short record batch".into()))
        };
        let i64_at = |at| -> Result<i64, DriverError> {
            let mut x = [0u8; 8];
            x.copy_from_slice(field(at, 8)?);
            Ok(i64::from_be_bytes(x))
        };
        let i32_at = |at| -> Result<i32, DriverError> {
            let mut x = [0u8; 4];
            x.copy_from_slice(field(at, 4)?);
            Ok(i32::from_be_bytes(x))
        };
        if b.len() < BATCH_HEADER_BYTES {
            return Err(DriverError::Protocol(format!(
                "record batch of {} bytes",
                b.len()
            )));
        }
        let base_offset = i64_at(0)?;
        let last_offset_delta = i32_at(23)?;
        let record_count = i32_at(57)?;
        Ok(BatchHeader {
            base_offset,
            next_offset: base_offset + i64::from(last_offset_delta) + 1,
            record_count,
        })
    }
}

/// Splits fetched bytes into whole batches; a partial batch at the end (cut by the size
/// limit) is dropped and fetched again next time.
fn complete_batches(records: &Bytes) -> Result<Vec<Bytes>, DriverError> {
    let mut out = Vec::new();
    let mut at = 0usize;
    while let Some(head) = records.get(at..at + 12) {
        let mut len = [0u8; 4];
        len.copy_from_slice(&head[8..12]);
        let len = usize::try_from(i32::from_be_bytes(len))
            .map_err(|_| DriverError::Protocol("negative batch length".into()))?;
        let end = at + 12 + len;
        if end > records.len() {
            break;
        }
        out.push(records.slice(at..end));
        at = end;
    }
    Ok(out)
}
