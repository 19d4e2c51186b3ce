//! Share groups (KIP-932) on the wire, as Apache Kafka 4.1 answers them: not advertised
//! unless enabled; ShareGroupHeartbeat's checks and a partition shared by two members;
//! ShareFetch sessions and acquisition (each record to one member at a time, with its
//! delivery count); acknowledgements (ACCEPT finishes, RELEASE gives back, a record not
//! acquired by the member is INVALID_RECORD_STATE); a session's close releasing the
//! member's records; lock expiry; and a group config (`share.auto.offset.reset`). The
//! Java client's view is tests/kafka/test_share_groups.py.

use kafka_protocol::messages::incremental_alter_configs_request::{
    AlterConfigsResource, AlterableConfig,
};
use kafka_protocol::messages::share_acknowledge_request::{
    AcknowledgePartition, AcknowledgeTopic, AcknowledgementBatch as AckBatch,
};
use kafka_protocol::messages::share_fetch_request::{
    AcknowledgementBatch, FetchPartition, FetchTopic,
};
use kafka_protocol::messages::{
    ApiKey, GroupId, IncrementalAlterConfigsRequest, ListGroupsRequest, MetadataRequest,
    ShareAcknowledgeRequest, ShareFetchRequest, ShareFetchResponse, ShareGroupDescribeRequest,
    ShareGroupHeartbeatRequest,
};
use kafka_protocol::protocol::StrBytes;
use strand_tests::broker::{topic_name, Broker, Client, Options};
use strand_tests::clock::Deadline;

const GROUP: &str = "kip932-queue";
const TOPIC: &str = "kip932-jobs";
const INVALID_REQUEST: i16 = 42;
const UNKNOWN_MEMBER_ID: i16 = 25;
const GROUP_ID_NOT_FOUND: i16 = 69;
const INVALID_RECORD_STATE: i16 = 121;
const SHARE_SESSION_NOT_FOUND: i16 = 122;
const INVALID_SHARE_SESSION_EPOCH: i16 = 123;
const ACCEPT: i8 = 1;
const RELEASE: i8 = 2;
const LOCK_MS: u64 = 1_500;

fn s(v: &str) -> StrBytes {
    StrBytes::from_string(v.to_string())
}

fn beat(member: &str, epoch: i32) -> ShareGroupHeartbeatRequest {
    ShareGroupHeartbeatRequest::default()
        .with_group_id(GroupId(s(GROUP)))
        .with_member_id(s(member))
        .with_member_epoch(epoch)
}

fn join(member: &str) -> ShareGroupHeartbeatRequest {
    beat(member, 0).with_subscribed_topic_names(Some(vec![topic_name(TOPIC)]))
}

/// A ShareFetch of partition 0 with `acks` (first, last, type) piggybacked.
fn fetch(
    member: &str,
    epoch: i32,
    topic_id: uuid::Uuid,
    acks: &[(i64, i64, i8)],
) -> ShareFetchRequest {
    let batches = acks
        .iter()
        .map(|&(first, last, t)| {
            AcknowledgementBatch::default()
                .with_first_offset(first)
                .with_last_offset(last)
                .with_acknowledge_types(vec![t])
        })
        .collect();
    ShareFetchRequest::default()
        .with_group_id(Some(GroupId(s(GROUP))))
        .with_member_id(Some(s(member)))
        .with_share_session_epoch(epoch)
        .with_max_wait_ms(0)
        .with_min_bytes(1)
        .with_max_bytes(1 << 20)
        .with_max_records(500)
        .with_batch_size(500)
        .with_topics(vec![FetchTopic::default()
            .with_topic_id(topic_id)
            .with_partitions(vec![FetchPartition::default()
                .with_partition_index(0)
                .with_acknowledgement_batches(batches)])])
}

/// A ShareAcknowledge of partition 0.
fn ack(
    member: &str,
    epoch: i32,
    topic_id: uuid::Uuid,
    acks: &[(i64, i64, i8)],
) -> ShareAcknowledgeRequest {
    let batches = acks
        .iter()
        .map(|&(first, last, t)| {
            AckBatch::default()
                .with_first_offset(first)
                .with_last_offset(last)
                .with_acknowledge_types(vec![t])
        })
        .collect();
    ShareAcknowledgeRequest::default()
        .with_group_id(Some(GroupId(s(GROUP))))
        .with_member_id(Some(s(member)))
        .with_share_session_epoch(epoch)
        .with_topics(vec![AcknowledgeTopic::default()
            .with_topic_id(topic_id)
            .with_partitions(vec![AcknowledgePartition::default()
                .with_partition_index(0)
                .with_acknowledgement_batches(batches)])])
}

/// `(first, last, delivery count)` of each acquired range, and the partition's error and
/// acknowledgement error.
fn acquired(r: &ShareFetchResponse) -> (Vec<(i64, i64, i16)>, i16, i16) {
    let p = &r.responses[0].partitions[0];
    let ranges = p
        .acquired_records
        .iter()
        .map(|a| (a.first_offset, a.last_offset, a.delivery_count))
        .collect();
    (ranges, p.error_code, p.acknowledge_error_code)
}

fn produce(c: &mut Client, n: usize) {
    let ts = 1_700_000_000_000;
    let mut b = strand_wire::BatchBuilder::new(ts);
    for i in 0..n {
        b.push(ts, None, Some(format!("job-{i}").as_bytes()), &[]);
    }
    assert_eq!(c.produce(TOPIC, 0, b.build(), -1).error_code, 0);
}

fn enabled(extra: &[&str]) -> Options {
    let mut args: Vec<String> = vec![
        "--group-share-enable".into(),
        "true".into(),
        "--group-share-record-lock-duration-ms".into(),
        LOCK_MS.to_string(),
        "--group-share-delivery-count-limit".into(),
        "3".into(),
    ];
    args.extend(extra.iter().map(|a| a.to_string()));
    Options {
        extra_args: args,
        ..Options::default()
    }
}

#[test]
fn share_apis_are_advertised_only_when_enabled() {
    let disabled = Options {
        extra_args: vec!["--group-share-enable".into(), "false".into()],
        ..Options::default()
    };
    let off = Broker::start(env!("CARGO_TARGET_TMPDIR").as_ref(), disabled);
    let keys: Vec<i16> = off
        .connect()
        .api_versions()
        .expect("ApiVersions")
        .api_keys
        .iter()
        .map(|k| k.api_key)
        .collect();
    for key in [
        ApiKey::ShareGroupHeartbeat,
        ApiKey::ShareFetch,
        ApiKey::ShareAcknowledge,
    ] {
        assert!(
            !keys.contains(&(key as i16)),
            "{key:?} advertised while disabled"
        );
    }
    // On by default, as on a new Kafka 4.2 cluster.
    let on = Broker::start(env!("CARGO_TARGET_TMPDIR").as_ref(), Options::default());
    let versions = on.connect().api_versions().expect("ApiVersions").api_keys;
    for key in [
        ApiKey::ShareGroupHeartbeat,
        ApiKey::ShareGroupDescribe,
        ApiKey::ShareFetch,
        ApiKey::ShareAcknowledge,
    ] {
        let v = versions.iter().find(|k| k.api_key == key as i16);
        assert_eq!(
            v.map(|v| (v.min_version, v.max_version)),
            Some((1, 1)),
            "{key:?}"
        );
    }
    for key in [
        ApiKey::DescribeShareGroupOffsets,
        ApiKey::AlterShareGroupOffsets,
        ApiKey::DeleteShareGroupOffsets,
    ] {
        let v = versions.iter().find(|k| k.api_key == key as i16);
        assert_eq!(
            v.map(|v| (v.min_version, v.max_version)),
            Some((0, 0)),
            "{key:?}"
        );
    }
}

#[test]
#[expect(clippy::too_many_lines, reason = "one protocol walk, step by step")]
fn share_group_protocol_matches_kafka() {
    let broker = Broker::start(env!("CARGO_TARGET_TMPDIR").as_ref(), enabled(&[]));
    let mut c = broker.connect();
    c.wait_coordinator(GROUP, Deadline::after(std::time::Duration::from_secs(30)));
    c.create_topic(TOPIC, 1);
    let topic_id = c
        .request(12, &MetadataRequest::default().with_topics(None))
        .topics
        .iter()
        .find(|t| t.name.as_ref().is_some_and(|n| n.0.as_str() == TOPIC))
        .expect("the topic in Metadata")
        .topic_id;

    // The group reads from the start of the log (a group config), else from its end.
    let earliest = IncrementalAlterConfigsRequest::default().with_resources(vec![
        AlterConfigsResource::default()
            .with_resource_type(32)
            .with_resource_name(s(GROUP))
            .with_configs(vec![AlterableConfig::default()
                .with_name(s("share.auto.offset.reset"))
                .with_config_operation(0)
                .with_value(Some(s("earliest")))]),
    ]);
    assert_eq!(c.request(1, &earliest).responses[0].error_code, 0);
    produce(&mut c, 10);

    // Heartbeat checks, then two members sharing the one partition.
    assert_eq!(
        c.request(1, &beat("a", 0)).error_code,
        INVALID_REQUEST,
        "a join names topics"
    );
    assert_eq!(c.request(1, &beat("a", 4)).error_code, UNKNOWN_MEMBER_ID);
    assert_eq!(c.request(1, &beat("a", -1)).error_code, GROUP_ID_NOT_FOUND);
    for m in ["a", "b"] {
        let r = c.request(1, &join(m));
        assert_eq!(r.error_code, 0, "{r:?}");
        let a = r.assignment.expect("an assignment on a join");
        assert_eq!(
            a.topic_partitions[0].partitions,
            vec![0],
            "{m} has partition 0"
        );
    }
    let d = c.request(
        1,
        &ShareGroupDescribeRequest::default().with_group_ids(vec![GroupId(s(GROUP))]),
    );
    assert_eq!(d.groups[0].error_code, 0);
    assert_eq!(d.groups[0].members.len(), 2);
    let listed = c.request(5, &ListGroupsRequest::default());
    let g = listed
        .groups
        .iter()
        .find(|g| g.group_id.0.as_str() == GROUP);
    assert_eq!(
        g.map(|g| (
            g.group_type.as_str(),
            g.protocol_type.as_str(),
            g.group_state.as_str()
        )),
        Some(("share", "share", "Stable")),
        "{listed:?}"
    );

    // A takes all ten records; B finds none left.
    let r = c.request(1, &fetch("a", 0, topic_id, &[]));
    assert_eq!(acquired(&r), (vec![(0, 9, 1)], 0, 0), "{r:?}");
    assert!(r.responses[0].partitions[0]
        .records
        .as_ref()
        .is_some_and(|b| !b.is_empty()));
    let r = c.request(1, &fetch("b", 0, topic_id, &[]));
    assert_eq!(acquired(&r).0, vec![], "nothing available for b");

    // Session order: a wrong epoch, an opening request with acknowledgements.
    let wrong = c.request(1, &fetch("a", 5, topic_id, &[]));
    assert_eq!(wrong.error_code, INVALID_SHARE_SESSION_EPOCH);
    let acks_on_open = c.request(1, &fetch("b", 0, topic_id, &[(0, 0, ACCEPT)]));
    assert_eq!(acks_on_open.error_code, INVALID_REQUEST);
    let none = c.request(1, &fetch("z", 3, topic_id, &[]));
    assert_eq!(none.error_code, SHARE_SESSION_NOT_FOUND);

    // B may not acknowledge A's records; A accepts 0..=4 and releases 5..=9, which B gets
    // on its next fetch, delivered for the second time.
    let r = c.request(1, &fetch("b", 1, topic_id, &[(0, 4, ACCEPT)]));
    assert_eq!(acquired(&r).2, INVALID_RECORD_STATE, "{r:?}");
    let r = c.request(
        1,
        &ack("a", 1, topic_id, &[(0, 4, ACCEPT), (5, 9, RELEASE)]),
    );
    assert_eq!(
        (r.error_code, r.responses[0].partitions[0].error_code),
        (0, 0),
        "{r:?}"
    );
    let r = c.request(1, &fetch("b", 2, topic_id, &[]));
    assert_eq!(acquired(&r).0, vec![(5, 9, 2)], "{r:?}");

    // B's session closes (ShareAcknowledge epoch -1): its records go back, this delivery
    // not counted; A gets them at their second delivery again.
    let r = c.request(1, &ack("b", -1, topic_id, &[(5, 5, ACCEPT)]));
    assert_eq!(
        (r.error_code, r.responses[0].partitions[0].error_code),
        (0, 0),
        "{r:?}"
    );
    let r = c.request(1, &fetch("a", 2, topic_id, &[]));
    assert_eq!(
        acquired(&r).0,
        vec![(6, 9, 2)],
        "5 was accepted on the close: {r:?}"
    );

    // A holds 6..=9 past its lock: they go to B (a new session) at their third delivery.
    std::thread::sleep(std::time::Duration::from_millis(LOCK_MS + 300));
    let r = c.request(1, &fetch("b", 0, topic_id, &[]));
    assert_eq!(acquired(&r).0, vec![(6, 9, 3)], "{r:?}");
    // A's late acknowledgement is refused.
    let r = c.request(1, &fetch("a", 3, topic_id, &[(6, 9, ACCEPT)]));
    assert_eq!(acquired(&r).2, INVALID_RECORD_STATE, "{r:?}");
    // Released at the delivery-count limit (3): archived, never delivered again.
    let r = c.request(1, &fetch("b", 1, topic_id, &[(6, 9, RELEASE)]));
    assert_eq!(acquired(&r), (vec![], 0, 0), "{r:?}");
    produce(&mut c, 1);
    let r = c.request(1, &fetch("a", 4, topic_id, &[]));
    assert_eq!(
        acquired(&r).0,
        vec![(10, 10, 1)],
        "only the new record: {r:?}"
    );

    // Leaving.
    assert_eq!(c.request(1, &beat("a", -1)).member_epoch, -1);
}

/// A ShareFetch that finds nothing waits up to its MaxWaitMs, and a record appended
/// meanwhile is handed to it then (Kafka's DelayedShareFetch completes on new data): the
/// answer holds the new record, well before MaxWaitMs. Prints how long after the append
/// it came (strand wakes a waiting share fetch on an append to one of its partitions).
#[test]
fn a_waiting_share_fetch_gets_a_record_appended_meanwhile() {
    const GROUP_W: &str = "kip932-waiting";
    const TOPIC_W: &str = "kip932-waiting-jobs";
    // Below the test client's 10 s read timeout.
    const MAX_WAIT_MS: i32 = 8_000;
    let broker = Broker::start(env!("CARGO_TARGET_TMPDIR").as_ref(), enabled(&[]));
    let mut c = broker.connect();
    c.wait_coordinator(GROUP_W, Deadline::after(std::time::Duration::from_secs(30)));
    c.create_topic(TOPIC_W, 1);
    let topic_id = c
        .request(12, &MetadataRequest::default().with_topics(None))
        .topics
        .iter()
        .find(|t| t.name.as_ref().is_some_and(|n| n.0.as_str() == TOPIC_W))
        .expect("the topic in Metadata")
        .topic_id;
    let joined = ShareGroupHeartbeatRequest::default()
        .with_group_id(GroupId(s(GROUP_W)))
        .with_member_id(s("w"))
        .with_member_epoch(0)
        .with_subscribed_topic_names(Some(vec![kafka_protocol::messages::TopicName(s(TOPIC_W))]));
    assert_eq!(c.request(1, &joined).error_code, 0);
    let at = move |epoch: i32, max_wait_ms: i32| {
        let mut f = fetch("w", epoch, topic_id, &[]).with_group_id(Some(GroupId(s(GROUP_W))));
        f.max_wait_ms = max_wait_ms;
        f
    };
    // The share partition starts at the log end; the first fetch opens the session.
    let first = c.request(1, &at(0, 0));
    assert_eq!(acquired(&first), (vec![], 0, 0));

    let mut waiter = broker.connect();
    let waiting = std::thread::spawn(move || {
        let r = waiter.request(1, &at(1, MAX_WAIT_MS));
        (r, strand_tests::clock::Stopwatch::start())
    });
    std::thread::sleep(std::time::Duration::from_millis(300));
    let started = strand_tests::clock::Stopwatch::start();
    let mut b = strand_wire::BatchBuilder::new(1_700_000_000_000);
    b.push(1_700_000_000_000, None, Some(b"new"), &[]);
    assert_eq!(c.produce(TOPIC_W, 0, b.build(), -1).error_code, 0);
    let produced_after = started.elapsed();
    let (r, answered) = waiting.join().expect("the waiting fetch");
    let after_append = started.elapsed().saturating_sub(answered.elapsed());
    assert_eq!(acquired(&r), (vec![(0, 0, 1)], 0, 0), "{r:?}");
    assert!(
        after_append
            < std::time::Duration::from_millis(u64::try_from(MAX_WAIT_MS).unwrap_or(0) / 2),
        "answered {after_append:?} after the append, not woken by it"
    );
    eprintln!(
        "waiting share fetch answered {after_append:?} after the append began (its ack took {produced_after:?})"
    );
}

/// DeleteGroups of a share group, as Kafka answers it: NON_EMPTY_GROUP while it has a
/// member; once the member left, deleted (0), and then it is not found.
#[test]
fn a_share_group_is_deleted_only_without_members() {
    use kafka_protocol::messages::DeleteGroupsRequest;
    const NON_EMPTY_GROUP: i16 = 68;
    let broker = Broker::start(env!("CARGO_TARGET_TMPDIR").as_ref(), enabled(&[]));
    let mut c = broker.connect();
    c.wait_coordinator(GROUP, Deadline::after(std::time::Duration::from_secs(30)));
    c.create_topic(TOPIC, 1);
    let delete = DeleteGroupsRequest::default().with_groups_names(vec![GroupId(s(GROUP))]);
    assert_eq!(c.request(1, &join("a")).error_code, 0);
    assert_eq!(c.request(2, &delete).results[0].error_code, NON_EMPTY_GROUP);
    assert_eq!(c.request(1, &beat("a", -1)).error_code, 0);
    assert_eq!(c.request(2, &delete).results[0].error_code, 0);
    let d = c.request(
        1,
        &ShareGroupDescribeRequest::default().with_group_ids(vec![GroupId(s(GROUP))]),
    );
    assert_eq!(d.groups[0].error_code, GROUP_ID_NOT_FOUND);
    assert_eq!(
        c.request(2, &delete).results[0].error_code,
        GROUP_ID_NOT_FOUND
    );
}

/// AlterShareGroupOffsets and DeleteShareGroupOffsets, as Kafka answers them: only a share
/// group without members (NON_EMPTY_GROUP, GROUP_ID_NOT_FOUND for the whole request);
/// per partition (alter) or topic (delete) UNKNOWN_TOPIC_OR_PARTITION for an unknown one,
/// and for a topic with no state to delete. A share group takes no OffsetCommit.
#[test]
#[expect(clippy::too_many_lines, reason = "one protocol walk, step by step")]
fn share_offsets_are_changed_only_in_an_empty_share_group() {
    use kafka_protocol::messages::alter_share_group_offsets_request::{
        AlterShareGroupOffsetsRequestPartition as AlterPartition,
        AlterShareGroupOffsetsRequestTopic as AlterTopic,
    };
    use kafka_protocol::messages::delete_share_group_offsets_request::DeleteShareGroupOffsetsRequestTopic as DeleteTopic;
    use kafka_protocol::messages::offset_commit_request::{
        OffsetCommitRequestPartition, OffsetCommitRequestTopic,
    };
    use kafka_protocol::messages::{
        AlterShareGroupOffsetsRequest, DeleteShareGroupOffsetsRequest, OffsetCommitRequest,
    };
    const NON_EMPTY_GROUP: i16 = 68;
    const UNKNOWN_TOPIC_OR_PARTITION: i16 = 3;
    let broker = Broker::start(env!("CARGO_TARGET_TMPDIR").as_ref(), enabled(&[]));
    let mut c = broker.connect();
    c.wait_coordinator(GROUP, Deadline::after(std::time::Duration::from_secs(30)));
    c.create_topic(TOPIC, 1);
    let alter = |group: &str, parts: &[(&str, i32, i64)]| {
        let topics = parts
            .iter()
            .map(|&(t, p, o)| {
                AlterTopic::default()
                    .with_topic_name(topic_name(t))
                    .with_partitions(vec![AlterPartition::default()
                        .with_partition_index(p)
                        .with_start_offset(o)])
            })
            .collect();
        AlterShareGroupOffsetsRequest::default()
            .with_group_id(GroupId(s(group)))
            .with_topics(topics)
    };
    let delete = DeleteShareGroupOffsetsRequest::default()
        .with_group_id(GroupId(s(GROUP)))
        .with_topics(vec![
            DeleteTopic::default().with_topic_name(topic_name(TOPIC))
        ]);
    assert_eq!(c.request(1, &join("a")).error_code, 0);
    // The refusal is on the partitions too (the Java 4.1 Admin reads only those).
    let busy = c.request(0, &alter(GROUP, &[(TOPIC, 0, 0)]));
    let on_partition = busy.responses[0].partitions[0].error_code;
    assert_eq!(
        (busy.error_code, on_partition),
        (NON_EMPTY_GROUP, NON_EMPTY_GROUP)
    );
    assert_eq!(c.request(0, &delete).error_code, NON_EMPTY_GROUP);
    let commit = OffsetCommitRequest::default()
        .with_group_id(GroupId(s(GROUP)))
        .with_generation_id_or_member_epoch(-1)
        .with_topics(vec![OffsetCommitRequestTopic::default()
            .with_name(topic_name(TOPIC))
            .with_partitions(vec![
                OffsetCommitRequestPartition::default().with_committed_offset(1)
            ])]);
    let committed = c.request(8, &commit);
    assert_eq!(
        committed.topics[0].partitions[0].error_code,
        GROUP_ID_NOT_FOUND
    );
    assert_eq!(c.request(1, &beat("a", -1)).error_code, 0);

    let r = c.request(
        0,
        &alter(
            GROUP,
            &[(TOPIC, 0, 3), (TOPIC, 5, 0), ("kip932-none", 0, 0)],
        ),
    );
    assert_eq!(r.error_code, 0);
    let codes: Vec<(String, i32, i16)> = r
        .responses
        .iter()
        .flat_map(|t| {
            t.partitions
                .iter()
                .map(|p| (t.topic_name.to_string(), p.partition_index, p.error_code))
        })
        .collect();
    assert_eq!(
        codes,
        vec![
            (TOPIC.to_string(), 0, 0),
            (TOPIC.to_string(), 5, UNKNOWN_TOPIC_OR_PARTITION),
            ("kip932-none".to_string(), 0, UNKNOWN_TOPIC_OR_PARTITION),
        ]
    );
    assert_ne!(r.responses[0].topic_id, uuid::Uuid::nil(), "the topic id");
    let deleted = c.request(0, &delete);
    assert_eq!(
        (deleted.error_code, deleted.responses[0].error_code),
        (0, 0)
    );
    let again = c.request(0, &delete);
    assert_eq!(again.responses[0].error_code, UNKNOWN_TOPIC_OR_PARTITION);
    let unknown = c.request(0, &alter("kip932-no-such-group", &[(TOPIC, 0, 0)]));
    assert_eq!(unknown.error_code, GROUP_ID_NOT_FOUND);
}
