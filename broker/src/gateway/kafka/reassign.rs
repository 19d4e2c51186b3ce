//! AlterPartitionReassignments and ListPartitionReassignments: Kafka's way to move a
//! partition's replicas to other nodes or change its replication factor
//! (`kafka-reassign-partitions.sh`, `Admin.alterPartitionReassignments`). A request
//! records one controller command per partition and answers once each is committed; the
//! partition's leader carries the move out (`crate::cluster::reassign`).

use std::rc::Rc;

use bytes::Bytes;
use kafka_protocol::messages::alter_partition_reassignments_response::{
    ReassignablePartitionResponse, ReassignableTopicResponse,
};
use kafka_protocol::messages::list_partition_reassignments_response::{
    OngoingPartitionReassignment, OngoingTopicReassignment,
};
use kafka_protocol::messages::{
    AlterPartitionReassignmentsRequest, AlterPartitionReassignmentsResponse, BrokerId,
    ListPartitionReassignmentsRequest, ListPartitionReassignmentsResponse,
};
use kafka_protocol::protocol::StrBytes;

use super::{Ctx, FramingError};
use crate::cluster::metadata::{Command, MetaError};
use crate::common::errors::code;
use crate::security::acl::op;
use crate::shard::Shard;

/// AlterPartitionReassignments: starts (replicas given) or cancels (null) a move per
/// partition.
#[expect(
    clippy::too_many_lines,
    reason = "longer than 70 lines when the lint came in (issue 27): split it when it next changes"
)]
pub async fn alter(shard: &Rc<Shard>, ctx: &Ctx, body: Bytes) -> Result<Bytes, FramingError> {
    let req: AlterPartitionReassignmentsRequest = ctx.decode(body)?;
    if !ctx.allowed_on_cluster(shard, op::ALTER) {
        return ctx.respond(
            &AlterPartitionReassignmentsResponse::default()
                .with_error_code(code::CLUSTER_AUTHORIZATION_FAILED)
                .with_allow_replication_factor_change(req.allow_replication_factor_change),
        );
    }
    let topics = req.topics.iter().map(|t| t.name.0.as_str());
    let meta = super::topics::metadata_naming(shard, topics).await;
    // Per partition: its slot in the response and the command, or the refusal.
    let mut slots: Vec<(usize, usize, Result<Command, MetaError>)> = Vec::new();
    let mut responses = Vec::with_capacity(req.topics.len());
    for (ti, t) in req.topics.iter().enumerate() {
        let name = t.name.0.to_string();
        let mut partitions = Vec::with_capacity(t.partitions.len());
        for (pi, p) in t.partitions.iter().enumerate() {
            partitions.push(
                ReassignablePartitionResponse::default().with_partition_index(p.partition_index),
            );
            let target: Option<Vec<i32>> =
                p.replicas.as_ref().map(|r| r.iter().map(|b| b.0).collect());
            let rf_changes = match (&target, meta.topics.get(&name)) {
                (Some(target), Some(topic)) => {
                    let from = topic
                        .moving
                        .get(&p.partition_index)
                        .map_or(topic.replicas_of(p.partition_index), |m| &m.from);
                    !from.is_empty() && from.len() != target.len()
                }
                _ => false,
            };
            let cmd = if rf_changes && !req.allow_replication_factor_change {
                Err(MetaError::InvalidAssignment(
                    "the replication factor would change and the request does not allow it".into(),
                ))
            } else {
                Ok(Command::ReassignPartition {
                    name: name.clone(),
                    partition: p.partition_index,
                    target,
                })
            };
            slots.push((ti, pi, cmd));
        }
        responses.push(
            ReassignableTopicResponse::default()
                .with_name(t.name.clone())
                .with_partitions(partitions),
        );
    }
    let cmds: Vec<Command> = slots
        .iter()
        .filter_map(|(_, _, c)| c.as_ref().ok().cloned())
        .collect();
    let mut outcomes = if cmds.is_empty() {
        Vec::new()
    } else {
        super::topics::commit(shard, cmds).await
    }
    .into_iter();
    for (ti, pi, cmd) in slots {
        let outcome = match cmd {
            Ok(_) => outcomes
                .next()
                .unwrap_or_else(|| Err(MetaError::Internal("no outcome".into()))),
            Err(e) => Err(e),
        };
        if let Err(e) = outcome {
            let r = &mut responses[ti].partitions[pi];
            r.error_code = e.kafka_code();
            r.error_message = Some(StrBytes::from_string(e.to_string()));
        }
    }
    ctx.respond(
        &AlterPartitionReassignmentsResponse::default()
            .with_allow_replication_factor_change(req.allow_replication_factor_change)
            .with_responses(responses),
    )
}

/// ListPartitionReassignments: the moves in progress, of every topic or of those asked
/// (unknown topics and partitions, or ones not moving, are left out, as Kafka does).
pub async fn list(shard: &Rc<Shard>, ctx: &Ctx, body: Bytes) -> Result<Bytes, FramingError> {
    let req: ListPartitionReassignmentsRequest = ctx.decode(body)?;
    if !ctx.allowed_on_cluster(shard, op::DESCRIBE) {
        return ctx.respond(
            &ListPartitionReassignmentsResponse::default()
                .with_error_code(code::CLUSTER_AUTHORIZATION_FAILED),
        );
    }
    let meta = shard.metadata();
    let ids = |v: &[i32]| v.iter().map(|&n| BrokerId(n)).collect::<Vec<_>>();
    let ongoing = |name: &str, filter: Option<&[i32]>| {
        let t = meta.topics.get(name)?;
        let partitions: Vec<OngoingPartitionReassignment> = t
            .moving
            .iter()
            .filter(|(p, _)| filter.is_none_or(|f| f.contains(p)))
            .map(|(&p, m)| {
                let adding: Vec<i32> = m
                    .target
                    .iter()
                    .copied()
                    .filter(|n| !m.from.contains(n))
                    .collect();
                let removing: Vec<i32> = t
                    .replicas_of(p)
                    .iter()
                    .copied()
                    .filter(|n| !m.target.contains(n))
                    .collect();
                OngoingPartitionReassignment::default()
                    .with_partition_index(p)
                    .with_replicas(ids(t.replicas_of(p)))
                    .with_adding_replicas(ids(&adding))
                    .with_removing_replicas(ids(&removing))
            })
            .collect();
        (!partitions.is_empty()).then(|| {
            OngoingTopicReassignment::default()
                .with_name(StrBytes::from_string(name.to_string()).into())
                .with_partitions(partitions)
        })
    };
    let topics: Vec<OngoingTopicReassignment> = match &req.topics {
        None => meta
            .topics
            .keys()
            .filter_map(|name| ongoing(name, None))
            .collect(),
        Some(asked) => asked
            .iter()
            .filter_map(|t| ongoing(t.name.0.as_str(), Some(&t.partition_indexes)))
            .collect(),
    };
    ctx.respond(&ListPartitionReassignmentsResponse::default().with_topics(topics))
}
