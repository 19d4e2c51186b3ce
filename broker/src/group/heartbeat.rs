//! The coordinator's side of consumer-protocol groups (KIP-848): ConsumerGroupHeartbeat
//! over the group's state (`consumer`), the snapshot record written durable before the
//! answer whenever it changed, session expiry, and the switch between the classic and the
//! consumer protocol of a group without members.
//!
//! Invariant: a heartbeat's answer is sent only after every change it made is durable in
//! `__consumer_offsets` (an answer that could be undone by a coordinator crash would let a
//! member consume a partition another member is then given).

use std::collections::BTreeMap;
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::cluster::metadata::Metadata;

use super::consumer::ClassicJoin;
use super::consumer::{
    decode_assignment, decode_subscription, encode_assignment, Answer, ClassicMeta, ConsumerGroup,
    ConsumerMember, Heartbeat, Liveness,
};
use super::coordinator::{
    code, failed_join, persist_group_records, JoinRequest, GROUP_ID_BYTES_MAX,
};
use super::records::{self, Key};
use super::state::JoinOutcome;
use super::state::{Group, GroupState, Member};
use super::GroupHost;

/// A `topic_partitions` map and the metadata it was made of.
type TopicPartitionsOf = (Arc<Metadata>, Rc<BTreeMap<String, i32>>);

thread_local! {
    /// This shard's last `topic_partitions`.
    static TOPIC_PARTITIONS: std::cell::RefCell<Option<TopicPartitionsOf>> =
        const { std::cell::RefCell::new(None) };
}

/// The cluster's topics and partition counts, as the assignors see them: made once per
/// metadata change on each shard (it was made at every heartbeat, one string per topic),
/// and remembered for the regex matches (`consumer::remember_topics`).
pub fn topic_partitions(meta: &Arc<Metadata>) -> Rc<BTreeMap<String, i32>> {
    TOPIC_PARTITIONS.with(|cached| {
        if let Some((of, map)) = &*cached.borrow() {
            if Arc::ptr_eq(of, meta) {
                return map.clone();
            }
        }
        let map: Rc<BTreeMap<String, i32>> = Rc::new(
            meta.topics
                .iter()
                .map(|(name, t)| {
                    let n = i32::try_from(t.shards.len()).unwrap_or(i32::MAX);
                    (name.clone(), n)
                })
                .collect(),
        );
        super::consumer::remember_topics(map.clone());
        *cached.borrow_mut() = Some((meta.clone(), map.clone()));
        map
    })
}

/// An `__consumer_offsets` record: key, and value (`None`: a tombstone).
type Record = (Vec<u8>, Option<Vec<u8>>);

/// The record holding `group`'s consumer state (`None`: its tombstone).
fn state_record(group: &str, snapshot: Option<Vec<u8>>) -> Record {
    let key = Key::ConsumerGroup {
        group: group.to_string(),
    };
    (records::key_bytes(&key), snapshot)
}

/// ConsumerGroupHeartbeat for `group`.
pub async fn consumer_heartbeat<H: GroupHost>(host: &Rc<H>, group: &str, hb: Heartbeat) -> Answer {
    if group.is_empty() || group.len() > GROUP_ID_BYTES_MAX {
        return Answer::error(
            code::INVALID_GROUP_ID,
            "the group id is empty or too long",
            &hb,
        );
    }
    if hb.member_id.len() > GROUP_ID_BYTES_MAX
        || hb
            .instance_id
            .as_ref()
            .is_some_and(|i| i.len() > GROUP_ID_BYTES_MAX)
    {
        return Answer::error(
            code::INVALID_REQUEST,
            "the member or instance id is too long",
            &hb,
        );
    }
    let (answer, records) = apply(host, group, hb);
    if records.is_empty() {
        return answer;
    }
    match persist_group_records(&**host, group, records, None).await {
        Ok(_) => answer,
        Err(error) => Answer {
            error,
            message: Some("the group's state could not be written".into()),
            assignment: None,
            ..answer
        },
    }
}

/// The regex member `member_id` of consumer group `group` subscribed with, if any.
pub fn member_regex<H: GroupHost>(host: &H, group: &str, member_id: &str) -> Option<String> {
    let groups = host.groups().borrow();
    let member = groups
        .get(group)?
        .consumer
        .as_ref()?
        .members
        .get(member_id)?;
    member.subscribed_topic_regex.clone()
}

/// The heartbeat applied to the group's state: the answer, and the records to make
/// durable before it when the state changed.
fn apply<H: GroupHost>(host: &Rc<H>, group: &str, hb: Heartbeat) -> (Answer, Vec<Record>) {
    let topics = topic_partitions(&host.metadata());
    let mut groups = host.groups().borrow_mut();
    let existed = groups.contains_key(group);
    if !existed && groups.len() >= host.groups_max() {
        let why = "this coordinator holds groups_per_shard groups already";
        return (
            Answer::error(code::COORDINATOR_NOT_AVAILABLE, why, &hb),
            Vec::new(),
        );
    }
    let g = groups
        .entry(group.to_string())
        .or_insert_with(|| Group::new(group));
    let now = crate::common::clock::now();
    if g.consumer.is_none() {
        if g.state != GroupState::Empty || !g.members.is_empty() {
            if let Err(refused) = super::consumer::precheck(&hb) {
                return (refused, Vec::new());
            }
            match upgrade(g, hb.member_epoch, now, host.group_max_size()) {
                Ok(c) => g.consumer = Some(c),
                Err(why) => {
                    return (
                        Answer::error(code::GROUP_ID_NOT_FOUND, why, &hb),
                        Vec::new(),
                    )
                }
            }
        } else {
            g.consumer = Some(ConsumerGroup::default());
        }
    }
    let Some(c) = g.consumer.as_mut() else {
        let why = "consumer state vanished";
        return (
            Answer::error(code::UNKNOWN_SERVER_ERROR, why, &hb),
            Vec::new(),
        );
    };
    let leaving = hb.member_epoch < 0;
    let answer = c.heartbeat(hb, &topics, now, host.group_max_size());
    if answer.error != code::NONE && *c == ConsumerGroup::default() {
        // A refused first heartbeat leaves nothing behind (no group to count or keep).
        g.consumer = None;
        if !existed {
            groups.remove(group);
        }
        return (answer, Vec::new());
    }
    if answer.error == code::NONE {
        g.protocol_type = Some("consumer".into());
        g.empty_since_ms = None;
    }
    if leaving && c.only_classic_members() {
        return (answer, downgrade(host, g, now));
    }
    let records = match answer.changed {
        true => vec![state_record(group, Some(c.snapshot()))],
        false => Vec::new(),
    };
    (answer, records)
}

/// Kafka's online upgrade: a consumer-protocol member joining a classic group of consumers
/// turns it into a consumer group whose classic members keep their partitions at the
/// classic generation (they go on with JoinGroup, SyncGroup and Heartbeat). A join or
/// sync parked in a classic rebalance is answered REBALANCE_IN_PROGRESS (its waiter is
/// dropped) and the member rejoins the consumer group.
fn upgrade(
    g: &mut Group,
    member_epoch: i32,
    now: Instant,
    max_size: usize,
) -> Result<ConsumerGroup, String> {
    let id = &g.id;
    if member_epoch != super::consumer::JOIN_EPOCH {
        return Err(format!("group {id} is not a consumer group"));
    }
    if g.members.len() >= max_size {
        return Err(format!("group {id} is full: it cannot be upgraded"));
    }
    if g.protocol_type.as_deref() != Some("consumer") {
        return Err(format!(
            "group {id} is a classic group of protocol type {:?}, not of consumers",
            g.protocol_type
        ));
    }
    let protocol = g.protocol.clone().unwrap_or_default();
    let mut c = ConsumerGroup {
        group_epoch: g.generation,
        assignment_epoch: g.generation,
        ..ConsumerGroup::default()
    };
    for m in g.members.values() {
        let mut names = decode_subscription(&m.metadata_for(&protocol))
            .map(|(n, _)| n)
            .unwrap_or_default();
        names.sort();
        names.dedup();
        let assigned = decode_assignment(&m.assignment);
        c.target.insert(m.id.clone(), assigned.clone());
        let member = ConsumerMember {
            id: m.id.clone(),
            instance_id: m.instance_id.clone(),
            client_id: m.client_id.clone(),
            client_host: m.client_host.clone(),
            rebalance_timeout_ms: m.rebalance_timeout_ms,
            subscribed_topic_names: names,
            member_epoch: g.generation,
            previous_member_epoch: g.generation.saturating_sub(1),
            assigned,
            classic: Some(ClassicMeta {
                session_timeout_ms: m.session_timeout_ms,
                protocols: m
                    .protocols
                    .iter()
                    .map(|(n, b)| (n.clone(), b.to_vec()))
                    .collect(),
            }),
            live: Liveness {
                last_seen: Some(now),
                ..Liveness::default()
            },
            ..ConsumerMember::default()
        };
        c.members.insert(m.id.clone(), member);
    }
    tracing::info!(group = %id, members = c.members.len(), generation = g.generation,
        "classic group upgraded to the consumer protocol");
    g.members.clear();
    g.pending.clear();
    g.leader = None;
    g.state = GroupState::Empty;
    Ok(c)
}

/// Kafka's downgrade: when the last consumer-protocol member left a group of classic
/// members, it becomes a classic group again at the group epoch, with their partitions,
/// and rebalances. Its records: the consumer state's tombstone, then the classic group.
fn downgrade<H: GroupHost>(host: &Rc<H>, g: &mut Group, now: Instant) -> Vec<Record> {
    let Some(c) = g.consumer.take() else {
        return Vec::new();
    };
    g.generation = g.generation.max(c.group_epoch);
    g.members = c
        .members
        .into_values()
        .map(|m| {
            let classic = m.classic.unwrap_or_default();
            let member = Member {
                id: m.id.clone(),
                instance_id: m.instance_id,
                client_id: m.client_id,
                client_host: m.client_host,
                session_timeout_ms: classic.session_timeout_ms,
                rebalance_timeout_ms: m.rebalance_timeout_ms,
                protocols: classic
                    .protocols
                    .into_iter()
                    .map(|(n, b)| (n, bytes::Bytes::from(b)))
                    .collect(),
                assignment: encode_assignment(&m.assigned),
                join_waiter: None,
                sync_waiter: None,
                last_seen: now,
            };
            (m.id, member)
        })
        .collect();
    g.protocol_type = Some("consumer".into());
    g.protocol = g.select_protocol();
    g.leader = g.members.keys().next().cloned();
    g.state = GroupState::Stable;
    tracing::info!(group = %g.id, members = g.members.len(), generation = g.generation,
        "consumer group downgraded to the classic protocol");
    let classic = (
        records::key_bytes(&Key::Group {
            group: g.id.clone(),
        }),
        Some(records::value_bytes(&records::group_value(g))),
    );
    super::coordinator::prepare_rebalance(host, g);
    vec![state_record(&g.id, None), classic]
}

/// Removes consumer-protocol members whose session expired or that did not revoke their
/// partitions within their rebalance timeout, and writes each changed group's state.
pub fn expire_consumer_members<H: GroupHost>(host: &Rc<H>) {
    let now = crate::common::clock::now();
    let meta = host.metadata();
    let mut records = Vec::new();
    for g in host.groups().borrow_mut().values_mut() {
        let Some(c) = g.consumer.as_mut() else {
            continue;
        };
        // The group's `consumer.session.timeout.ms`, else the broker's.
        let session = Duration::from_millis(crate::cluster::group_config::number(
            meta.group_configs.get(&g.id),
            crate::cluster::group_config::CONSUMER_SESSION_TIMEOUT_MS,
            host.consumer_session_timeout_ms(),
        ));
        let gone = c.expire(now, session);
        if gone.is_empty() {
            continue;
        }
        tracing::info!(group = %g.id, members = ?gone, "consumer group members expired");
        if c.only_classic_members() {
            records.push((g.id.clone(), downgrade(host, g, now)));
        } else {
            records.push((g.id.clone(), vec![state_record(&g.id, Some(c.snapshot()))]));
        }
    }
    for (group, recs) in records {
        spawn_persist(host, group, recs);
    }
}

/// Writes `recs` to `group`'s offsets partition in the background (a change no request
/// waits for: an expiry, a classic heartbeat that moved the group epoch).
fn spawn_persist<H: GroupHost>(host: &Rc<H>, group: String, recs: Vec<Record>) {
    let host = host.clone();
    crate::runtime::task::spawn_local(async move {
        if let Err(e) = persist_group_records(&*host, &group, recs, None).await {
            tracing::warn!(%group, code = e, "writing a consumer group's state failed");
        }
    });
}

/// A classic JoinGroup to a consumer group with members (Kafka 4's mixed groups): the
/// member joins the consumer group and is answered at once with its epoch as the
/// generation and no leader (the coordinator assigns). `None` when the group is not a
/// consumer group with members (the classic coordinator handles the join).
pub async fn classic_join<H: GroupHost>(host: &Rc<H>, r: &JoinRequest) -> Option<JoinOutcome> {
    if !is_consumer_group(host, &r.group, true) {
        return None;
    }
    let topics = topic_partitions(&host.metadata());
    let (outcome, records) = {
        let mut groups = host.groups().borrow_mut();
        let g = groups.get_mut(&r.group)?;
        let c = g.consumer.as_mut().filter(|c| !c.members.is_empty())?;
        let member_id = match classic_member_id(r) {
            Ok(id) => id,
            Err(refused) => return Some(*refused),
        };
        let failed = |error| failed_join(error, r.member_id.clone());
        let join = ClassicJoin {
            member_id: member_id.clone(),
            instance_id: r.instance_id.clone(),
            client_id: r.client_id.clone(),
            client_host: r.client_host.clone(),
            meta: ClassicMeta {
                session_timeout_ms: r.session_timeout_ms,
                protocols: r
                    .protocols
                    .iter()
                    .map(|(n, b)| (n.clone(), b.to_vec()))
                    .collect(),
            },
            rebalance_timeout_ms: r.rebalance_timeout_ms,
        };
        let now = crate::common::clock::now();
        match c.classic_join(join, &topics, now, host.group_max_size()) {
            Err(error) => {
                return Some(JoinOutcome {
                    member_id,
                    ..failed(error)
                })
            }
            Ok((generation, changed)) => {
                let outcome = JoinOutcome {
                    error: code::NONE,
                    generation,
                    protocol: r.protocols.first().map(|(n, _)| n.clone()),
                    protocol_type: Some("consumer".into()),
                    leader: String::new(),
                    member_id,
                    members: Vec::new(),
                };
                let records = match changed {
                    true => vec![state_record(&r.group, Some(c.snapshot()))],
                    false => Vec::new(),
                };
                (outcome, records)
            }
        }
    };
    if !records.is_empty() {
        if let Err(error) = persist_group_records(&**host, &r.group, records, None).await {
            return Some(JoinOutcome {
                error,
                generation: -1,
                ..outcome
            });
        }
    }
    Some(outcome)
}

/// The member id of a classic JoinGroup to a consumer group: its own, or a new one (with
/// MEMBER_ID_REQUIRED from v4, as Kafka answers a first join); refused unless it joins as
/// a consumer.
fn classic_member_id(r: &JoinRequest) -> Result<String, Box<JoinOutcome>> {
    if r.protocol_type != "consumer" || r.protocols.is_empty() {
        let refused = failed_join(code::INCONSISTENT_GROUP_PROTOCOL, r.member_id.clone());
        return Err(Box::new(refused));
    }
    if !r.member_id.is_empty() {
        return Ok(r.member_id.clone());
    }
    let id = format!("{}-{}", r.client_id, uuid::Uuid::new_v4());
    if r.version >= 4 {
        return Err(Box::new(failed_join(code::MEMBER_ID_REQUIRED, id)));
    }
    Ok(id)
}

/// Whether `group` is a consumer group (`with_members`: one with members): the check
/// before a classic request builds anything (a classic group's requests pay nothing more).
fn is_consumer_group<H: GroupHost>(host: &Rc<H>, group: &str, with_members: bool) -> bool {
    host.groups()
        .borrow()
        .get(group)
        .and_then(|g| g.consumer.as_ref())
        .is_some_and(|c| !with_members || !c.members.is_empty())
}

/// A classic SyncGroup in a consumer group: the member's assignment. `None` when the group
/// is not a consumer group.
pub fn classic_sync<H: GroupHost>(
    host: &Rc<H>,
    group: &str,
    member_id: &str,
    generation: i32,
) -> Option<(i16, bytes::Bytes)> {
    let groups = host.groups().borrow();
    let c = groups.get(group)?.consumer.as_ref()?;
    Some(match c.classic_sync(member_id, generation) {
        Ok(a) => (code::NONE, encode_assignment(a)),
        Err(e) => (e, bytes::Bytes::new()),
    })
}

/// A classic Heartbeat in a consumer group. `None` when the group is not a consumer group.
pub fn classic_heartbeat<H: GroupHost>(
    host: &Rc<H>,
    group: &str,
    member_id: &str,
    generation: i32,
) -> Option<i16> {
    if !is_consumer_group(host, group, false) {
        return None;
    }
    let topics = topic_partitions(&host.metadata());
    let now = crate::common::clock::now();
    let (error, record) = {
        let mut groups = host.groups().borrow_mut();
        let c = groups.get_mut(group)?.consumer.as_mut()?;
        let (error, changed) = c.classic_heartbeat(member_id, generation, &topics, now);
        (
            error,
            changed.then(|| state_record(group, Some(c.snapshot()))),
        )
    };
    if let Some(record) = record {
        spawn_persist(host, group.to_string(), vec![record]);
    }
    Some(error)
}

/// A classic LeaveGroup in a consumer group: per member, an error code; written before
/// the answer. `None` when the group is not a consumer group.
pub async fn classic_leave<H: GroupHost>(
    host: &Rc<H>,
    group: &str,
    members: &[(String, Option<String>)],
) -> Option<Vec<i16>> {
    let (codes, records) = {
        let mut groups = host.groups().borrow_mut();
        let g = groups.get_mut(group)?;
        let c = g.consumer.as_mut()?;
        let codes: Vec<i16> = members
            .iter()
            .map(|(id, instance)| {
                let id = match instance {
                    Some(i) => c
                        .members
                        .values()
                        .find(|m| m.instance_id.as_deref() == Some(i))
                        .map_or_else(|| id.clone(), |m| m.id.clone()),
                    None => id.clone(),
                };
                if c.members.contains_key(&id) {
                    c.remove(&id);
                    code::NONE
                } else {
                    code::UNKNOWN_MEMBER_ID
                }
            })
            .collect();
        let records = match codes.contains(&code::NONE) {
            true => vec![state_record(group, Some(c.snapshot()))],
            false => Vec::new(),
        };
        (codes, records)
    };
    if !records.is_empty() {
        if let Err(e) = persist_group_records(&**host, group, records, None).await {
            return Some(vec![e; members.len()]);
        }
    }
    Some(codes)
}

/// Before a classic JoinGroup: a consumer-protocol group without members becomes classic
/// again, durably (one with members takes the join itself: `classic_join`).
pub async fn make_classic<H: GroupHost>(host: &Rc<H>, group: &str) -> Result<(), i16> {
    {
        let groups = host.groups().borrow();
        match groups.get(group) {
            Some(g) if g.has_consumer_members() => return Ok(()),
            Some(g) if g.consumer.is_some() => {}
            _ => return Ok(()),
        }
    }
    persist_group_records(&**host, group, vec![state_record(group, None)], None).await?;
    let mut groups = host.groups().borrow_mut();
    if let Some(g) = groups.get_mut(group) {
        if !g.has_consumer_members() {
            g.consumer = None;
            if g.members.is_empty() {
                g.protocol_type = None;
            }
        }
    }
    Ok(())
}
