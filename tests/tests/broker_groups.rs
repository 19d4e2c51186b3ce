//! The classic consumer-group protocol against the real broker, with the exact error codes
//! Apache Kafka answers (KAFKA-NOTES.md, Consumer groups): MEMBER_ID_REQUIRED and a prompt
//! rejoin, SyncGroup and Heartbeat errors, a second member forcing a rebalance, offset
//! commits checked against the generation, LeaveGroup, session expiry emptying the group,
//! DeleteGroups, and committed offsets (and the deletion) surviving kill -9.
//!
//! Takes a little over the minimum session timeout (6 s): one member is left to expire.

use std::time::Duration;

use bytes::{BufMut, Bytes, BytesMut};
use kafka_protocol::messages::consumer_protocol_assignment::TopicPartition;
use kafka_protocol::messages::describe_groups_response::DescribedGroup;
use kafka_protocol::messages::join_group_request::JoinGroupRequestProtocol;
use kafka_protocol::messages::leave_group_request::MemberIdentity;
use kafka_protocol::messages::offset_commit_request::{
    OffsetCommitRequestPartition, OffsetCommitRequestTopic,
};
use kafka_protocol::messages::offset_fetch_request::{
    OffsetFetchRequestGroup, OffsetFetchRequestTopic, OffsetFetchRequestTopics,
};
use kafka_protocol::messages::sync_group_request::SyncGroupRequestAssignment;
use kafka_protocol::messages::{
    ConsumerProtocolAssignment, ConsumerProtocolSubscription, DeleteGroupsRequest,
    DescribeGroupsRequest, FindCoordinatorRequest, GroupId, HeartbeatRequest, JoinGroupRequest,
    JoinGroupResponse, LeaveGroupRequest, ListGroupsRequest, OffsetCommitRequest,
    OffsetFetchRequest, SyncGroupRequest, SyncGroupResponse,
};
use kafka_protocol::protocol::{Encodable, StrBytes};
use strand_tests::broker::{topic_name, Broker, Client, Options};
use strand_tests::clock::{Deadline, Stopwatch};

const GROUP: &str = "orders-app";
const TOPIC: &str = "orders";
const PROTOCOL_TYPE: &str = "consumer";
const PROTOCOL: &str = "range";
/// Kafka's `group.min.session.timeout.ms` default, the shortest a member may ask for.
const SESSION_TIMEOUT_MS: i32 = 6_000;
const REBALANCE_TIMEOUT_MS: i32 = 30_000;
/// A join that only waits for members already present completes well within this.
const PROMPT: Duration = Duration::from_secs(2);
/// kill -9 and restart rounds checking that committed offsets survive.
const RESTARTS: usize = 3;
/// Connections checked right after each restart.
const CONNECTIONS_AFTER_RESTART: usize = 3;
/// How long waits for the broker's own timers may take beyond their nominal time.
const SLACK: Duration = Duration::from_secs(4);

const NONE: i16 = 0;
const COORDINATOR_LOAD_IN_PROGRESS: i16 = 14;
const COORDINATOR_NOT_AVAILABLE: i16 = 15;
const NOT_COORDINATOR: i16 = 16;
const RETRIABLE: [i16; 3] = [
    COORDINATOR_LOAD_IN_PROGRESS,
    COORDINATOR_NOT_AVAILABLE,
    NOT_COORDINATOR,
];
const ILLEGAL_GENERATION: i16 = 22;
const UNKNOWN_MEMBER_ID: i16 = 25;
const REBALANCE_IN_PROGRESS: i16 = 27;
const NON_EMPTY_GROUP: i16 = 68;
const MEMBER_ID_REQUIRED: i16 = 79;

fn s(v: &str) -> StrBytes {
    StrBytes::from_string(v.to_string())
}

fn group_id() -> GroupId {
    GroupId(s(GROUP))
}

/// Consumer protocol bytes: a version prefix, then the struct at that version.
fn versioned<T: Encodable>(v: &T) -> Bytes {
    let mut b = BytesMut::new();
    b.put_i16(0);
    v.encode(&mut b, 0).expect("encode consumer protocol");
    b.freeze()
}

fn subscription() -> Bytes {
    versioned(&ConsumerProtocolSubscription::default().with_topics(vec![s(TOPIC)]))
}

fn assignment(partitions: &[i32]) -> Bytes {
    let tp = TopicPartition::default()
        .with_topic(topic_name(TOPIC))
        .with_partitions(partitions.to_vec());
    versioned(&ConsumerProtocolAssignment::default().with_assigned_partitions(vec![tp]))
}

/// JoinGroup v5.
fn join(c: &mut Client, member_id: &str) -> JoinGroupResponse {
    let req = JoinGroupRequest::default()
        .with_group_id(group_id())
        .with_session_timeout_ms(SESSION_TIMEOUT_MS)
        .with_rebalance_timeout_ms(REBALANCE_TIMEOUT_MS)
        .with_member_id(s(member_id))
        .with_protocol_type(s(PROTOCOL_TYPE))
        .with_protocols(vec![JoinGroupRequestProtocol::default()
            .with_name(s(PROTOCOL))
            .with_metadata(subscription())]);
    c.request(5, &req)
}

/// SyncGroup v5; `assignments` only from the leader.
fn sync(
    c: &mut Client,
    member_id: &str,
    generation: i32,
    assignments: &[(&str, Bytes)],
) -> SyncGroupResponse {
    let req = SyncGroupRequest::default()
        .with_group_id(group_id())
        .with_generation_id(generation)
        .with_member_id(s(member_id))
        .with_protocol_type(Some(s(PROTOCOL_TYPE)))
        .with_protocol_name(Some(s(PROTOCOL)))
        .with_assignments(
            assignments
                .iter()
                .map(|(m, a)| {
                    SyncGroupRequestAssignment::default()
                        .with_member_id(s(m))
                        .with_assignment(a.clone())
                })
                .collect(),
        );
    c.request(5, &req)
}

/// Heartbeat v4: the error code.
fn heartbeat(c: &mut Client, member_id: &str, generation: i32) -> i16 {
    let req = HeartbeatRequest::default()
        .with_group_id(group_id())
        .with_generation_id(generation)
        .with_member_id(s(member_id));
    c.request(4, &req).error_code
}

/// LeaveGroup v3 of one member: (top-level code, the member's code).
fn leave(c: &mut Client, member_id: &str) -> (i16, Vec<i16>) {
    let req = LeaveGroupRequest::default()
        .with_group_id(group_id())
        .with_members(vec![MemberIdentity::default().with_member_id(s(member_id))]);
    let resp = c.request(3, &req);
    let codes = resp.members.iter().map(|m| m.error_code).collect();
    (resp.error_code, codes)
}

/// OffsetCommit v7 of one partition: its error code.
fn commit(c: &mut Client, member_id: &str, generation: i32, partition: i32, offset: i64) -> i16 {
    let p = OffsetCommitRequestPartition::default()
        .with_partition_index(partition)
        .with_committed_offset(offset)
        .with_committed_leader_epoch(-1)
        .with_committed_metadata(Some(s("m")));
    let req = OffsetCommitRequest::default()
        .with_group_id(group_id())
        .with_generation_id_or_member_epoch(generation)
        .with_member_id(s(member_id))
        .with_topics(vec![OffsetCommitRequestTopic::default()
            .with_name(topic_name(TOPIC))
            .with_partitions(vec![p])]);
    let resp = c.request(7, &req);
    let codes: Vec<i16> = resp
        .topics
        .iter()
        .flat_map(|t| t.partitions.iter().map(|p| p.error_code))
        .collect();
    assert_eq!(codes.len(), 1, "OffsetCommit: {resp:?}");
    codes[0]
}

/// Retries `f` while it fails with an error Kafka clients retry on a coordinator that is
/// loading or moving (COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE,
/// NOT_COORDINATOR), as after a restart; any other error fails the test.
fn retrying<T>(what: &str, mut f: impl FnMut() -> Result<T, i16>) -> T {
    let deadline = Deadline::after(SLACK);
    loop {
        match f() {
            Ok(v) => return v,
            Err(code) if RETRIABLE.contains(&code) && deadline.remaining().is_some() => {
                std::thread::sleep(Duration::from_millis(10));
            }
            Err(code) => panic!("{what}: error {code}"),
        }
    }
}

/// Committed offsets of partitions 0 and 1 (offset, partition error), OffsetFetch v7.
fn offset_fetch_v7(c: &mut Client) -> Result<Vec<(i32, i64, i16)>, i16> {
    let req = OffsetFetchRequest::default()
        .with_group_id(group_id())
        .with_topics(Some(vec![OffsetFetchRequestTopic::default()
            .with_name(topic_name(TOPIC))
            .with_partition_indexes(vec![0, 1])]));
    let resp = c.request(7, &req);
    let parts: Vec<(i32, i64, i16)> = resp
        .topics
        .iter()
        .flat_map(|t| t.partitions.iter())
        .map(|p| (p.partition_index, p.committed_offset, p.error_code))
        .collect();
    match resp.error_code {
        NONE => partition_errors(parts),
        code => Err(code),
    }
}

/// The same with OffsetFetch v8 (a list of groups).
fn offset_fetch_v8(c: &mut Client) -> Result<Vec<(i32, i64, i16)>, i16> {
    let req = OffsetFetchRequest::default().with_groups(vec![OffsetFetchRequestGroup::default()
        .with_group_id(group_id())
        .with_topics(Some(vec![OffsetFetchRequestTopics::default()
            .with_name(topic_name(TOPIC))
            .with_partition_indexes(vec![0, 1])]))]);
    let resp = c.request(8, &req);
    assert_eq!(resp.groups.len(), 1, "OffsetFetch v8: {resp:?}");
    let g = &resp.groups[0];
    let parts: Vec<(i32, i64, i16)> = g
        .topics
        .iter()
        .flat_map(|t| t.partitions.iter())
        .map(|p| (p.partition_index, p.committed_offset, p.error_code))
        .collect();
    match g.error_code {
        NONE => partition_errors(parts),
        code => Err(code),
    }
}

fn partition_errors(parts: Vec<(i32, i64, i16)>) -> Result<Vec<(i32, i64, i16)>, i16> {
    match parts.iter().find(|p| p.2 != NONE) {
        Some(p) => Err(p.2),
        None => Ok(parts),
    }
}

/// Committed offsets of partitions 0 and 1, asked with OffsetFetch v7 and v8 (which must
/// agree), -1 where none.
fn committed(c: &mut Client, when: &str) -> Vec<i64> {
    let v7 = retrying(&format!("OffsetFetch v7 {when}"), || offset_fetch_v7(c));
    let v8 = retrying(&format!("OffsetFetch v8 {when}"), || offset_fetch_v8(c));
    assert_eq!(v7, v8, "OffsetFetch v7 and v8 disagree {when}");
    let parts: Vec<i32> = v7.iter().map(|p| p.0).collect();
    assert_eq!(parts, [0, 1], "OffsetFetch partitions {when}: {v7:?}");
    v7.iter().map(|p| p.1).collect()
}

/// DescribeGroups v5 of the group.
fn describe(c: &mut Client) -> DescribedGroup {
    retrying("DescribeGroups", || {
        let req = DescribeGroupsRequest::default().with_groups(vec![group_id()]);
        let resp = c.request(5, &req);
        assert_eq!(resp.groups.len(), 1, "DescribeGroups: {resp:?}");
        let g = resp.groups.into_iter().next().expect("one group");
        match g.error_code {
            NONE => Ok(g),
            code => Err(code),
        }
    })
}

fn state_and_members(g: &DescribedGroup) -> (String, Vec<String>) {
    let members = g.members.iter().map(|m| m.member_id.to_string()).collect();
    (g.group_state.to_string(), members)
}

/// DeleteGroups v2 of the group: its code (retried while the coordinator loads).
fn delete(c: &mut Client) -> i16 {
    let attempt = |c: &mut Client| {
        let resp = c.request(
            2,
            &DeleteGroupsRequest::default().with_groups_names(vec![group_id()]),
        );
        assert_eq!(resp.results.len(), 1, "DeleteGroups: {resp:?}");
        resp.results[0].error_code
    };
    retrying("DeleteGroups", || match attempt(c) {
        code if RETRIABLE.contains(&code) => Err(code),
        code => Ok(code),
    })
}

/// ListGroups v4: the group's state, if listed.
fn listed_state(c: &mut Client) -> Option<String> {
    let resp = c.request(4, &ListGroupsRequest::default());
    assert_eq!(resp.error_code, NONE, "ListGroups: {resp:?}");
    resp.groups
        .iter()
        .find(|g| g.group_id.0.as_str() == GROUP)
        .map(|g| g.group_state.to_string())
}

/// Connects after a (re)start and waits until the group has a coordinator.
fn connect_ready(broker: &Broker) -> Client {
    let mut c = broker.connect();
    c.wait_coordinator(GROUP, Deadline::after(SLACK));
    c
}

/// Two shards: group requests are forwarded to the coordinator shard of the group's
/// `__consumer_offsets` partition, and DescribeGroups/ListGroups/OffsetFetch fan out.
fn options() -> Options {
    Options {
        smp: 2,
        ..Options::default()
    }
}

#[test]
#[expect(
    clippy::too_many_lines,
    reason = "longer than 70 lines when the lint came in (issue 27): split it when it next changes"
)]
fn group_protocol_matches_kafka() {
    let watch = Stopwatch::start();
    let mut broker = Broker::start(env!("CARGO_TARGET_TMPDIR").as_ref(), options());
    let mut a = connect_ready(&broker);
    let fc = a.request(
        3,
        &FindCoordinatorRequest::default()
            .with_key(s(GROUP))
            .with_key_type(0),
    );
    assert_eq!(
        (fc.error_code, fc.port),
        (NONE, i32::from(broker.addr().port())),
        "FindCoordinator: {fc:?}"
    );
    a.create_topic(TOPIC, 2);

    // First join: MEMBER_ID_REQUIRED with an id; the rejoin with it completes at once.
    let r = join(&mut a, "");
    assert_eq!(
        (r.error_code, r.generation_id),
        (MEMBER_ID_REQUIRED, -1),
        "first join: {r:?}"
    );
    let id_a = r.member_id.to_string();
    assert!(!id_a.is_empty(), "MEMBER_ID_REQUIRED without a member id");
    let r = join(&mut a, "no-such-member");
    assert_eq!(r.error_code, UNKNOWN_MEMBER_ID, "join, unknown id: {r:?}");
    let took = Stopwatch::start();
    let r = join(&mut a, &id_a);
    let took = took.elapsed();
    assert_eq!(r.error_code, NONE, "rejoin: {r:?}");
    assert!(
        took < PROMPT,
        "rejoin took {took:?} (rebalance timeout {REBALANCE_TIMEOUT_MS} ms, initial delay 0)"
    );
    assert_eq!(
        (
            r.generation_id,
            r.leader.as_str(),
            r.member_id.as_str(),
            r.protocol_name.as_deref()
        ),
        (1, id_a.as_str(), id_a.as_str(), Some(PROTOCOL)),
        "rejoin: {r:?}"
    );
    let members: Vec<(&str, &Bytes)> = r
        .members
        .iter()
        .map(|m| (m.member_id.as_str(), &m.metadata))
        .collect();
    assert_eq!(
        members,
        [(id_a.as_str(), &subscription())],
        "the leader sees itself"
    );

    // SyncGroup errors, then the leader's assignment.
    let r = sync(&mut a, &id_a, 2, &[]);
    assert_eq!(
        r.error_code, ILLEGAL_GENERATION,
        "sync, generation 2: {r:?}"
    );
    let r = sync(&mut a, "no-such-member", 1, &[]);
    assert_eq!(
        r.error_code, UNKNOWN_MEMBER_ID,
        "sync, unknown member: {r:?}"
    );
    let r = sync(&mut a, &id_a, 1, &[(&id_a, assignment(&[0, 1]))]);
    assert_eq!(
        (r.error_code, &r.assignment),
        (NONE, &assignment(&[0, 1])),
        "sync: {r:?}"
    );
    assert_eq!(heartbeat(&mut a, &id_a, 1), NONE);
    assert_eq!(heartbeat(&mut a, &id_a, 0), ILLEGAL_GENERATION);
    assert_eq!(heartbeat(&mut a, "no-such-member", 1), UNKNOWN_MEMBER_ID);
    let g = describe(&mut a);
    assert_eq!(state_and_members(&g), ("Stable".into(), vec![id_a.clone()]));

    // A second member: its join parks until the first rejoins, whose heartbeat says so.
    let mut b = connect_ready(&broker);
    let r = join(&mut b, "");
    assert_eq!(r.error_code, MEMBER_ID_REQUIRED, "second member: {r:?}");
    let id_b = r.member_id.to_string();
    let b_join = {
        let id_b = id_b.clone();
        std::thread::spawn(move || {
            let r = join(&mut b, &id_b);
            (b, r)
        })
    };
    let deadline = Deadline::after(SLACK);
    loop {
        match heartbeat(&mut a, &id_a, 1) {
            REBALANCE_IN_PROGRESS => break,
            NONE if deadline.remaining().is_some() => std::thread::sleep(Duration::from_millis(5)),
            code => panic!("heartbeat while the second member joins: {code}"),
        }
    }
    let took = Stopwatch::start();
    let ra = join(&mut a, &id_a);
    let (mut b, rb) = b_join.join().expect("second member's join");
    let took = took.elapsed();
    assert!(
        took < PROMPT,
        "generation 2 took {took:?} once everyone rejoined"
    );
    assert_eq!(
        (ra.error_code, ra.generation_id, ra.leader.as_str()),
        (NONE, 2, id_a.as_str()),
        "first member's rejoin: {ra:?}"
    );
    let mut seen: Vec<&str> = ra.members.iter().map(|m| m.member_id.as_str()).collect();
    seen.sort_unstable();
    let mut both = vec![id_a.as_str(), id_b.as_str()];
    both.sort_unstable();
    assert_eq!(seen, both, "the leader sees both members");
    assert_eq!(
        (
            rb.error_code,
            rb.generation_id,
            rb.leader.as_str(),
            rb.member_id.as_str(),
            rb.members.len()
        ),
        (NONE, 2, id_a.as_str(), id_b.as_str(), 0),
        "second member's join: {rb:?}"
    );
    let r = sync(
        &mut a,
        &id_a,
        2,
        &[(&id_a, assignment(&[0])), (&id_b, assignment(&[1]))],
    );
    assert_eq!((r.error_code, &r.assignment), (NONE, &assignment(&[0])));
    let r = sync(&mut b, &id_b, 2, &[]);
    assert_eq!((r.error_code, &r.assignment), (NONE, &assignment(&[1])));
    // The second member goes silent from here: its session runs from this point.
    let b_silent = Stopwatch::start();
    let g = describe(&mut a);
    assert_eq!(
        (g.group_state.as_str(), g.protocol_data.as_str()),
        ("Stable", PROTOCOL),
        "{g:?}"
    );
    let mut assigned: Vec<(&str, &Bytes)> = g
        .members
        .iter()
        .map(|m| (m.member_id.as_str(), &m.member_assignment))
        .collect();
    assigned.sort_unstable();
    let (a0, b1) = (assignment(&[0]), assignment(&[1]));
    let mut want = vec![(id_a.as_str(), &a0), (id_b.as_str(), &b1)];
    want.sort_unstable();
    assert_eq!(assigned, want, "DescribeGroups assignments");

    // Offsets: committed at the current generation, refused at a stale one.
    assert_eq!(commit(&mut a, &id_a, 2, 0, 42), NONE);
    assert_eq!(committed(&mut a, "after the commit"), [42, -1]);
    assert_eq!(commit(&mut a, &id_a, 1, 0, 43), ILLEGAL_GENERATION);
    assert_eq!(
        commit(&mut a, "no-such-member", 2, 0, 43),
        UNKNOWN_MEMBER_ID
    );
    assert_eq!(
        committed(&mut a, "after refused commits"),
        [42, -1],
        "a refused commit changed nothing"
    );
    assert_eq!(delete(&mut a), NON_EMPTY_GROUP);

    // The first member leaves; the silent one is dropped when its session expires.
    assert_eq!(leave(&mut a, &id_a), (NONE, vec![NONE]));
    assert_eq!(
        heartbeat(&mut a, &id_a, 2),
        UNKNOWN_MEMBER_ID,
        "after leaving"
    );
    let g = describe(&mut a);
    assert_eq!(
        state_and_members(&g),
        ("PreparingRebalance".into(), vec![id_b.clone()])
    );
    let deadline = Deadline::after(Duration::from_millis(SESSION_TIMEOUT_MS as u64) + SLACK);
    let g = loop {
        let g = describe(&mut a);
        if g.group_state.as_str() != "PreparingRebalance" || deadline.remaining().is_none() {
            break g;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let expired_after = b_silent.elapsed();
    assert_eq!(
        state_and_members(&g),
        ("Empty".into(), vec![]),
        "after the session timeout ({expired_after:?})"
    );
    assert!(
        expired_after >= Duration::from_millis(SESSION_TIMEOUT_MS as u64 - 1000),
        "member expired after {expired_after:?}, before its {SESSION_TIMEOUT_MS} ms session"
    );
    assert_eq!(
        heartbeat(&mut b, &id_b, 2),
        UNKNOWN_MEMBER_ID,
        "expired member"
    );
    assert_eq!(listed_state(&mut a).as_deref(), Some("Empty"));
    drop((a, b));

    // Committed offsets and the group survive kill -9, seen at once from every connection
    // (each may land on another shard) and every restart.
    for round in 0..RESTARTS {
        broker.kill9();
        broker.restart();
        for k in 0..CONNECTIONS_AFTER_RESTART {
            let mut c = connect_ready(&broker);
            let when = format!("right after kill -9 #{round}, connection {k}");
            assert_eq!(committed(&mut c, &when), [42, -1], "offsets {when}");
            let g = describe(&mut c);
            assert_eq!(
                state_and_members(&g),
                ("Empty".into(), vec![]),
                "{when}: {g:?}"
            );
        }
    }
    let mut c = connect_ready(&broker);

    // An empty group can be deleted, with its offsets; that survives kill -9 too.
    assert_eq!(delete(&mut c), NONE);
    assert_eq!(describe(&mut c).group_state.as_str(), "Dead");
    let when = "after DeleteGroups";
    assert_eq!(committed(&mut c, when), [-1, -1], "offsets {when}");
    drop(c);
    broker.kill9();
    broker.restart();
    let mut c = connect_ready(&broker);
    assert_eq!(
        describe(&mut c).group_state.as_str(),
        "Dead",
        "after kill -9"
    );
    let when = "after DeleteGroups and kill -9";
    assert_eq!(committed(&mut c, when), [-1, -1], "offsets {when}");
    assert_eq!(listed_state(&mut c), None, "a deleted group is not listed");
    eprintln!("group protocol checked in {:?}", watch.elapsed());
}
