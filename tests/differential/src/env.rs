//! What a case may do to one broker before its compared request: create and wait for
//! topics, produce, join a group. Each broker gets its own [`Env`] and the same calls.
//!
//! Invariant: preparation steps are not compared, but each must succeed, so that both
//! brokers are in the same state when the compared request goes out; a failed step fails
//! the case on that broker instead of comparing answers from different states.

use std::collections::{BTreeMap, HashMap};
use std::thread;
use std::time::Duration;

use anyhow::{anyhow, bail, Context};
use bytes::{Bytes, BytesMut};
use kafka_protocol::indexmap::IndexMap;
use kafka_protocol::messages::create_topics_request::{CreatableTopic, CreatableTopicConfig};
use kafka_protocol::messages::fetch_request::FetchTopic;
use kafka_protocol::messages::join_group_request::JoinGroupRequestProtocol;
use kafka_protocol::messages::leave_group_request::MemberIdentity;
use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
use kafka_protocol::messages::metadata_response::MetadataResponseTopic;
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::sync_group_request::SyncGroupRequestAssignment;
use kafka_protocol::messages::{
    ApiKey, CreateTopicsRequest, FindCoordinatorRequest, GroupId, JoinGroupRequest,
    LeaveGroupRequest, MetadataRequest, ProduceRequest, SyncGroupRequest, TopicName,
};
use kafka_protocol::protocol::{Decodable, StrBytes};
use kafka_protocol::records::{
    Compression, Record, RecordBatchEncoder, RecordEncodeOptions, TimestampType,
};

use crate::clock::Deadline;
use crate::wire::Conn;

/// How long a topic may take to get leaders, or the group coordinator to load.
pub const READY_TIMEOUT: Duration = Duration::from_secs(60);
/// Pause between two polls of a condition with a deadline.
const POLL_PAUSE: Duration = Duration::from_millis(100);

/// Kafka's MEMBER_ID_REQUIRED: a JoinGroup v4+ without member id gets one and must rejoin.
const MEMBER_ID_REQUIRED: i16 = 79;
/// Kafka's TOPIC_ALREADY_EXISTS.
const TOPIC_ALREADY_EXISTS: i16 = 36;

/// A group member joined during preparation.
#[derive(Clone, Debug)]
pub struct Member {
    /// Group.
    pub group: String,
    /// Member id the coordinator gave.
    pub member_id: StrBytes,
    /// Generation of the join.
    pub generation: i32,
}

/// One broker under test.
pub struct Env {
    /// Its connection.
    pub conn: Conn,
    /// `strand` or `kafka`.
    pub label: &'static str,
    /// Per API key, the versions Strand, Kafka and the codec all speak.
    common: BTreeMap<i16, (i16, i16)>,
    topics: HashMap<String, MetadataResponseTopic>,
    /// Members joined by preparation steps, left after the case.
    joined: Vec<Member>,
    /// A group the compared request joins; its answer's member is left after the case.
    joining: Option<String>,
}

/// A topic name.
pub fn tn(s: &str) -> TopicName {
    TopicName(StrBytes::from_string(s.to_string()))
}

/// A group id.
pub fn gid(s: &str) -> GroupId {
    GroupId(StrBytes::from_string(s.to_string()))
}

/// A string.
pub fn sb(s: &str) -> StrBytes {
    StrBytes::from_string(s.to_string())
}

/// A topic id no broker has: a `FetchTopic` whose `topic_id` is fixed (the codec's `Uuid`
/// type is reachable only through its messages).
pub fn unknown_topic_id_holder() -> FetchTopic {
    let mut raw = vec![0x5a; 16];
    raw.extend_from_slice(&[1, 0]); // no partitions, no tagged fields
    FetchTopic::decode(&mut Bytes::from(raw), 13).expect("a fixed 18-byte FetchTopic v13")
}

/// `n` records with keys `{prefix}-k{i}`, values `{prefix}-v{i}` padded to `value_bytes`,
/// one header each, fixed CreateTime timestamps; one batch.
pub fn batch(prefix: &str, n: usize, value_bytes: usize, compression: Compression) -> Bytes {
    batch_from(prefix, n, value_bytes, compression, None)
}

/// An idempotent producer's identity and the sequence of a batch's first record.
#[derive(Clone, Copy, Debug)]
pub struct ProducerSeq {
    /// Producer id from InitProducerId.
    pub producer_id: i64,
    /// Its epoch.
    pub producer_epoch: i16,
    /// Sequence of the first record.
    pub base_sequence: i32,
}

/// As [`batch`], written by an idempotent producer when `producer` is given.
pub fn batch_from(
    prefix: &str,
    n: usize,
    value_bytes: usize,
    compression: Compression,
    producer: Option<ProducerSeq>,
) -> Bytes {
    let p = producer.unwrap_or(ProducerSeq {
        producer_id: -1,
        producer_epoch: -1,
        // The encoder starts a new batch where offset - sequence changes; this keeps one
        // batch with base sequence -1 (no producer id), as clients send it.
        base_sequence: -1,
    });
    let records: Vec<Record> = (0..n)
        .map(|i| {
            let mut value = format!("{prefix}-v{i}").into_bytes();
            value.resize(value.len().max(value_bytes), b'.');
            let mut headers = IndexMap::new();
            headers.insert(sb("h"), Some(Bytes::from(format!("{i}"))));
            let index = i64::try_from(i).expect("a small record count");
            Record {
                transactional: false,
                control: false,
                delete_horizon: false,
                partition_leader_epoch: -1,
                producer_id: p.producer_id,
                producer_epoch: p.producer_epoch,
                timestamp_type: TimestampType::Creation,
                offset: index,
                sequence: p.base_sequence + i32::try_from(index).expect("a small record count"),
                timestamp: crate::clock::first_timestamp_ms() + index,
                key: Some(Bytes::from(format!("{prefix}-k{i}"))),
                value: Some(Bytes::from(value)),
                headers,
            }
        })
        .collect();
    let mut buf = BytesMut::new();
    let options = RecordEncodeOptions {
        version: 2,
        compression,
    };
    RecordBatchEncoder::encode(&mut buf, records.iter(), &options).expect("fixed records encode");
    buf.freeze()
}

impl Env {
    /// An environment for the broker at `addr`.
    pub fn new(label: &'static str, addr: &str, common: BTreeMap<i16, (i16, i16)>) -> Env {
        Env {
            conn: Conn::new(addr),
            label,
            common,
            topics: HashMap::new(),
            joined: Vec::new(),
            joining: None,
        }
    }

    /// The highest version of `api` all three speak.
    pub fn top(&self, api: ApiKey) -> anyhow::Result<i16> {
        self.common
            .get(&(api as i16))
            .map(|r| r.1)
            .ok_or_else(|| anyhow!("no common version of {api:?}"))
    }

    /// Creates `name` (if missing) and waits until each partition has a leader.
    pub fn create_topic(
        &mut self,
        name: &str,
        partitions: i32,
        configs: &[(&str, &str)],
    ) -> anyhow::Result<()> {
        let v = self.top(ApiKey::CreateTopics)?;
        let configs = configs
            .iter()
            .map(|(k, val)| {
                CreatableTopicConfig::default()
                    .with_name(sb(k))
                    .with_value(Some(sb(val)))
            })
            .collect();
        let topic = CreatableTopic::default()
            .with_name(tn(name))
            .with_num_partitions(partitions)
            .with_replication_factor(1)
            .with_configs(configs);
        let req = CreateTopicsRequest::default()
            .with_topics(vec![topic])
            .with_timeout_ms(30_000);
        let resp = self.conn.call(&req, v)?;
        for t in &resp.topics {
            if t.error_code != 0 && t.error_code != TOPIC_ALREADY_EXISTS {
                bail!("{}: creating {name}: error {}", self.label, t.error_code);
            }
        }
        self.wait_topic(name)
    }

    /// Waits until `name` has leaders everywhere; remembers its metadata (topic id).
    pub fn wait_topic(&mut self, name: &str) -> anyhow::Result<()> {
        let v = self.top(ApiKey::Metadata)?;
        let mut req = MetadataRequest::default().with_topics(Some(vec![
            MetadataRequestTopic::default().with_name(Some(tn(name))),
        ]));
        if v >= 4 {
            req = req.with_allow_auto_topic_creation(false);
        }
        let deadline = Deadline::after(READY_TIMEOUT);
        loop {
            let resp = self.conn.call(&req, v)?;
            if let Some(t) = resp
                .topics
                .into_iter()
                .find(|t| t.name.as_ref().map(|n| n.as_str()) == Some(name))
            {
                let ready = t.error_code == 0
                    && !t.partitions.is_empty()
                    && t.partitions
                        .iter()
                        .all(|p| p.error_code == 0 && p.leader_id.0 >= 0);
                if ready {
                    self.topics.insert(name.to_string(), t);
                    return Ok(());
                }
            }
            if deadline.passed() {
                bail!(
                    "{}: topic {name} has no leaders after {READY_TIMEOUT:?}",
                    self.label
                );
            }
            thread::sleep(POLL_PAUSE);
        }
    }

    /// Metadata of a topic created or waited for earlier.
    pub fn topic(&mut self, name: &str) -> anyhow::Result<MetadataResponseTopic> {
        if !self.topics.contains_key(name) {
            self.wait_topic(name)?;
        }
        self.topics
            .get(name)
            .cloned()
            .ok_or_else(|| anyhow!("no metadata for {name}"))
    }

    /// Produces `records` to one partition with acks=all; fails unless accepted. Retries
    /// while the partition is not yet ready (Kafka's metadata names a leader a moment
    /// before that leader accepts writes: NOT_LEADER_OR_FOLLOWER, LEADER_NOT_AVAILABLE,
    /// UNKNOWN_TOPIC_OR_PARTITION).
    pub fn produce(&mut self, topic: &str, partition: i32, records: Bytes) -> anyhow::Result<()> {
        let v = self.top(ApiKey::Produce)?;
        let req = ProduceRequest::default()
            .with_acks(-1)
            .with_timeout_ms(10_000)
            .with_topic_data(vec![self.produce_topic(topic, v)?.with_partition_data(
                vec![PartitionProduceData::default()
                    .with_index(partition)
                    .with_records(Some(records))],
            )]);
        let deadline = Deadline::after(READY_TIMEOUT);
        loop {
            let resp = self.conn.call(&req, v)?;
            let p = resp
                .responses
                .iter()
                .flat_map(|t| &t.partition_responses)
                .next()
                .ok_or_else(|| anyhow!("{}: produce answer without partitions", self.label))?;
            match p.error_code {
                0 => return Ok(()),
                3 | 5 | 6 if !deadline.passed() => thread::sleep(POLL_PAUSE),
                code => bail!(
                    "{}: produce to {topic}-{partition}: error {code} {:?}",
                    self.label,
                    p.error_message
                ),
            }
        }
    }

    /// A TopicProduceData naming `topic` the way Produce `v` does (by id from v13).
    pub fn produce_topic(&mut self, topic: &str, v: i16) -> anyhow::Result<TopicProduceData> {
        if v >= 13 {
            let id = self.topic(topic)?.topic_id;
            return Ok(TopicProduceData::default().with_topic_id(id));
        }
        Ok(TopicProduceData::default().with_name(tn(topic)))
    }

    /// Waits until the group coordinator answers FindCoordinator without error (Kafka
    /// creates `__consumer_offsets` at the first one and answers COORDINATOR_NOT_AVAILABLE
    /// until it is loaded).
    pub fn wait_coordinator(&mut self, group: &str) -> anyhow::Result<()> {
        let v = self.top(ApiKey::FindCoordinator)?.min(3);
        let req = FindCoordinatorRequest::default().with_key(sb(group));
        let deadline = Deadline::after(READY_TIMEOUT);
        loop {
            let resp = self.conn.call(&req, v)?;
            if resp.error_code == 0 {
                return Ok(());
            }
            if deadline.passed() {
                bail!("{}: no coordinator: error {}", self.label, resp.error_code);
            }
            thread::sleep(POLL_PAUSE);
        }
    }

    /// Joins `group` as its only member at the highest common version (rejoining once
    /// with the member id a v4+ coordinator hands out). The member is left after the case.
    pub fn join(&mut self, group: &str) -> anyhow::Result<Member> {
        let v = self.top(ApiKey::JoinGroup)?;
        let mut member_id = StrBytes::default();
        for _ in 0..2 {
            let resp = self
                .conn
                .call(&join_request(group, member_id.clone(), v), v)?;
            match resp.error_code {
                0 => {
                    let m = Member {
                        group: group.to_string(),
                        member_id: resp.member_id,
                        generation: resp.generation_id,
                    };
                    self.joined.push(m.clone());
                    return Ok(m);
                }
                MEMBER_ID_REQUIRED => member_id = resp.member_id,
                code => bail!("{}: joining {group}: error {code}", self.label),
            }
        }
        bail!("{}: joining {group}: member id required twice", self.label)
    }

    /// Notes that the compared request joins `group`: [`Env::joined_by_answer`] then
    /// remembers the member the answer names, to leave it after the case.
    pub fn joining(&mut self, group: &str) {
        self.joining = Some(group.to_string());
    }

    /// Remembers the member a compared JoinGroup answer created (see [`Env::joining`]).
    pub fn joined_by_answer(&mut self, member_id: Option<&str>) {
        let Some(group) = self.joining.take() else {
            return;
        };
        if let Some(id) = member_id.filter(|m| !m.is_empty()) {
            self.joined.push(Member {
                group,
                member_id: sb(id),
                generation: -1,
            });
        }
    }

    /// Joins `group` and syncs with a fixed assignment: the group is Stable.
    pub fn join_sync(&mut self, group: &str) -> anyhow::Result<Member> {
        let m = self.join(group)?;
        let v = self.top(ApiKey::SyncGroup)?;
        let resp = self
            .conn
            .call(&sync_request(&m, m.generation, m.member_id.clone(), v), v)?;
        if resp.error_code != 0 {
            bail!("{}: syncing {group}: error {}", self.label, resp.error_code);
        }
        Ok(m)
    }

    /// Leaves every group joined by preparation; errors are ignored (the case may have
    /// made the member leave already).
    pub fn leave_all(&mut self) {
        let Ok(v) = self.top(ApiKey::LeaveGroup) else {
            return;
        };
        for m in std::mem::take(&mut self.joined) {
            let req = leave_request(&m.group, m.member_id.clone(), v);
            let _ignored = self.conn.call(&req, v).context("leaving");
        }
    }
}

/// ConsumerProtocolSubscription v0: topics [diff-a], no user data. Kafka's coordinator
/// parses the metadata of "consumer" groups, and a join with garbage here never completes.
const SUBSCRIPTION: &[u8] = b"\x00\x00\x00\x00\x00\x01\x00\x06diff-a\xff\xff\xff\xff";

/// ConsumerProtocolAssignment v0: diff-a partition 0, no user data.
const ASSIGNMENT: &[u8] =
    b"\x00\x00\x00\x00\x00\x01\x00\x06diff-a\x00\x00\x00\x01\x00\x00\x00\x00\xff\xff\xff\xff";

/// JoinGroup for a "consumer" group with one "range" protocol.
pub fn join_request(group: &str, member_id: StrBytes, v: i16) -> JoinGroupRequest {
    let mut req = JoinGroupRequest::default()
        .with_group_id(gid(group))
        .with_session_timeout_ms(10_000)
        .with_member_id(member_id)
        .with_protocol_type(sb("consumer"))
        .with_protocols(vec![JoinGroupRequestProtocol::default()
            .with_name(sb("range"))
            .with_metadata(Bytes::from_static(SUBSCRIPTION))]);
    if v >= 1 {
        req = req.with_rebalance_timeout_ms(10_000);
    }
    req
}

/// SyncGroup from the leader `m`, assigning it a fixed blob.
pub fn sync_request(m: &Member, generation: i32, member_id: StrBytes, v: i16) -> SyncGroupRequest {
    let mut req = SyncGroupRequest::default()
        .with_group_id(gid(&m.group))
        .with_generation_id(generation)
        .with_member_id(member_id)
        .with_assignments(vec![SyncGroupRequestAssignment::default()
            .with_member_id(m.member_id.clone())
            .with_assignment(Bytes::from_static(ASSIGNMENT))]);
    if v >= 5 {
        req = req
            .with_protocol_type(Some(sb("consumer")))
            .with_protocol_name(Some(sb("range")));
    }
    req
}

/// LeaveGroup of one member, in the shape of version `v`.
pub fn leave_request(group: &str, member_id: StrBytes, v: i16) -> LeaveGroupRequest {
    let req = LeaveGroupRequest::default().with_group_id(gid(group));
    if v >= 3 {
        req.with_members(vec![MemberIdentity::default().with_member_id(member_id)])
    } else {
        req.with_member_id(member_id)
    }
}
