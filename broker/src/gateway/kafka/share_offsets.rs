//! DescribeShareGroupOffsets (KIP-932; `Admin.listShareGroupOffsets`,
//! `kafka-share-groups.sh --describe --offsets`): each share partition's start offset, read
//! from its persisted state wherever that is kept (this node, or the node leading its
//! `__share_group_state` partition).
//!
//! Invariant: a group is answered only when its coordinator knows it as a share group, or
//! when a partition asked has a persisted state (a group deleted while a partition kept a
//! state another node could not forget yet); otherwise the ShareGroupDescribe
//! answer's error (GROUP_ID_NOT_FOUND). A partition whose share partition has
//! no state yet has start offset -1, as in Kafka; without topics the partitions of every
//! topic the group's members subscribe to and of every topic whose share partitions may
//! hold a state (given to a member once, or altered; Kafka's initialized partitions) are
//! answered, so an Empty group still shows its offsets.

use std::collections::BTreeSet;
use std::rc::Rc;

use bytes::Bytes;
use kafka_protocol::messages::describe_share_group_offsets_response::{
    DescribeShareGroupOffsetsResponseGroup, DescribeShareGroupOffsetsResponsePartition,
    DescribeShareGroupOffsetsResponseTopic,
};
use kafka_protocol::messages::{
    DescribeShareGroupOffsetsRequest, DescribeShareGroupOffsetsResponse, TopicName,
};

use super::{Ctx, FramingError};
use crate::common::errors::code;
use crate::security::acl::{op as acl_op, resource};
use crate::shard::groups::s;
use crate::shard::share::ShareDescribed;
use crate::shard::Shard;

/// The leader epoch asked with: reading to describe fences no writer.
pub(super) const NO_LEADER_EPOCH: i32 = -1;

/// DescribeShareGroupOffsets.
pub async fn describe(shard: &Rc<Shard>, ctx: &Ctx, body: Bytes) -> Result<Bytes, FramingError> {
    let r: DescribeShareGroupOffsetsRequest = ctx.decode(body)?;
    let ids: Vec<String> = r.groups.iter().map(|g| g.group_id.0.to_string()).collect();
    let described = super::share_groups::described(shard, ctx, &ids).await;
    let mut groups = Vec::with_capacity(r.groups.len());
    for (
        g,
        ShareDescribed {
            group: d,
            initialized,
        },
    ) in r.groups.iter().zip(described)
    {
        let base =
            DescribeShareGroupOffsetsResponseGroup::default().with_group_id(g.group_id.clone());
        // A group known only by the state of the partitions asked (its membership gone, its
        // state not yet) is answered from that state.
        let by_state = d.error_code == code::GROUP_ID_NOT_FOUND && g.topics.is_some();
        if d.error_code != code::NONE && !by_state {
            groups.push(
                base.with_error_code(d.error_code)
                    .with_error_message(d.error_message),
            );
            continue;
        }
        let asked: Vec<(String, Option<Vec<i32>>)> = match &g.topics {
            Some(ts) => ts
                .iter()
                .map(|t| (t.topic_name.0.to_string(), Some(t.partitions.clone())))
                .collect(),
            None => {
                // A topic that once held a state and has since been deleted is left out.
                let meta = shard.metadata();
                let stated = initialized
                    .into_iter()
                    .filter(|t| meta.topics.contains_key(t));
                d.members
                    .iter()
                    .flat_map(|m| m.subscribed_topic_names.iter().map(|t| t.0.to_string()))
                    .chain(stated)
                    .collect::<BTreeSet<String>>()
                    .into_iter()
                    .map(|t| (t, None))
                    .collect()
            }
        };
        let mut topics = Vec::with_capacity(asked.len());
        for (topic, partitions) in asked {
            topics.push(describe_topic(shard, ctx, &g.group_id.0, &topic, partitions).await);
        }
        let stated = topics
            .iter()
            .flat_map(|t| t.partitions.iter())
            .any(|p| p.start_offset >= 0 || p.error_code != code::NONE);
        if by_state && !stated {
            groups.push(
                base.with_error_code(d.error_code)
                    .with_error_message(d.error_message),
            );
            continue;
        }
        groups.push(base.with_topics(topics));
    }
    ctx.respond(&DescribeShareGroupOffsetsResponse::default().with_groups(groups))
}

/// One topic of a group: its partitions asked (`None`: all of them).
async fn describe_topic(
    shard: &Rc<Shard>,
    ctx: &Ctx,
    group: &str,
    topic: &str,
    partitions: Option<Vec<i32>>,
) -> DescribeShareGroupOffsetsResponseTopic {
    let meta = shard.metadata();
    let known = meta.topics.get(topic);
    let count = known.map_or(0, |t| i32::try_from(t.shards.len()).unwrap_or(i32::MAX));
    let partitions = partitions.unwrap_or_else(|| (0..count).collect());
    let refused = if !ctx.allowed(shard, acl_op::DESCRIBE, resource::TOPIC, topic) {
        Some(code::TOPIC_AUTHORIZATION_FAILED)
    } else {
        known.is_none().then_some(code::UNKNOWN_TOPIC_OR_PARTITION)
    };
    let mut out = Vec::with_capacity(partitions.len());
    for p in partitions {
        let base = DescribeShareGroupOffsetsResponsePartition::default()
            .with_partition_index(p)
            .with_start_offset(-1)
            .with_leader_epoch(-1);
        let error =
            refused.or_else(|| (p < 0 || p >= count).then_some(code::UNKNOWN_TOPIC_OR_PARTITION));
        if let Some(error) = error {
            out.push(base.with_error_code(error));
            continue;
        }
        let key = (group.to_string(), topic.to_string(), p);
        out.push(match shard.read_share_state(&key, NO_LEADER_EPOCH).await {
            Ok(Some(state)) => base
                .with_start_offset(state.start)
                .with_leader_epoch(state.leader_epoch),
            Ok(None) => base,
            Err(error) => base.with_error_code(error),
        });
    }
    DescribeShareGroupOffsetsResponseTopic::default()
        .with_topic_name(TopicName(s(topic.to_string())))
        .with_topic_id(uuid::Uuid::from_u128(known.map_or(0, |t| t.id)))
        .with_partitions(out)
}
