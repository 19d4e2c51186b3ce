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
use std::time::Duration;

use super::consumer::{Answer, ConsumerGroup, Heartbeat};
use super::coordinator::{code, persist_group_records, GROUP_ID_BYTES_MAX};
use super::records::{self, Key};
use super::state::{Group, GroupState};
use super::GroupHost;

/// The cluster's topics and partition counts, as the assignors see them.
pub fn topic_partitions(meta: &crate::cluster::metadata::Metadata) -> BTreeMap<String, i32> {
    meta.topics
        .iter()
        .map(|(name, t)| {
            let n = i32::try_from(t.shards.len()).unwrap_or(i32::MAX);
            (name.clone(), n)
        })
        .collect()
}

fn refused(error: i16, message: impl Into<String>, hb: &Heartbeat) -> Answer {
    Answer {
        error,
        message: Some(message.into()),
        member_id: hb.member_id.clone(),
        member_epoch: hb.member_epoch,
        assignment: None,
        changed: false,
    }
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
        return refused(
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
        return refused(
            code::INVALID_REQUEST,
            "the member or instance id is too long",
            &hb,
        );
    }
    let (answer, record) = apply(host, group, hb);
    let Some(record) = record else {
        return answer;
    };
    match persist_group_records(&**host, group, vec![record], None).await {
        Ok(_) => answer,
        Err(error) => Answer {
            error,
            message: Some("the group's state could not be written".into()),
            assignment: None,
            ..answer
        },
    }
}

/// The heartbeat applied to the group's state: the answer, and the record to make durable
/// before it when the state changed.
fn apply<H: GroupHost>(host: &Rc<H>, group: &str, hb: Heartbeat) -> (Answer, Option<Record>) {
    let topics = topic_partitions(&host.metadata());
    let mut groups = host.groups().borrow_mut();
    let existed = groups.contains_key(group);
    if !existed && groups.len() >= host.groups_max() {
        let why = "this coordinator holds groups_per_shard groups already";
        return (refused(code::COORDINATOR_NOT_AVAILABLE, why, &hb), None);
    }
    let g = groups
        .entry(group.to_string())
        .or_insert_with(|| Group::new(group));
    if g.consumer.is_none() {
        if g.state != GroupState::Empty || !g.members.is_empty() {
            let why = format!("group {group} is not a consumer group: it has classic members");
            return (refused(code::GROUP_ID_NOT_FOUND, why, &hb), None);
        }
        g.consumer = Some(ConsumerGroup::default());
    }
    let Some(c) = g.consumer.as_mut() else {
        return (
            refused(code::UNKNOWN_SERVER_ERROR, "consumer state vanished", &hb),
            None,
        );
    };
    let now = crate::common::clock::now();
    let answer = c.heartbeat(hb, &topics, now, host.group_max_size());
    if answer.error != code::NONE && *c == ConsumerGroup::default() {
        // A refused first heartbeat leaves nothing behind (no group to count or keep).
        g.consumer = None;
        if !existed {
            groups.remove(group);
        }
        return (answer, None);
    }
    let record = answer
        .changed
        .then(|| state_record(group, Some(c.snapshot())));
    if answer.error == code::NONE {
        g.protocol_type = Some("consumer".into());
        g.empty_since_ms = None;
    }
    (answer, record)
}

/// Removes consumer-protocol members whose session expired or that did not revoke their
/// partitions within their rebalance timeout, and writes each changed group's state.
pub fn expire_consumer_members<H: GroupHost>(host: &Rc<H>) {
    let now = crate::common::clock::now();
    let session = Duration::from_millis(host.consumer_session_timeout_ms());
    let mut records = Vec::new();
    for g in host.groups().borrow_mut().values_mut() {
        let Some(c) = g.consumer.as_mut() else {
            continue;
        };
        let gone = c.expire(now, session);
        if !gone.is_empty() {
            tracing::info!(group = %g.id, members = ?gone, "consumer group members expired");
            records.push((g.id.clone(), state_record(&g.id, Some(c.snapshot()))));
        }
    }
    for (group, record) in records {
        let host = host.clone();
        crate::runtime::task::spawn_local(async move {
            if let Err(e) = persist_group_records(&*host, &group, vec![record], None).await {
                tracing::warn!(%group, code = e, "writing a consumer group's state after member expiry failed");
            }
        });
    }
}

/// Before a classic JoinGroup: a consumer-protocol group with members refuses it
/// (INCONSISTENT_GROUP_PROTOCOL, as Kafka with `group.consumer.migration.policy` off); one
/// without members becomes classic again, durably.
pub async fn make_classic<H: GroupHost>(host: &Rc<H>, group: &str) -> Result<(), i16> {
    {
        let groups = host.groups().borrow();
        match groups.get(group) {
            Some(g) if g.has_consumer_members() => return Err(code::INCONSISTENT_GROUP_PROTOCOL),
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
