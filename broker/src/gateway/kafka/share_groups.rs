//! Share-group APIs (KIP-932), served only with `group_share_enable` (on by default): ShareGroupHeartbeat, run on the group's coordinator shard
//! like every single-group request (`groups::route`), and ShareGroupDescribe, split per
//! coordinator shard like ConsumerGroupDescribe. Topic ids on the wire, names in the
//! coordinator's state.
//!
//! Invariant: a share API is answered only while `group_share_enable` is set; otherwise
//! it is neither advertised nor served (`is_share_api`).

use std::rc::Rc;

use bytes::Bytes;
use kafka_protocol::messages::share_group_heartbeat_response::{Assignment, TopicPartitions};
use kafka_protocol::messages::*;

use super::{Ctx, FramingError};
use crate::cluster::group_config;
use crate::common::errors::code;
use crate::security::acl::{op as acl_op, resource};
use crate::shard::groups::s;
use crate::shard::ops::{Op, Reply};
use crate::shard::share::ShareDescribed;
use crate::shard::Shard;
use crate::share::group::{Answer, Heartbeat, JOIN_EPOCH, LEAVE_EPOCH};

/// Whether `key` is a share-group API (served only with `group_share_enable`).
pub fn is_share_api(key: ApiKey) -> bool {
    matches!(
        key,
        ApiKey::ShareGroupHeartbeat
            | ApiKey::ShareGroupDescribe
            | ApiKey::ShareFetch
            | ApiKey::ShareAcknowledge
            | ApiKey::ReadShareGroupState
            | ApiKey::DescribeShareGroupOffsets
            | ApiKey::AlterShareGroupOffsets
            | ApiKey::DeleteShareGroupOffsets
            | ApiKey::DeleteShareGroupState
            | ApiKey::WriteShareGroupState
    )
}

/// Whether a ShareGroupHeartbeat subscribes to a topic its principal may not describe
/// (Kafka answers TOPIC_AUTHORIZATION_FAILED).
pub fn subscribes_undescribable(
    shard: &Shard,
    ctx: &Ctx,
    body: &Bytes,
) -> Result<bool, FramingError> {
    let r: ShareGroupHeartbeatRequest = ctx.decode(body.clone())?;
    let topics = r.subscribed_topic_names.as_deref();
    Ok(super::consumer_groups::undescribable(shard, ctx, topics))
}

/// The ShareGroupHeartbeat answer to a request refused before the coordinator saw it.
pub fn refused(ctx: &Ctx, error: i16) -> Result<Bytes, FramingError> {
    ctx.respond(&ShareGroupHeartbeatResponse::default().with_error_code(error))
}

/// Kafka's checks of a ShareGroupHeartbeat before the coordinator
/// (`throwIfShareGroupHeartbeatRequestIsInvalid`).
fn invalid(r: &ShareGroupHeartbeatRequest) -> Option<&'static str> {
    if r.member_id.trim().is_empty() {
        Some("MemberId can't be empty.")
    } else if r.group_id.0.trim().is_empty() {
        Some("GroupId can't be empty.")
    } else if r.rack_id.as_ref().is_some_and(|x| x.trim().is_empty()) {
        Some("RackId can't be empty.")
    } else if r.member_epoch == JOIN_EPOCH
        && r.subscribed_topic_names.as_ref().is_none_or(Vec::is_empty)
    {
        Some("SubscribedTopicNames must be set in first request.")
    } else if r.member_epoch < LEAVE_EPOCH {
        Some("MemberEpoch is invalid.")
    } else {
        None
    }
}

/// Creates `__share_group_state` (compacted, `SHARE_STATE_NUM_PARTITIONS` partitions, the
/// default replication factor) unless it exists: at a share group's first join, so it is
/// there before any of its members acknowledges a record.
pub async fn ensure_share_state_topic(shard: &Rc<Shard>) {
    use crate::common::config::{SHARE_STATE_NUM_PARTITIONS, SHARE_STATE_TOPIC};
    if shard.metadata().topics.contains_key(SHARE_STATE_TOPIC) {
        return;
    }
    let configs =
        std::collections::BTreeMap::from([("cleanup.policy".to_string(), "compact".to_string())]);
    let cmd = super::topics::create_command(
        shard,
        SHARE_STATE_TOPIC,
        SHARE_STATE_NUM_PARTITIONS,
        configs,
        -1,
    );
    match super::topics::commit(shard, vec![cmd]).await.pop() {
        Some(Err(crate::cluster::metadata::MetaError::TopicExists(_))) | Some(Ok(())) | None => {}
        Some(Err(e)) => tracing::warn!(error = %e, "cannot create {SHARE_STATE_TOPIC}"),
    }
}

/// ShareGroupHeartbeat, on the group's coordinator shard.
pub async fn heartbeat(shard: &Rc<Shard>, ctx: &Ctx, body: Bytes) -> Result<Bytes, FramingError> {
    let r: ShareGroupHeartbeatRequest = ctx.decode(body)?;
    if let Some(why) = invalid(&r) {
        let resp = ShareGroupHeartbeatResponse::default()
            .with_error_code(code::INVALID_REQUEST)
            .with_error_message(Some(s(why)));
        return ctx.respond(&resp);
    }
    let group = r.group_id.0.to_string();
    if let Err(error) = shard.coordinator_check(&group) {
        return refused(ctx, error);
    }
    let hb = Heartbeat {
        member_id: r.member_id.to_string(),
        member_epoch: r.member_epoch,
        rack_id: r.rack_id.as_ref().map(ToString::to_string),
        subscribed: r
            .subscribed_topic_names
            .as_ref()
            .map(|ts| ts.iter().map(|t| t.0.to_string()).collect()),
        client_id: ctx.client_id.clone(),
        client_host: ctx.client_host.clone(),
    };
    if hb.member_epoch == JOIN_EPOCH {
        ensure_share_state_topic(shard).await;
    }
    let answer = heartbeat_durably(shard, &group, hb).await;
    let resp = ShareGroupHeartbeatResponse::default().with_member_id(Some(r.member_id.clone()));
    let resp = match answer {
        Answer::Error(error, why) => resp.with_error_code(error).with_error_message(Some(s(why))),
        Answer::Left => resp.with_member_epoch(LEAVE_EPOCH),
        Answer::Ok { epoch, assignment } => {
            let meta = shard.metadata();
            let assignment = assignment.map(|a| {
                let tps = a
                    .iter()
                    .filter_map(|(t, ps)| {
                        let topic = meta.topics.get(t)?;
                        Some(
                            TopicPartitions::default()
                                .with_topic_id(uuid::Uuid::from_u128(topic.id))
                                .with_partitions(ps.iter().copied().collect()),
                        )
                    })
                    .collect();
                Assignment::default().with_topic_partitions(tps)
            });
            let interval = group_config::number(
                meta.group_configs.get(&group),
                group_config::SHARE_HEARTBEAT_INTERVAL_MS,
                shard.config.group_share_heartbeat_interval_ms,
            );
            resp.with_member_epoch(epoch)
                .with_heartbeat_interval_ms(i32::try_from(interval).unwrap_or(i32::MAX))
                .with_assignment(assignment)
        }
    };
    ctx.respond(&resp)
}

/// The heartbeat against this shard's share groups, made durable before it is answered
/// (an answer a coordinator crash could undo would hand a member partitions the group then
/// forgets): a change is written to `__consumer_offsets` first.
async fn heartbeat_durably(shard: &Rc<Shard>, group: &str, hb: Heartbeat) -> Answer {
    let (answer, snapshot) = run(shard, group, hb);
    let Some(snapshot) = snapshot else {
        return answer;
    };
    match shard.persist_share_group(group, Some(snapshot)).await {
        Ok(()) => answer,
        Err(error) => Answer::Error(error, "the share group's state could not be written"),
    }
}

/// The heartbeat against this shard's share groups, and the group's new snapshot when it
/// changed: members silent for the session timeout leave first (the session sweeper also
/// expires them between heartbeats).
fn run(shard: &Shard, group: &str, hb: Heartbeat) -> (Answer, Option<Vec<u8>>) {
    let refused = |error, why| (Answer::Error(error, why), None);
    let is_other_kind = shard.groups.borrow().contains_key(group);
    if is_other_kind {
        return refused(code::GROUP_ID_NOT_FOUND, "The group is not a share group.");
    }
    let mut groups = shard.share_groups.borrow_mut();
    if !groups.contains_key(group) {
        if hb.member_epoch == LEAVE_EPOCH {
            return refused(code::GROUP_ID_NOT_FOUND, "The share group does not exist.");
        }
        if hb.member_epoch != JOIN_EPOCH {
            // A member of a deleted group: told it is unknown, it joins again
            // (GROUP_ID_NOT_FOUND would be fatal to the client).
            return refused(code::UNKNOWN_MEMBER_ID, "unknown member");
        }
    }
    let c = &shard.config;
    let meta = shard.metadata();
    let partitions = |t: &str| meta.topics.get(t).map(|x| x.shards.len());
    let now_ms = crate::common::clock::mono_ms();
    let session_ms = shard.share_session_ms(&meta, group);
    let g = groups.entry(group.to_string()).or_default();
    let member_id = hb.member_id.clone();
    let before = g.persisted_by(&member_id);
    let expired = !g.expire(session_ms, now_ms).is_empty();
    let answer = g.heartbeat(hb, &partitions, c.group_share_max_size, now_ms);
    // A share group whose last member left stays, Empty, as in Kafka (described, listed);
    // a refused first heartbeat leaves no group behind.
    if g.members.is_empty() && g.epoch == 0 {
        groups.remove(group);
        return (answer, None);
    }
    let changed = expired || g.persisted_by(&member_id) != before;
    let snapshot = changed.then(|| g.snapshot());
    (answer, snapshot)
}

/// ShareGroupDescribe over the groups' coordinator shards.
pub async fn describe(shard: &Rc<Shard>, ctx: &Ctx, body: Bytes) -> Result<Bytes, FramingError> {
    let r: ShareGroupDescribeRequest = ctx.decode(body)?;
    let all: Vec<String> = r.group_ids.iter().map(|g| g.0.to_string()).collect();
    let mut out: Vec<_> = described(shard, ctx, &all)
        .await
        .into_iter()
        .map(|d| d.group)
        .collect();
    for d in &mut out {
        if r.include_authorized_operations && d.error_code == code::NONE {
            d.authorized_operations = super::authorized::of_group(ctx, shard, &d.group_id.0);
        }
    }
    ctx.respond(&ShareGroupDescribeResponse::default().with_groups(out))
}

/// The share groups `all` as their coordinator shards describe them, in order (a group
/// the principal may not describe: GROUP_AUTHORIZATION_FAILED).
pub async fn described(shard: &Rc<Shard>, ctx: &Ctx, all: &[String]) -> Vec<ShareDescribed> {
    use kafka_protocol::messages::share_group_describe_response::DescribedGroup;
    let allowed = |g: &String| ctx.allowed(shard, acl_op::DESCRIBE, resource::GROUP, g);
    let mut out: Vec<ShareDescribed> = all
        .iter()
        .map(|g| {
            let error = match allowed(g) {
                true => code::COORDINATOR_NOT_AVAILABLE,
                false => code::GROUP_AUTHORIZATION_FAILED,
            };
            let group = DescribedGroup::default()
                .with_group_id(GroupId(s(g.clone())))
                .with_error_code(error);
            ShareDescribed {
                group,
                initialized: Default::default(),
            }
        })
        .collect();
    let (ids, at) = super::groups::permitted(all, allowed);
    for (target, (groups, idx)) in super::groups::by_shard(shard, &ids) {
        let reply = shard.call(target, Op::DescribeShareGroups(groups)).await;
        if let Reply::DescribedShareGroups(ds) = reply {
            for (i, d) in idx.into_iter().zip(ds) {
                out[at[i]] = d;
            }
        }
    }
    out
}
