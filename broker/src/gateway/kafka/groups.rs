//! Group APIs: FindCoordinator, JoinGroup, SyncGroup, Heartbeat, LeaveGroup, OffsetCommit,
//! OffsetFetch, OffsetDelete, ListGroups, DescribeGroups, DeleteGroups. Requests for one
//! group run on its coordinator shard (the raw request is forwarded there); requests over
//! several groups are split per coordinator shard and merged.

use std::collections::BTreeMap;
use std::rc::Rc;

use bytes::Bytes;
use futures::future::LocalBoxFuture;
use kafka_protocol::messages::describe_groups_response::DescribedGroup;
use kafka_protocol::messages::find_coordinator_response::Coordinator;
use kafka_protocol::messages::join_group_response::JoinGroupResponseMember;
use kafka_protocol::messages::leave_group_response::MemberResponse;
use kafka_protocol::messages::list_groups_response::ListedGroup;
use kafka_protocol::messages::offset_commit_response::{
    OffsetCommitResponsePartition, OffsetCommitResponseTopic,
};
use kafka_protocol::messages::offset_delete_response::{
    OffsetDeleteResponsePartition, OffsetDeleteResponseTopic,
};
use kafka_protocol::messages::offset_fetch_response::{
    OffsetFetchResponseGroup, OffsetFetchResponsePartition, OffsetFetchResponsePartitions,
    OffsetFetchResponseTopic, OffsetFetchResponseTopics,
};
use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;

use super::{Ctx, FramingError};
use crate::cluster::ClusterHost;
use crate::group::coordinator::{self, code, JoinRequest};
use crate::group::state::Committed;
use crate::group::{partition_for, OFFSETS_TOPIC};
use crate::security::acl::{op as acl_op, resource};
use crate::shard::groups::s;
use crate::shard::ops::{GroupRequest, Op, Reply};
use crate::shard::Shard;

/// The shard coordinating `group`, if the offsets topic exists.
pub fn coordinator_shard(shard: &Shard, group: &str) -> Option<usize> {
    shard.coordinator_shard(OFFSETS_TOPIC, group)
}

/// The authorization error of a single-group request, if its principal may not make it:
/// TxnOffsetCommit needs WRITE on its transactional id, OffsetDelete DELETE on the group,
/// the others READ on it.
fn group_refusal(
    shard: &Shard,
    ctx: &Ctx,
    group: &str,
    body: &Bytes,
) -> Result<Option<i16>, FramingError> {
    if ctx.key == ApiKey::TxnOffsetCommit {
        let r: TxnOffsetCommitRequest = ctx.decode(body.clone())?;
        if !ctx.allowed(
            shard,
            acl_op::WRITE,
            resource::TRANSACTIONAL_ID,
            &r.transactional_id.0,
        ) {
            return Ok(Some(code::TRANSACTIONAL_ID_AUTHORIZATION_FAILED));
        }
    }
    let operation = if ctx.key == ApiKey::OffsetDelete {
        acl_op::DELETE
    } else {
        acl_op::READ
    };
    if !ctx.allowed(shard, operation, resource::GROUP, group) {
        return Ok(Some(code::GROUP_AUTHORIZATION_FAILED));
    }
    if ctx.key == ApiKey::ConsumerGroupHeartbeat
        && super::consumer_groups::subscribes_undescribable(shard, ctx, body)?
    {
        return Ok(Some(code::TOPIC_AUTHORIZATION_FAILED));
    }
    if ctx.key == ApiKey::ShareGroupHeartbeat
        && super::share_groups::subscribes_undescribable(shard, ctx, body)?
    {
        return Ok(Some(code::TOPIC_AUTHORIZATION_FAILED));
    }
    Ok(None)
}

/// The groups of `all` that `allowed` lets through, and the index in `all` of each.
pub(super) fn permitted(
    all: &[String],
    mut allowed: impl FnMut(&String) -> bool,
) -> (Vec<String>, Vec<usize>) {
    all.iter()
        .enumerate()
        .filter(|(_, g)| allowed(g))
        .map(|(i, g)| (g.clone(), i))
        .unzip()
}

/// Per topic of a request: whether `ctx` may READ it.
pub fn readable<'a>(shard: &Shard, ctx: &Ctx, topics: impl Iterator<Item = &'a str>) -> Vec<bool> {
    topics
        .map(|t| ctx.allowed(shard, acl_op::READ, resource::TOPIC, t))
        .collect()
}

/// The codes of a request's partitions (`partitions[t]` of topic t) from `codes` of the
/// readable topics' partitions, in order; the others' are TOPIC_AUTHORIZATION_FAILED.
pub fn with_denied(readable: &[bool], partitions: &[usize], codes: Vec<i16>) -> Vec<i16> {
    let mut codes = codes.into_iter();
    readable
        .iter()
        .zip(partitions)
        .flat_map(|(&ok, &n)| std::iter::repeat_n(ok, n))
        .map(|ok| match ok {
            true => codes.next().unwrap_or(code::UNKNOWN_SERVER_ERROR),
            false => code::TOPIC_AUTHORIZATION_FAILED,
        })
        .collect()
}

/// The authorization error of a FindCoordinator key its principal may not describe: a
/// group (key type 0) or a transactional id (1).
fn coordinator_denied(shard: &Shard, ctx: &Ctx, key_type: i8, key: &str) -> Option<i16> {
    let (resource_type, denied) = if key_type == 1 {
        (
            resource::TRANSACTIONAL_ID,
            code::TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
        )
    } else {
        (resource::GROUP, code::GROUP_AUTHORIZATION_FAILED)
    };
    (!ctx.allowed(shard, acl_op::DESCRIBE, resource_type, key)).then_some(denied)
}

/// Runs a single-group request on its coordinator shard.
pub async fn route(
    shard: &Rc<Shard>,
    ctx: &Ctx,
    group: &str,
    body: Bytes,
) -> Result<Bytes, FramingError> {
    if let Some(error) = group_refusal(shard, ctx, group, &body)? {
        return refused(ctx, body, error);
    }
    let Some(target) = coordinator_shard(shard, group) else {
        return Err(FramingError::Malformed(
            "group request before the offsets topic exists".into(),
        ));
    };
    let op = Op::Group(GroupRequest {
        key: ctx.key as i16,
        version: ctx.version,
        correlation_id: ctx.correlation_id,
        client_id: ctx.client_id.clone(),
        client_host: ctx.client_host.clone(),
        principal: ctx.principal.to_string(),
        listener: ctx.listener.0,
        body,
    });
    match shard.call(target, op).await {
        Reply::Encoded(Ok(b)) => Ok(b),
        Reply::Encoded(Err(e)) => Err(FramingError::Malformed(e)),
        _ => Err(FramingError::Malformed(
            "coordinator shard unavailable".into(),
        )),
    }
}

/// Runs a single-group request, or a transaction coordinator's request, that reached its
/// coordinator shard (installed in every [`Shard`] at start-up as its group request
/// handler).
pub fn on_coordinator(
    shard: &Rc<Shard>,
    req: GroupRequest,
) -> LocalBoxFuture<'_, Result<Bytes, String>> {
    Box::pin(async move {
        let key = ApiKey::try_from(req.key).map_err(|_| "unknown api key".to_string())?;
        let ctx = Ctx {
            key,
            version: req.version,
            correlation_id: req.correlation_id,
            client_id: req.client_id,
            client_host: req.client_host,
            // The connection's shard authorized the group (or transactional id); topics
            // are authorized here, where the request's partitions are.
            listener: super::Listener(req.listener),
            principal: req.principal.into(),
            muted_until: Rc::default(),
            throttle_ms: 0,
            conn_id: 0,
            received: None,
        };
        if super::txn::is_coordinator_api(key) {
            return super::txn::on_coordinator(shard, &ctx, req.body)
                .await
                .map_err(|e| e.to_string());
        }
        let group = group_of(&ctx, &req.body).map_err(|e| e.to_string())?;
        shard.wait_loaded(OFFSETS_TOPIC, &group).await;
        execute(shard, &ctx, &group, req.body)
            .await
            .map_err(|e| e.to_string())
    })
}

/// The group id of a single-group request (decoded on the connection's shard).
pub fn group_of(ctx: &Ctx, body: &Bytes) -> Result<String, FramingError> {
    let b = body.clone();
    Ok(match ctx.key {
        ApiKey::JoinGroup => ctx.decode::<JoinGroupRequest>(b)?.group_id.0.to_string(),
        ApiKey::SyncGroup => ctx.decode::<SyncGroupRequest>(b)?.group_id.0.to_string(),
        ApiKey::Heartbeat => ctx.decode::<HeartbeatRequest>(b)?.group_id.0.to_string(),
        ApiKey::LeaveGroup => ctx.decode::<LeaveGroupRequest>(b)?.group_id.0.to_string(),
        ApiKey::ConsumerGroupHeartbeat => ctx
            .decode::<ConsumerGroupHeartbeatRequest>(b)?
            .group_id
            .0
            .to_string(),
        ApiKey::ShareGroupHeartbeat => ctx
            .decode::<ShareGroupHeartbeatRequest>(b)?
            .group_id
            .0
            .to_string(),
        ApiKey::OffsetCommit => ctx.decode::<OffsetCommitRequest>(b)?.group_id.0.to_string(),
        ApiKey::OffsetDelete => ctx.decode::<OffsetDeleteRequest>(b)?.group_id.0.to_string(),
        ApiKey::TxnOffsetCommit => ctx
            .decode::<TxnOffsetCommitRequest>(b)?
            .group_id
            .0
            .to_string(),
        _ => return Err(FramingError::UnsupportedApi(ctx.key as i16)),
    })
}

/// Executes a single-group request on this (coordinator) shard; refused with
/// NOT_COORDINATOR / COORDINATOR_LOAD_IN_PROGRESS when this node does not coordinate the
/// group now (see `Shard::coordinator_check`). `group` is the request's, read by `group_of`.
pub async fn execute(
    shard: &Rc<Shard>,
    ctx: &Ctx,
    group: &str,
    body: Bytes,
) -> Result<Bytes, FramingError> {
    if let Err(error) = shard.coordinator_check(group) {
        return refused(ctx, body, error);
    }
    // A share group takes no classic or consumer-group request and commits no offsets
    // (Kafka: "Group {id} is not a classic/consumer group").
    if ctx.key != ApiKey::ShareGroupHeartbeat && shard.share_groups.borrow().contains_key(group) {
        return refused(ctx, body, code::GROUP_ID_NOT_FOUND);
    }
    match ctx.key {
        ApiKey::JoinGroup => join(shard, ctx, body).await,
        ApiKey::SyncGroup => {
            let r: SyncGroupRequest = ctx.decode(body)?;
            let assignments = r
                .assignments
                .iter()
                .map(|a| (a.member_id.to_string(), a.assignment.clone()))
                .collect();
            let (code, assignment) = coordinator::group_sync(
                shard,
                &r.group_id.0,
                (&r.member_id, r.group_instance_id.as_deref()),
                r.generation_id,
                assignments,
            )
            .await;
            let resp = SyncGroupResponse::default()
                .with_error_code(code)
                .with_assignment(assignment)
                .with_protocol_type(r.protocol_type.clone())
                .with_protocol_name(r.protocol_name.clone());
            ctx.respond(&resp)
        }
        ApiKey::Heartbeat => {
            let r: HeartbeatRequest = ctx.decode(body)?;
            let code = coordinator::group_heartbeat(
                shard,
                &r.group_id.0,
                (&r.member_id, r.group_instance_id.as_deref()),
                r.generation_id,
            );
            ctx.respond(&HeartbeatResponse::default().with_error_code(code))
        }
        ApiKey::LeaveGroup => leave(shard, ctx, body).await,
        ApiKey::ConsumerGroupHeartbeat => super::consumer_groups::heartbeat(shard, ctx, body).await,
        ApiKey::ShareGroupHeartbeat => super::share_groups::heartbeat(shard, ctx, body).await,
        ApiKey::OffsetCommit => commit(shard, ctx, body).await,
        ApiKey::OffsetDelete => offset_delete(shard, ctx, body).await,
        ApiKey::TxnOffsetCommit => super::txn::offset_commit(shard, ctx, body).await,
        _ => Err(FramingError::UnsupportedApi(ctx.key as i16)),
    }
}

/// The answer to a single-group request this node does not coordinate now: `error` as
/// Kafka puts it in each API's response (a JoinGroup keeps the caller's member id and no
/// generation; an OffsetCommit answers it for every partition).
fn refused(ctx: &Ctx, body: Bytes, error: i16) -> Result<Bytes, FramingError> {
    match ctx.key {
        ApiKey::JoinGroup => {
            let r: JoinGroupRequest = ctx.decode(body)?;
            let resp = JoinGroupResponse::default()
                .with_error_code(error)
                .with_generation_id(-1)
                .with_protocol_name(if ctx.version >= 7 { None } else { Some(s("")) })
                .with_member_id(r.member_id);
            ctx.respond(&resp)
        }
        ApiKey::SyncGroup => ctx.respond(&SyncGroupResponse::default().with_error_code(error)),
        ApiKey::Heartbeat => ctx.respond(&HeartbeatResponse::default().with_error_code(error)),
        ApiKey::LeaveGroup => ctx.respond(&LeaveGroupResponse::default().with_error_code(error)),
        ApiKey::ConsumerGroupHeartbeat => super::consumer_groups::refused(ctx, error),
        ApiKey::ShareGroupHeartbeat => super::share_groups::refused(ctx, error),
        ApiKey::OffsetDelete => {
            ctx.respond(&OffsetDeleteResponse::default().with_error_code(error))
        }
        ApiKey::OffsetCommit => {
            let r: OffsetCommitRequest = ctx.decode(body)?;
            ctx.respond(&commit_answer(&r, std::iter::repeat(error)))
        }
        ApiKey::TxnOffsetCommit => super::txn::offset_commit_refused(ctx, body, error),
        _ => Err(FramingError::UnsupportedApi(ctx.key as i16)),
    }
}

/// The OffsetCommit response echoing the request's partitions with `codes`, in order.
fn commit_answer(
    r: &OffsetCommitRequest,
    mut codes: impl Iterator<Item = i16>,
) -> OffsetCommitResponse {
    let topics = r
        .topics
        .iter()
        .map(|t| {
            let parts = t
                .partitions
                .iter()
                .map(|p| {
                    OffsetCommitResponsePartition::default()
                        .with_partition_index(p.partition_index)
                        .with_error_code(codes.next().unwrap_or(code::UNKNOWN_MEMBER_ID))
                })
                .collect();
            OffsetCommitResponseTopic::default()
                .with_name(t.name.clone())
                .with_partitions(parts)
        })
        .collect();
    OffsetCommitResponse::default().with_topics(topics)
}

async fn join(shard: &Rc<Shard>, ctx: &Ctx, body: Bytes) -> Result<Bytes, FramingError> {
    let r: JoinGroupRequest = ctx.decode(body)?;
    let req = JoinRequest {
        group: r.group_id.0.to_string(),
        member_id: r.member_id.to_string(),
        instance_id: r.group_instance_id.as_ref().map(|i| i.to_string()),
        client_id: ctx.client_id.clone(),
        client_host: ctx.client_host.clone(),
        session_timeout_ms: r.session_timeout_ms,
        // v0 has no rebalance timeout: Kafka uses the session timeout.
        rebalance_timeout_ms: if ctx.version == 0 {
            r.session_timeout_ms
        } else {
            r.rebalance_timeout_ms
        },
        protocol_type: r.protocol_type.to_string(),
        protocols: r
            .protocols
            .iter()
            .map(|p| (p.name.to_string(), p.metadata.clone()))
            .collect(),
        version: ctx.version,
    };
    let o = coordinator::group_join(shard, req).await;
    let members = o
        .members
        .into_iter()
        .map(|(id, inst, meta)| {
            JoinGroupResponseMember::default()
                .with_member_id(s(id))
                .with_group_instance_id(if ctx.version >= 5 { inst.map(s) } else { None })
                .with_metadata(meta)
        })
        .collect();
    let resp = JoinGroupResponse::default()
        .with_error_code(o.error)
        .with_generation_id(o.generation)
        .with_protocol_type(if ctx.version >= 7 {
            o.protocol_type.map(s)
        } else {
            None
        })
        .with_protocol_name(Some(s(o.protocol.unwrap_or_default())))
        .with_leader(s(o.leader))
        .with_member_id(s(o.member_id))
        .with_members(members);
    ctx.respond(&resp)
}

async fn leave(shard: &Rc<Shard>, ctx: &Ctx, body: Bytes) -> Result<Bytes, FramingError> {
    let r: LeaveGroupRequest = ctx.decode(body)?;
    let members: Vec<(String, Option<String>)> = if ctx.version >= 3 {
        r.members
            .iter()
            .map(|m| {
                (
                    m.member_id.to_string(),
                    m.group_instance_id.as_ref().map(|i| i.to_string()),
                )
            })
            .collect()
    } else {
        vec![(r.member_id.to_string(), None)]
    };
    let codes = coordinator::group_leave(shard, &r.group_id.0, &members).await;
    let mut resp = LeaveGroupResponse::default();
    if ctx.version >= 3 {
        resp = resp.with_members(
            members
                .iter()
                .zip(&codes)
                .map(|((id, inst), c)| {
                    MemberResponse::default()
                        .with_member_id(s(id.clone()))
                        .with_group_instance_id(inst.clone().map(s))
                        .with_error_code(*c)
                })
                .collect(),
        );
    } else {
        resp = resp.with_error_code(codes.first().copied().unwrap_or(code::UNKNOWN_MEMBER_ID));
    }
    ctx.respond(&resp)
}

async fn commit(shard: &Rc<Shard>, ctx: &Ctx, body: Bytes) -> Result<Bytes, FramingError> {
    let r: OffsetCommitRequest = ctx.decode(body)?;
    let ok = readable(shard, ctx, r.topics.iter().map(|t| t.name.0.as_str()));
    let counts: Vec<usize> = r.topics.iter().map(|t| t.partitions.len()).collect();
    let offsets: Vec<(String, i32, Committed)> = r
        .topics
        .iter()
        .zip(&ok)
        .filter(|(_, ok)| **ok)
        .map(|(t, _)| t)
        .flat_map(|t| {
            t.partitions.iter().map(|p| {
                let c = Committed {
                    offset: p.committed_offset,
                    leader_epoch: p.committed_leader_epoch,
                    metadata: p
                        .committed_metadata
                        .as_ref()
                        .map(|m| m.to_string())
                        .unwrap_or_default(),
                    commit_timestamp_ms: crate::common::clock::wall_ms(),
                };
                (t.name.0.to_string(), p.partition_index, c)
            })
        })
        .collect();
    let codes = coordinator::offset_commit(
        shard,
        &r.group_id.0,
        (&r.member_id, r.group_instance_id.as_deref()),
        (r.generation_id_or_member_epoch, ctx.version),
        offsets,
    )
    .await;
    let codes = with_denied(&ok, &counts, codes);
    ctx.respond(&commit_answer(&r, codes.into_iter()))
}

async fn offset_delete(shard: &Rc<Shard>, ctx: &Ctx, body: Bytes) -> Result<Bytes, FramingError> {
    let r: OffsetDeleteRequest = ctx.decode(body)?;
    let ok = readable(shard, ctx, r.topics.iter().map(|t| t.name.0.as_str()));
    let counts: Vec<usize> = r.topics.iter().map(|t| t.partitions.len()).collect();
    let parts: Vec<(String, i32)> = r
        .topics
        .iter()
        .zip(&ok)
        .filter(|(_, ok)| **ok)
        .flat_map(|(t, _)| {
            t.partitions
                .iter()
                .map(|p| (t.name.0.to_string(), p.partition_index))
        })
        .collect();
    let resp = match coordinator::offset_delete(shard, &r.group_id.0, parts).await {
        Err(c) => OffsetDeleteResponse::default().with_error_code(c),
        Ok(codes) => {
            let mut codes = with_denied(&ok, &counts, codes).into_iter();
            let topics = r
                .topics
                .iter()
                .map(|t| {
                    let ps = t
                        .partitions
                        .iter()
                        .map(|p| {
                            OffsetDeleteResponsePartition::default()
                                .with_partition_index(p.partition_index)
                                .with_error_code(codes.next().unwrap_or(0))
                        })
                        .collect();
                    OffsetDeleteResponseTopic::default()
                        .with_name(t.name.clone())
                        .with_partitions(ps)
                })
                .collect();
            OffsetDeleteResponse::default().with_topics(topics)
        }
    };
    ctx.respond(&resp)
}

/// FindCoordinator: for a group (key type 0) the node leading its `__consumer_offsets`
/// partition, for a transactional id (key type 1) the node leading its
/// `__transaction_state` partition; that topic is created by the first such lookup, as
/// Kafka does. Any other key type is INVALID_REQUEST.
pub async fn find_coordinator(
    shard: &Rc<Shard>,
    ctx: &Ctx,
    body: Bytes,
) -> Result<Bytes, FramingError> {
    let r: FindCoordinatorRequest = ctx.decode(body)?;
    let topic = match r.key_type {
        0 => Some(OFFSETS_TOPIC),
        1 => Some(crate::txn::coordinator::TXN_STATE_TOPIC),
        _ => None,
    };
    if r.key_type == 1 {
        super::txn::ensure_txn_topic(shard).await;
    }
    let c = &shard.config;
    let meta = shard.metadata();
    let ready = topic.is_some_and(|t| meta.topics.contains_key(t));
    // Cluster mode: the coordinator is the node leading the key's partition.
    let leader_of = |key: &StrBytes| -> Option<(i32, String, i32)> {
        let t = meta.topics.get(topic?)?;
        let p = partition_for(key.as_str(), t.shards.len());
        let (leader, _) = shard.leader_of_group(t.group_of(p));
        let (host, port) = meta
            .nodes
            .get(&leader)?
            .endpoint(ctx.listener_name(shard))?;
        Some((leader, host, i32::from(port)))
    };
    let answer = |key: StrBytes| {
        let clustered = shard.clustered().then(|| leader_of(&key));
        let base = Coordinator::default().with_key(key.clone());
        let denied = topic.and_then(|_| coordinator_denied(shard, ctx, r.key_type, &key));
        let none = base
            .clone()
            .with_node_id(BrokerId(-1))
            .with_host(s(""))
            .with_port(-1);
        if let Some(denied_code) = denied {
            none.with_error_code(denied_code)
        } else if topic.is_none() {
            none.with_error_code(code::INVALID_REQUEST)
                .with_error_message(Some(s(format!("unknown key type {}", r.key_type))))
        } else if !ready || clustered.as_ref().is_some_and(Option::is_none) {
            none.with_error_code(code::COORDINATOR_NOT_AVAILABLE)
        } else if let Some(Some((id, host, port))) = clustered {
            base.with_node_id(BrokerId(id))
                .with_host(s(host))
                .with_port(port)
        } else {
            let me = c.listeners.get(ctx.listener.0);
            base.with_node_id(BrokerId(c.node_id))
                .with_host(s(me.map_or_else(String::new, |l| l.advertised_host.clone())))
                .with_port(me.map_or(-1, |l| i32::from(l.advertised_port)))
        }
    };
    let resp = if ctx.version >= 4 {
        FindCoordinatorResponse::default()
            .with_coordinators(r.coordinator_keys.iter().cloned().map(answer).collect())
    } else {
        let a = answer(r.key.clone());
        FindCoordinatorResponse::default()
            .with_error_code(a.error_code)
            .with_error_message(if ctx.version >= 1 {
                a.error_message
            } else {
                None
            })
            .with_node_id(a.node_id)
            .with_host(a.host)
            .with_port(a.port)
    };
    ctx.respond(&resp)
}

/// Splits group ids by coordinator shard: (shard, groups, their indexes in the request).
pub(super) fn by_shard(
    shard: &Shard,
    groups: &[String],
) -> BTreeMap<usize, (Vec<String>, Vec<usize>)> {
    let mut out: BTreeMap<usize, (Vec<String>, Vec<usize>)> = BTreeMap::new();
    for (i, g) in groups.iter().enumerate() {
        if let Some(t) = coordinator_shard(shard, g) {
            let e = out.entry(t).or_default();
            e.0.push(g.clone());
            e.1.push(i);
        }
    }
    out
}

/// DescribeGroups.
pub async fn describe(shard: &Rc<Shard>, ctx: &Ctx, body: Bytes) -> Result<Bytes, FramingError> {
    let r: DescribeGroupsRequest = ctx.decode(body)?;
    let all: Vec<String> = r.groups.iter().map(|g| g.0.to_string()).collect();
    let allowed = |g: &String| ctx.allowed(shard, acl_op::DESCRIBE, resource::GROUP, g);
    let mut out: Vec<DescribedGroup> = all
        .iter()
        .map(|g| {
            DescribedGroup::default()
                .with_group_id(GroupId(s(g.clone())))
                .with_error_code(if allowed(g) {
                    code::COORDINATOR_NOT_AVAILABLE
                } else {
                    code::GROUP_AUTHORIZATION_FAILED
                })
        })
        .collect();
    // The groups it may describe, by their index in `all` (`by_shard` indexes `ids`).
    let (ids, at) = permitted(&all, allowed);
    for (target, (groups, idx)) in by_shard(shard, &ids) {
        let idx: Vec<usize> = idx.into_iter().map(|i| at[i]).collect();
        if let Reply::Described(mut ds) = shard.call(target, Op::DescribeGroups(groups)).await {
            if ctx.version < 4 {
                for m in ds.iter_mut().flat_map(|d| d.members.iter_mut()) {
                    m.group_instance_id = None;
                }
            }
            for (i, d) in idx.into_iter().zip(ds) {
                out[i] = d;
            }
        }
    }
    if r.include_authorized_operations {
        for d in out.iter_mut().filter(|d| d.error_code == code::NONE) {
            d.authorized_operations = super::authorized::of_group(ctx, shard, &d.group_id.0);
        }
    }
    ctx.respond(&DescribeGroupsResponse::default().with_groups(out))
}

/// ListGroups over every shard (v4: state filter; v5: type filter, KIP-848).
pub async fn list(shard: &Rc<Shard>, ctx: &Ctx, body: Bytes) -> Result<Bytes, FramingError> {
    let with_state = ctx.version >= 4;
    let r: ListGroupsRequest = ctx.decode(body)?;
    let states: Vec<String> = r.states_filter.iter().map(|x| x.to_lowercase()).collect();
    let types: Vec<String> = r.types_filter.iter().map(|x| x.to_lowercase()).collect();
    let calls = (0..shard.count).map(|t| shard.call(t, Op::ListGroups));
    let mut groups = Vec::new();
    for reply in futures::future::join_all(calls).await {
        if let Reply::Listed(gs) = reply {
            groups.extend(gs.into_iter().filter(|g: &ListedGroup| {
                (states.is_empty() || states.contains(&g.group_state.to_lowercase()))
                    && (types.is_empty() || types.contains(&g.group_type.to_lowercase()))
            }));
        }
    }
    // DESCRIBE on the cluster lists every group; without it, the groups it may describe.
    if !ctx.allowed_on_cluster(shard, acl_op::DESCRIBE) {
        groups.retain(|g| ctx.allowed(shard, acl_op::DESCRIBE, resource::GROUP, &g.group_id.0));
    }
    if !with_state {
        let d = ListedGroup::default();
        for g in &mut groups {
            g.group_state = d.group_state.clone();
        }
    }
    ctx.respond(&ListGroupsResponse::default().with_groups(groups))
}

/// DeleteGroups.
pub async fn delete(shard: &Rc<Shard>, ctx: &Ctx, body: Bytes) -> Result<Bytes, FramingError> {
    let r: DeleteGroupsRequest = ctx.decode(body)?;
    let all: Vec<String> = r.groups_names.iter().map(|g| g.0.to_string()).collect();
    let allowed = |g: &String| ctx.allowed(shard, acl_op::DELETE, resource::GROUP, g);
    let mut codes: Vec<i16> = all
        .iter()
        .map(|g| match allowed(g) {
            true => code::COORDINATOR_NOT_AVAILABLE,
            false => code::GROUP_AUTHORIZATION_FAILED,
        })
        .collect();
    let (ids, at) = permitted(&all, allowed);
    for (target, (groups, idx)) in by_shard(shard, &ids) {
        if let Reply::Codes(cs) = shard.call(target, Op::DeleteGroups(groups)).await {
            for (i, c) in idx.into_iter().zip(cs) {
                codes[at[i]] = c;
            }
        }
    }
    let results = all
        .into_iter()
        .zip(codes)
        .map(|(g, c)| deletable(g, c))
        .collect();
    ctx.respond(&DeleteGroupsResponse::default().with_results(results))
}

fn deletable(g: String, c: i16) -> delete_groups_response::DeletableGroupResult {
    delete_groups_response::DeletableGroupResult::default()
        .with_group_id(GroupId(s(g)))
        .with_error_code(c)
}

pub use crate::group::coordinator::{GroupOffsets, OffsetFetchAsk, WantedOffsets};

/// OffsetFetch (one group before v8, several from v8).
#[expect(
    clippy::too_many_lines,
    reason = "longer than 70 lines when the lint came in (issue 27): split it when it next changes"
)]
pub async fn offset_fetch(
    shard: &Rc<Shard>,
    ctx: &Ctx,
    body: Bytes,
) -> Result<Bytes, FramingError> {
    let r: OffsetFetchRequest = ctx.decode(body)?;
    let wanted: Vec<OffsetFetchAsk> = if ctx.version >= 8 {
        r.groups
            .iter()
            .map(|g| {
                let ts = g.topics.as_ref().map(|ts| {
                    ts.iter()
                        .map(|t| (t.name.0.to_string(), t.partition_indexes.clone()))
                        .collect()
                });
                // v9: a member asking (Kafka checks it when either field is set).
                let member = (g.member_epoch != -1 || g.member_id.is_some()).then(|| {
                    let id = g
                        .member_id
                        .as_ref()
                        .map(|m| m.to_string())
                        .unwrap_or_default();
                    (id, g.member_epoch)
                });
                (g.group_id.0.to_string(), ts, member)
            })
            .collect()
    } else {
        let ts = r.topics.as_ref().map(|ts| {
            ts.iter()
                .map(|t| (t.name.0.to_string(), t.partition_indexes.clone()))
                .collect()
        });
        vec![(r.group_id.0.to_string(), ts, None)]
    };
    let ids: Vec<String> = wanted.iter().map(|(g, _, _)| g.clone()).collect();
    let group_ok: Vec<bool> = ids
        .iter()
        .map(|g| ctx.allowed(shard, acl_op::DESCRIBE, resource::GROUP, g))
        .collect();
    let mut answers: Vec<Result<GroupOffsets, i16>> = group_ok
        .iter()
        .map(|ok| match ok {
            true => Err(code::COORDINATOR_NOT_AVAILABLE),
            false => Err(code::GROUP_AUTHORIZATION_FAILED),
        })
        .collect();
    let mut ok = group_ok.iter();
    let (asked, at) = permitted(&ids, |_| ok.next().copied().unwrap_or(false));
    for (target, (_, idx)) in by_shard(shard, &asked) {
        let reqs = idx.iter().map(|&i| wanted[at[i]].clone()).collect();
        let op = Op::OffsetFetch(reqs, ctx.version >= 7 && r.require_stable);
        if let Reply::Offsets(os) = shard.call(target, op).await {
            for (i, o) in idx.into_iter().zip(os) {
                answers[at[i]] = o;
            }
        }
    }
    // Topics it may not describe: named ones answer TOPIC_AUTHORIZATION_FAILED, and when
    // every topic was asked for they are left out (as Kafka).
    for ((_, topics, _), answer) in wanted.iter().zip(answers.iter_mut()) {
        if let Ok(a) = answer {
            hide_undescribed(shard, ctx, a, topics.is_some());
        }
    }
    let committed = |c: &Option<Committed>| match c {
        Some(c) => (c.offset, c.leader_epoch, c.metadata.clone()),
        None => (-1, -1, String::new()),
    };
    let resp = if ctx.version >= 8 {
        let groups = ids
            .into_iter()
            .zip(answers)
            .map(|(g, a)| {
                let base = OffsetFetchResponseGroup::default().with_group_id(GroupId(s(g)));
                let a = match a {
                    Ok(a) => a,
                    Err(error) => return base.with_error_code(error),
                };
                base.with_topics(
                    a.into_iter()
                        .map(|(t, ps)| {
                            let parts = ps
                                .iter()
                                .map(|(p, c, error)| {
                                    let (o, e, m) = committed(c);
                                    OffsetFetchResponsePartitions::default()
                                        .with_partition_index(*p)
                                        .with_error_code(*error)
                                        .with_committed_offset(o)
                                        .with_committed_leader_epoch(e)
                                        .with_metadata(Some(s(m)))
                                })
                                .collect();
                            OffsetFetchResponseTopics::default()
                                .with_name(TopicName(s(t)))
                                .with_partitions(parts)
                        })
                        .collect(),
                )
            })
            .collect();
        OffsetFetchResponse::default().with_groups(groups)
    } else {
        let a = match answers.into_iter().next() {
            Some(Ok(a)) => a,
            Some(Err(error)) => return offset_fetch_refused(ctx, &r, error),
            None => return offset_fetch_refused(ctx, &r, code::COORDINATOR_NOT_AVAILABLE),
        };
        let topics = a
            .into_iter()
            .map(|(t, ps)| {
                let parts = ps
                    .iter()
                    .map(|(p, c, error)| {
                        let (o, e, m) = committed(c);
                        OffsetFetchResponsePartition::default()
                            .with_partition_index(*p)
                            .with_error_code(*error)
                            .with_committed_offset(o)
                            .with_committed_leader_epoch(if ctx.version >= 5 { e } else { -1 })
                            .with_metadata(Some(s(m)))
                    })
                    .collect();
                OffsetFetchResponseTopic::default()
                    .with_name(TopicName(s(t)))
                    .with_partitions(parts)
            })
            .collect();
        OffsetFetchResponse::default().with_topics(topics)
    };
    ctx.respond(&resp)
}

/// Applies topic DESCRIBE authorization to one group's OffsetFetch answer.
fn hide_undescribed(shard: &Shard, ctx: &Ctx, answer: &mut GroupOffsets, named: bool) {
    let described = |t: &str| ctx.allowed(shard, acl_op::DESCRIBE, resource::TOPIC, t);
    if named {
        for (_, parts) in answer.iter_mut().filter(|(t, _)| !described(t)) {
            for (_, committed, error) in parts.iter_mut() {
                *committed = None;
                *error = code::TOPIC_AUTHORIZATION_FAILED;
            }
        }
    } else {
        answer.retain(|(t, _)| described(t));
    }
}

/// OffsetFetch before v8 refused: the error at the top (v2+) and on every partition asked
/// for (v0 and v1 have only those).
fn offset_fetch_refused(
    ctx: &Ctx,
    r: &OffsetFetchRequest,
    error: i16,
) -> Result<Bytes, FramingError> {
    let topics = r
        .topics
        .iter()
        .flatten()
        .map(|t| {
            let parts = t
                .partition_indexes
                .iter()
                .map(|&p| {
                    OffsetFetchResponsePartition::default()
                        .with_partition_index(p)
                        .with_committed_offset(-1)
                        .with_error_code(error)
                })
                .collect();
            OffsetFetchResponseTopic::default()
                .with_name(t.name.clone())
                .with_partitions(parts)
        })
        .collect();
    let resp = OffsetFetchResponse::default().with_topics(topics);
    ctx.respond(&if ctx.version >= 2 {
        resp.with_error_code(error)
    } else {
        resp
    })
}
