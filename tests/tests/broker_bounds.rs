//! The bounds a single client cannot push the broker past (issue 24), against the real
//! binary: hostile partition counts, replication factors and topic names are refused with
//! Kafka's error codes before anything is allocated (the broker's peak RSS grows by at most
//! `RSS_GROWTH_MAX_BYTES`), the per-shard partition limit holds across CreateTopics,
//! CreatePartitions and validate-only requests, and a Fetch answer never holds more than
//! `fetch.max.bytes` of records whatever the request asks (KIP-74: only the first non-empty
//! partition may exceed it, by its first batch).

use bytes::Bytes;
use kafka_protocol::messages::create_partitions_request::CreatePartitionsTopic;
use kafka_protocol::messages::create_topics_request::CreatableTopic;
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::{CreatePartitionsRequest, CreateTopicsRequest, FetchRequest};
use strand_tests::broker::{topic_name, Broker, Client, Options};
use strand_wire::BatchBuilder;

/// Peak RSS a hostile request may add (issue 24).
const RSS_GROWTH_MAX_BYTES: u64 = 64 * 1024 * 1024;
/// The partition limit the test broker runs with: 2 shards x 20 = 40 partition replicas.
const PARTITIONS_PER_SHARD: usize = 20;
const INVALID_TOPIC_EXCEPTION: i16 = 17;
const INVALID_PARTITIONS: i16 = 37;
const INVALID_REPLICATION_FACTOR: i16 = 38;

fn create(
    c: &mut Client,
    name: &str,
    partitions: i32,
    rf: i16,
    validate_only: bool,
) -> (i16, String) {
    let req = CreateTopicsRequest::default()
        .with_topics(vec![CreatableTopic::default()
            .with_name(topic_name(name))
            .with_num_partitions(partitions)
            .with_replication_factor(rf)])
        .with_timeout_ms(10_000)
        .with_validate_only(validate_only);
    let resp = c.request(5, &req);
    let t = &resp.topics[0];
    let message = t
        .error_message
        .as_ref()
        .map(ToString::to_string)
        .unwrap_or_default();
    (t.error_code, message)
}

fn grow(c: &mut Client, name: &str, count: i32) -> (i16, String) {
    let req = CreatePartitionsRequest::default()
        .with_topics(vec![CreatePartitionsTopic::default()
            .with_name(topic_name(name))
            .with_count(count)
            .with_assignments(None)])
        .with_timeout_ms(10_000);
    let resp = c.request(1, &req);
    let r = &resp.results[0];
    let message = r
        .error_message
        .as_ref()
        .map(ToString::to_string)
        .unwrap_or_default();
    (r.error_code, message)
}

#[test]
fn hostile_counts_and_names_are_refused_before_anything_is_allocated() {
    let mut broker = Broker::start(
        env!("CARGO_TARGET_TMPDIR").as_ref(),
        Options {
            smp: 2,
            extra_args: vec![
                "--topic-partitions-per-shard".into(),
                PARTITIONS_PER_SHARD.to_string(),
            ],
            ..Options::default()
        },
    );
    let mut c = broker.connect();
    let rss_before = broker.peak_rss_bytes();

    // Counts and factors no broker could hold: refused at once.
    assert_eq!(
        create(&mut c, "huge", i32::MAX, 1, false).0,
        INVALID_PARTITIONS
    );
    assert_eq!(
        create(&mut c, "huge", 10_001, 1, false).0,
        INVALID_PARTITIONS
    );
    assert_eq!(create(&mut c, "huge", 0, 1, false).0, INVALID_PARTITIONS);
    assert_eq!(
        create(&mut c, "huge", 1, i16::MAX, false).0,
        INVALID_REPLICATION_FACTOR
    );

    // Names as Kafka allows them; none can name a path outside the data directory.
    let long = "n".repeat(250);
    for bad in [
        "..",
        ".",
        "../escape",
        "a/b",
        "a\\b",
        "",
        "sp ace",
        "ü",
        long.as_str(),
    ] {
        assert_eq!(
            create(&mut c, bad, 1, 1, true).0,
            INVALID_TOPIC_EXCEPTION,
            "topic name {bad:?}"
        );
    }
    assert_eq!(create(&mut c, &"n".repeat(249), 1, 1, true).0, 0);

    // The per-shard limit: 40 replicas on this node, 4 of them __consumer_offsets'; 30 fit,
    // 30 more do not, validate-only or not, and growing the first topic fits only within
    // what is left.
    assert_eq!(create(&mut c, "first", 30, 1, false).0, 0);
    let (code, message) = create(&mut c, "second", 30, 1, false);
    assert_eq!(code, INVALID_PARTITIONS, "{message}");
    assert!(message.contains("partition limit"), "{message}");
    assert_eq!(create(&mut c, "second", 30, 1, true).0, INVALID_PARTITIONS);
    assert_eq!(grow(&mut c, "first", i32::MAX).0, INVALID_PARTITIONS);
    assert_eq!(grow(&mut c, "first", 45).0, INVALID_PARTITIONS);
    assert_eq!(grow(&mut c, "first", 35).0, 0);
    assert_eq!(create(&mut c, "second", 1, 1, false).0, 0);
    assert_eq!(create(&mut c, "third", 1, 1, false).0, INVALID_PARTITIONS);

    let grown = broker.peak_rss_bytes().saturating_sub(rss_before);
    assert!(
        grown <= RSS_GROWTH_MAX_BYTES,
        "peak RSS grew by {grown} bytes (bound {RSS_GROWTH_MAX_BYTES})"
    );
    broker.assert_alive();
    c.api_versions().expect("still serving");
}

/// A batch of one record with a `value_bytes`-byte value.
fn batch(value_bytes: usize) -> Bytes {
    let mut b = BatchBuilder::new(1_700_000_000_000);
    b.push(1_700_000_000_000, None, Some(&vec![b'v'; value_bytes]), &[]);
    b.build()
}

/// Record bytes per partition of a Fetch v11 of partitions 0..3 from offset 0.
fn fetch_sizes(c: &mut Client, topic: &str, max_bytes: i32) -> Vec<usize> {
    let partitions = (0..3)
        .map(|p| {
            FetchPartition::default()
                .with_partition(p)
                .with_fetch_offset(0)
                .with_partition_max_bytes(i32::MAX)
        })
        .collect();
    let req = FetchRequest::default()
        .with_replica_id((-1).into())
        .with_max_wait_ms(0)
        .with_max_bytes(max_bytes)
        .with_topics(vec![FetchTopic::default()
            .with_topic(topic_name(topic))
            .with_partitions(partitions)]);
    let resp = c.request(11, &req);
    let parts = &resp.responses[0].partitions;
    parts
        .iter()
        .map(|p| {
            assert_eq!(p.error_code, 0, "{p:?}");
            p.records.as_ref().map_or(0, Bytes::len)
        })
        .collect()
}

#[test]
fn a_fetch_answer_holds_at_most_fetch_max_bytes() {
    const FETCH_MAX_BYTES: usize = 10_000;
    const VALUE_BYTES: usize = 1_000;
    let mut broker = Broker::start(
        env!("CARGO_TARGET_TMPDIR").as_ref(),
        Options {
            smp: 2,
            extra_args: vec!["--fetch-max-bytes".into(), FETCH_MAX_BYTES.to_string()],
            ..Options::default()
        },
    );
    let mut c = broker.connect();
    c.create_topic("capped", 3);
    // Partition 0 stays empty; 1 and 2 get 8 batches of about 1 KiB each (16 KiB in all).
    let one = batch(VALUE_BYTES).len();
    for p in 1..3 {
        for _ in 0..8 {
            let r = c.produce("capped", p, batch(VALUE_BYTES), -1);
            assert_eq!(r.error_code, 0, "{r:?}");
        }
    }

    // The request asks for everything; the broker's fetch.max.bytes caps it, in whole
    // batches.
    let sizes = fetch_sizes(&mut c, "capped", i32::MAX);
    let total: usize = sizes.iter().sum();
    assert!(total <= FETCH_MAX_BYTES, "{sizes:?}");
    // Each of the 2 shards reads its share of the cap in parallel (whole batches).
    assert!(
        total > FETCH_MAX_BYTES - 2 * one,
        "each shard fills its share: {sizes:?}"
    );
    assert_eq!(sizes[0], 0);
    assert_eq!(
        sizes.iter().sum::<usize>() % one,
        0,
        "whole batches: {sizes:?}"
    );

    // max_bytes 1: the first batch of the first non-empty partition only.
    assert_eq!(fetch_sizes(&mut c, "capped", 1), [0, one, 0]);
    broker.assert_alive();
}

/// Fetch v11 of partition 0 of `topic` from offset 0 asking for everything.
fn fetch_everything(topic: &str, max_wait_ms: i32) -> FetchRequest {
    FetchRequest::default()
        .with_replica_id((-1).into())
        .with_max_wait_ms(max_wait_ms)
        .with_max_bytes(i32::MAX)
        .with_topics(vec![FetchTopic::default()
            .with_topic(topic_name(topic))
            .with_partitions(vec![FetchPartition::default()
                .with_partition(0)
                .with_fetch_offset(0)
                .with_partition_max_bytes(i32::MAX)])])
}

#[test]
fn answers_not_yet_written_count_against_the_in_flight_bytes() {
    const IN_FLIGHT_BYTES: usize = 8 * 1024 * 1024;
    const BATCHES: usize = 24;
    const PIPELINED: i32 = 64;
    let mut broker = Broker::start(
        env!("CARGO_TARGET_TMPDIR").as_ref(),
        Options {
            extra_args: vec![
                "--in-flight-bytes-per-shard".into(),
                IN_FLIGHT_BYTES.to_string(),
            ],
            ..Options::default()
        },
    );
    let mut c = broker.connect();
    c.create_topic("held", 1);
    for _ in 0..BATCHES {
        let r = c.produce("held", 0, batch(1_000_000), 1);
        assert_eq!(r.error_code, 0, "{r:?}");
    }
    let records = |c: &mut Client, max_wait_ms| {
        let resp = c.request(11, &fetch_everything("held", max_wait_ms));
        let p = &resp.responses[0].partitions[0];
        assert_eq!(p.error_code, 0, "{p:?}");
        p.records.as_ref().map_or(0, Bytes::len)
    };
    let first = records(&mut c, 0);
    assert!(first > 0 && first <= IN_FLIGHT_BYTES, "{first}");
    let before = broker.peak_rss_bytes();
    // A client pipelines fetches of everything (24 MB each) and never reads its answers:
    // without the bound their answers would pile up in the broker (1.5 GB).
    let mut hostile = broker.connect();
    let req = fetch_everything("held", 0);
    for id in 0..PIPELINED {
        let frame = strand_tests::broker::encode_request(&req, 11, id).expect("encode");
        hostile.send_frame(&frame).expect("send");
    }
    std::thread::sleep(std::time::Duration::from_secs(3));
    let held = broker.metric_sum("strand_shard_in_flight_bytes");
    assert!(held <= IN_FLIGHT_BYTES as f64, "{held} bytes in flight");
    // Others are still answered, within their wait, with what room there is.
    let answered = std::time::Instant::now();
    let _ = records(&mut c, 500);
    assert!(answered.elapsed() < std::time::Duration::from_secs(5));
    let grown = broker.peak_rss_bytes().saturating_sub(before);
    assert!(
        grown <= RSS_GROWTH_MAX_BYTES,
        "peak RSS grew by {grown} bytes with answers unread"
    );
    // The unread answers' bytes come back when their connection goes.
    drop(hostile);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while broker.metric_sum("strand_shard_in_flight_bytes") > 1_000_000.0 {
        assert!(
            std::time::Instant::now() < deadline,
            "in-flight bytes never returned"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    assert!(records(&mut c, 0) > 0);
    broker.assert_alive();
}

#[test]
fn connections_over_max_connections_per_ip_are_closed_and_counted() {
    const PER_IP: usize = 3;
    let mut broker = Broker::start(
        env!("CARGO_TARGET_TMPDIR").as_ref(),
        Options {
            smp: 2,
            extra_args: vec!["--max-connections-per-ip".into(), PER_IP.to_string()],
            ..Options::default()
        },
    );
    // PER_IP served connections. The start-up probe's connection may still be counted for
    // a moment (its release reaches shard 0 after it closed), so each is retried.
    let held: Vec<Client> = (0..PER_IP).map(|_| served(&broker)).collect();
    let mut over = Client::connect(broker.addr()).expect("TCP connect");
    over.set_read_timeout(std::time::Duration::from_secs(10));
    assert!(
        over.api_versions().is_err(),
        "a connection over max_connections_per_ip is closed"
    );
    assert!(broker.metric_sum("strand_kafka_connections_refused_total") >= 1.0);
    // A closed connection frees its place (its release reaches shard 0 a moment later).
    let mut held = held;
    drop(held.pop());
    served(&broker);
    broker.assert_alive();
}

/// A connection the broker serves, retried for 10 s while it is refused.
fn served(broker: &Broker) -> Client {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let mut c = Client::connect(broker.addr()).expect("TCP connect");
        c.set_read_timeout(std::time::Duration::from_secs(10));
        if c.api_versions().is_ok() {
            return c;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no connection served within 10 s (a closed connection's place never came back)"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

/// JoinGroup v5 of a new member (empty member id) to `group`; (error code, member id).
fn join_new(c: &mut Client, group: &str) -> (i16, String) {
    use kafka_protocol::messages::join_group_request::JoinGroupRequestProtocol;
    use kafka_protocol::messages::JoinGroupRequest;
    use kafka_protocol::protocol::StrBytes;
    let req = JoinGroupRequest::default()
        .with_group_id(StrBytes::from_string(group.to_string()).into())
        .with_session_timeout_ms(GROUP_SESSION_TIMEOUT_MS)
        .with_rebalance_timeout_ms(10_000)
        .with_member_id(StrBytes::from_static_str(""))
        .with_protocol_type(StrBytes::from_static_str("consumer"))
        .with_protocols(vec![JoinGroupRequestProtocol::default()
            .with_name(StrBytes::from_static_str("range"))
            .with_metadata(Bytes::from_static(&[0, 0, 0, 0, 0, 0, 0, 0]))]);
    let resp = c.request(5, &req);
    (resp.error_code, resp.member_id.to_string())
}

/// The shortest session timeout a group accepts (Kafka's group.min.session.timeout.ms).
const GROUP_SESSION_TIMEOUT_MS: i32 = 6_000;
const MEMBER_ID_REQUIRED: i16 = 79;
const GROUP_MAX_SIZE_REACHED: i16 = 81;

#[test]
fn group_max_size_counts_pending_member_ids_which_expire_with_their_session() {
    let mut broker = Broker::start(
        env!("CARGO_TARGET_TMPDIR").as_ref(),
        Options {
            extra_args: vec!["--group-max-size".into(), "2".into()],
            ..Options::default()
        },
    );
    let mut c = broker.connect();
    // A group id is a key in memory and in __consumer_offsets: its length is bounded.
    const INVALID_GROUP_ID: i16 = 24;
    assert_eq!(join_new(&mut c, &"g".repeat(1025)).0, INVALID_GROUP_ID);
    let group = "bounded-group";
    // Member ids handed out and never used count: a third is refused.
    assert_eq!(join_new(&mut c, group).0, MEMBER_ID_REQUIRED);
    assert_eq!(join_new(&mut c, group).0, MEMBER_ID_REQUIRED);
    assert_eq!(join_new(&mut c, group).0, GROUP_MAX_SIZE_REACHED);
    // Unused for the session timeout their joins asked for, they are dropped: room again.
    let deadline = std::time::Instant::now()
        + std::time::Duration::from_millis(3 * GROUP_SESSION_TIMEOUT_MS.unsigned_abs() as u64);
    loop {
        let (code, _) = join_new(&mut c, group);
        if code == MEMBER_ID_REQUIRED {
            break;
        }
        assert_eq!(code, GROUP_MAX_SIZE_REACHED);
        assert!(
            std::time::Instant::now() < deadline,
            "pending member ids never expired"
        );
        std::thread::sleep(std::time::Duration::from_millis(250));
    }
    broker.assert_alive();
}

/// OffsetCommit v2 of a simple consumer (no generation, no member) to `group`; the error
/// code of its one partition.
fn commit_simple(c: &mut Client, group: &str, topic: &str) -> i16 {
    use kafka_protocol::messages::offset_commit_request::{
        OffsetCommitRequestPartition, OffsetCommitRequestTopic,
    };
    use kafka_protocol::messages::OffsetCommitRequest;
    use kafka_protocol::protocol::StrBytes;
    let req = OffsetCommitRequest::default()
        .with_group_id(StrBytes::from_string(group.to_string()).into())
        .with_generation_id_or_member_epoch(-1)
        .with_member_id(StrBytes::from_static_str(""))
        .with_topics(vec![OffsetCommitRequestTopic::default()
            .with_name(StrBytes::from_string(topic.to_string()).into())
            .with_partitions(vec![OffsetCommitRequestPartition::default()
                .with_partition_index(0)
                .with_committed_offset(0)])]);
    let resp: kafka_protocol::messages::OffsetCommitResponse = c.request(2, &req);
    resp.topics[0].partitions[0].error_code
}

#[test]
fn groups_per_shard_bounds_new_groups_and_empty_ones_are_dropped() {
    const COORDINATOR_NOT_AVAILABLE: i16 = 15;
    let mut broker = Broker::start(
        env!("CARGO_TARGET_TMPDIR").as_ref(),
        Options {
            extra_args: vec!["--groups-per-shard".into(), "3".into()],
            ..Options::default()
        },
    );
    let mut c = broker.connect();
    let topic = "groups-bound";
    assert_eq!(create(&mut c, topic, 1, 1, false).0, 0);
    // Two groups waiting for their members (pending member ids), one with an offset.
    assert_eq!(join_new(&mut c, "waiting-1").0, MEMBER_ID_REQUIRED);
    assert_eq!(join_new(&mut c, "waiting-2").0, MEMBER_ID_REQUIRED);
    assert_eq!(commit_simple(&mut c, "committed", topic), 0);
    let before = broker.peak_rss_bytes();
    // A hostile client asking for ever new groups gets a retriable refusal each time.
    for i in 0..5_000 {
        let group = format!("hostile-{i}");
        assert_eq!(
            join_new(&mut c, &group).0,
            COORDINATOR_NOT_AVAILABLE,
            "{group}"
        );
        if i % 500 == 0 {
            assert_eq!(
                commit_simple(&mut c, &group, topic),
                COORDINATOR_NOT_AVAILABLE
            );
        }
    }
    // Existing groups are served as before.
    assert_eq!(commit_simple(&mut c, "committed", topic), 0);
    assert_eq!(join_new(&mut c, "waiting-1").0, MEMBER_ID_REQUIRED);
    let grown = broker.peak_rss_bytes().saturating_sub(before);
    assert!(
        grown <= RSS_GROWTH_MAX_BYTES,
        "peak RSS grew by {grown} bytes"
    );
    // Once their member ids expire unused, the waiting groups hold nothing and are dropped;
    // the group with an offset stays.
    let deadline = std::time::Instant::now()
        + std::time::Duration::from_millis(3 * GROUP_SESSION_TIMEOUT_MS.unsigned_abs() as u64);
    loop {
        let code = join_new(&mut c, "newcomer").0;
        if code == MEMBER_ID_REQUIRED {
            break;
        }
        assert_eq!(code, COORDINATOR_NOT_AVAILABLE);
        assert!(
            std::time::Instant::now() < deadline,
            "empty groups never dropped"
        );
        std::thread::sleep(std::time::Duration::from_millis(250));
    }
    assert_eq!(commit_simple(&mut c, "committed", topic), 0);
    broker.assert_alive();
}

/// CreateTopics v5 of `name` with a manual replica assignment: (error code, partitions).
fn create_assigned(c: &mut Client, name: &str, lists: &[Vec<i32>], partitions: i32) -> (i16, i32) {
    use kafka_protocol::messages::create_topics_request::CreatableReplicaAssignment;
    let assignments = lists
        .iter()
        .enumerate()
        .map(|(i, ids)| {
            CreatableReplicaAssignment::default()
                .with_partition_index(i32::try_from(i).expect("small"))
                .with_broker_ids(ids.iter().map(|&b| b.into()).collect())
        })
        .collect();
    let req = CreateTopicsRequest::default()
        .with_topics(vec![CreatableTopic::default()
            .with_name(topic_name(name))
            .with_num_partitions(partitions)
            .with_replication_factor(-1)
            .with_assignments(assignments)])
        .with_timeout_ms(10_000);
    let resp = c.request(5, &req);
    (resp.topics[0].error_code, resp.topics[0].num_partitions)
}

#[test]
fn manual_replica_assignments_follow_kafkas_rules() {
    use kafka_protocol::messages::MetadataRequest;
    const INVALID_REPLICA_ASSIGNMENT: i16 = 39;
    const INVALID_REQUEST: i16 = 42;
    let broker = Broker::start(env!("CARGO_TARGET_TMPDIR").as_ref(), Options::default());
    let mut c = broker.connect();
    let node = c.request(1, &MetadataRequest::default()).brokers[0]
        .node_id
        .0;
    let three = vec![vec![node]; 3];
    assert_eq!(create_assigned(&mut c, "assigned", &three, -1), (0, 3));
    assert_eq!(
        create_assigned(&mut c, "assigned-bad-node", &[vec![node + 1]], -1).0,
        INVALID_REPLICA_ASSIGNMENT
    );
    assert_eq!(
        create_assigned(&mut c, "assigned-twice", &[vec![node, node]], -1).0,
        INVALID_REPLICA_ASSIGNMENT
    );
    assert_eq!(
        create_assigned(&mut c, "assigned-and-counted", &three, 3).0,
        INVALID_REQUEST
    );
}
