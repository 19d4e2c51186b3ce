//! The corpus: the setup both brokers get, and one table of cases, each a small function
//! that prepares (uncompared) and returns the one request whose answers are compared.
//!
//! Invariant: a case's preparation and request depend only on the version and on what
//! the broker itself answered (topic ids, member ids), never on which broker it is, so
//! both brokers see the same conversation.

use bytes::Bytes;
use kafka_protocol::messages::alter_configs_request::{AlterConfigsResource, AlterableConfig};
use kafka_protocol::messages::create_partitions_request::CreatePartitionsTopic;
use kafka_protocol::messages::create_topics_request::CreatableTopic;
use kafka_protocol::messages::delete_records_request::{
    DeleteRecordsPartition, DeleteRecordsTopic,
};
use kafka_protocol::messages::delete_topics_request::DeleteTopicState;
use kafka_protocol::messages::describe_configs_request::DescribeConfigsResource;
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::incremental_alter_configs_request::{
    AlterConfigsResource as IncrAlterConfigsResource, AlterableConfig as IncrAlterableConfig,
};
use kafka_protocol::messages::list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic};
use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
use kafka_protocol::messages::offset_commit_request::{
    OffsetCommitRequestPartition, OffsetCommitRequestTopic,
};
use kafka_protocol::messages::offset_delete_request::{
    OffsetDeleteRequestPartition, OffsetDeleteRequestTopic,
};
use kafka_protocol::messages::offset_fetch_request::{
    OffsetFetchRequestGroup, OffsetFetchRequestTopic, OffsetFetchRequestTopics,
};
use kafka_protocol::messages::offset_for_leader_epoch_request::{
    OffsetForLeaderPartition, OffsetForLeaderTopic,
};
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::{
    AlterConfigsRequest, IncrementalAlterConfigsRequest, ListPartitionReassignmentsRequest,
    OffsetDeleteRequest,
};
use kafka_protocol::messages::{
    ApiKey, ApiVersionsRequest, BrokerId, CreatePartitionsRequest, CreateTopicsRequest,
    DeleteGroupsRequest, DeleteRecordsRequest, DeleteTopicsRequest, DescribeClusterRequest,
    DescribeConfigsRequest, DescribeGroupsRequest, FetchRequest, FindCoordinatorRequest,
    HeartbeatRequest, InitProducerIdRequest, ListGroupsRequest, ListOffsetsRequest,
    MetadataRequest, OffsetCommitRequest, OffsetFetchRequest, OffsetForLeaderEpochRequest,
    ProduceRequest,
};
use kafka_protocol::records::Compression;

use crate::env::{
    batch, batch_from, gid, join_request, leave_request, sb, sync_request, tn,
    unknown_topic_id_holder, Env, ProducerSeq,
};
use crate::wire::{AnyRequest, WireVersions};

/// What of the two answers is compared.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Compare {
    /// Every field, after masking.
    Full,
    /// Only the top-level `error_code` (the rest of the answer is version-specific).
    ErrorCodeOnly,
}

/// The request a case sends, and how.
pub struct Probe {
    /// The request.
    pub req: Box<dyn AnyRequest>,
    /// Versions on the wire.
    pub wire: WireVersions,
    /// What is compared.
    pub compare: Compare,
}

fn probe(req: impl AnyRequest + 'static, v: i16) -> anyhow::Result<Probe> {
    Ok(Probe {
        req: Box::new(req),
        wire: WireVersions::at(v),
        compare: Compare::Full,
    })
}

/// One entry of the corpus.
pub struct Case {
    /// Name used in the report and in expected.tsv.
    pub name: &'static str,
    /// The API under test; its common versions pick the versions tested.
    pub api: ApiKey,
    /// Lowest version the case makes sense at.
    pub min_version: i16,
    /// Part of the `--quick` subset (tested at the highest common version only).
    pub quick: bool,
    /// Prepares the broker and returns the request.
    pub build: fn(&mut Env, i16) -> anyhow::Result<Probe>,
}

const fn case(
    name: &'static str,
    api: ApiKey,
    min_version: i16,
    quick: bool,
    build: fn(&mut Env, i16) -> anyhow::Result<Probe>,
) -> Case {
    Case {
        name,
        api,
        min_version,
        quick,
        build,
    }
}

/// The corpus, in the order it runs (later cases may see earlier cases' effects, the
/// same on both brokers).
pub const CASES: &[Case] = &[
    case("api_versions", ApiKey::ApiVersions, 0, true, api_versions),
    case(
        "api_versions_unsupported",
        ApiKey::ApiVersions,
        0,
        true,
        api_versions_too_high,
    ),
    case(
        "metadata_unsupported_version",
        ApiKey::Metadata,
        0,
        false,
        metadata_too_high,
    ),
    case(
        "metadata_known_topics",
        ApiKey::Metadata,
        0,
        true,
        metadata_known,
    ),
    case(
        "metadata_unknown_topic",
        ApiKey::Metadata,
        4,
        false,
        metadata_unknown,
    ),
    case(
        "metadata_invalid_topic_name",
        ApiKey::Metadata,
        4,
        false,
        metadata_invalid,
    ),
    case(
        "metadata_auto_create",
        ApiKey::Metadata,
        4,
        false,
        metadata_auto_create,
    ),
    case("produce", ApiKey::Produce, 0, true, produce_ok),
    case(
        "produce_unknown_topic",
        ApiKey::Produce,
        0,
        false,
        produce_unknown_topic,
    ),
    case(
        "produce_partition_out_of_range",
        ApiKey::Produce,
        0,
        false,
        produce_bad_partition,
    ),
    case(
        "produce_batch_too_large",
        ApiKey::Produce,
        0,
        false,
        produce_too_large,
    ),
    case(
        "produce_invalid_acks",
        ApiKey::Produce,
        0,
        false,
        produce_invalid_acks,
    ),
    case("fetch", ApiKey::Fetch, 0, true, fetch_ok),
    case(
        "fetch_offset_out_of_range",
        ApiKey::Fetch,
        0,
        false,
        fetch_out_of_range,
    ),
    case(
        "fetch_unknown_topic",
        ApiKey::Fetch,
        0,
        false,
        fetch_unknown_topic,
    ),
    case(
        "fetch_partition_out_of_range",
        ApiKey::Fetch,
        0,
        false,
        fetch_bad_partition,
    ),
    case(
        "list_offsets_earliest",
        ApiKey::ListOffsets,
        0,
        false,
        list_offsets_earliest,
    ),
    case(
        "list_offsets_latest",
        ApiKey::ListOffsets,
        0,
        true,
        list_offsets_latest,
    ),
    case(
        "list_offsets_max_timestamp",
        ApiKey::ListOffsets,
        7,
        false,
        list_offsets_max_ts,
    ),
    case(
        "list_offsets_by_timestamp",
        ApiKey::ListOffsets,
        0,
        false,
        list_offsets_by_ts,
    ),
    case(
        "list_offsets_unknown_topic",
        ApiKey::ListOffsets,
        0,
        false,
        list_offsets_unknown,
    ),
    case(
        "find_coordinator",
        ApiKey::FindCoordinator,
        0,
        true,
        find_coordinator,
    ),
    case(
        "join_group_new_member",
        ApiKey::JoinGroup,
        0,
        false,
        join_new_member,
    ),
    case("join_group", ApiKey::JoinGroup, 0, true, join_full),
    case("sync_group", ApiKey::SyncGroup, 0, false, sync_ok),
    case(
        "sync_group_unknown_member",
        ApiKey::SyncGroup,
        0,
        false,
        sync_unknown_member,
    ),
    case(
        "sync_group_wrong_generation",
        ApiKey::SyncGroup,
        0,
        false,
        sync_wrong_generation,
    ),
    case("heartbeat", ApiKey::Heartbeat, 0, false, heartbeat_ok),
    case(
        "heartbeat_unknown_member",
        ApiKey::Heartbeat,
        0,
        false,
        heartbeat_unknown_member,
    ),
    case(
        "heartbeat_wrong_generation",
        ApiKey::Heartbeat,
        0,
        false,
        heartbeat_wrong_gen,
    ),
    case(
        "heartbeat_during_rebalance",
        ApiKey::Heartbeat,
        0,
        false,
        heartbeat_rebalancing,
    ),
    case("leave_group", ApiKey::LeaveGroup, 0, false, leave_ok),
    case(
        "leave_group_unknown_member",
        ApiKey::LeaveGroup,
        0,
        false,
        leave_unknown_member,
    ),
    case(
        "offset_commit",
        ApiKey::OffsetCommit,
        0,
        true,
        offset_commit_member,
    ),
    case(
        "offset_commit_simple",
        ApiKey::OffsetCommit,
        0,
        false,
        offset_commit_simple,
    ),
    case(
        "offset_commit_unknown_member",
        ApiKey::OffsetCommit,
        0,
        false,
        commit_unknown_member,
    ),
    case(
        "offset_commit_wrong_generation",
        ApiKey::OffsetCommit,
        0,
        false,
        commit_wrong_gen,
    ),
    case("offset_fetch", ApiKey::OffsetFetch, 0, true, offset_fetch),
    case(
        "offset_fetch_unknown_group",
        ApiKey::OffsetFetch,
        0,
        false,
        offset_fetch_unknown,
    ),
    case(
        "describe_groups",
        ApiKey::DescribeGroups,
        0,
        false,
        describe_groups,
    ),
    case("list_groups", ApiKey::ListGroups, 0, false, list_groups),
    case(
        "create_topics",
        ApiKey::CreateTopics,
        0,
        true,
        create_topics_ok,
    ),
    case(
        "create_topics_validate_only",
        ApiKey::CreateTopics,
        1,
        false,
        create_validate_only,
    ),
    case(
        "create_topics_exists",
        ApiKey::CreateTopics,
        0,
        false,
        create_topics_exists,
    ),
    case(
        "create_topics_invalid_name",
        ApiKey::CreateTopics,
        0,
        false,
        create_invalid_name,
    ),
    case(
        "create_topics_zero_partitions",
        ApiKey::CreateTopics,
        0,
        false,
        create_zero_parts,
    ),
    case(
        "delete_topics",
        ApiKey::DeleteTopics,
        0,
        false,
        delete_topics_ok,
    ),
    case(
        "delete_topics_unknown",
        ApiKey::DeleteTopics,
        0,
        false,
        delete_topics_unknown,
    ),
    case(
        "create_partitions",
        ApiKey::CreatePartitions,
        0,
        false,
        create_partitions_ok,
    ),
    case(
        "create_partitions_decrease",
        ApiKey::CreatePartitions,
        0,
        false,
        create_parts_fewer,
    ),
    case(
        "create_partitions_unknown",
        ApiKey::CreatePartitions,
        0,
        false,
        create_parts_unknown,
    ),
    case(
        "describe_configs_topic",
        ApiKey::DescribeConfigs,
        0,
        false,
        describe_configs_topic,
    ),
    case(
        "describe_configs_unknown",
        ApiKey::DescribeConfigs,
        0,
        false,
        describe_configs_unknown,
    ),
    case(
        "describe_cluster",
        ApiKey::DescribeCluster,
        0,
        false,
        describe_cluster,
    ),
    case(
        "init_producer_id",
        ApiKey::InitProducerId,
        0,
        false,
        init_producer_id,
    ),
    case(
        "init_producer_id_empty_txn_id",
        ApiKey::InitProducerId,
        0,
        false,
        init_producer_id_empty,
    ),
    case(
        "delete_records",
        ApiKey::DeleteRecords,
        0,
        false,
        delete_records_ok,
    ),
    case(
        "delete_records_beyond_end",
        ApiKey::DeleteRecords,
        0,
        false,
        delete_records_beyond,
    ),
    case(
        "offset_for_leader_epoch",
        ApiKey::OffsetForLeaderEpoch,
        0,
        false,
        leader_epoch_end,
    ),
    case(
        "delete_groups",
        ApiKey::DeleteGroups,
        0,
        false,
        delete_groups_ok,
    ),
    case(
        "delete_groups_unknown",
        ApiKey::DeleteGroups,
        0,
        false,
        delete_groups_unknown,
    ),
    case(
        "fetch_read_committed",
        ApiKey::Fetch,
        4,
        false,
        fetch_read_committed,
    ),
    case(
        "alter_configs",
        ApiKey::AlterConfigs,
        0,
        false,
        alter_configs,
    ),
    case(
        "alter_configs_unknown_key",
        ApiKey::AlterConfigs,
        0,
        false,
        alter_configs_bad_key,
    ),
    case(
        "incremental_alter_configs",
        ApiKey::IncrementalAlterConfigs,
        0,
        false,
        incr_alter,
    ),
    case(
        "describe_configs_after_alter",
        ApiKey::DescribeConfigs,
        0,
        false,
        describe_altered,
    ),
    case(
        "offset_delete",
        ApiKey::OffsetDelete,
        0,
        false,
        offset_delete,
    ),
    case(
        "offset_delete_unknown_group",
        ApiKey::OffsetDelete,
        0,
        false,
        offset_delete_unknown,
    ),
    case(
        "list_partition_reassignments",
        ApiKey::ListPartitionReassignments,
        0,
        false,
        list_moves,
    ),
    case(
        "metadata_no_topics",
        ApiKey::Metadata,
        1,
        false,
        metadata_no_topics,
    ),
    case(
        "fetch_compressed",
        ApiKey::Fetch,
        0,
        false,
        fetch_compressed,
    ),
    case("fetch_mid_batch", ApiKey::Fetch, 0, false, fetch_mid_batch),
    case(
        "fetch_tiny_max_bytes",
        ApiKey::Fetch,
        0,
        false,
        fetch_tiny_max_bytes,
    ),
    case("fetch_at_end", ApiKey::Fetch, 0, false, fetch_at_end),
    case(
        "list_offsets_future_timestamp",
        ApiKey::ListOffsets,
        0,
        false,
        list_offsets_future,
    ),
    case(
        "produce_corrupt_crc",
        ApiKey::Produce,
        0,
        false,
        produce_corrupt_crc,
    ),
    case(
        "produce_idempotent",
        ApiKey::Produce,
        0,
        false,
        produce_idempotent,
    ),
    case(
        "produce_idempotent_duplicate",
        ApiKey::Produce,
        0,
        false,
        produce_duplicate,
    ),
    case(
        "produce_out_of_order_sequence",
        ApiKey::Produce,
        0,
        false,
        produce_sequence_gap,
    ),
    case(
        "offset_commit_unknown_topic",
        ApiKey::OffsetCommit,
        0,
        false,
        commit_unknown_topic,
    ),
    case(
        "join_group_inconsistent_protocol",
        ApiKey::JoinGroup,
        0,
        false,
        join_other_protocol,
    ),
];

/// Topics and data every case may rely on; run on both brokers before the cases.
pub fn setup(env: &mut Env) -> anyhow::Result<()> {
    env.create_topic("diff-a", 3, &[])?;
    env.produce("diff-a", 0, batch("a0", 5, 0, Compression::None))?;
    env.produce("diff-a", 0, batch("a0b", 2, 0, Compression::None))?;
    env.produce("diff-a", 1, batch("a1", 3, 0, Compression::Gzip))?;
    env.create_topic("diff-b", 1, &[])?;
    env.create_topic("diff-p", 1, &[])?;
    env.create_topic("diff-small", 1, &[("max.message.bytes", "1024")])?;
    env.create_topic("diff-dr", 1, &[])?;
    env.create_topic("diff-c", 4, &[])?;
    let codecs = [
        Compression::Gzip,
        Compression::Snappy,
        Compression::Lz4,
        Compression::Zstd,
    ];
    for (p, codec) in (0..).zip(codecs) {
        env.produce("diff-c", p, batch(&format!("c{p}"), 4, 100, codec))?;
    }
    env.produce("diff-dr", 0, batch("dr", 10, 0, Compression::None))?;
    env.wait_coordinator("diff-simple")?;
    wait_producer_ids(env)?;
    // The coordinator may still be loading its partition (COORDINATOR_LOAD_IN_PROGRESS,
    // COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR: 14, 15, 16) right after FindCoordinator.
    let v = env.top(ApiKey::OffsetCommit)?;
    let deadline = crate::clock::Deadline::after(crate::env::READY_TIMEOUT);
    loop {
        let resp = env
            .conn
            .call(&commit_request("diff-simple", -1, "", 0, 3, v), v)?;
        let code = resp
            .topics
            .iter()
            .flat_map(|t| &t.partitions)
            .map(|p| p.error_code)
            .max();
        match code {
            Some(0) => return Ok(()),
            Some(14..=16) if !deadline.passed() => {
                std::thread::sleep(std::time::Duration::from_millis(100));
            }
            _ => anyhow::bail!("{}: setup commit: {code:?}", env.label),
        }
    }
}

/// Waits until InitProducerId succeeds: Kafka answers COORDINATOR_LOAD_IN_PROGRESS (14)
/// until its first block of producer ids arrives from the controller.
fn wait_producer_ids(env: &mut Env) -> anyhow::Result<()> {
    let v = env.top(ApiKey::InitProducerId)?;
    let deadline = crate::clock::Deadline::after(crate::env::READY_TIMEOUT);
    loop {
        let code = env.conn.call(&init_producer_id_request(), v)?.error_code;
        match code {
            0 => return Ok(()),
            14 | 15 if !deadline.passed() => {
                std::thread::sleep(std::time::Duration::from_millis(100));
            }
            _ => anyhow::bail!("{}: InitProducerId: error {code}", env.label),
        }
    }
}

// ---- ApiVersions ----

fn api_versions_request(v: i16) -> ApiVersionsRequest {
    let req = ApiVersionsRequest::default();
    if v >= 3 {
        // Kafka rejects v3+ without a valid client software name and version.
        return req
            .with_client_software_name(sb("strand-diff"))
            .with_client_software_version(sb("0.1.0"));
    }
    req
}

fn api_versions(_: &mut Env, v: i16) -> anyhow::Result<Probe> {
    probe(api_versions_request(v), v)
}

/// A version neither broker knows: both must answer UNSUPPORTED_VERSION in a v0 answer.
fn api_versions_too_high(_: &mut Env, _: i16) -> anyhow::Result<Probe> {
    Ok(Probe {
        req: Box::new(api_versions_request(3)),
        wire: WireVersions {
            header: 127,
            body: 3,
            response: 0,
        },
        compare: Compare::ErrorCodeOnly,
    })
}

// ---- Metadata ----

fn metadata_request(topics: &[&str], auto_create: bool, v: i16) -> MetadataRequest {
    let topics = topics
        .iter()
        .map(|t| MetadataRequestTopic::default().with_name(Some(tn(t))))
        .collect();
    let req = MetadataRequest::default().with_topics(Some(topics));
    if v >= 4 {
        return req.with_allow_auto_topic_creation(auto_create);
    }
    req
}

/// Metadata at a version neither broker knows: Kafka closes the connection.
fn metadata_too_high(_: &mut Env, v: i16) -> anyhow::Result<Probe> {
    Ok(Probe {
        req: Box::new(metadata_request(&["diff-a"], false, v)),
        wire: WireVersions {
            header: 99,
            body: v,
            response: v,
        },
        compare: Compare::Full,
    })
}

fn metadata_known(_: &mut Env, v: i16) -> anyhow::Result<Probe> {
    probe(metadata_request(&["diff-a", "diff-b"], false, v), v)
}

fn metadata_unknown(_: &mut Env, v: i16) -> anyhow::Result<Probe> {
    probe(metadata_request(&["diff-missing"], false, v), v)
}

fn metadata_invalid(_: &mut Env, v: i16) -> anyhow::Result<Probe> {
    probe(metadata_request(&["bad name!"], true, v), v)
}

fn metadata_auto_create(_: &mut Env, v: i16) -> anyhow::Result<Probe> {
    let name = format!("diff-auto-v{v}");
    probe(metadata_request(&[&name], true, v), v)
}

// ---- Produce ----

fn produce_request(topic: &str, partition: i32, records: Bytes, acks: i16) -> ProduceRequest {
    ProduceRequest::default()
        .with_acks(acks)
        .with_timeout_ms(10_000)
        .with_topic_data(vec![TopicProduceData::default()
            .with_name(tn(topic))
            .with_partition_data(vec![PartitionProduceData::default()
                .with_index(partition)
                .with_records(Some(records))])])
}

fn produce_ok(_: &mut Env, v: i16) -> anyhow::Result<Probe> {
    let records = batch(&format!("p-v{v}"), 3, 0, Compression::None);
    probe(produce_request("diff-p", 0, records, -1), v)
}

/// A topic no case creates, unique per case and version (so that a broker that creates
/// topics on first use does not leak one case's topic into another).
fn nope(case: &str, v: i16) -> String {
    format!("diff-nope-{case}-v{v}")
}

fn produce_unknown_topic(_: &mut Env, v: i16) -> anyhow::Result<Probe> {
    let records = batch("x", 1, 0, Compression::None);
    probe(produce_request(&nope("produce", v), 0, records, -1), v)
}

fn produce_bad_partition(_: &mut Env, v: i16) -> anyhow::Result<Probe> {
    let records = batch("x", 1, 0, Compression::None);
    probe(produce_request("diff-a", 7, records, -1), v)
}

/// A 4 KiB record to a topic with max.message.bytes=1024: MESSAGE_TOO_LARGE.
fn produce_too_large(_: &mut Env, v: i16) -> anyhow::Result<Probe> {
    let records = batch("big", 1, 4096, Compression::None);
    probe(produce_request("diff-small", 0, records, -1), v)
}

fn produce_invalid_acks(_: &mut Env, v: i16) -> anyhow::Result<Probe> {
    let records = batch("x", 1, 0, Compression::None);
    probe(produce_request("diff-p", 0, records, 2), v)
}

// ---- Fetch ----

/// A FetchTopic naming `topic` the way version `v` does (name before v13, id from v13).
fn fetch_topic(env: &mut Env, topic: &str, v: i16) -> anyhow::Result<FetchTopic> {
    if v >= 13 {
        let id = env.topic(topic)?.topic_id;
        return Ok(FetchTopic::default().with_topic_id(id));
    }
    Ok(FetchTopic::default().with_topic(tn(topic)))
}

fn fetch_request(topic: FetchTopic, partitions: &[(i32, i64)]) -> FetchRequest {
    let partitions = partitions
        .iter()
        .map(|&(p, offset)| {
            FetchPartition::default()
                .with_partition(p)
                .with_fetch_offset(offset)
                .with_partition_max_bytes(1 << 20)
        })
        .collect();
    FetchRequest::default()
        .with_max_wait_ms(200)
        .with_min_bytes(1)
        .with_max_bytes(4 << 20)
        .with_topics(vec![topic.with_partitions(partitions)])
}

fn fetch_ok(env: &mut Env, v: i16) -> anyhow::Result<Probe> {
    let t = fetch_topic(env, "diff-a", v)?;
    probe(fetch_request(t, &[(0, 0), (1, 0), (2, 0)]), v)
}

fn fetch_out_of_range(env: &mut Env, v: i16) -> anyhow::Result<Probe> {
    let t = fetch_topic(env, "diff-a", v)?;
    probe(fetch_request(t, &[(0, 1000)]), v)
}

fn fetch_unknown_topic(_: &mut Env, v: i16) -> anyhow::Result<Probe> {
    let t = if v >= 13 {
        unknown_topic_id_holder()
    } else {
        FetchTopic::default().with_topic(tn(&nope("fetch", v)))
    };
    probe(fetch_request(t, &[(0, 0)]), v)
}

fn fetch_bad_partition(env: &mut Env, v: i16) -> anyhow::Result<Probe> {
    let t = fetch_topic(env, "diff-a", v)?;
    probe(fetch_request(t, &[(9, 0)]), v)
}

// ---- ListOffsets ----

fn list_offsets_request(topic: &str, partitions: &[i32], timestamp: i64) -> ListOffsetsRequest {
    let partitions = partitions
        .iter()
        .map(|&p| {
            ListOffsetsPartition::default()
                .with_partition_index(p)
                .with_timestamp(timestamp)
        })
        .collect();
    ListOffsetsRequest::default()
        .with_replica_id(BrokerId(-1))
        .with_topics(vec![ListOffsetsTopic::default()
            .with_name(tn(topic))
            .with_partitions(partitions)])
}

fn list_offsets_earliest(_: &mut Env, v: i16) -> anyhow::Result<Probe> {
    probe(list_offsets_request("diff-a", &[0, 1, 2], -2), v)
}

fn list_offsets_latest(_: &mut Env, v: i16) -> anyhow::Result<Probe> {
    probe(list_offsets_request("diff-a", &[0, 1, 2], -1), v)
}

fn list_offsets_max_ts(_: &mut Env, v: i16) -> anyhow::Result<Probe> {
    probe(list_offsets_request("diff-a", &[0, 1, 2], -3), v)
}

/// The first record at or after the third record's timestamp: offset 2 in partition 0.
fn list_offsets_by_ts(_: &mut Env, v: i16) -> anyhow::Result<Probe> {
    let ts = crate::clock::first_timestamp_ms() + 2;
    probe(list_offsets_request("diff-a", &[0, 1, 2], ts), v)
}

fn list_offsets_unknown(_: &mut Env, v: i16) -> anyhow::Result<Probe> {
    probe(list_offsets_request(&nope("list-offsets", v), &[0], -1), v)
}

// ---- Groups ----

fn find_coordinator(_: &mut Env, v: i16) -> anyhow::Result<Probe> {
    let req = FindCoordinatorRequest::default();
    if v >= 4 {
        return probe(req.with_coordinator_keys(vec![sb("diff-simple")]), v);
    }
    probe(req.with_key(sb("diff-simple")), v)
}

fn join_new_member(env: &mut Env, v: i16) -> anyhow::Result<Probe> {
    let group = format!("diff-join-new-v{v}");
    env.joining(&group);
    probe(join_request(&group, sb(""), v), v)
}

/// The join that completes: for v4+ the second one, with the id the first handed out.
fn join_full(env: &mut Env, v: i16) -> anyhow::Result<Probe> {
    let group = format!("diff-join-v{v}");
    let mut member = sb("");
    if v >= 4 {
        member = env
            .conn
            .call(&join_request(&group, member, v), v)?
            .member_id;
    }
    env.joining(&group);
    probe(join_request(&group, member, v), v)
}

fn sync_ok(env: &mut Env, v: i16) -> anyhow::Result<Probe> {
    let m = env.join(&format!("diff-sync-v{v}"))?;
    probe(sync_request(&m, m.generation, m.member_id.clone(), v), v)
}

fn sync_unknown_member(env: &mut Env, v: i16) -> anyhow::Result<Probe> {
    let m = env.join(&format!("diff-sync-um-v{v}"))?;
    probe(sync_request(&m, m.generation, sb("nobody"), v), v)
}

fn sync_wrong_generation(env: &mut Env, v: i16) -> anyhow::Result<Probe> {
    let m = env.join(&format!("diff-sync-wg-v{v}"))?;
    probe(
        sync_request(&m, m.generation + 5, m.member_id.clone(), v),
        v,
    )
}

fn heartbeat(group: &str, generation: i32, member: &str) -> HeartbeatRequest {
    HeartbeatRequest::default()
        .with_group_id(gid(group))
        .with_generation_id(generation)
        .with_member_id(sb(member))
}

fn heartbeat_ok(env: &mut Env, v: i16) -> anyhow::Result<Probe> {
    let m = env.join_sync(&format!("diff-hb-v{v}"))?;
    probe(heartbeat(&m.group, m.generation, &m.member_id), v)
}

fn heartbeat_unknown_member(env: &mut Env, v: i16) -> anyhow::Result<Probe> {
    let m = env.join_sync(&format!("diff-hb-um-v{v}"))?;
    probe(heartbeat(&m.group, m.generation, "nobody"), v)
}

fn heartbeat_wrong_gen(env: &mut Env, v: i16) -> anyhow::Result<Probe> {
    let m = env.join_sync(&format!("diff-hb-wg-v{v}"))?;
    probe(heartbeat(&m.group, m.generation + 5, &m.member_id), v)
}

/// Joined but not synced: the group is CompletingRebalance.
fn heartbeat_rebalancing(env: &mut Env, v: i16) -> anyhow::Result<Probe> {
    let m = env.join(&format!("diff-hb-rb-v{v}"))?;
    probe(heartbeat(&m.group, m.generation, &m.member_id), v)
}

fn leave_ok(env: &mut Env, v: i16) -> anyhow::Result<Probe> {
    let m = env.join_sync(&format!("diff-leave-v{v}"))?;
    probe(leave_request(&m.group, m.member_id.clone(), v), v)
}

fn leave_unknown_member(env: &mut Env, v: i16) -> anyhow::Result<Probe> {
    let m = env.join_sync(&format!("diff-leave-um-v{v}"))?;
    probe(leave_request(&m.group, sb("nobody"), v), v)
}

fn commit_request(
    group: &str,
    generation: i32,
    member: &str,
    partition: i32,
    offset: i64,
    _v: i16,
) -> OffsetCommitRequest {
    OffsetCommitRequest::default()
        .with_group_id(gid(group))
        .with_generation_id_or_member_epoch(generation)
        .with_member_id(sb(member))
        .with_topics(vec![OffsetCommitRequestTopic::default()
            .with_name(tn("diff-a"))
            .with_partitions(vec![OffsetCommitRequestPartition::default()
                .with_partition_index(partition)
                .with_committed_offset(offset)
                .with_committed_metadata(Some(sb("meta")))])])
}

fn offset_commit_member(env: &mut Env, v: i16) -> anyhow::Result<Probe> {
    let m = env.join_sync(&format!("diff-commit-v{v}"))?;
    probe(
        commit_request(&m.group, m.generation, &m.member_id, 1, 2, v),
        v,
    )
}

fn offset_commit_simple(_: &mut Env, v: i16) -> anyhow::Result<Probe> {
    probe(
        commit_request(&format!("diff-commit-simple-v{v}"), -1, "", 0, 4, v),
        v,
    )
}

fn commit_unknown_member(env: &mut Env, v: i16) -> anyhow::Result<Probe> {
    let m = env.join_sync(&format!("diff-commit-um-v{v}"))?;
    probe(commit_request(&m.group, m.generation, "nobody", 0, 1, v), v)
}

fn commit_wrong_gen(env: &mut Env, v: i16) -> anyhow::Result<Probe> {
    let m = env.join_sync(&format!("diff-commit-wg-v{v}"))?;
    probe(
        commit_request(&m.group, m.generation + 5, &m.member_id, 0, 1, v),
        v,
    )
}

fn offset_fetch_request(group: &str, v: i16) -> OffsetFetchRequest {
    let partitions = vec![0, 1];
    if v >= 8 {
        let topics = vec![OffsetFetchRequestTopics::default()
            .with_name(tn("diff-a"))
            .with_partition_indexes(partitions)];
        return OffsetFetchRequest::default().with_groups(vec![OffsetFetchRequestGroup::default()
            .with_group_id(gid(group))
            .with_topics(Some(topics))]);
    }
    let topics = vec![OffsetFetchRequestTopic::default()
        .with_name(tn("diff-a"))
        .with_partition_indexes(partitions)];
    OffsetFetchRequest::default()
        .with_group_id(gid(group))
        .with_topics(Some(topics))
}

/// diff-simple has offset 3 committed for partition 0 (setup), nothing for partition 1.
fn offset_fetch(_: &mut Env, v: i16) -> anyhow::Result<Probe> {
    probe(offset_fetch_request("diff-simple", v), v)
}

fn offset_fetch_unknown(_: &mut Env, v: i16) -> anyhow::Result<Probe> {
    probe(offset_fetch_request("diff-no-such-group", v), v)
}

/// A Stable group, an Empty one (offsets only) and one that does not exist.
fn describe_groups(env: &mut Env, v: i16) -> anyhow::Result<Probe> {
    let m = env.join_sync(&format!("diff-describe-v{v}"))?;
    let groups = vec![gid(&m.group), gid("diff-simple"), gid("diff-no-such-group")];
    probe(DescribeGroupsRequest::default().with_groups(groups), v)
}

fn list_groups(_: &mut Env, v: i16) -> anyhow::Result<Probe> {
    probe(ListGroupsRequest::default(), v)
}

fn delete_groups_ok(env: &mut Env, v: i16) -> anyhow::Result<Probe> {
    let group = format!("diff-delete-group-v{v}");
    let vc = env.top(ApiKey::OffsetCommit)?;
    env.conn
        .call(&commit_request(&group, -1, "", 0, 1, vc), vc)?;
    probe(
        DeleteGroupsRequest::default().with_groups_names(vec![gid(&group)]),
        v,
    )
}

fn delete_groups_unknown(_: &mut Env, v: i16) -> anyhow::Result<Probe> {
    probe(
        DeleteGroupsRequest::default().with_groups_names(vec![gid("diff-no-such-group")]),
        v,
    )
}

// ---- Topics ----

fn create_request(name: &str, partitions: i32, validate_only: bool) -> CreateTopicsRequest {
    CreateTopicsRequest::default()
        .with_topics(vec![CreatableTopic::default()
            .with_name(tn(name))
            .with_num_partitions(partitions)
            .with_replication_factor(1)])
        .with_timeout_ms(30_000)
        .with_validate_only(validate_only)
}

fn create_topics_ok(_: &mut Env, v: i16) -> anyhow::Result<Probe> {
    probe(create_request(&format!("diff-create-v{v}"), 2, false), v)
}

fn create_validate_only(_: &mut Env, v: i16) -> anyhow::Result<Probe> {
    probe(create_request(&format!("diff-validate-v{v}"), 2, true), v)
}

fn create_topics_exists(_: &mut Env, v: i16) -> anyhow::Result<Probe> {
    probe(create_request("diff-a", 3, false), v)
}

fn create_invalid_name(_: &mut Env, v: i16) -> anyhow::Result<Probe> {
    probe(create_request("bad/name", 1, false), v)
}

fn create_zero_parts(_: &mut Env, v: i16) -> anyhow::Result<Probe> {
    probe(create_request(&format!("diff-zero-v{v}"), 0, false), v)
}

fn delete_request(name: &str, v: i16) -> DeleteTopicsRequest {
    let req = DeleteTopicsRequest::default().with_timeout_ms(30_000);
    if v >= 6 {
        return req.with_topics(vec![DeleteTopicState::default().with_name(Some(tn(name)))]);
    }
    req.with_topic_names(vec![tn(name)])
}

fn delete_topics_ok(env: &mut Env, v: i16) -> anyhow::Result<Probe> {
    let name = format!("diff-delete-v{v}");
    env.create_topic(&name, 1, &[])?;
    probe(delete_request(&name, v), v)
}

fn delete_topics_unknown(_: &mut Env, v: i16) -> anyhow::Result<Probe> {
    probe(delete_request(&nope("delete", v), v), v)
}

fn create_partitions_request(name: &str, count: i32) -> CreatePartitionsRequest {
    CreatePartitionsRequest::default()
        .with_topics(vec![CreatePartitionsTopic::default()
            .with_name(tn(name))
            .with_count(count)])
        .with_timeout_ms(30_000)
}

fn create_partitions_ok(env: &mut Env, v: i16) -> anyhow::Result<Probe> {
    let name = format!("diff-grow-v{v}");
    env.create_topic(&name, 1, &[])?;
    probe(create_partitions_request(&name, 3), v)
}

fn create_parts_fewer(_: &mut Env, v: i16) -> anyhow::Result<Probe> {
    probe(create_partitions_request("diff-a", 2), v)
}

fn create_parts_unknown(_: &mut Env, v: i16) -> anyhow::Result<Probe> {
    probe(create_partitions_request(&nope("grow", v), 2), v)
}

// ---- Configs, cluster, producers, records ----

/// Resource type 2 is a topic.
fn describe_configs_request(topic: &str, keys: &[&str]) -> DescribeConfigsRequest {
    let keys = keys.iter().map(|k| sb(k)).collect();
    DescribeConfigsRequest::default().with_resources(vec![DescribeConfigsResource::default()
        .with_resource_type(2)
        .with_resource_name(sb(topic))
        .with_configuration_keys(Some(keys))])
}

fn describe_configs_topic(_: &mut Env, v: i16) -> anyhow::Result<Probe> {
    let keys = [
        "cleanup.policy",
        "retention.ms",
        "max.message.bytes",
        "segment.bytes",
    ];
    probe(describe_configs_request("diff-small", &keys), v)
}

fn describe_configs_unknown(_: &mut Env, v: i16) -> anyhow::Result<Probe> {
    probe(
        describe_configs_request(&nope("configs", v), &["retention.ms"]),
        v,
    )
}

fn describe_cluster(_: &mut Env, v: i16) -> anyhow::Result<Probe> {
    probe(DescribeClusterRequest::default(), v)
}

/// An idempotent producer: no transactional id (the codec's default is Some("")).
fn init_producer_id_request() -> InitProducerIdRequest {
    InitProducerIdRequest::default()
        .with_transactional_id(None)
        .with_transaction_timeout_ms(60_000)
}

fn init_producer_id(_: &mut Env, v: i16) -> anyhow::Result<Probe> {
    probe(init_producer_id_request(), v)
}

/// An empty transactional id: both answer INVALID_REQUEST.
fn init_producer_id_empty(_: &mut Env, v: i16) -> anyhow::Result<Probe> {
    let req = init_producer_id_request().with_transactional_id(Some(sb("").into()));
    probe(req, v)
}

fn delete_records_request(offset: i64) -> DeleteRecordsRequest {
    DeleteRecordsRequest::default()
        .with_topics(vec![DeleteRecordsTopic::default()
            .with_name(tn("diff-dr"))
            .with_partitions(vec![DeleteRecordsPartition::default()
                .with_partition_index(0)
                .with_offset(offset)])])
        .with_timeout_ms(10_000)
}

/// Each version deletes one record more (2, 3, 4), so each answer is a new low watermark.
fn delete_records_ok(_: &mut Env, v: i16) -> anyhow::Result<Probe> {
    probe(delete_records_request(2 + i64::from(v)), v)
}

fn delete_records_beyond(_: &mut Env, v: i16) -> anyhow::Result<Probe> {
    probe(delete_records_request(1000), v)
}

/// The end offset of epoch 0 of partition 0 of diff-a: its log end (epochs are masked;
/// both brokers created the topic at their first leader epoch).
fn leader_epoch_end(env: &mut Env, v: i16) -> anyhow::Result<Probe> {
    let epoch = env
        .topic("diff-a")?
        .partitions
        .iter()
        .map(|p| p.leader_epoch)
        .min();
    let req =
        OffsetForLeaderEpochRequest::default().with_topics(vec![OffsetForLeaderTopic::default()
            .with_topic(tn("diff-a"))
            .with_partitions(vec![OffsetForLeaderPartition::default()
                .with_partition(0)
                .with_leader_epoch(epoch.unwrap_or(0))])]);
    if v >= 3 {
        return probe(req.with_replica_id(BrokerId(-1)), v);
    }
    probe(req, v)
}

// ---- Later additions: configs, offsets, reassignments ----

/// Isolation READ_COMMITTED: Kafka answers an empty (not null) aborted transaction list.
fn fetch_read_committed(env: &mut Env, v: i16) -> anyhow::Result<Probe> {
    let t = fetch_topic(env, "diff-a", v)?;
    probe(
        fetch_request(t, &[(0, 0), (2, 0)]).with_isolation_level(1),
        v,
    )
}

/// One topic of its own per version, created in preparation.
fn config_topic(env: &mut Env, what: &str, v: i16) -> anyhow::Result<String> {
    let name = format!("diff-{what}-v{v}");
    env.create_topic(&name, 1, &[])?;
    Ok(name)
}

fn alter_request(topic: &str, key: &str, value: &str) -> AlterConfigsRequest {
    AlterConfigsRequest::default().with_resources(vec![AlterConfigsResource::default()
        .with_resource_type(2)
        .with_resource_name(sb(topic))
        .with_configs(vec![AlterableConfig::default()
            .with_name(sb(key))
            .with_value(Some(sb(value)))])])
}

fn alter_configs(env: &mut Env, v: i16) -> anyhow::Result<Probe> {
    let topic = config_topic(env, "alter", v)?;
    probe(alter_request(&topic, "retention.ms", "3600000"), v)
}

fn alter_configs_bad_key(env: &mut Env, v: i16) -> anyhow::Result<Probe> {
    let topic = config_topic(env, "alter-bad", v)?;
    probe(alter_request(&topic, "no.such.config", "1"), v)
}

/// SET retention.ms (operation 0) on a fresh topic.
fn incr_alter(env: &mut Env, v: i16) -> anyhow::Result<Probe> {
    let topic = config_topic(env, "incr", v)?;
    let req = IncrementalAlterConfigsRequest::default().with_resources(vec![
        IncrAlterConfigsResource::default()
            .with_resource_type(2)
            .with_resource_name(sb(&topic))
            .with_configs(vec![IncrAlterableConfig::default()
                .with_name(sb("retention.ms"))
                .with_config_operation(0)
                .with_value(Some(sb("7200000")))]),
    ]);
    probe(req, v)
}

/// A topic created with a config set: DescribeConfigs reports it as a topic config.
fn describe_altered(env: &mut Env, v: i16) -> anyhow::Result<Probe> {
    let name = format!("diff-described-v{v}");
    env.create_topic(&name, 1, &[("retention.ms", "3600000")])?;
    probe(
        describe_configs_request(&name, &["retention.ms", "cleanup.policy"]),
        v,
    )
}

fn offset_delete_request(group: &str) -> OffsetDeleteRequest {
    OffsetDeleteRequest::default()
        .with_group_id(gid(group))
        .with_topics(vec![OffsetDeleteRequestTopic::default()
            .with_name(tn("diff-a"))
            .with_partitions(vec![
                OffsetDeleteRequestPartition::default().with_partition_index(0)
            ])])
}

/// An Empty group with an offset for diff-a 0: the delete succeeds.
fn offset_delete(env: &mut Env, v: i16) -> anyhow::Result<Probe> {
    let group = format!("diff-offset-delete-v{v}");
    let vc = env.top(ApiKey::OffsetCommit)?;
    env.conn
        .call(&commit_request(&group, -1, "", 0, 1, vc), vc)?;
    probe(offset_delete_request(&group), v)
}

fn offset_delete_unknown(_: &mut Env, v: i16) -> anyhow::Result<Probe> {
    probe(offset_delete_request("diff-no-such-group"), v)
}

fn list_moves(_: &mut Env, v: i16) -> anyhow::Result<Probe> {
    probe(
        ListPartitionReassignmentsRequest::default().with_timeout_ms(10_000),
        v,
    )
}

// ---- Later additions: fetch edges, idempotence, more errors ----

fn metadata_no_topics(_: &mut Env, v: i16) -> anyhow::Result<Probe> {
    probe(metadata_request(&[], false, v), v)
}

/// One batch per codec (gzip, snappy, lz4, zstd), each in its own partition of diff-c.
fn fetch_compressed(env: &mut Env, v: i16) -> anyhow::Result<Probe> {
    let t = fetch_topic(env, "diff-c", v)?;
    probe(fetch_request(t, &[(0, 0), (1, 0), (2, 0), (3, 0)]), v)
}

/// From offset 2 of the batch 0..=4: Kafka returns the whole batch.
fn fetch_mid_batch(env: &mut Env, v: i16) -> anyhow::Result<Probe> {
    let t = fetch_topic(env, "diff-a", v)?;
    probe(fetch_request(t, &[(0, 2)]), v)
}

/// max_bytes 1 and partition_max_bytes 1: Kafka still returns the first batch (KIP-74).
fn fetch_tiny_max_bytes(env: &mut Env, v: i16) -> anyhow::Result<Probe> {
    let t = fetch_topic(env, "diff-a", v)?;
    let mut req = fetch_request(t, &[(0, 0), (1, 0)]).with_max_bytes(1);
    for topic in &mut req.topics {
        for p in &mut topic.partitions {
            p.partition_max_bytes = 1;
        }
    }
    probe(req, v)
}

/// At the log end: no records, after max_wait_ms.
fn fetch_at_end(env: &mut Env, v: i16) -> anyhow::Result<Probe> {
    let t = fetch_topic(env, "diff-a", v)?;
    probe(fetch_request(t, &[(0, 7), (2, 0)]), v)
}

fn list_offsets_future(_: &mut Env, v: i16) -> anyhow::Result<Probe> {
    let ts = crate::clock::first_timestamp_ms() + 3_600_000;
    probe(list_offsets_request("diff-a", &[0, 1], ts), v)
}

/// A batch with one bit flipped after its CRC field: CORRUPT_MESSAGE.
fn produce_corrupt_crc(_: &mut Env, v: i16) -> anyhow::Result<Probe> {
    let mut raw = batch("crc", 2, 0, Compression::None).to_vec();
    let last = raw.len() - 1;
    raw[last] ^= 0x01;
    probe(produce_request("diff-p", 0, Bytes::from(raw), -1), v)
}

/// A fresh idempotent producer id from this broker.
fn producer(env: &mut Env) -> anyhow::Result<(i64, i16)> {
    let vi = env.top(ApiKey::InitProducerId)?;
    let r = env.conn.call(&init_producer_id_request(), vi)?;
    anyhow::ensure!(
        r.error_code == 0,
        "{}: InitProducerId error {}",
        env.label,
        r.error_code
    );
    Ok((r.producer_id.0, r.producer_epoch))
}

fn idempotent_batch(id: (i64, i16), base_sequence: i32, prefix: &str) -> Bytes {
    let p = ProducerSeq {
        producer_id: id.0,
        producer_epoch: id.1,
        base_sequence,
    };
    batch_from(prefix, 3, 0, Compression::None, Some(p))
}

/// Sequence 0 of a new producer, into its own topic.
fn produce_idempotent(env: &mut Env, v: i16) -> anyhow::Result<Probe> {
    let topic = format!("diff-idem-v{v}");
    env.create_topic(&topic, 1, &[])?;
    let id = producer(env)?;
    probe(
        produce_request(&topic, 0, idempotent_batch(id, 0, "i"), -1),
        v,
    )
}

/// The same batch twice: the second is a duplicate, acknowledged at the first's offset.
fn produce_duplicate(env: &mut Env, v: i16) -> anyhow::Result<Probe> {
    let topic = format!("diff-dup-v{v}");
    env.create_topic(&topic, 1, &[])?;
    let id = producer(env)?;
    env.produce(&topic, 0, batch("pad", 2, 0, Compression::None))?;
    env.produce(&topic, 0, idempotent_batch(id, 0, "d"))?;
    probe(
        produce_request(&topic, 0, idempotent_batch(id, 0, "d"), -1),
        v,
    )
}

/// Sequence 0 then 5: OUT_OF_ORDER_SEQUENCE_NUMBER.
fn produce_sequence_gap(env: &mut Env, v: i16) -> anyhow::Result<Probe> {
    let topic = format!("diff-gap-v{v}");
    env.create_topic(&topic, 1, &[])?;
    let id = producer(env)?;
    env.produce(&topic, 0, idempotent_batch(id, 0, "g"))?;
    probe(
        produce_request(&topic, 0, idempotent_batch(id, 5, "g"), -1),
        v,
    )
}

fn commit_unknown_topic(_: &mut Env, v: i16) -> anyhow::Result<Probe> {
    let mut req = commit_request(&format!("diff-commit-nt-v{v}"), -1, "", 0, 1, v);
    for t in &mut req.topics {
        t.name = tn(&nope("commit", v));
    }
    probe(req, v)
}

/// A Stable "consumer" group, then a join with protocol type "connect".
fn join_other_protocol(env: &mut Env, v: i16) -> anyhow::Result<Probe> {
    let m = env.join_sync(&format!("diff-join-other-v{v}"))?;
    env.joining(&m.group);
    probe(
        join_request(&m.group, sb(""), v).with_protocol_type(sb("connect")),
        v,
    )
}
