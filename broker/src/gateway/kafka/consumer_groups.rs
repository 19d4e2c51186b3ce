//! Consumer-protocol group APIs (KIP-848): ConsumerGroupHeartbeat, run on the group's
//! coordinator shard like the classic single-group requests (`groups::route`), and
//! ConsumerGroupDescribe, split per coordinator shard like DescribeGroups. Topic ids on
//! the wire, topic names in the coordinator's state.

use std::collections::BTreeSet;
use std::rc::Rc;

use bytes::Bytes;
use kafka_protocol::messages::consumer_group_heartbeat_response::{Assignment, TopicPartitions};
use kafka_protocol::messages::*;

use super::{Ctx, FramingError};
use crate::cluster::metadata::Metadata;
use crate::group::consumer::Heartbeat;
use crate::security::acl::{op as acl_op, resource};
use crate::shard::groups::s;
use crate::shard::ops::{Op, Reply};
use crate::shard::Shard;

/// Whether a ConsumerGroupHeartbeat subscribes by name to a topic its principal may not
/// describe (Kafka answers TOPIC_AUTHORIZATION_FAILED).
pub fn subscribes_undescribable(
    shard: &Shard,
    ctx: &Ctx,
    body: &Bytes,
) -> Result<bool, FramingError> {
    let r: ConsumerGroupHeartbeatRequest = ctx.decode(body.clone())?;
    Ok(undescribable(
        shard,
        ctx,
        r.subscribed_topic_names.as_deref(),
    ))
}

/// Whether any of `topics` is a topic the request's principal may not describe.
pub fn undescribable(shard: &Shard, ctx: &Ctx, topics: Option<&[TopicName]>) -> bool {
    topics
        .into_iter()
        .flatten()
        .any(|t| !ctx.allowed(shard, acl_op::DESCRIBE, resource::TOPIC, &t.0))
}

/// The ConsumerGroupHeartbeat answer to a request refused before the coordinator saw it.
pub fn refused(ctx: &Ctx, error: i16) -> Result<Bytes, FramingError> {
    ctx.respond(&ConsumerGroupHeartbeatResponse::default().with_error_code(error))
}

/// Kafka's checks of a ConsumerGroupHeartbeat before the coordinator: from v1 the client
/// makes its member id (KIP-1082), a v0 join may leave it to the coordinator; a static
/// leave names its instance.
fn invalid(ctx: &Ctx, r: &ConsumerGroupHeartbeatRequest) -> Option<&'static str> {
    let blank = r.member_id.trim().is_empty();
    if blank && (ctx.version >= 1 || r.member_epoch > 0 || r.member_epoch == -1) {
        Some("MemberId can't be empty.")
    } else if r.member_epoch == crate::group::consumer::STATIC_LEAVE_EPOCH
        && r.instance_id.is_none()
    {
        Some("InstanceId can't be null.")
    } else {
        None
    }
}

/// The request as the coordinator reads it: topic ids resolved to names (an unknown id,
/// a topic deleted meanwhile, is left out).
fn read(ctx: &Ctx, r: &ConsumerGroupHeartbeatRequest, meta: &Metadata) -> Heartbeat {
    let owned = r.topic_partitions.as_ref().map(|tps| {
        tps.iter()
            .filter_map(|tp| {
                let name = meta.topic_name_of(tp.topic_id.as_u128())?;
                Some((name.to_string(), tp.partitions.iter().copied().collect()))
            })
            .collect()
    });
    Heartbeat {
        member_id: r.member_id.to_string(),
        member_epoch: r.member_epoch,
        instance_id: r.instance_id.as_ref().map(|i| i.to_string()),
        rack_id: r.rack_id.as_ref().map(|i| i.to_string()),
        rebalance_timeout_ms: r.rebalance_timeout_ms,
        subscribed_topic_names: r
            .subscribed_topic_names
            .as_ref()
            .map(|ts| ts.iter().map(|t| t.0.to_string()).collect()),
        subscribed_topic_regex: r.subscribed_topic_regex.as_ref().map(|x| x.to_string()),
        regex_describable: None,
        server_assignor: r.server_assignor.as_ref().map(|x| x.to_string()),
        owned,
        client_id: ctx.client_id.clone(),
        client_host: ctx.client_host.clone(),
    }
}

/// The topics the member's regex (this heartbeat's, else the one it subscribed with
/// before) matches that the request's principal may describe: Kafka resolves a regex to
/// those only. `None` without a regex.
fn regex_describable(
    shard: &Shard,
    ctx: &Ctx,
    group: &str,
    hb: &Heartbeat,
) -> Option<BTreeSet<String>> {
    let regex = match &hb.subscribed_topic_regex {
        Some(re) => Some(re.clone()).filter(|r| !r.is_empty()),
        None => crate::group::heartbeat::member_regex(shard, group, &hb.member_id),
    }?;
    let topics = crate::group::heartbeat::topic_partitions(&shard.metadata());
    let matched = crate::group::consumer::regex_matches(&topics, &regex)?;
    let describable = matched
        .iter()
        .filter(|t| ctx.allowed(shard, acl_op::DESCRIBE, resource::TOPIC, t))
        .cloned()
        .collect();
    Some(describable)
}

/// ConsumerGroupHeartbeat, on the group's coordinator shard.
pub async fn heartbeat(shard: &Rc<Shard>, ctx: &Ctx, body: Bytes) -> Result<Bytes, FramingError> {
    let r: ConsumerGroupHeartbeatRequest = ctx.decode(body)?;
    if let Some(why) = invalid(ctx, &r) {
        let resp = ConsumerGroupHeartbeatResponse::default()
            .with_error_code(crate::common::errors::code::INVALID_REQUEST)
            .with_error_message(Some(s(why)));
        return ctx.respond(&resp);
    }
    let mut hb = read(ctx, &r, &shard.metadata());
    if shard.config.authorizer_enabled {
        hb.regex_describable = regex_describable(shard, ctx, &r.group_id.0, &hb);
    }
    let a = crate::group::heartbeat::consumer_heartbeat(shard, &r.group_id.0, hb).await;
    if a.error != crate::common::errors::code::NONE {
        let resp = ConsumerGroupHeartbeatResponse::default()
            .with_error_code(a.error)
            .with_error_message(a.message.map(s));
        return ctx.respond(&resp);
    }
    let meta = shard.metadata();
    let assignment = a.assignment.map(|asg| {
        let tps = asg
            .into_iter()
            .filter_map(|(t, ps)| {
                let topic = meta.topics.get(&t)?;
                Some(
                    TopicPartitions::default()
                        .with_topic_id(uuid::Uuid::from_u128(topic.id))
                        .with_partitions(ps.into_iter().collect()),
                )
            })
            .collect();
        Assignment::default().with_topic_partitions(tps)
    });
    let interval_ms = crate::cluster::group_config::number(
        meta.group_configs.get(r.group_id.0.as_str()),
        crate::cluster::group_config::CONSUMER_HEARTBEAT_INTERVAL_MS,
        shard.config.group_consumer_heartbeat_interval_ms,
    );
    let resp = ConsumerGroupHeartbeatResponse::default()
        .with_member_id(Some(s(a.member_id)))
        .with_member_epoch(a.member_epoch)
        .with_heartbeat_interval_ms(i32::try_from(interval_ms).unwrap_or(i32::MAX))
        .with_assignment(assignment);
    ctx.respond(&resp)
}

/// ConsumerGroupDescribe over the groups' coordinator shards.
pub async fn describe(shard: &Rc<Shard>, ctx: &Ctx, body: Bytes) -> Result<Bytes, FramingError> {
    use kafka_protocol::messages::consumer_group_describe_response::DescribedGroup;
    let r: ConsumerGroupDescribeRequest = ctx.decode(body)?;
    let all: Vec<String> = r.group_ids.iter().map(|g| g.0.to_string()).collect();
    let allowed = |g: &String| ctx.allowed(shard, acl_op::DESCRIBE, resource::GROUP, g);
    let code = crate::common::errors::code::COORDINATOR_NOT_AVAILABLE;
    let mut out: Vec<DescribedGroup> = all
        .iter()
        .map(|g| {
            let error = match allowed(g) {
                true => code,
                false => crate::common::errors::code::GROUP_AUTHORIZATION_FAILED,
            };
            DescribedGroup::default()
                .with_group_id(GroupId(s(g.clone())))
                .with_error_code(error)
        })
        .collect();
    let (ids, at) = super::groups::permitted(&all, allowed);
    for (target, (groups, idx)) in super::groups::by_shard(shard, &ids) {
        let reply = shard.call(target, Op::DescribeConsumerGroups(groups)).await;
        if let Reply::DescribedConsumerGroups(ds) = reply {
            for (i, d) in idx.into_iter().zip(ds) {
                out[at[i]] = d;
            }
        }
    }
    for d in &mut out {
        if ctx.version < 1 {
            for m in &mut d.members {
                m.member_type = -1;
            }
        }
        if r.include_authorized_operations && d.error_code == crate::common::errors::code::NONE {
            d.authorized_operations = super::authorized::of_group(ctx, shard, &d.group_id.0);
        }
    }
    ctx.respond(&ConsumerGroupDescribeResponse::default().with_groups(out))
}
