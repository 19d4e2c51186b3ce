//! ReadShareGroupState and WriteShareGroupState (KIP-932's share coordinator, between
//! nodes): the leader of a data partition on another node reads and writes the state of
//! its share partitions on this node, which leads their `__share_group_state` partition
//! (`share::remote` sends them).
//!
//! Invariant: only a principal allowed CLUSTER_ACTION is served (others get
//! CLUSTER_AUTHORIZATION_FAILED for every partition); every partition asked gets an
//! answer, in order; a topic id this node does not know is UNKNOWN_TOPIC_ID.

use std::rc::Rc;

use bytes::Bytes;
use kafka_protocol::messages::{
    ReadShareGroupStateRequest, ReadShareGroupStateResponse, WriteShareGroupStateRequest,
    WriteShareGroupStateResponse,
};

use super::{Ctx, FramingError};
use crate::common::config::{SHARE_STATE_NUM_PARTITIONS, SHARE_STATE_TOPIC};
use crate::common::errors::code;
use crate::security::acl::op as acl_op;
use crate::shard::ops::{Op, Reply};
use crate::shard::Shard;
use crate::share::records::ShareKey;
use crate::share::remote::{self as share_state, UNINITIALIZED_START_OFFSET};

/// The shard of this node holding `key`'s `__share_group_state` partition.
fn state_shard(shard: &Shard, key: &ShareKey) -> Result<usize, i16> {
    let p = crate::share::records::partition_for(key, SHARE_STATE_NUM_PARTITIONS);
    shard
        .metadata()
        .shard_of(SHARE_STATE_TOPIC, p)
        .ok_or(code::NOT_COORDINATOR)
}

/// The share key of `group`'s partition `partition` of the topic with id `topic_id`.
fn key_of(
    shard: &Shard,
    group: &str,
    topic_id: uuid::Uuid,
    partition: i32,
) -> Result<ShareKey, i16> {
    let meta = shard.metadata();
    let topic = meta
        .topic_name_of(topic_id.as_u128())
        .ok_or(code::UNKNOWN_TOPIC_ID)?;
    Ok((group.to_string(), topic.to_string(), partition))
}

async fn read_one(
    shard: &Rc<Shard>,
    key: Result<ShareKey, i16>,
    leader_epoch: i32,
) -> Result<Option<crate::share::partition::ShareState>, i16> {
    let key = key?;
    let target = state_shard(shard, &key)?;
    match shard
        .call(target, Op::ReadShareState(key, leader_epoch))
        .await
    {
        Reply::ShareState(state) => state,
        _ => Err(code::UNKNOWN_SERVER_ERROR),
    }
}

/// ReadShareGroupState: the persisted state of each partition asked.
pub async fn read(shard: &Rc<Shard>, ctx: &Ctx, body: Bytes) -> Result<Bytes, FramingError> {
    use kafka_protocol::messages::read_share_group_state_response::{
        PartitionResult, ReadStateResult, StateBatch,
    };
    let r: ReadShareGroupStateRequest = ctx.decode(body)?;
    let permitted = ctx.allowed_on_cluster(shard, acl_op::CLUSTER_ACTION);
    let mut results = Vec::with_capacity(r.topics.len());
    for t in &r.topics {
        let mut partitions = Vec::with_capacity(t.partitions.len());
        for p in &t.partitions {
            let base = PartitionResult::default()
                .with_partition(p.partition)
                .with_start_offset(UNINITIALIZED_START_OFFSET);
            let key = key_of(shard, &r.group_id, t.topic_id, p.partition);
            let got = if permitted {
                read_one(shard, key, p.leader_epoch).await
            } else {
                Err(code::CLUSTER_AUTHORIZATION_FAILED)
            };
            partitions.push(match got {
                Err(error) => base.with_error_code(error),
                Ok(None) => base,
                Ok(Some(state)) => {
                    let batches = share_state::state_batches!(StateBatch, &state);
                    base.with_start_offset(state.start)
                        .with_state_batches(batches)
                }
            });
        }
        results.push(
            ReadStateResult::default()
                .with_topic_id(t.topic_id)
                .with_partitions(partitions),
        );
    }
    ctx.respond(&ReadShareGroupStateResponse::default().with_results(results))
}

/// WriteShareGroupState: each partition's new state, written durably before the answer.
pub async fn write(shard: &Rc<Shard>, ctx: &Ctx, body: Bytes) -> Result<Bytes, FramingError> {
    use kafka_protocol::messages::write_share_group_state_response::{
        PartitionResult, WriteStateResult,
    };
    let r: WriteShareGroupStateRequest = ctx.decode(body)?;
    let permitted = ctx.allowed_on_cluster(shard, acl_op::CLUSTER_ACTION);
    let mut results = Vec::with_capacity(r.topics.len());
    for t in &r.topics {
        let mut partitions = Vec::with_capacity(t.partitions.len());
        for p in &t.partitions {
            let batches = share_state::batches_of!(p.state_batches);
            let state = share_state::from_batches(p.start_offset, p.leader_epoch, &batches);
            let error = if !permitted {
                code::CLUSTER_AUTHORIZATION_FAILED
            } else if p.start_offset < 0 {
                code::INVALID_REQUEST
            } else {
                match key_of(shard, &r.group_id, t.topic_id, p.partition) {
                    Err(e) => e,
                    Ok(key) => match state_shard(shard, &key) {
                        Err(e) => e,
                        Ok(target) => {
                            match shard.call(target, Op::WriteShareState(key, state)).await {
                                Reply::Codes(c) => {
                                    c.first().copied().unwrap_or(code::UNKNOWN_SERVER_ERROR)
                                }
                                _ => code::UNKNOWN_SERVER_ERROR,
                            }
                        }
                    },
                }
            };
            partitions.push(
                PartitionResult::default()
                    .with_partition(p.partition)
                    .with_error_code(error),
            );
        }
        results.push(
            WriteStateResult::default()
                .with_topic_id(t.topic_id)
                .with_partitions(partitions),
        );
    }
    ctx.respond(&WriteShareGroupStateResponse::default().with_results(results))
}

/// DeleteShareGroupState from the coordinator of a share group (on another node,
/// `share::remote::forget`): every shard of this node forgets the group (no topics: a
/// deleted group) or the partitions named (offsets deleted or reset). Answered with the
/// partitions named, each with the node's code.
pub async fn forget(shard: &Rc<Shard>, ctx: &Ctx, body: Bytes) -> Result<Bytes, FramingError> {
    use kafka_protocol::messages::delete_share_group_state_response::{
        DeleteStateResult, PartitionResult,
    };
    use kafka_protocol::messages::{DeleteShareGroupStateRequest, DeleteShareGroupStateResponse};
    let r: DeleteShareGroupStateRequest = ctx.decode(body)?;
    let error = if ctx.allowed_on_cluster(shard, acl_op::CLUSTER_ACTION) {
        let meta = shard.metadata();
        let name_of = |id: u128| {
            meta.topics
                .iter()
                .find(|(_, t)| t.id == id)
                .map(|(n, _)| n.clone())
        };
        let forget = crate::share::remote::decode_forget(&r, &name_of);
        let calls = (0..shard.count).map(|t| shard.call(t, Op::ForgetShareGroup(forget.clone())));
        futures::future::join_all(calls)
            .await
            .into_iter()
            .filter_map(|reply| match reply {
                Reply::Codes(c) => c.first().copied(),
                _ => Some(code::UNKNOWN_SERVER_ERROR),
            })
            .find(|c| *c != code::NONE)
            .unwrap_or(code::NONE)
    } else {
        code::CLUSTER_AUTHORIZATION_FAILED
    };
    let results = r
        .topics
        .iter()
        .map(|t| {
            DeleteStateResult::default()
                .with_topic_id(t.topic_id)
                .with_partitions(
                    t.partitions
                        .iter()
                        .map(|p| {
                            PartitionResult::default()
                                .with_partition(p.partition)
                                .with_error_code(error)
                        })
                        .collect(),
                )
        })
        .collect();
    ctx.respond(&DeleteShareGroupStateResponse::default().with_results(results))
}
