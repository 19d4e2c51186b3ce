//! DeleteRecords and OffsetForLeaderEpoch: per-partition operations on the owning shard.

use std::rc::Rc;

use bytes::Bytes;
use kafka_protocol::messages::delete_records_response::{
    DeleteRecordsPartitionResult, DeleteRecordsTopicResult,
};
use kafka_protocol::messages::offset_for_leader_epoch_response::{
    EpochEndOffset, OffsetForLeaderTopicResult,
};
use kafka_protocol::messages::{
    DeleteRecordsRequest, DeleteRecordsResponse, OffsetForLeaderEpochRequest,
    OffsetForLeaderEpochResponse,
};

use super::{Ctx, FramingError};
use crate::common::errors::code;
use crate::security::acl::{op, resource};
use strand_storage::KafkaOffset;

use crate::common::errors::KafkaError;
use crate::shard::ops::{Op, PartReply, Reply, ShardSplit};
use crate::shard::Shard;

/// Runs a per-partition op on the owning shards; answers in request order.
async fn per_partition<T>(
    shard: &Rc<Shard>,
    rows: Vec<Vec<Option<(String, i32, T)>>>,
    make: impl Fn(Vec<T>, Vec<(String, i32)>) -> Op,
) -> Vec<Vec<PartReply>> {
    let meta = shard.metadata();
    let unknown = || PartReply {
        error: Some(KafkaError::UnknownTopicOrPartition),
        epoch: -1,
        offset: KafkaOffset(-1),
    };
    let mut out: Vec<Vec<PartReply>> = rows
        .iter()
        .map(|r| r.iter().map(|_| unknown()).collect())
        .collect();
    let mut split: ShardSplit<(String, i32, T)> = ShardSplit::new(shard.count);
    for (ti, row) in rows.into_iter().enumerate() {
        for (pi, part) in row.into_iter().enumerate() {
            if let Some(p) = part {
                if let Some(s) = meta.shard_of(&p.0, p.1) {
                    split.push(s, (ti, pi), p);
                }
            }
        }
    }
    let calls = split.into_groups().map(|(s, parts, slots)| {
        let keys = parts.iter().map(|(t, p, _)| (t.clone(), *p)).collect();
        let op = make(parts.into_iter().map(|(_, _, x)| x).collect(), keys);
        async move { (slots, shard.call(s, op).await) }
    });
    for (slots, reply) in futures::future::join_all(calls).await {
        if let Reply::Parts(rs) = reply {
            for ((ti, pi), r) in slots.into_iter().zip(rs) {
                out[ti][pi] = r;
            }
        }
    }
    out
}

/// DeleteRecords.
pub async fn delete_records(
    shard: &Rc<Shard>,
    ctx: &Ctx,
    body: Bytes,
) -> Result<Bytes, FramingError> {
    let req: DeleteRecordsRequest = ctx.decode(body)?;
    let denied: Vec<bool> = req
        .topics
        .iter()
        .map(|t| !ctx.allowed(shard, op::DELETE, resource::TOPIC, &t.name.0))
        .collect();
    let rows = req
        .topics
        .iter()
        .zip(&denied)
        .map(|(t, &denied)| {
            t.partitions
                .iter()
                .map(|p| (!denied).then(|| (t.name.0.to_string(), p.partition_index, p.offset)))
                .collect()
        })
        .collect();
    let answers = per_partition(shard, rows, |offsets, keys| Op::DeleteRecords {
        parts: keys
            .into_iter()
            .zip(offsets)
            .map(|((t, p), o)| (t, p, KafkaOffset(o)))
            .collect(),
    })
    .await;
    let topics = req
        .topics
        .iter()
        .zip(answers)
        .zip(denied)
        .map(|((t, row), denied)| {
            let parts = t
                .partitions
                .iter()
                .zip(row)
                .map(|(p, r)| {
                    let error = if denied {
                        Some(KafkaError::TopicAuthorizationFailed)
                    } else {
                        r.error
                    };
                    DeleteRecordsPartitionResult::default()
                        .with_partition_index(p.partition_index)
                        .with_low_watermark(r.offset.0)
                        .with_error_code(error.map_or(0, |e| e.code()))
                })
                .collect();
            DeleteRecordsTopicResult::default()
                .with_name(t.name.clone())
                .with_partitions(parts)
        })
        .collect();
    ctx.respond(&DeleteRecordsResponse::default().with_topics(topics))
}

/// OffsetForLeaderEpoch: the end offset of each asked epoch, from the log's terms.
pub async fn offset_for_leader_epoch(
    shard: &Rc<Shard>,
    ctx: &Ctx,
    body: Bytes,
) -> Result<Bytes, FramingError> {
    let req: OffsetForLeaderEpochRequest = ctx.decode(body)?;
    // A replica's request (replica id >= 0) needs CLUSTER_ACTION, a client's DESCRIBE.
    let replica = req.replica_id.0 >= 0;
    let cluster_ok = !replica || ctx.allowed_on_cluster(shard, op::CLUSTER_ACTION);
    let denied: Vec<bool> = req
        .topics
        .iter()
        .map(|t| {
            !cluster_ok
                || (!replica && !ctx.allowed(shard, op::DESCRIBE, resource::TOPIC, &t.topic.0))
        })
        .collect();
    let rows = req
        .topics
        .iter()
        .zip(&denied)
        .map(|(t, &denied)| {
            t.partitions
                .iter()
                .map(|p| {
                    (!denied).then(|| {
                        (
                            t.topic.0.to_string(),
                            p.partition,
                            (p.current_leader_epoch, p.leader_epoch),
                        )
                    })
                })
                .collect()
        })
        .collect();
    let answers = per_partition(shard, rows, |epochs, keys| Op::EpochEnd {
        parts: keys
            .into_iter()
            .zip(epochs)
            .map(|((t, p), (c, e))| (t, p, c, e))
            .collect(),
    })
    .await;
    let topics = req
        .topics
        .iter()
        .zip(answers)
        .zip(denied)
        .map(|((t, row), denied)| {
            let parts = t
                .partitions
                .iter()
                .zip(row)
                .map(|(p, r)| {
                    let error = match (denied, cluster_ok) {
                        (true, false) => code::CLUSTER_AUTHORIZATION_FAILED,
                        (true, true) => code::TOPIC_AUTHORIZATION_FAILED,
                        (false, _) => r.error.map_or(0, |e| e.code()),
                    };
                    EpochEndOffset::default()
                        .with_partition(p.partition)
                        .with_error_code(error)
                        .with_leader_epoch(r.epoch)
                        .with_end_offset(r.offset.0)
                })
                .collect();
            OffsetForLeaderTopicResult::default()
                .with_topic(t.topic.clone())
                .with_partitions(parts)
        })
        .collect();
    ctx.respond(&OffsetForLeaderEpochResponse::default().with_topics(topics))
}
