//! AlterShareGroupOffsets and DeleteShareGroupOffsets (KIP-932; `Admin.alterShareGroupOffsets`
//! and `deleteShareGroupOffsets`, `kafka-share-groups.sh --reset-offsets / --delete-offsets`):
//! a share group without members gets new start offsets for some partitions, or loses its
//! delivery state of whole topics.
//!
//! Invariants:
//! - Only a share group this coordinator knows and that has no members is changed (else
//!   GROUP_ID_NOT_FOUND / NON_EMPTY_GROUP for the whole request, as Kafka answers).
//! - A partition changed is first forgotten everywhere (`Shard::forget_everywhere`: the
//!   share partition held in memory by its data leader, and its persisted state), so no
//!   in-flight state from before survives; a reset then persists a state with the new
//!   start offset and nothing in flight, which the next ShareFetch loads. A reset to a
//!   negative offset leaves no state: `share.auto.offset.reset` applies again.

use std::collections::{BTreeMap, BTreeSet};
use std::rc::Rc;

use bytes::Bytes;
use kafka_protocol::messages::alter_share_group_offsets_response::{
    AlterShareGroupOffsetsResponsePartition, AlterShareGroupOffsetsResponseTopic,
};
use kafka_protocol::messages::delete_share_group_offsets_response::DeleteShareGroupOffsetsResponseTopic;
use kafka_protocol::messages::{
    AlterShareGroupOffsetsRequest, AlterShareGroupOffsetsResponse, DeleteShareGroupOffsetsRequest,
    DeleteShareGroupOffsetsResponse, TopicName,
};

use super::{Ctx, FramingError};
use crate::common::errors::code;
use crate::security::acl::{op as acl_op, resource};
use crate::shard::groups::s;
use crate::shard::ops::{Op, Reply};
use crate::shard::Shard;
use crate::share::partition::ShareState;
use crate::share::records::Forget;

/// The leader epoch a reset state carries: the data partition's leader raises it when it
/// reads the state, fencing older leaders from then on.
const RESET_LEADER_EPOCH: i32 = 0;

/// Why `group` cannot have its offsets changed now (a top-level error and its message),
/// checked at its coordinator: unknown or not a share group, or not empty.
async fn refusal(shard: &Rc<Shard>, ctx: &Ctx, group: &str) -> Option<(i16, String)> {
    if group.is_empty() {
        return Some((code::INVALID_GROUP_ID, "The group id is empty.".into()));
    }
    let described = super::share_groups::described(shard, ctx, &[group.to_string()]).await;
    let d = described.into_iter().next()?.group;
    if d.error_code != code::NONE {
        let message = d.error_message.map_or_else(String::new, |m| m.to_string());
        return Some((d.error_code, message));
    }
    (!d.members.is_empty()).then(|| {
        (
            code::NON_EMPTY_GROUP,
            format!("Share group {group} is not empty."),
        )
    })
}

/// The code refusing `topic` of a request (`None`: known and readable), and its partition
/// count and id.
fn topic_check(shard: &Shard, ctx: &Ctx, topic: &str) -> (Option<i16>, i32, u128) {
    let meta = shard.metadata();
    let known = meta.topics.get(topic);
    let count = known.map_or(0, |t| i32::try_from(t.shards.len()).unwrap_or(i32::MAX));
    let id = known.map_or(0, |t| t.id);
    let refused = if !ctx.allowed(shard, acl_op::READ, resource::TOPIC, topic) {
        Some(code::TOPIC_AUTHORIZATION_FAILED)
    } else {
        known.is_none().then_some(code::UNKNOWN_TOPIC_OR_PARTITION)
    };
    (refused, count, id)
}

/// One topic of an AlterShareGroupOffsets answer: its partitions' codes.
struct TopicCodes {
    topic: String,
    id: u128,
    partitions: Vec<(i32, i16)>,
}

/// AlterShareGroupOffsets: each valid partition forgotten everywhere, then given a state
/// starting at its new offset.
pub async fn alter(shard: &Rc<Shard>, ctx: &Ctx, body: Bytes) -> Result<Bytes, FramingError> {
    let r: AlterShareGroupOffsetsRequest = ctx.decode(body)?;
    let group = r.group_id.0.to_string();
    // A refusal is top-level and on every partition too: the Java 4.1 Admin reads only the
    // partitions' codes (it would report a refused request as done), later ones copy the
    // top-level code to them.
    let refused = |error: i16, message: String| {
        let every = r.topics.iter().map(|t| TopicCodes {
            topic: t.topic_name.0.to_string(),
            id: shard
                .metadata()
                .topics
                .get(t.topic_name.0.as_str())
                .map_or(0, |x| x.id),
            partitions: t
                .partitions
                .iter()
                .map(|p| (p.partition_index, error))
                .collect(),
        });
        ctx.respond(
            &AlterShareGroupOffsetsResponse::default()
                .with_error_code(error)
                .with_error_message(Some(s(message)))
                .with_responses(every.map(alter_topic).collect()),
        )
    };
    if !ctx.allowed(shard, acl_op::READ, resource::GROUP, &group) {
        return refused(code::GROUP_AUTHORIZATION_FAILED, String::new());
    }
    if let Some((error, message)) = refusal(shard, ctx, &group).await {
        return refused(error, message);
    }
    // Each partition's code so far, and the new offsets of the valid ones.
    let mut codes: Vec<TopicCodes> = Vec::new();
    let mut reset: BTreeMap<String, BTreeMap<i32, i64>> = BTreeMap::new();
    for t in &r.topics {
        let topic = t.topic_name.0.to_string();
        let (refused, count, id) = topic_check(shard, ctx, &topic);
        let mut partitions = Vec::with_capacity(t.partitions.len());
        for p in &t.partitions {
            let i = p.partition_index;
            let error = refused
                .or_else(|| (i < 0 || i >= count).then_some(code::UNKNOWN_TOPIC_OR_PARTITION));
            if error.is_none() {
                reset
                    .entry(topic.clone())
                    .or_default()
                    .insert(i, p.start_offset);
            }
            partitions.push((i, error.unwrap_or(code::NONE)));
        }
        codes.push(TopicCodes {
            topic,
            id,
            partitions,
        });
    }
    reset_partitions(shard, &group, &reset, &mut codes).await;
    let stated = codes.iter().filter(|t| {
        let starts = reset.get(&t.topic);
        let written = |(p, error): &(i32, i16)| {
            *error == code::NONE && starts.and_then(|s| s.get(p)).is_some_and(|&o| o >= 0)
        };
        t.partitions.iter().any(written)
    });
    let stated = stated.map(|t| t.topic.clone()).collect();
    note_topics(shard, &group, stated, true).await;
    let responses = codes.into_iter().map(alter_topic).collect();
    ctx.respond(&AlterShareGroupOffsetsResponse::default().with_responses(responses))
}

/// One topic of an AlterShareGroupOffsets answer.
fn alter_topic(t: TopicCodes) -> AlterShareGroupOffsetsResponseTopic {
    let partitions = t
        .partitions
        .into_iter()
        .map(|(p, error)| {
            AlterShareGroupOffsetsResponsePartition::default()
                .with_partition_index(p)
                .with_error_code(error)
        })
        .collect();
    AlterShareGroupOffsetsResponseTopic::default()
        .with_topic_name(TopicName(s(t.topic)))
        .with_topic_id(uuid::Uuid::from_u128(t.id))
        .with_partitions(partitions)
}

/// Forgets `reset`'s partitions of `group` everywhere, then persists each one's state at
/// its new start offset (none for a negative one); each code into `codes`.
async fn reset_partitions(
    shard: &Rc<Shard>,
    group: &str,
    reset: &BTreeMap<String, BTreeMap<i32, i64>>,
    codes: &mut [TopicCodes],
) {
    if reset.is_empty() {
        return;
    }
    let forget = Forget {
        group: group.to_string(),
        only: Some(
            reset
                .iter()
                .map(|(t, ps)| (t.clone(), ps.keys().copied().collect::<BTreeSet<i32>>()))
                .collect(),
        ),
    };
    let forgotten = shard.forget_everywhere(&forget).await;
    for t in codes.iter_mut() {
        for (p, error) in &mut t.partitions {
            let Some(&start) = reset.get(&t.topic).and_then(|ps| ps.get(p)) else {
                continue;
            };
            *error = if forgotten != code::NONE {
                forgotten
            } else if start < 0 {
                code::NONE
            } else {
                let state = ShareState {
                    start,
                    end: start,
                    available: Vec::new(),
                    leader_epoch: RESET_LEADER_EPOCH,
                };
                let key = (group.to_string(), t.topic.clone(), *p);
                shard.persist_share_state(&key, &state).await
            };
        }
    }
}

/// DeleteShareGroupOffsets: every partition of each valid topic forgotten everywhere; a
/// topic none of whose partitions has a state has nothing to delete
/// (UNKNOWN_TOPIC_OR_PARTITION, as Kafka answers).
pub async fn delete(shard: &Rc<Shard>, ctx: &Ctx, body: Bytes) -> Result<Bytes, FramingError> {
    let r: DeleteShareGroupOffsetsRequest = ctx.decode(body)?;
    let group = r.group_id.0.to_string();
    let refused = |error: i16, message: String| {
        ctx.respond(
            &DeleteShareGroupOffsetsResponse::default()
                .with_error_code(error)
                .with_error_message(Some(s(message))),
        )
    };
    if !ctx.allowed(shard, acl_op::DELETE, resource::GROUP, &group) {
        return refused(code::GROUP_AUTHORIZATION_FAILED, String::new());
    }
    if let Some((error, message)) = refusal(shard, ctx, &group).await {
        return refused(error, message);
    }
    let mut responses = Vec::with_capacity(r.topics.len());
    let mut deleted = Vec::new();
    for t in &r.topics {
        let topic = t.topic_name.0.to_string();
        let (refused, count, id) = topic_check(shard, ctx, &topic);
        let (error, message) = match refused {
            Some(error) => (error, None),
            None => delete_topic(shard, &group, &topic, count).await,
        };
        if error == code::NONE {
            deleted.push(topic.clone());
        }
        responses.push(
            DeleteShareGroupOffsetsResponseTopic::default()
                .with_topic_name(TopicName(s(topic)))
                .with_topic_id(uuid::Uuid::from_u128(id))
                .with_error_code(error)
                .with_error_message(message.map(s)),
        );
    }
    note_topics(shard, &group, deleted, false).await;
    ctx.respond(&DeleteShareGroupOffsetsResponse::default().with_responses(responses))
}

/// Notes on `group`'s coordinator that `topics` hold a state for it (`true`) or no longer
/// do, for DescribeShareGroupOffsets without topics. A failure is logged, not answered:
/// the states themselves are written (or forgotten) already.
async fn note_topics(shard: &Rc<Shard>, group: &str, topics: Vec<String>, initialized: bool) {
    if topics.is_empty() {
        return;
    }
    let Some(target) = super::groups::coordinator_shard(shard, group) else {
        return;
    };
    let op = Op::NoteShareTopics {
        group: group.to_string(),
        topics,
        initialized,
    };
    let error = match shard.call(target, op).await {
        Reply::Codes(c) => c.first().copied().unwrap_or(code::UNKNOWN_SERVER_ERROR),
        _ => code::UNKNOWN_SERVER_ERROR,
    };
    if error != code::NONE {
        tracing::warn!(%group, initialized, code = error, "noting a share group's topics failed");
    }
}

/// Forgets `group`'s state of every partition of `topic` (`count` of them), if it has
/// one; a code and message.
async fn delete_topic(
    shard: &Rc<Shard>,
    group: &str,
    topic: &str,
    count: i32,
) -> (i16, Option<&'static str>) {
    let mut stated = false;
    for p in 0..count {
        let key = (group.to_string(), topic.to_string(), p);
        match shard
            .read_share_state(&key, super::share_offsets::NO_LEADER_EPOCH)
            .await
        {
            Ok(Some(_)) => {
                stated = true;
                break;
            }
            Ok(None) => {}
            Err(error) => return (error, None),
        }
    }
    if !stated {
        return (
            code::UNKNOWN_TOPIC_OR_PARTITION,
            Some("There is no offset information to delete."),
        );
    }
    let forget = Forget {
        group: group.to_string(),
        only: Some(BTreeMap::from([(topic.to_string(), (0..count).collect())])),
    };
    (shard.forget_everywhere(&forget).await, None)
}
