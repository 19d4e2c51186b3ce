//! Produce: split once per owning shard, append there, merge; acks 0 / 1 / -1.
//! Record batches are never decoded: the header is checked and the bytes stored as sent.

use std::collections::BTreeSet;
use std::rc::Rc;

use bytes::Bytes;
use kafka_protocol::messages::produce_response::{
    BatchIndexAndErrorMessage, LeaderIdAndEpoch, NodeEndpoint, PartitionProduceResponse,
    TopicProduceResponse,
};
use kafka_protocol::messages::{BrokerId, ProduceRequest, ProduceResponse};
use kafka_protocol::protocol::StrBytes;

use super::{slow_log, Ctx, FramingError};
use strand_storage::KafkaOffset;

use crate::common::errors::code;
use crate::common::errors::KafkaError;
use crate::security::acl::{op, resource};
use crate::shard::ops::{Op, ProducePart, ProduceResult, Reply, ShardSplit};
use crate::shard::Shard;

/// The first Produce version whose transactional batch adds its partition to the
/// transaction (transaction version 2, KIP-890 part 2).
pub const PRODUCE_ADDS_TO_TXN: i16 = 12;

/// The first Produce version whose NOT_LEADER_OR_FOLLOWER answer may name the leader and
/// its endpoint (KIP-951).
const LEADER_HINTS_VERSION: i16 = 10;

/// Produce; `None` for acks=0 (no response at all).
#[expect(
    clippy::too_many_lines,
    reason = "longer than 70 lines when the lint came in (issue 27): split it when it next changes"
)]
pub async fn handle(
    shard: &Rc<Shard>,
    ctx: &Ctx,
    body: Bytes,
) -> Result<Option<Bytes>, FramingError> {
    let handler_started = crate::common::clock::now();
    let req: ProduceRequest = ctx.decode(body)?;
    // As Kafka: Produce never creates a topic (only Metadata does, when the client allows
    // it and auto.create.topics.enable is on); a missing one is UNKNOWN_TOPIC_OR_PARTITION,
    // which clients answer by refreshing their metadata.
    let meta = shard.metadata();
    let acks_ok = matches!(req.acks, -1..=1);
    let txn_denied = req
        .transactional_id
        .as_ref()
        .is_some_and(|id| !ctx.allowed(shard, op::WRITE, resource::TRANSACTIONAL_ID, &id.0));
    // results[t][p] and, per shard, the (t, p) slots its parts fill, in order.
    let mut results: Vec<Vec<Option<ProduceResult>>> = Vec::with_capacity(req.topic_data.len());
    let mut split = ShardSplit::new(shard.count);
    for (ti, t) in req.topic_data.iter().enumerate() {
        let topic = t.name.0.as_str();
        let mut row = Vec::with_capacity(t.partition_data.len());
        let topic_denied = !ctx.allowed(shard, op::WRITE, resource::TOPIC, topic);
        for (pi, p) in t.partition_data.iter().enumerate() {
            let records = p.records.clone().unwrap_or_default();
            let early = if txn_denied {
                Some(KafkaError::TransactionalIdAuthorizationFailed)
            } else if topic_denied {
                Some(KafkaError::TopicAuthorizationFailed)
            } else if !acks_ok {
                Some(KafkaError::InvalidRequest("acks".into()))
            } else {
                check_one_batch(&records).err()
            };
            match (early, meta.shard_of(topic, p.index)) {
                (Some(e), _) => row.push(Some(failed(e))),
                (None, None) => row.push(Some(failed(KafkaError::UnknownTopicOrPartition))),
                (None, Some(s)) => {
                    row.push(None);
                    let part = ProducePart {
                        topic: topic.to_string(),
                        partition: p.index,
                        batch: records,
                        transactional_id: req.transactional_id.as_ref().map(|t| t.0.to_string()),
                        add_to_txn: ctx.version >= PRODUCE_ADDS_TO_TXN,
                    };
                    split.push(s, (ti, pi), part);
                }
            }
        }
        results.push(row);
    }
    let acks_all = req.acks == -1;
    let calls = split.into_groups().map(|(s, parts, slots)| async move {
        match shard.call(s, Op::Produce { parts, acks_all }).await {
            Reply::Produce(r) => (slots, r),
            _ => (slots, Vec::new()),
        }
    });
    for (slots, replies) in futures::future::join_all(calls).await {
        for (k, (ti, pi)) in slots.into_iter().enumerate() {
            results[ti][pi] = Some(
                replies
                    .get(k)
                    .cloned()
                    .unwrap_or_else(|| failed(KafkaError::NotLeader)),
            );
        }
    }
    if let Some(received) = ctx.received {
        log_if_slow(shard, ctx, &req, &results, received, handler_started);
    }
    // Counted against the producer's quota when its frame was read (`quotas::record_produce`).
    let throttle_ms = ctx.throttle_ms;
    if req.acks == 0 {
        return Ok(None);
    }
    let mut leaders = BTreeSet::new();
    let responses = req
        .topic_data
        .iter()
        .zip(results)
        .map(|(t, row)| {
            let parts = t
                .partition_data
                .iter()
                .zip(row)
                .map(|(p, r)| {
                    let out = partition_response(
                        p.index,
                        r.unwrap_or_else(|| failed(KafkaError::NotLeader)),
                        req.acks,
                        ctx.version,
                    );
                    with_leader_hint(shard, ctx, &t.name.0, out, &mut leaders)
                })
                .collect();
            TopicProduceResponse::default()
                .with_name(t.name.clone())
                .with_partition_responses(parts)
        })
        .collect();
    let endpoints = super::metadata::endpoints_of(shard, ctx, &leaders)
        .into_iter()
        .map(|(id, host, port)| {
            NodeEndpoint::default()
                .with_node_id(BrokerId(id))
                .with_host(StrBytes::from_string(host))
                .with_port(i32::from(port))
        })
        .collect();
    ctx.respond(
        &ProduceResponse::default()
            .with_responses(responses)
            .with_node_endpoints(endpoints)
            .with_throttle_time_ms(i32::try_from(throttle_ms).unwrap_or(i32::MAX)),
    )
    .map(Some)
}

/// Hands the request's timeline to `slow_log`, which logs it if it was slow.
fn log_if_slow(
    shard: &Rc<Shard>,
    ctx: &Ctx,
    req: &ProduceRequest,
    results: &[Vec<Option<ProduceResult>>],
    received: std::time::Instant,
    handler_started: std::time::Instant,
) {
    let stamps = slow_log::Stamps {
        received,
        handler_started,
        parts_done: crate::common::clock::now(),
    };
    let threshold_ms = shard.config.produce_slow_log_ms;
    slow_log::check(threshold_ms, stamps, req.acks, &ctx.client_id, || {
        let meta = shard.metadata();
        req.topic_data
            .iter()
            .zip(results)
            .flat_map(|(t, row)| {
                let topic = t.name.0.as_str();
                let meta = &meta;
                t.partition_data.iter().zip(row).filter_map(move |(p, r)| {
                    r.as_ref()
                        .map(|r| (topic, p.index, meta.shard_of(topic, p.index), r))
                })
            })
            .collect()
    });
}

/// KIP-951 (Produce v10+): a partition answered NOT_LEADER_OR_FOLLOWER names the leader
/// this node knows (its endpoint goes in the response's NodeEndpoints, `leaders`).
fn with_leader_hint(
    shard: &Shard,
    ctx: &Ctx,
    topic: &str,
    out: PartitionProduceResponse,
    leaders: &mut BTreeSet<i32>,
) -> PartitionProduceResponse {
    if ctx.version < LEADER_HINTS_VERSION {
        return out;
    }
    match super::metadata::leader_hint(shard, topic, out.index, out.error_code, leaders) {
        Some((leader, epoch)) => out.with_current_leader(
            LeaderIdAndEpoch::default()
                .with_leader_id(BrokerId(leader))
                .with_leader_epoch(epoch),
        ),
        None => out,
    }
}

fn partition_response(
    index: i32,
    r: ProduceResult,
    acks: i16,
    version: i16,
) -> PartitionProduceResponse {
    let mut out = PartitionProduceResponse::default()
        .with_index(index)
        .with_base_offset(r.base_offset.0)
        .with_log_append_time_ms(r.log_append_time_ms)
        .with_log_start_offset(if version >= 5 {
            r.log_start_offset.0
        } else {
            -1
        });
    if !matches!(acks, -1..=1) {
        return out.with_error_code(code::INVALID_REQUIRED_ACKS);
    }
    if let Some(e) = r.error {
        out = out.with_error_code(e.code());
        if version >= 8 {
            if let KafkaError::RecordErrors { records, .. } = &e {
                out = out.with_record_errors(
                    records
                        .iter()
                        .map(|(i, m)| {
                            BatchIndexAndErrorMessage::default()
                                .with_batch_index(*i)
                                .with_batch_index_error_message(Some(StrBytes::from_string(
                                    m.clone(),
                                )))
                        })
                        .collect(),
                );
            }
            out = out.with_error_message(Some(StrBytes::from_string(e.to_string())));
        }
    }
    out
}

fn failed(e: KafkaError) -> ProduceResult {
    ProduceResult {
        error: Some(e),
        base_offset: KafkaOffset(-1),
        log_start_offset: KafkaOffset(-1),
        timing: None,
        log_append_time_ms: -1,
    }
}

/// Kafka requires exactly one batch per partition in Produce v3+.
pub(crate) fn check_one_batch(records: &Bytes) -> Result<(), KafkaError> {
    let mut it = strand_wire::batches(records.clone());
    match (it.next(), it.next()) {
        (Some(Ok(_)), None) => Ok(()),
        (Some(Err(e)), _) => Err(KafkaError::from_batch(e)),
        (None, _) => Err(KafkaError::InvalidRecord("no record batch".into())),
        (Some(Ok(_)), Some(_)) => Err(KafkaError::InvalidRecord(
            "more than one batch per partition".into(),
        )),
    }
}
