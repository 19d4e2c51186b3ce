//! Transaction APIs: InitProducerId with a transactional id, AddPartitionsToTxn (v0–3),
//! AddOffsetsToTxn, EndTxn (run on the id's coordinator shard, `txn::coordinator`),
//! TxnOffsetCommit (on the group's coordinator shard), WriteTxnMarkers (a coordinator on
//! another node asking this one's partition leaders), the KIP-890 verification of a
//! transactional Produce, and the admin APIs DescribeTransactions, ListTransactions and
//! DescribeProducers (what `kafka-transactions.sh` uses). `__transaction_state` is created by the first FindCoordinator
//! for a transactional id.
//!
//! Invariant: a request for one transactional id is executed only on the shard that owns
//! its `__transaction_state` partition, once that partition is loaded there.

use std::collections::BTreeMap;
use std::rc::Rc;

use bytes::Bytes;
use kafka_protocol::messages::add_partitions_to_txn_response::{
    AddPartitionsToTxnPartitionResult, AddPartitionsToTxnTopicResult,
};
use kafka_protocol::messages::txn_offset_commit_response::{
    TxnOffsetCommitResponsePartition, TxnOffsetCommitResponseTopic,
};
use kafka_protocol::messages::write_txn_markers_response::{
    WritableTxnMarkerPartitionResult, WritableTxnMarkerResult, WritableTxnMarkerTopicResult,
};
use kafka_protocol::messages::*;

use super::{Ctx, FramingError};
use crate::cluster::markers::Markers;
use crate::common::errors::code;
use crate::group::state::Committed;
use crate::security::acl::{op as acl_op, resource};
use crate::shard::ops::{spread_codes, GroupRequest, Op, Reply, ShardSplit, TxnCheck};
use crate::shard::Shard;
use crate::txn::coordinator::{self, AddError, TXN_STATE_TOPIC};

/// `segment.bytes` of `__transaction_state` (Kafka's
/// `transaction.state.log.segment.bytes`).
const TXN_STATE_SEGMENT_BYTES: u64 = 100 * 1024 * 1024;

/// Whether `key` is a request the transaction coordinator of one id executes.
pub fn is_coordinator_api(key: ApiKey) -> bool {
    matches!(
        key,
        ApiKey::InitProducerId
            | ApiKey::AddPartitionsToTxn
            | ApiKey::AddOffsetsToTxn
            | ApiKey::EndTxn
    )
}

/// Creates `__transaction_state` (compacted, `transaction_state_num_partitions`
/// partitions, the default replication factor) unless it exists.
pub async fn ensure_txn_topic(shard: &Rc<Shard>) {
    if shard.metadata().topics.contains_key(TXN_STATE_TOPIC) {
        return;
    }
    let configs = BTreeMap::from([
        ("cleanup.policy".to_string(), "compact".to_string()),
        (
            "segment.bytes".to_string(),
            TXN_STATE_SEGMENT_BYTES.to_string(),
        ),
    ]);
    let n = shard.config.transaction_state_num_partitions;
    let cmd = super::topics::create_command(shard, TXN_STATE_TOPIC, n, configs, -1);
    match super::topics::commit(shard, vec![cmd]).await.pop() {
        Some(Err(crate::cluster::metadata::MetaError::TopicExists(_))) | Some(Ok(())) | None => {}
        Some(Err(e)) => tracing::warn!(error = %e, "cannot create {TXN_STATE_TOPIC}"),
    }
}

/// The shard of this node that owns `id`'s `__transaction_state` partition.
fn coordinator_shard(shard: &Shard, id: &str) -> Option<usize> {
    shard.coordinator_shard(TXN_STATE_TOPIC, id)
}

/// The transactional id of a coordinator request (decoded on the connection's shard).
pub fn transactional_id_of(ctx: &Ctx, body: &Bytes) -> Result<String, FramingError> {
    let b = body.clone();
    Ok(match ctx.key {
        ApiKey::InitProducerId => ctx
            .decode::<InitProducerIdRequest>(b)?
            .transactional_id
            .map(|t| t.0.to_string())
            .unwrap_or_default(),
        ApiKey::AddPartitionsToTxn => ctx
            .decode::<AddPartitionsToTxnRequest>(b)?
            .v3_and_below_transactional_id
            .0
            .to_string(),
        ApiKey::AddOffsetsToTxn => ctx
            .decode::<AddOffsetsToTxnRequest>(b)?
            .transactional_id
            .0
            .to_string(),
        ApiKey::EndTxn => ctx
            .decode::<EndTxnRequest>(b)?
            .transactional_id
            .0
            .to_string(),
        _ => return Err(FramingError::UnsupportedApi(ctx.key as i16)),
    })
}

/// The answer to a coordinator request its principal may not make, if so: WRITE on the
/// transactional id for every one, then READ on the group for AddOffsetsToTxn and WRITE on
/// every topic for AddPartitionsToTxn (unauthorized partitions TOPIC_AUTHORIZATION_FAILED,
/// the others OPERATION_NOT_ATTEMPTED, as Kafka).
fn coordinator_refusal(
    shard: &Shard,
    ctx: &Ctx,
    id: &str,
    body: &Bytes,
) -> Result<Option<Bytes>, FramingError> {
    if !ctx.allowed(shard, acl_op::WRITE, resource::TRANSACTIONAL_ID, id) {
        let error = code::TRANSACTIONAL_ID_AUTHORIZATION_FAILED;
        return refused(ctx, body.clone(), error).map(Some);
    }
    match ctx.key {
        ApiKey::AddOffsetsToTxn => {
            let r: AddOffsetsToTxnRequest = ctx.decode(body.clone())?;
            if !ctx.allowed(shard, acl_op::READ, resource::GROUP, &r.group_id.0) {
                let error = code::GROUP_AUTHORIZATION_FAILED;
                return refused(ctx, body.clone(), error).map(Some);
            }
        }
        ApiKey::AddPartitionsToTxn => {
            let r: AddPartitionsToTxnRequest = ctx.decode(body.clone())?;
            let writable: Vec<bool> = r
                .v3_and_below_topics
                .iter()
                .flat_map(|t| {
                    let ok = ctx.allowed(shard, acl_op::WRITE, resource::TOPIC, &t.name.0);
                    std::iter::repeat_n(ok, t.partitions.len())
                })
                .collect();
            if writable.contains(&false) {
                let codes = writable.into_iter().map(|ok| match ok {
                    true => code::OPERATION_NOT_ATTEMPTED,
                    false => code::TOPIC_AUTHORIZATION_FAILED,
                });
                return ctx.respond(&add_partitions_answer(&r, codes)).map(Some);
            }
        }
        _ => {}
    }
    Ok(None)
}

/// Runs a transaction coordinator request on the shard owning its id; without
/// `__transaction_state` (no FindCoordinator for a transactional id yet) it is answered
/// NOT_COORDINATOR, which sends the client to FindCoordinator; an empty id is
/// INVALID_REQUEST.
pub async fn route(
    shard: &Rc<Shard>,
    ctx: &Ctx,
    id: &str,
    body: Bytes,
) -> Result<Bytes, FramingError> {
    if id.is_empty() {
        // Kafka: an empty transactional id is INVALID_REQUEST for every coordinator API.
        return refused(ctx, body, code::INVALID_REQUEST);
    }
    if let Some(answer) = coordinator_refusal(shard, ctx, id, &body)? {
        return Ok(answer);
    }
    let Some(target) = coordinator_shard(shard, id) else {
        return refused(ctx, body, code::NOT_COORDINATOR);
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

/// Executes a coordinator request that reached the shard owning its id.
pub async fn on_coordinator(
    shard: &Rc<Shard>,
    ctx: &Ctx,
    body: Bytes,
) -> Result<Bytes, FramingError> {
    let id = transactional_id_of(ctx, &body)?;
    shard.wait_loaded(TXN_STATE_TOPIC, &id).await;
    match ctx.key {
        ApiKey::InitProducerId => init_producer_id(shard, ctx, &id, body).await,
        ApiKey::AddPartitionsToTxn => add_partitions(shard, ctx, &id, body).await,
        ApiKey::AddOffsetsToTxn => add_offsets(shard, ctx, &id, body).await,
        ApiKey::EndTxn => end_txn(shard, ctx, &id, body).await,
        _ => Err(FramingError::UnsupportedApi(ctx.key as i16)),
    }
}

/// The first EndTxn version of transaction version 2 (KIP-890 part 2: the epoch bumps
/// at every transaction's end, and the answer carries it).
const END_TXN_V2: i16 = 5;

/// The first TxnOffsetCommit version of transaction version 2 (it adds the group's
/// offsets partition to the transaction itself).
const TXN_OFFSET_COMMIT_V2: i16 = 5;

/// PRODUCER_FENCED as the request's version knows it: versions before `since` get
/// INVALID_PRODUCER_EPOCH (Kafka's answer to clients that predate KIP-588).
fn fenced_as(c: i16, version: i16, since: i16) -> i16 {
    if c == code::PRODUCER_FENCED && version < since {
        code::INVALID_PRODUCER_EPOCH
    } else {
        c
    }
}

/// The answer to a coordinator request refused with `error` before it ran.
fn refused(ctx: &Ctx, body: Bytes, error: i16) -> Result<Bytes, FramingError> {
    match ctx.key {
        ApiKey::InitProducerId => ctx.respond(
            &InitProducerIdResponse::default()
                .with_error_code(error)
                .with_producer_id(ProducerId(-1))
                .with_producer_epoch(-1),
        ),
        ApiKey::AddPartitionsToTxn => {
            let r: AddPartitionsToTxnRequest = ctx.decode(body)?;
            ctx.respond(&add_partitions_answer(&r, std::iter::repeat(error)))
        }
        ApiKey::AddOffsetsToTxn => {
            ctx.respond(&AddOffsetsToTxnResponse::default().with_error_code(error))
        }
        ApiKey::EndTxn => ctx.respond(
            &EndTxnResponse::default()
                .with_error_code(error)
                .with_producer_id(ProducerId(-1))
                .with_producer_epoch(-1),
        ),
        _ => Err(FramingError::UnsupportedApi(ctx.key as i16)),
    }
}

async fn init_producer_id(
    shard: &Rc<Shard>,
    ctx: &Ctx,
    id: &str,
    body: Bytes,
) -> Result<Bytes, FramingError> {
    let r: InitProducerIdRequest = ctx.decode(body)?;
    let expected = (r.producer_id.0 >= 0).then_some((r.producer_id.0, r.producer_epoch));
    let resp = InitProducerIdResponse::default();
    let resp =
        match coordinator::init_producer_id(shard, id, r.transaction_timeout_ms, expected).await {
            Ok((pid, epoch)) => resp
                .with_producer_id(ProducerId(pid))
                .with_producer_epoch(epoch),
            Err(c) => resp
                .with_error_code(fenced_as(c, ctx.version, 4))
                .with_producer_id(ProducerId(-1))
                .with_producer_epoch(-1),
        };
    ctx.respond(&resp)
}

/// The AddPartitionsToTxn (v0–3) response echoing the request's partitions with `codes`.
fn add_partitions_answer(
    r: &AddPartitionsToTxnRequest,
    codes: impl Iterator<Item = i16>,
) -> AddPartitionsToTxnResponse {
    AddPartitionsToTxnResponse::default()
        .with_results_by_topic_v3_and_below(topic_results(&r.v3_and_below_topics, codes))
}

/// Per topic of `topics`, its partitions with `codes`, in order.
fn topic_results(
    topics: &[kafka_protocol::messages::add_partitions_to_txn_request::AddPartitionsToTxnTopic],
    mut codes: impl Iterator<Item = i16>,
) -> Vec<AddPartitionsToTxnTopicResult> {
    topics
        .iter()
        .map(|t| {
            let parts = t
                .partitions
                .iter()
                .map(|p| {
                    AddPartitionsToTxnPartitionResult::default()
                        .with_partition_index(*p)
                        .with_partition_error_code(codes.next().unwrap_or(code::NONE))
                })
                .collect();
            AddPartitionsToTxnTopicResult::default()
                .with_name(t.name.clone())
                .with_results_by_partition(parts)
        })
        .collect()
}

async fn add_partitions(
    shard: &Rc<Shard>,
    ctx: &Ctx,
    id: &str,
    body: Bytes,
) -> Result<Bytes, FramingError> {
    let r: AddPartitionsToTxnRequest = ctx.decode(body)?;
    let partitions: Vec<(String, i32)> = r
        .v3_and_below_topics
        .iter()
        .flat_map(|t| t.partitions.iter().map(|p| (t.name.0.to_string(), *p)))
        .collect();
    let result = coordinator::add_partitions(
        shard,
        id,
        r.v3_and_below_producer_id.0,
        r.v3_and_below_producer_epoch,
        &partitions,
    )
    .await;
    let resp = match result {
        Ok(()) => add_partitions_answer(&r, std::iter::repeat(code::NONE)),
        Err(AddError::All(c)) => {
            add_partitions_answer(&r, std::iter::repeat(fenced_as(c, ctx.version, 2)))
        }
        Err(AddError::Each(codes)) => add_partitions_answer(&r, codes.into_iter()),
    };
    ctx.respond(&resp)
}

async fn add_offsets(
    shard: &Rc<Shard>,
    ctx: &Ctx,
    id: &str,
    body: Bytes,
) -> Result<Bytes, FramingError> {
    let r: AddOffsetsToTxnRequest = ctx.decode(body)?;
    let meta = shard.metadata();
    let Some(n) = meta
        .topics
        .get(crate::group::OFFSETS_TOPIC)
        .map(|t| t.shards.len())
    else {
        return ctx.respond(
            &AddOffsetsToTxnResponse::default().with_error_code(code::COORDINATOR_NOT_AVAILABLE),
        );
    };
    let p = crate::group::partition_for(&r.group_id.0, n);
    let partitions = [(crate::group::OFFSETS_TOPIC.to_string(), p)];
    let c = match coordinator::add_partitions(
        shard,
        id,
        r.producer_id.0,
        r.producer_epoch,
        &partitions,
    )
    .await
    {
        Ok(()) => code::NONE,
        Err(AddError::All(c)) => fenced_as(c, ctx.version, 2),
        Err(AddError::Each(codes)) => codes
            .first()
            .copied()
            .unwrap_or(code::COORDINATOR_NOT_AVAILABLE),
    };
    ctx.respond(&AddOffsetsToTxnResponse::default().with_error_code(c))
}

async fn end_txn(
    shard: &Rc<Shard>,
    ctx: &Ctx,
    id: &str,
    body: Bytes,
) -> Result<Bytes, FramingError> {
    let r: EndTxnRequest = ctx.decode(body)?;
    let producer = (r.producer_id.0, r.producer_epoch);
    let v2 = ctx.version >= END_TXN_V2;
    let resp = match coordinator::end_txn(shard, id, producer, r.committed, v2).await {
        Ok((pid, epoch)) if v2 => EndTxnResponse::default()
            .with_producer_id(ProducerId(pid))
            .with_producer_epoch(epoch),
        Ok(_) => EndTxnResponse::default(),
        Err(c) => EndTxnResponse::default()
            .with_error_code(fenced_as(c, ctx.version, 2))
            .with_producer_id(ProducerId(-1))
            .with_producer_epoch(-1),
    };
    ctx.respond(&resp)
}

/// The offsets of a TxnOffsetCommit, in request order.
fn txn_offsets(r: &TxnOffsetCommitRequest) -> Vec<(String, i32, Committed)> {
    r.topics
        .iter()
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
        .collect()
}

/// The TxnOffsetCommit response echoing the request's partitions with `codes`.
fn offset_commit_answer(
    r: &TxnOffsetCommitRequest,
    mut codes: impl Iterator<Item = i16>,
) -> TxnOffsetCommitResponse {
    let topics = r
        .topics
        .iter()
        .map(|t| {
            let parts = t
                .partitions
                .iter()
                .map(|p| {
                    TxnOffsetCommitResponsePartition::default()
                        .with_partition_index(p.partition_index)
                        .with_error_code(codes.next().unwrap_or(code::NONE))
                })
                .collect();
            TxnOffsetCommitResponseTopic::default()
                .with_name(t.name.clone())
                .with_partitions(parts)
        })
        .collect();
    TxnOffsetCommitResponse::default().with_topics(topics)
}

/// TxnOffsetCommit refused before it ran (the group's coordinator is elsewhere).
pub fn offset_commit_refused(ctx: &Ctx, body: Bytes, error: i16) -> Result<Bytes, FramingError> {
    let r: TxnOffsetCommitRequest = ctx.decode(body)?;
    ctx.respond(&offset_commit_answer(&r, std::iter::repeat(error)))
}

/// TxnOffsetCommit on the group's coordinator shard: verified with the transaction's
/// coordinator (the group's offsets partition must be in the transaction, added by
/// AddOffsetsToTxn), then staged in the group until the transaction's marker.
pub async fn offset_commit(
    shard: &Rc<Shard>,
    ctx: &Ctx,
    body: Bytes,
) -> Result<Bytes, FramingError> {
    let r: TxnOffsetCommitRequest = ctx.decode(body)?;
    let meta = shard.metadata();
    let n = meta
        .topics
        .get(crate::group::OFFSETS_TOPIC)
        .map_or(1, |t| t.shards.len());
    let offsets_partition = (
        crate::group::OFFSETS_TOPIC.to_string(),
        crate::group::partition_for(&r.group_id.0, n),
    );
    let check = TxnCheck {
        transactional_id: r.transactional_id.0.to_string(),
        producer_id: r.producer_id.0,
        producer_epoch: r.producer_epoch,
        partitions: vec![offsets_partition],
    };
    // Transaction version 2 (v5+): the offsets partition is added here, as a Produce v12
    // adds its partition; before, AddOffsetsToTxn added it and this only verifies.
    let verified = shard
        .verify_with_coordinator(check, ctx.version >= TXN_OFFSET_COMMIT_V2)
        .await;
    if let Err(c) = verified {
        let c = fenced_as(c, ctx.version, 3);
        return ctx.respond(&offset_commit_answer(&r, std::iter::repeat(c)));
    }
    let ok = super::groups::readable(shard, ctx, r.topics.iter().map(|t| t.name.0.as_str()));
    let counts: Vec<usize> = r.topics.iter().map(|t| t.partitions.len()).collect();
    let mut offsets = txn_offsets(&r).into_iter();
    let permitted: Vec<_> = ok
        .iter()
        .zip(&counts)
        .flat_map(|(&ok, &n)| {
            offsets
                .by_ref()
                .take(n)
                .filter(move |_| ok)
                .collect::<Vec<_>>()
        })
        .collect();
    let codes = crate::group::coordinator::txn_offset_commit(
        shard,
        &r.group_id.0,
        (r.producer_id.0, r.producer_epoch),
        (&r.member_id, r.generation_id),
        permitted,
    )
    .await;
    let codes = super::groups::with_denied(&ok, &counts, codes);
    ctx.respond(&offset_commit_answer(&r, codes.into_iter()))
}

/// One marker's answer: its partitions with `codes`, in order.
fn marker_result(
    m: &kafka_protocol::messages::write_txn_markers_request::WritableTxnMarker,
    mut codes: impl Iterator<Item = i16>,
) -> WritableTxnMarkerResult {
    let topics = m
        .topics
        .iter()
        .map(|t| {
            let parts = t
                .partition_indexes
                .iter()
                .map(|p| {
                    WritableTxnMarkerPartitionResult::default()
                        .with_partition_index(*p)
                        .with_error_code(codes.next().unwrap_or(code::NONE))
                })
                .collect();
            WritableTxnMarkerTopicResult::default()
                .with_name(t.name.clone())
                .with_partitions(parts)
        })
        .collect();
    WritableTxnMarkerResult::default()
        .with_producer_id(m.producer_id)
        .with_topics(topics)
}

/// WriteTxnMarkers: a coordinator (on another node) asks this node's partition leaders to
/// write markers; a code per partition.
pub async fn write_markers(
    shard: &Rc<Shard>,
    ctx: &Ctx,
    body: Bytes,
) -> Result<Bytes, FramingError> {
    let r: WriteTxnMarkersRequest = ctx.decode(body)?;
    let meta = shard.metadata();
    let mut results = Vec::with_capacity(r.markers.len());
    // The coordinators' request: CLUSTER_ACTION (every partition refused without it).
    let permitted = ctx.allowed_on_cluster(shard, acl_op::CLUSTER_ACTION);
    for m in r.markers.iter().filter(|_| permitted) {
        let partitions: Vec<(String, i32)> = m
            .topics
            .iter()
            .flat_map(|t| {
                t.partition_indexes
                    .iter()
                    .map(|p| (t.name.0.to_string(), *p))
            })
            .collect();
        let mut codes = vec![code::UNKNOWN_TOPIC_OR_PARTITION; partitions.len()];
        let mut split = ShardSplit::new(shard.count);
        for (i, (t, p)) in partitions.iter().enumerate() {
            if let Some(s) = meta.shard_of(t, *p) {
                split.push(s, (0, i), (t.clone(), *p));
            }
        }
        let replies = split
            .call_each(shard, |parts| {
                Op::WriteMarkers(Markers {
                    producer_id: m.producer_id.0,
                    producer_epoch: m.producer_epoch,
                    commit: m.transaction_result,
                    coordinator_epoch: m.coordinator_epoch,
                    partitions: parts,
                })
            })
            .await;
        spread_codes(&mut codes, replies);
        results.push(marker_result(m, codes.into_iter()));
    }
    if !permitted {
        let refused = || std::iter::repeat(code::CLUSTER_AUTHORIZATION_FAILED);
        results = r
            .markers
            .iter()
            .map(|m| marker_result(m, refused()))
            .collect();
    }
    ctx.respond(&WriteTxnMarkersResponse::default().with_markers(results))
}

/// DescribeTransactions: each id answered by the shard coordinating it.
pub async fn describe_transactions(
    shard: &Rc<Shard>,
    ctx: &Ctx,
    body: Bytes,
) -> Result<Bytes, FramingError> {
    use kafka_protocol::messages::describe_transactions_response::TransactionState;
    let r: DescribeTransactionsRequest = ctx.decode(body)?;
    let mut out: Vec<TransactionState> = r
        .transactional_ids
        .iter()
        .map(|id| {
            TransactionState::default()
                .with_transactional_id(id.clone())
                .with_error_code(code::COORDINATOR_NOT_AVAILABLE)
                .with_producer_id(ProducerId(-1))
                .with_producer_epoch(-1)
                .with_transaction_start_time_ms(-1)
        })
        .collect();
    let mut split = ShardSplit::new(shard.count);
    for (i, id) in r.transactional_ids.iter().enumerate() {
        if !ctx.allowed(shard, acl_op::DESCRIBE, resource::TRANSACTIONAL_ID, &id.0) {
            out[i].error_code = code::TRANSACTIONAL_ID_AUTHORIZATION_FAILED;
            continue;
        }
        if let Some(s) = coordinator_shard(shard, &id.0) {
            split.push(s, (0, i), id.0.to_string());
        }
    }
    for (slots, reply) in split.call_each(shard, Op::DescribeTxns).await {
        if let Reply::TxnStates(states) = reply {
            for ((_, i), st) in slots.into_iter().zip(states) {
                out[i] = st;
            }
        }
    }
    ctx.respond(&DescribeTransactionsResponse::default().with_transaction_states(out))
}

/// Kafka's transaction state names (ListTransactions' filter).
const STATE_NAMES: [&str; 8] = [
    "Empty",
    "Ongoing",
    "PrepareCommit",
    "PrepareAbort",
    "CompleteCommit",
    "CompleteAbort",
    "Dead",
    "PrepareEpochFence",
];

/// ListTransactions (v0–1): the ids this node coordinates, from every shard.
pub async fn list_transactions(
    shard: &Rc<Shard>,
    ctx: &Ctx,
    body: Bytes,
) -> Result<Bytes, FramingError> {
    let r: ListTransactionsRequest = ctx.decode(body)?;
    let states: Vec<String> = r.state_filters.iter().map(|s| s.to_string()).collect();
    let unknown: Vec<_> = r
        .state_filters
        .iter()
        .filter(|s| !STATE_NAMES.contains(&s.as_str()))
        .cloned()
        .collect();
    let filter = crate::shard::ops::TxnFilter {
        states,
        producer_ids: r.producer_id_filters.iter().map(|p| p.0).collect(),
        min_duration_ms: if ctx.version >= 1 {
            r.duration_filter
        } else {
            -1
        },
    };
    let calls = (0..shard.count).map(|s| shard.call(s, Op::ListTxns(filter.clone())));
    let mut listed = Vec::new();
    for reply in futures::future::join_all(calls).await {
        if let Reply::TxnList(l) = reply {
            listed.extend(l);
        }
    }
    // Only the ids the principal may describe (Kafka filters them the same way).
    listed.retain(
        |t: &kafka_protocol::messages::list_transactions_response::TransactionState| {
            ctx.allowed(
                shard,
                acl_op::DESCRIBE,
                resource::TRANSACTIONAL_ID,
                &t.transactional_id.0,
            )
        },
    );
    ctx.respond(
        &ListTransactionsResponse::default()
            .with_unknown_state_filters(unknown)
            .with_transaction_states(listed),
    )
}

/// DescribeProducers: each partition answered by the shard holding it.
pub async fn describe_producers(
    shard: &Rc<Shard>,
    ctx: &Ctx,
    body: Bytes,
) -> Result<Bytes, FramingError> {
    use kafka_protocol::messages::describe_producers_response::{PartitionResponse, TopicResponse};
    let r: DescribeProducersRequest = ctx.decode(body)?;
    let meta = shard.metadata();
    let mut out: Vec<Vec<PartitionResponse>> = Vec::with_capacity(r.topics.len());
    let mut split = ShardSplit::new(shard.count);
    for (ti, t) in r.topics.iter().enumerate() {
        let mut row = Vec::with_capacity(t.partition_indexes.len());
        let allowed = ctx.allowed(shard, acl_op::READ, resource::TOPIC, &t.name.0);
        for (pi, p) in t.partition_indexes.iter().enumerate() {
            row.push(
                PartitionResponse::default()
                    .with_partition_index(*p)
                    .with_error_code(if allowed {
                        code::UNKNOWN_TOPIC_OR_PARTITION
                    } else {
                        code::TOPIC_AUTHORIZATION_FAILED
                    }),
            );
            let owner = meta.shard_of(&t.name.0, *p).filter(|_| allowed);
            if let Some(s) = owner {
                split.push(s, (ti, pi), (t.name.0.to_string(), *p));
            }
        }
        out.push(row);
    }
    for (slots, reply) in split.call_each(shard, Op::DescribeProducers).await {
        if let Reply::Producers(answers) = reply {
            for ((ti, pi), a) in slots.into_iter().zip(answers) {
                out[ti][pi] = a;
            }
        }
    }
    let topics = r
        .topics
        .iter()
        .zip(out)
        .map(|(t, ps)| {
            TopicResponse::default()
                .with_name(t.name.clone())
                .with_partitions(ps)
        })
        .collect();
    ctx.respond(&DescribeProducersResponse::default().with_topics(topics))
}

/// AddPartitionsToTxn v4, the batched form brokers send: per transaction, verify only
/// (KIP-890 part 1: a partition leader asks before a producer's first transactional
/// batch) or add, on the shard coordinating its id here (NOT_COORDINATOR when this node
/// does not; the request is never passed on).
pub async fn add_partitions_batched(
    shard: &Rc<Shard>,
    ctx: &Ctx,
    body: Bytes,
) -> Result<Bytes, FramingError> {
    use kafka_protocol::messages::add_partitions_to_txn_response::AddPartitionsToTxnResult;
    let r: AddPartitionsToTxnRequest = ctx.decode(body)?;
    // The batched form is the brokers' (KIP-890 verification): CLUSTER_ACTION.
    if !ctx.allowed_on_cluster(shard, acl_op::CLUSTER_ACTION) {
        return ctx.respond(
            &AddPartitionsToTxnResponse::default()
                .with_error_code(code::CLUSTER_AUTHORIZATION_FAILED),
        );
    }
    let mut results = Vec::with_capacity(r.transactions.len());
    for t in &r.transactions {
        let partitions: Vec<(String, i32)> = t
            .topics
            .iter()
            .flat_map(|tp| tp.partitions.iter().map(|p| (tp.name.0.to_string(), *p)))
            .collect();
        let check = TxnCheck {
            transactional_id: t.transactional_id.0.to_string(),
            producer_id: t.producer_id.0,
            producer_epoch: t.producer_epoch,
            partitions: partitions.clone(),
        };
        let codes = match coordinator_shard(shard, &t.transactional_id.0) {
            None => vec![code::NOT_COORDINATOR; partitions.len()],
            Some(target) if t.verify_only => match shard.call(target, Op::VerifyTxn(check)).await {
                Reply::Codes(c) => vec![c.first().copied().unwrap_or(code::NONE); partitions.len()],
                _ => vec![code::COORDINATOR_NOT_AVAILABLE; partitions.len()],
            },
            Some(target) => match shard.call(target, Op::AddTxnPartitions(check)).await {
                Reply::Codes(c) => c,
                _ => vec![code::COORDINATOR_NOT_AVAILABLE; partitions.len()],
            },
        };
        let topics = topic_results(&t.topics, codes.into_iter());
        results.push(
            AddPartitionsToTxnResult::default()
                .with_transactional_id(t.transactional_id.clone())
                .with_topic_results(topics),
        );
    }
    ctx.respond(&AddPartitionsToTxnResponse::default().with_results_by_transaction(results))
}
