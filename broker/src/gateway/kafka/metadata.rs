//! Metadata: brokers (fenced nodes left out, as Kafka leaves out a fenced broker), topics
//! and partitions with their leader, leader epoch, replicas and in-sync replicas (a single
//! node leads every partition; in a cluster each partition's Raft group leader as this node
//! last heard it), with auto-creation of unknown topics when enabled.

use std::collections::BTreeMap;
use std::rc::Rc;

use bytes::Bytes;
use kafka_protocol::messages::metadata_response::{
    MetadataResponseBroker, MetadataResponsePartition, MetadataResponseTopic,
};
use kafka_protocol::messages::{BrokerId, MetadataRequest, MetadataResponse, TopicName};
use kafka_protocol::protocol::StrBytes;

use super::{topics, Ctx, FramingError};
use crate::cluster::metadata::validate_topic_name;
use crate::cluster::ClusterHost;
use crate::common::errors::code;
use crate::security::acl::{op, resource};
use crate::shard::Shard;

/// Creates the topics in `names` that do not exist, when auto-creation is enabled.
pub async fn auto_create(shard: &Rc<Shard>, names: &[String]) {
    if !shard.config.auto_create_topics {
        return;
    }
    let meta = shard.metadata();
    let partitions = usize::try_from(shard.config.num_partitions).unwrap_or(1);
    let needed = topics::replicas_needed(shard, partitions, -1);
    let mut room = topics::replica_room(shard);
    let mut cmds = Vec::new();
    for n in names {
        if meta.topics.contains_key(n) || validate_topic_name(n).is_err() {
            continue;
        }
        // Over the partition limit the topic stays unknown (UNKNOWN_TOPIC_OR_PARTITION),
        // and the log says why.
        if let Some(why) = topics::over_limit(shard, needed, room) {
            tracing::warn!(topic = %n, "not auto-creating the topic: {why}");
            continue;
        }
        room -= needed;
        cmds.push(topics::create_command(
            shard,
            n,
            partitions,
            BTreeMap::new(),
            -1,
        ));
    }
    if !cmds.is_empty() {
        let names: Vec<(String, usize)> = cmds
            .iter()
            .filter_map(|c| match c {
                crate::cluster::metadata::Command::CreateTopic { name, .. } => {
                    Some((name.clone(), 1))
                }
                _ => None,
            })
            .collect();
        topics::commit(shard, cmds).await;
        topics::wait_for_leaders(shard, &names, AUTO_CREATE_LEADERS_WAIT).await;
    }
}

/// How long the Metadata request that auto-creates a topic waits for its partitions' first
/// leaders (`topics::wait_for_leaders`) before it answers.
const AUTO_CREATE_LEADERS_WAIT: std::time::Duration = std::time::Duration::from_secs(2);

/// Metadata.
pub async fn handle(shard: &Rc<Shard>, ctx: &Ctx, body: Bytes) -> Result<Bytes, FramingError> {
    let req: MetadataRequest = ctx.decode(body)?;
    let wanted: Option<Vec<String>> = req.topics.as_ref().map(|ts| {
        ts.iter()
            .filter_map(|t| t.name.as_ref().map(|n| n.0.as_str().to_string()))
            .collect()
    });
    if let Some(names) = &wanted {
        if req.allow_auto_topic_creation || ctx.version < 4 {
            let creatable: Vec<String> = names
                .iter()
                .filter(|n| described(shard, ctx, n) && topics::may_create(ctx, shard, n))
                .cloned()
                .collect();
            auto_create(shard, &creatable).await;
        }
    }
    let meta = shard.metadata();
    let include_ops = req.include_topic_authorized_operations;
    let topics = match &req.topics {
        // Topics by name or (v10+) by id, in the request's order.
        Some(ts) => ts
            .iter()
            .map(|t| match (&t.name, ctx.version >= 10) {
                (Some(n), _) => topic_metadata(shard, ctx, &meta, n.0.to_string(), include_ops),
                (None, true) => topic_by_id(shard, ctx, &meta, t.topic_id, include_ops),
                (None, false) => {
                    MetadataResponseTopic::default().with_error_code(code::INVALID_REQUEST)
                }
            })
            .collect(),
        // Every topic: those the principal may describe (Kafka leaves the others out).
        None => meta
            .topics
            .keys()
            .filter(|n| described(shard, ctx, n))
            .map(|n| topic_metadata(shard, ctx, &meta, n.clone(), include_ops))
            .collect(),
    };
    let listed = shard.brokers(ctx.listener_name(shard));
    let controller = shard.controller_id();
    let brokers = listed
        .into_iter()
        .map(|(id, host, port)| {
            MetadataResponseBroker::default()
                .with_node_id(BrokerId(id))
                .with_host(StrBytes::from_string(host))
                .with_port(i32::from(port))
        })
        .collect();
    let resp = MetadataResponse::default()
        .with_brokers(brokers)
        .with_cluster_id((ctx.version >= 2).then(|| StrBytes::from_string(meta.cluster_id.clone())))
        .with_controller_id(BrokerId(controller))
        .with_cluster_authorized_operations(if req.include_cluster_authorized_operations {
            super::authorized::cluster(ctx, shard)
        } else {
            i32::MIN
        })
        .with_topics(topics);
    ctx.respond(&resp)
}

/// A topic asked for by id (Metadata v10+, as librdkafka's KIP-848 consumer asks for the
/// topics of its assignment): its metadata, or UNKNOWN_TOPIC_ID with the id (also when the
/// principal may not describe it, so an id tells nothing of a hidden topic's name).
fn topic_by_id(
    shard: &Shard,
    ctx: &Ctx,
    meta: &crate::cluster::metadata::Metadata,
    id: uuid::Uuid,
    include_ops: bool,
) -> MetadataResponseTopic {
    match meta.topic_name_of(id.as_u128()) {
        Some(name) if described(shard, ctx, name) => {
            topic_metadata(shard, ctx, meta, name.to_string(), include_ops)
        }
        _ => MetadataResponseTopic::default()
            .with_topic_id(id)
            .with_error_code(code::UNKNOWN_TOPIC_ID),
    }
}

/// Whether the principal may describe the topic `name`.
fn described(shard: &Shard, ctx: &Ctx, name: &str) -> bool {
    ctx.allowed(shard, op::DESCRIBE, resource::TOPIC, name)
}

/// One topic's answer: not authorized (TOPIC_AUTHORIZATION_FAILED), unknown (UNKNOWN_TOPIC_OR_PARTITION, or INVALID_TOPIC_EXCEPTION for a
/// name Kafka would refuse) or its id and partitions.
fn topic_metadata(
    shard: &Shard,
    ctx: &Ctx,
    meta: &crate::cluster::metadata::Metadata,
    name: String,
    include_ops: bool,
) -> MetadataResponseTopic {
    let base = MetadataResponseTopic::default()
        .with_name(Some(TopicName(StrBytes::from_string(name.clone()))));
    if !described(shard, ctx, &name) {
        return base.with_error_code(code::TOPIC_AUTHORIZATION_FAILED);
    }
    match meta.topics.get(&name) {
        None => {
            let code = if validate_topic_name(&name).is_ok() {
                code::UNKNOWN_TOPIC_OR_PARTITION
            } else {
                code::INVALID_TOPIC_EXCEPTION
            };
            base.with_error_code(code)
        }
        Some(t) => base
            .with_topic_authorized_operations(if include_ops {
                super::authorized::of(ctx, shard, super::authorized::TOPIC, resource::TOPIC, &name)
            } else {
                i32::MIN
            })
            .with_is_internal(
                name == crate::group::OFFSETS_TOPIC
                    || name == crate::txn::coordinator::TXN_STATE_TOPIC
                    || name == crate::common::config::SHARE_STATE_TOPIC,
            )
            .with_topic_id(if ctx.version >= 10 {
                uuid::Uuid::from_u128(t.id)
            } else {
                uuid::Uuid::nil()
            })
            .with_partitions(
                (0..t.shards.len() as i32)
                    .map(|p| partition_metadata(shard, ctx, t, p))
                    .collect(),
            ),
    }
}

/// One partition's leader, epoch and replicas: this node without replication; the Raft
/// group's leader and term (as this node last heard) with it. An unknown leader is
/// LEADER_NOT_AVAILABLE (5), which clients retry, with the stand-in of
/// `cluster::stand_in_leader` (or -1) as the leader.
fn partition_metadata(
    shard: &Shard,
    ctx: &Ctx,
    t: &crate::cluster::metadata::Topic,
    p: i32,
) -> MetadataResponsePartition {
    let base = MetadataResponsePartition::default().with_partition_index(p);
    if !shard.clustered() {
        let node = shard.config.node_id;
        return base
            .with_leader_id(BrokerId(node))
            .with_leader_epoch(if ctx.version >= 7 { 0 } else { -1 })
            .with_replica_nodes(vec![BrokerId(node)])
            .with_isr_nodes(vec![BrokerId(node)]);
    }
    let group = t.group_of(p);
    let (known, epoch) = shard.leader_of_group(group);
    let leader = if known >= 0 {
        known
    } else {
        // Rare (no leader known): the listed brokers are worked out for this partition.
        let listed: Vec<i32> = shard
            .brokers(ctx.listener_name(shard))
            .into_iter()
            .map(|(id, _, _)| id)
            .collect();
        shard
            .stand_in_for(group, t.replicas_of(p), &listed, stand_in_seed())
            .unwrap_or(-1)
    };
    let isr = shard.in_sync_replicas(group, epoch, t.replicas_of(p));
    let base = base
        .with_leader_id(BrokerId(leader))
        .with_leader_epoch(if ctx.version >= 7 { epoch } else { -1 })
        .with_replica_nodes(t.replicas_of(p).iter().map(|&n| BrokerId(n)).collect())
        .with_isr_nodes(isr.into_iter().map(BrokerId).collect());
    if known >= 0 {
        base
    } else {
        base.with_error_code(code::LEADER_NOT_AVAILABLE)
    }
}

/// Varies the stand-in leader between answers, so that a client whose stand-in is cut off
/// too is sent elsewhere next time.
fn stand_in_seed() -> usize {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos() as usize)
}

/// KIP-951: the leader (id, epoch) to name in a partition's answer carrying `error_code`:
/// only for NOT_LEADER_OR_FOLLOWER, when this node knows a leader other than itself, so
/// that the client sends there at once instead of asking Metadata first. The leader is
/// added to `leaders`, whose endpoints (`endpoints_of`) the response then carries.
pub fn leader_hint(
    shard: &Shard,
    topic: &str,
    partition: i32,
    error_code: i16,
    leaders: &mut std::collections::BTreeSet<i32>,
) -> Option<(i32, i32)> {
    if error_code != code::NOT_LEADER_OR_FOLLOWER || !shard.clustered() {
        return None;
    }
    let meta = shard.metadata();
    let t = meta.topics.get(topic)?;
    if usize::try_from(partition).ok()? >= t.shards.len() {
        return None;
    }
    let (leader, epoch) = shard.leader_of_group(t.group_of(partition));
    if leader < 0 || leader == shard.config.node_id {
        return None;
    }
    leaders.insert(leader);
    Some((leader, epoch))
}

/// KIP-951's NodeEndpoints: the addresses of `nodes` on this connection's listener, as
/// Metadata would list them.
pub fn endpoints_of(
    shard: &Shard,
    ctx: &Ctx,
    nodes: &std::collections::BTreeSet<i32>,
) -> Vec<(i32, String, u16)> {
    if nodes.is_empty() {
        return Vec::new();
    }
    shard
        .brokers(ctx.listener_name(shard))
        .into_iter()
        .filter(|(id, _, _)| nodes.contains(id))
        .collect()
}
