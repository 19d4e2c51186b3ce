//! ListOffsets: earliest (-2) = log start offset, latest (-1) = high watermark (last stable
//! offset with isolation_level 1, read_committed), a
//! timestamp = the first record with timestamp >= it (-1 when none), max timestamp (-3).

use std::rc::Rc;

use bytes::Bytes;
use kafka_protocol::messages::list_offsets_response::{
    ListOffsetsPartitionResponse, ListOffsetsTopicResponse,
};
use kafka_protocol::messages::{ListOffsetsRequest, ListOffsetsResponse};

use super::{Ctx, FramingError};
use crate::common::errors::code;
use crate::security::acl::{op, resource};
use crate::shard::ops::{ListOffsetsPart, Op, Reply, ShardSplit};
use crate::shard::Shard;

/// ListOffsets.
pub async fn handle(shard: &Rc<Shard>, ctx: &Ctx, body: Bytes) -> Result<Bytes, FramingError> {
    let req: ListOffsetsRequest = ctx.decode(body)?;
    let meta = shard.metadata();
    let mut rows: Vec<Vec<ListOffsetsPartitionResponse>> = Vec::new();
    let mut split = ShardSplit::new(shard.count);
    for (ti, t) in req.topics.iter().enumerate() {
        let mut row = Vec::new();
        let allowed = ctx.allowed(shard, op::DESCRIBE, resource::TOPIC, &t.name.0);
        for (pi, p) in t.partitions.iter().enumerate() {
            row.push(
                ListOffsetsPartitionResponse::default()
                    .with_partition_index(p.partition_index)
                    .with_error_code(if allowed {
                        code::UNKNOWN_TOPIC_OR_PARTITION
                    } else {
                        code::TOPIC_AUTHORIZATION_FAILED
                    })
                    .with_timestamp(-1)
                    .with_offset(-1),
            );
            let owner = meta.shard_of(t.name.0.as_str(), p.partition_index);
            if let Some(s) = owner.filter(|_| allowed) {
                let part = ListOffsetsPart {
                    topic: t.name.0.as_str().to_string(),
                    partition: p.partition_index,
                    timestamp: p.timestamp,
                    read_committed: req.isolation_level == 1,
                };
                split.push(s, (ti, pi), part);
            }
        }
        rows.push(row);
    }
    let calls = split.into_groups().map(|(s, parts, slots)| async move {
        (slots, shard.call(s, Op::ListOffsets { parts }).await)
    });
    for (slots, reply) in futures::future::join_all(calls).await {
        let Reply::ListOffsets(rs) = reply else {
            continue;
        };
        for ((ti, pi), (err, ts, off, epoch)) in slots.into_iter().zip(rs) {
            let r = std::mem::take(&mut rows[ti][pi]);
            rows[ti][pi] = r
                .with_error_code(err.map_or(0, |e| e.code()))
                .with_timestamp(ts)
                .with_offset(off.0)
                .with_leader_epoch(if ctx.version >= 4 { epoch } else { -1 });
        }
    }
    let topics = req
        .topics
        .iter()
        .zip(rows)
        .map(|(t, row)| {
            ListOffsetsTopicResponse::default()
                .with_name(t.name.clone())
                .with_partitions(row)
        })
        .collect();
    ctx.respond(&ListOffsetsResponse::default().with_topics(topics))
}
