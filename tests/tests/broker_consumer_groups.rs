//! The consumer group protocol of KIP-848 on the wire, with the error codes Apache Kafka 4.1
//! answers (its `GroupCoordinatorService` request checks, `GroupMetadataManager`'s member
//! epoch checks, `ConsumerGroup.validateOffsetCommit/Fetch`): joins, assignment by topic
//! id, fencing, revocation before reassignment, commits and fetches checked against the
//! member epoch, a classic group refusing consumer members, and leaving. The clients'
//! view (librdkafka, Java) is tests/kafka/test_consumer_protocol.py.

use kafka_protocol::messages::consumer_group_heartbeat_request::TopicPartitions;
use kafka_protocol::messages::join_group_request::JoinGroupRequestProtocol;
use kafka_protocol::messages::leave_group_request::MemberIdentity;
use kafka_protocol::messages::offset_commit_request::{
    OffsetCommitRequestPartition, OffsetCommitRequestTopic,
};
use kafka_protocol::messages::offset_fetch_request::OffsetFetchRequestGroup;
use kafka_protocol::messages::{
    ConsumerGroupDescribeRequest, ConsumerGroupHeartbeatRequest, ConsumerGroupHeartbeatResponse,
    GroupId, HeartbeatRequest, JoinGroupRequest, LeaveGroupRequest, MetadataRequest,
    OffsetCommitRequest, OffsetFetchRequest, SyncGroupRequest,
};
use kafka_protocol::protocol::StrBytes;
use strand_tests::broker::{topic_name, Broker, Client, Options};
use strand_tests::clock::Deadline;

const GROUP: &str = "kip848-app";
const TOPIC: &str = "kip848-orders";
const INVALID_REQUEST: i16 = 42;
const UNKNOWN_MEMBER_ID: i16 = 25;
const ILLEGAL_GENERATION: i16 = 22;
const MEMBER_ID_REQUIRED: i16 = 79;
/// A ConsumerProtocolAssignment v0 with no partitions: version, empty array, null data.
const EMPTY_ASSIGNMENT: [u8; 10] = [0, 0, 0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff];
const GROUP_ID_NOT_FOUND: i16 = 69;
const UNSUPPORTED_VERSION: i16 = 35;
const FENCED_MEMBER_EPOCH: i16 = 110;
const UNSUPPORTED_ASSIGNOR: i16 = 112;
const STALE_MEMBER_EPOCH: i16 = 113;

fn s(v: &str) -> StrBytes {
    StrBytes::from_string(v.to_string())
}

fn beat(member: &str, epoch: i32) -> ConsumerGroupHeartbeatRequest {
    ConsumerGroupHeartbeatRequest::default()
        .with_group_id(GroupId(s(GROUP)))
        .with_member_id(s(member))
        .with_member_epoch(epoch)
}

fn join(member: &str) -> ConsumerGroupHeartbeatRequest {
    beat(member, 0)
        .with_rebalance_timeout_ms(30_000)
        .with_subscribed_topic_names(Some(vec![topic_name(TOPIC)]))
        .with_topic_partitions(Some(Vec::new()))
}

/// The partitions of an answer's assignment (one topic), or `None` when it has none.
fn assigned(r: &ConsumerGroupHeartbeatResponse) -> Option<Vec<i32>> {
    let a = r.assignment.as_ref()?;
    let mut ps: Vec<i32> = a
        .topic_partitions
        .iter()
        .flat_map(|t| t.partitions.iter().copied())
        .collect();
    ps.sort_unstable();
    Some(ps)
}

fn owned(topic_id: uuid::Uuid, partitions: &[i32]) -> Option<Vec<TopicPartitions>> {
    Some(vec![TopicPartitions::default()
        .with_topic_id(topic_id)
        .with_partitions(partitions.to_vec())])
}

fn commit(c: &mut Client, version: i16, member: &str, epoch: i32) -> i16 {
    let req = OffsetCommitRequest::default()
        .with_group_id(GroupId(s(GROUP)))
        .with_member_id(s(member))
        .with_generation_id_or_member_epoch(epoch)
        .with_topics(vec![OffsetCommitRequestTopic::default()
            .with_name(topic_name(TOPIC))
            .with_partitions(vec![OffsetCommitRequestPartition::default()
                .with_partition_index(0)
                .with_committed_offset(0)])]);
    c.request(version, &req).topics[0].partitions[0].error_code
}

fn fetch_error(c: &mut Client, member: &str, epoch: i32) -> i16 {
    let req = OffsetFetchRequest::default().with_groups(vec![OffsetFetchRequestGroup::default()
        .with_group_id(GroupId(s(GROUP)))
        .with_member_id(Some(s(member)))
        .with_member_epoch(epoch)
        .with_topics(None)]);
    c.request(9, &req).groups[0].error_code
}

#[test]
#[expect(clippy::too_many_lines, reason = "one protocol walk, step by step")]
fn consumer_group_protocol_matches_kafka() {
    let broker = Broker::start(
        env!("CARGO_TARGET_TMPDIR").as_ref(),
        Options {
            smp: 2,
            ..Options::default()
        },
    );
    let mut c = broker.connect();
    c.wait_coordinator(GROUP, Deadline::after(std::time::Duration::from_secs(30)));
    c.create_topic(TOPIC, 2);
    let topic_id = c
        .request(12, &MetadataRequest::default().with_topics(None))
        .topics
        .iter()
        .find(|t| t.name.as_ref().is_some_and(|n| n.0.as_str() == TOPIC))
        .expect("the topic in Metadata")
        .topic_id;

    // Kafka's request checks.
    assert_eq!(
        c.request(1, &join("")).error_code,
        INVALID_REQUEST,
        "v1 needs a member id"
    );
    let no_timeout = join("a").with_rebalance_timeout_ms(-1);
    assert_eq!(c.request(1, &no_timeout).error_code, INVALID_REQUEST);
    let owning = join("a").with_topic_partitions(owned(topic_id, &[0]));
    assert_eq!(c.request(1, &owning).error_code, INVALID_REQUEST);
    let sticky = join("a").with_server_assignor(Some(s("sticky")));
    assert_eq!(c.request(1, &sticky).error_code, UNSUPPORTED_ASSIGNOR);
    assert_eq!(c.request(1, &beat("a", 3)).error_code, UNKNOWN_MEMBER_ID);
    // Refused heartbeats leave no group behind.
    let describe = ConsumerGroupDescribeRequest::default().with_group_ids(vec![GroupId(s(GROUP))]);
    assert_eq!(
        c.request(1, &describe).groups[0].error_code,
        GROUP_ID_NOT_FOUND
    );

    // A joins: both partitions, by topic id, at epoch 1.
    let r = c.request(1, &join("a"));
    assert_eq!((r.error_code, r.member_epoch), (0, 1), "{r:?}");
    assert_eq!(r.member_id.as_deref(), Some("a"));
    assert!(r.heartbeat_interval_ms > 0);
    assert_eq!(assigned(&r), Some(vec![0, 1]));
    assert_eq!(
        r.assignment.expect("assignment").topic_partitions[0].topic_id,
        topic_id
    );
    // Nothing changed: no assignment in the answer.
    let r = c.request(1, &beat("a", 1));
    assert_eq!((r.error_code, r.member_epoch, assigned(&r)), (0, 1, None));
    assert_eq!(c.request(1, &beat("a", 7)).error_code, FENCED_MEMBER_EPOCH);

    // Commits and fetches at the member's epoch; stale ones and old versions refused.
    assert_eq!(commit(&mut c, 9, "a", 1), 0);
    assert_eq!(commit(&mut c, 9, "a", 0), STALE_MEMBER_EPOCH);
    assert_eq!(commit(&mut c, 8, "a", 1), UNSUPPORTED_VERSION);
    assert_eq!(
        commit(&mut c, 9, "", -1),
        UNKNOWN_MEMBER_ID,
        "not while members are in"
    );
    assert_eq!(commit(&mut c, 9, "x", 1), UNKNOWN_MEMBER_ID);
    assert_eq!(fetch_error(&mut c, "a", 1), 0);
    assert_eq!(fetch_error(&mut c, "a", 2), STALE_MEMBER_EPOCH);

    // B joins at epoch 2 but waits: A owns both partitions until it revokes one.
    let r = c.request(1, &join("b"));
    assert_eq!(
        (r.error_code, r.member_epoch, assigned(&r)),
        (0, 2, Some(vec![]))
    );
    let r = c.request(1, &beat("a", 1));
    assert_eq!(r.member_epoch, 1, "A stays at its epoch until it revoked");
    let kept = assigned(&r).expect("A's reduced assignment");
    assert_eq!(kept.len(), 1);
    let r = c.request(1, &beat("b", 2));
    assert_eq!(assigned(&r), None, "B gets nothing A still owns");
    // A revokes: epoch 2; then B gets the other partition.
    let r = c.request(
        1,
        &beat("a", 1).with_topic_partitions(owned(topic_id, &kept)),
    );
    assert_eq!((r.error_code, r.member_epoch), (0, 2));
    let r = c.request(1, &beat("b", 2));
    let moved = assigned(&r).expect("B's partition");
    assert_eq!(moved.len(), 1);
    assert_ne!(moved, kept);
    assert_eq!(commit(&mut c, 9, "a", 1), STALE_MEMBER_EPOCH);

    // ConsumerGroupDescribe shows both members at epoch 2, Stable.
    let d = c.request(
        1,
        &ConsumerGroupDescribeRequest::default().with_group_ids(vec![GroupId(s(GROUP))]),
    );
    let g = &d.groups[0];
    assert_eq!(
        (
            g.error_code,
            g.group_state.as_str(),
            g.group_epoch,
            g.assignment_epoch
        ),
        (0, "Stable", 2, 2),
        "{g:?}"
    );
    assert_eq!(g.members.len(), 2);
    assert!(g
        .members
        .iter()
        .all(|m| m.member_epoch == 2 && m.member_type == 1));

    // A classic member joins the consumer group (Kafka 4's mixed groups): its epoch is
    // its generation and there is no leader (the coordinator assigns). Two partitions,
    // three members: the sticky assignor leaves it none, so it is at its target at once.
    let classic = JoinGroupRequest::default()
        .with_group_id(GroupId(s(GROUP)))
        .with_session_timeout_ms(10_000)
        .with_rebalance_timeout_ms(10_000)
        .with_member_id(s(""))
        .with_protocol_type(s("consumer"))
        .with_protocols(vec![JoinGroupRequestProtocol::default()
            .with_name(s("range"))
            .with_metadata(subscription(TOPIC))]);
    let j = c.request(7, &classic);
    assert_eq!(j.error_code, MEMBER_ID_REQUIRED, "{j:?}");
    let id = j.member_id.to_string();
    let j = c.request(7, &classic.clone().with_member_id(s(&id)));
    assert_eq!(
        (
            j.error_code,
            j.generation_id,
            j.leader.as_str(),
            j.members.len()
        ),
        (0, 3, "", 0),
        "{j:?}"
    );
    let sync = SyncGroupRequest::default()
        .with_group_id(GroupId(s(GROUP)))
        .with_member_id(s(&id))
        .with_generation_id(3)
        .with_protocol_type(Some(s("consumer")))
        .with_protocol_name(Some(s("range")));
    let r = c.request(5, &sync);
    assert_eq!(r.error_code, 0);
    assert_eq!(&r.assignment[..], &EMPTY_ASSIGNMENT[..]);
    let hb = HeartbeatRequest::default()
        .with_group_id(GroupId(s(GROUP)))
        .with_member_id(s(&id))
        .with_generation_id(3);
    assert_eq!(c.request(4, &hb).error_code, 0);
    assert_eq!(
        c.request(4, &hb.clone().with_generation_id(2)).error_code,
        ILLEGAL_GENERATION
    );
    // A classic member commits as one: any version, ILLEGAL_GENERATION when not current.
    assert_eq!(commit(&mut c, 8, &id, 2), ILLEGAL_GENERATION);
    assert_eq!(commit(&mut c, 8, &id, 3), 0);
    let leave = LeaveGroupRequest::default()
        .with_group_id(GroupId(s(GROUP)))
        .with_members(vec![MemberIdentity::default().with_member_id(s(&id))]);
    let r = c.request(4, &leave);
    assert_eq!((r.error_code, r.members[0].error_code), (0, 0));

    // Both leave; the group is Empty, and an admin commit is taken again.
    let r = c.request(1, &beat("a", -1));
    assert_eq!((r.error_code, r.member_epoch), (0, -1));
    let r = c.request(1, &beat("b", -1));
    assert_eq!((r.error_code, r.member_epoch), (0, -1));
    assert_eq!(commit(&mut c, 9, "", -1), 0);

    // A classic group of consumers is upgraded by a consumer-protocol member's join (its
    // member parked in the classic rebalance rejoins); a heartbeat past a join is not.
    let other = "kip848-classic";
    c.wait_coordinator(other, Deadline::after(std::time::Duration::from_secs(30)));
    let j = c.request(7, &classic.clone().with_group_id(GroupId(s(other))));
    let j = c.request(
        7,
        &classic
            .with_group_id(GroupId(s(other)))
            .with_member_id(j.member_id),
    );
    assert_eq!(j.error_code, 0, "{j:?}");
    let r = c.request(1, &beat("c", 4).with_group_id(GroupId(s(other))));
    assert_eq!(r.error_code, GROUP_ID_NOT_FOUND);
    let r = c.request(1, &join("c").with_group_id(GroupId(s(other))));
    assert_eq!(r.error_code, 0, "{r:?}");
    let d = c.request(
        1,
        &ConsumerGroupDescribeRequest::default().with_group_ids(vec![GroupId(s(other))]),
    );
    let mut types: Vec<i8> = d.groups[0].members.iter().map(|m| m.member_type).collect();
    types.sort_unstable();
    assert_eq!(types, vec![0, 1], "a classic and a consumer member: {d:?}");
}

/// A classic member's subscription metadata: ConsumerProtocolSubscription v1, prefixed
/// with its version.
fn subscription(topic: &str) -> bytes::Bytes {
    use kafka_protocol::messages::ConsumerProtocolSubscription;
    use kafka_protocol::protocol::Encodable;
    let mut b = bytes::BytesMut::new();
    b.extend_from_slice(&1i16.to_be_bytes());
    ConsumerProtocolSubscription::default()
        .with_topics(vec![s(topic)])
        .encode(&mut b, 1)
        .expect("encode a subscription");
    b.freeze()
}

/// A group's own `consumer.heartbeat.interval.ms` (a group config, as in Kafka) is what
/// its members are told; out of Kafka's bounds it is refused (INVALID_CONFIG), and
/// DescribeConfigs shows it beside the broker's defaults.
#[test]
fn a_group_config_sets_its_members_heartbeat_interval() {
    use kafka_protocol::messages::describe_configs_request::DescribeConfigsResource;
    use kafka_protocol::messages::incremental_alter_configs_request::{
        AlterConfigsResource, AlterableConfig,
    };
    use kafka_protocol::messages::{DescribeConfigsRequest, IncrementalAlterConfigsRequest};
    const INVALID_CONFIG: i16 = 40;
    let broker = Broker::start(env!("CARGO_TARGET_TMPDIR").as_ref(), Options::default());
    let mut c = broker.connect();
    c.wait_coordinator(GROUP, Deadline::after(std::time::Duration::from_secs(30)));
    c.create_topic(TOPIC, 2);
    let set = |name: &str, value: &str| {
        IncrementalAlterConfigsRequest::default().with_resources(vec![
            AlterConfigsResource::default()
                .with_resource_type(32)
                .with_resource_name(s(GROUP))
                .with_configs(vec![AlterableConfig::default()
                    .with_name(s(name))
                    .with_config_operation(0)
                    .with_value(Some(s(value)))]),
        ])
    };
    let code = |c: &mut Client, name: &str, value: &str| {
        c.request(1, &set(name, value)).responses[0].error_code
    };
    assert_eq!(
        code(&mut c, "consumer.heartbeat.interval.ms", "1000"),
        INVALID_CONFIG
    );
    assert_eq!(
        code(&mut c, "consumer.session.timeout.ms", "600000"),
        INVALID_CONFIG
    );
    assert_eq!(code(&mut c, "consumer.heartbeat.interval.ms", "7000"), 0);
    let joined = c.request(1, &join("a"));
    assert_eq!((joined.error_code, joined.heartbeat_interval_ms), (0, 7000));
    let described = c.request(
        4,
        &DescribeConfigsRequest::default().with_resources(vec![DescribeConfigsResource::default()
            .with_resource_type(32)
            .with_resource_name(s(GROUP))
            .with_configuration_keys(None)]),
    );
    let configs: Vec<(String, Option<String>)> = described.results[0]
        .configs
        .iter()
        .map(|x| {
            (
                x.name.to_string(),
                x.value.as_ref().map(ToString::to_string),
            )
        })
        .collect();
    assert!(
        configs.contains(&("consumer.heartbeat.interval.ms".into(), Some("7000".into()))),
        "{configs:?}"
    );
    assert!(configs.contains(&("consumer.session.timeout.ms".into(), Some("45000".into()))));
}
