//! Fetch: split per shard, read whole batches up to the high watermark, long-poll until
//! `min_bytes` are there or `max_wait_ms` passes; appends wake waiting fetches.
//! Fetch sessions (KIP-227) are declined (session id 0), so every fetch is a full one.
//! From v13 a topic is named by its id, echoed in the answer (an unknown id is answered
//! UNKNOWN_TOPIC_ID, as Kafka does); from v16 a partition answered NOT_LEADER_OR_FOLLOWER
//! names the leader this node knows and the response its endpoint (KIP-951); v14, v15 and
//! v17 add nothing a consumer's fetch uses (tiered storage's error, the replica state, a
//! follower's directory id).

use std::collections::BTreeSet;
use std::rc::Rc;
use std::time::Duration;

use bytes::Bytes;
use kafka_protocol::messages::fetch_response::{
    AbortedTransaction, FetchableTopicResponse, LeaderIdAndEpoch, NodeEndpoint, PartitionData,
};
use kafka_protocol::messages::{BrokerId, FetchRequest, FetchResponse, ProducerId};
use kafka_protocol::protocol::StrBytes;

use super::response::{RecordPieces, RecordSet, Response};

use super::{Ctx, FramingError};
use strand_storage::KafkaOffset;

use super::quotas;
use crate::cluster::metadata::Metadata;
use crate::common::errors::{code, KafkaError};
use crate::security::acl::{op, resource};
use crate::security::quota::CONSUMER_BYTE_RATE;
use crate::shard::budget::Held;
use crate::shard::ops::{FetchLimit, FetchPart, FetchResult, Op, Reply, ShardSplit};
use crate::shard::Shard;

/// Longest long-poll accepted (clients default to 500 ms).
pub const MAX_WAIT_MS_MAX: u64 = 30_000;
/// The first Fetch version that names topics by id (KIP-516) instead of by name.
pub const TOPIC_IDS_VERSION: i16 = 13;
/// The first Fetch version with `isolation_level` (and the LSO and aborted transactions).
const ISOLATION_VERSION: i16 = 4;
/// The first Fetch version whose NOT_LEADER_OR_FOLLOWER answer names the leader and its
/// endpoint (KIP-951).
const LEADER_HINTS_VERSION: i16 = 16;

/// Fetch: plans the read per shard, reads until `min_bytes` are there, an error shows or
/// `max_wait_ms` passes (waiting for appends in between), then answers. The records it
/// answers with count against the shard's in-flight bytes (`held`, `Held::take_room`).
pub async fn handle(
    shard: &Rc<Shard>,
    ctx: &Ctx,
    body: Bytes,
    held: &Held,
) -> Result<Response, FramingError> {
    let req: FetchRequest = ctx.decode(body)?;
    let deadline = crate::common::clock::now()
        + Duration::from_millis(
            u64::try_from(req.max_wait_ms)
                .unwrap_or(0)
                .min(MAX_WAIT_MS_MAX),
        );
    let max_bytes = usize::try_from(req.max_bytes)
        .unwrap_or(0)
        .min(shard.config.fetch_max_bytes);
    let min_bytes = usize::try_from(req.min_bytes).unwrap_or(0);
    let readable = |topic: &str| ctx.allowed(shard, op::READ, resource::TOPIC, topic);
    let (split, mut results) = plan(&shard.metadata(), shard.count, &req, ctx.version, &readable);
    let involved = split.involved();
    let request_bytes = held.bytes();
    let room = loop {
        // Room for records is taken for each read and given back before a wait: a long
        // poll holds only its request's bytes, not its max_bytes (50 MiB by default).
        let room = held.take_room(max_bytes, deadline).await;
        let share = FetchLimit {
            max_bytes: (room / involved.len().max(1)).max(1),
            first_batch_whole: room > 0,
        };
        let (total, any_error) = read_round(shard, &split, &involved, share, &mut results).await;
        let now = crate::common::clock::now();
        if total >= min_bytes.max(1) || any_error || now >= deadline || involved.is_empty() {
            break room;
        }
        for r in results.iter_mut().flatten() {
            r.records = RecordSet::default();
        }
        held.shrink_to(request_bytes);
        wait_for_appends(shard, &split, &results, &involved, deadline - now).await;
    };
    trim_to_max_bytes(&mut results, room);
    let records: usize = results.iter().flatten().map(|r| r.records.len()).sum();
    // A consumer over its quota gets no records now, and its throttle time (as Kafka).
    let throttle_ms = quotas::record(shard, ctx, CONSUMER_BYTE_RATE, records as f64);
    if throttle_ms > 0 {
        quotas::unrecord(shard, ctx, CONSUMER_BYTE_RATE, records as f64);
    }
    if throttle_ms > 0 || !held.cover(records, room, deadline).await {
        for r in results.iter_mut().flatten() {
            r.records = RecordSet::default();
        }
    }
    let throttle_ms = i32::try_from(throttle_ms).unwrap_or(i32::MAX);
    // The record sets go out from where the reads left them, not copied into the frame.
    let mut records = RecordPieces::default();
    let body = answer(&req, results, ctx.version, &mut records).with_throttle_time_ms(throttle_ms);
    let body = with_leader_hints(shard, ctx, body);
    ctx.respond_pieces(&body, &records)
}

/// The read of each requested partition, per owning shard, and the answers so far: each
/// partition is unknown (UNKNOWN_TOPIC_OR_PARTITION, or UNKNOWN_TOPIC_ID for an id no
/// topic has from v13; a known id's missing partition is the former) until its shard
/// answers; a topic `readable` refuses is TOPIC_AUTHORIZATION_FAILED and not read.
fn plan(
    meta: &Metadata,
    shards: usize,
    req: &FetchRequest,
    version: i16,
    readable: &dyn Fn(&str) -> bool,
) -> (ShardSplit<FetchPart>, Vec<Vec<FetchResult>>) {
    let mut split = ShardSplit::new(shards);
    let mut results: Vec<Vec<FetchResult>> = Vec::with_capacity(req.topics.len());
    for (ti, t) in req.topics.iter().enumerate() {
        let topic = if version >= TOPIC_IDS_VERSION {
            meta.topic_name_of(t.topic_id.as_u128())
        } else {
            Some(t.topic.0.as_str())
        };
        // As Kafka: an id no topic has is UNKNOWN_TOPIC_ID; a partition the topic (named,
        // or found by its id) does not have is UNKNOWN_TOPIC_OR_PARTITION.
        let denied = topic.is_some_and(|t| !readable(t));
        let unknown = if topic.is_none() && version >= TOPIC_IDS_VERSION {
            KafkaError::UnknownTopicId
        } else if denied {
            KafkaError::TopicAuthorizationFailed
        } else {
            KafkaError::UnknownTopicOrPartition
        };
        let mut row = Vec::with_capacity(t.partitions.len());
        for (pi, p) in t.partitions.iter().enumerate() {
            row.push(FetchResult {
                error: Some(unknown.clone()),
                high_watermark: KafkaOffset(-1),
                log_start_offset: KafkaOffset(-1),
                last_stable_offset: KafkaOffset(-1),
                // Kafka sends an empty list (not null) for a partition it does not know
                // (null for an error of its read path, e.g. OFFSET_OUT_OF_RANGE).
                aborted: Some(Vec::new()),
                ..Default::default()
            });
            let Some(topic) = topic.filter(|_| !denied) else {
                continue;
            };
            if let Some(s) = meta.shard_of(topic, p.partition) {
                let part = FetchPart {
                    topic: topic.to_string(),
                    partition: p.partition,
                    offset: KafkaOffset(p.fetch_offset),
                    max_bytes: usize::try_from(p.partition_max_bytes).unwrap_or(0),
                    read_committed: version >= ISOLATION_VERSION && req.isolation_level == 1,
                };
                split.push(s, (ti, pi), part);
            }
        }
        results.push(row);
    }
    (split, results)
}

/// Reads every planned partition once, `share` per shard, into `results`; returns
/// the record bytes read and whether any partition answered an error.
async fn read_round(
    shard: &Rc<Shard>,
    split: &ShardSplit<FetchPart>,
    involved: &[usize],
    share: FetchLimit,
    results: &mut [Vec<FetchResult>],
) -> (usize, bool) {
    let calls = involved.iter().map(|&s| {
        let parts = split.parts(s).to_vec();
        async move {
            let op = Op::Fetch {
                parts,
                limit: share,
            };
            (s, shard.call(s, op).await)
        }
    });
    let mut total = 0usize;
    let mut any_error = false;
    for (s, reply) in futures::future::join_all(calls).await {
        let Reply::Fetch(rs) = reply else { continue };
        for (k, r) in rs.into_iter().enumerate() {
            let Some(&(ti, pi)) = split.slots(s).get(k) else {
                continue;
            };
            total += r.records.len();
            any_error |= r.error.is_some();
            results[ti][pi] = r;
        }
    }
    (total, any_error)
}

/// KIP-74, as Kafka: the response holds at most `max_bytes` of records, except that the
/// first non-empty partition (in request order) keeps its first batch whatever its size, so
/// a consumer always makes progress. Shards read their share in parallel and each lets its
/// own first partition exceed its share; in request order, each later partition keeps the
/// whole batches that still fit, and the consumer fetches the rest next time.
fn trim_to_max_bytes(results: &mut [Vec<FetchResult>], max_bytes: usize) {
    let mut total = 0usize;
    for r in results.iter_mut().flatten() {
        if total > 0 {
            r.records = r
                .records
                .whole_batches_within(max_bytes.saturating_sub(total));
        }
        total += r.records.len();
    }
}

/// The response: each requested topic as it was named (by name, or by id from v13), its
/// partitions in request order, each partition's records as `records` lays them out.
fn answer(
    req: &FetchRequest,
    results: Vec<Vec<FetchResult>>,
    version: i16,
    records: &mut RecordPieces,
) -> FetchResponse {
    let topics = req
        .topics
        .iter()
        .zip(results)
        .map(|(t, row)| {
            let parts = t
                .partitions
                .iter()
                .zip(row)
                .map(|(p, r)| partition_data(p.partition, r, version, records))
                .collect();
            FetchableTopicResponse::default()
                .with_topic(t.topic.clone())
                .with_topic_id(t.topic_id)
                .with_partitions(parts)
        })
        .collect();
    FetchResponse::default()
        .with_session_id(0)
        .with_responses(topics)
}

/// KIP-951 (Fetch v16+): each partition answered NOT_LEADER_OR_FOLLOWER names the leader
/// this node knows, and the response lists those leaders' endpoints.
fn with_leader_hints(shard: &Shard, ctx: &Ctx, mut body: FetchResponse) -> FetchResponse {
    let refused = |p: &PartitionData| p.error_code == code::NOT_LEADER_OR_FOLLOWER;
    let any_refused = body
        .responses
        .iter()
        .any(|t| t.partitions.iter().any(refused));
    if ctx.version < LEADER_HINTS_VERSION || !any_refused {
        return body;
    }
    let meta = shard.metadata();
    let mut leaders = BTreeSet::new();
    for t in &mut body.responses {
        let topic = if ctx.version >= TOPIC_IDS_VERSION {
            meta.topic_name_of(t.topic_id.as_u128())
        } else {
            Some(t.topic.0.as_str())
        };
        let Some(topic) = topic else {
            continue;
        };
        for p in &mut t.partitions {
            let hint = super::metadata::leader_hint(
                shard,
                topic,
                p.partition_index,
                p.error_code,
                &mut leaders,
            );
            let Some((leader, epoch)) = hint else {
                continue;
            };
            p.current_leader = LeaderIdAndEpoch::default()
                .with_leader_id(BrokerId(leader))
                .with_leader_epoch(epoch);
        }
    }
    body.node_endpoints = super::metadata::endpoints_of(shard, ctx, &leaders)
        .into_iter()
        .map(|(id, host, port)| {
            NodeEndpoint::default()
                .with_node_id(BrokerId(id))
                .with_host(StrBytes::from_string(host))
                .with_port(i32::from(port))
        })
        .collect();
    body
}

/// Waits until a high watermark moves past what the last read saw (or the fetch offset),
/// on any involved shard, or `timeout`. Waiting on the fetch offset alone would return at
/// once when some data is there but less than `min_bytes`, and the fetch would spin.
async fn wait_for_appends(
    shard: &Rc<Shard>,
    split: &ShardSplit<FetchPart>,
    results: &[Vec<FetchResult>],
    involved: &[usize],
    timeout: Duration,
) {
    let seen = |slot: &(usize, usize)| {
        results
            .get(slot.0)
            .and_then(|row| row.get(slot.1))
            .map_or(KafkaOffset(-1), |r| r.high_watermark)
    };
    let waits = involved.iter().map(|&s| {
        let parts = split
            .parts(s)
            .iter()
            .zip(split.slots(s))
            .map(|(p, slot)| (p.topic.clone(), p.partition, p.offset.max(seen(slot))))
            .collect();
        Box::pin(shard.call(s, Op::WaitAppend { parts, timeout }))
    });
    let _ = futures::future::select_all(waits).await;
}

fn partition_data(
    index: i32,
    r: FetchResult,
    version: i16,
    records: &mut RecordPieces,
) -> PartitionData {
    let aborted = r.aborted.map(|list| {
        list.into_iter()
            .map(|t| {
                AbortedTransaction::default()
                    .with_producer_id(ProducerId(t.producer_id))
                    .with_first_offset(t.first_offset)
            })
            .collect()
    });
    let mut d = PartitionData::default()
        .with_partition_index(index)
        .with_high_watermark(r.high_watermark.0)
        .with_last_stable_offset(r.last_stable_offset.0)
        .with_aborted_transactions(aborted)
        .with_log_start_offset(if version >= 5 {
            r.log_start_offset.0
        } else {
            -1
        })
        .with_records(Some(records.body_bytes(&r.records)));
    if let Some(e) = r.error {
        d = d.with_error_code(e.code());
    }
    d
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A fetch result holding batches of the given sizes.
    fn read(batches: &[usize]) -> FetchResult {
        let batches = batches.iter().map(|&n| Bytes::from(vec![0u8; n])).collect();
        FetchResult {
            records: RecordSet::from_batches(batches),
            ..Default::default()
        }
    }

    fn sizes(results: &[Vec<FetchResult>]) -> Vec<Vec<usize>> {
        results
            .iter()
            .map(|row| row.iter().map(|r| r.records.len()).collect())
            .collect()
    }

    #[test]
    fn only_the_first_non_empty_partition_may_exceed_max_bytes() {
        // As Kafka 4.1.2 answered strand-diff's fetch_tiny_max_bytes: max_bytes 1, the
        // first partition empty, the next two with a batch each: only the first batch.
        let mut r = vec![vec![read(&[]), read(&[70])], vec![read(&[70])]];
        trim_to_max_bytes(&mut r, 1);
        assert_eq!(sizes(&r), [vec![0, 70], vec![0]]);
    }

    #[test]
    fn later_partitions_keep_the_whole_batches_that_fit() {
        let mut r = vec![vec![
            read(&[40]),
            read(&[20, 30]),
            read(&[30, 20]),
            read(&[12]),
        ]];
        trim_to_max_bytes(&mut r, 102);
        // 40; 20 + 30 (90); the 30-byte batch would make 120: nothing; 12 makes 102.
        assert_eq!(sizes(&r), [vec![40, 50, 0, 12]]);
    }

    #[test]
    fn a_first_partition_within_max_bytes_is_kept_whole() {
        let mut r = vec![vec![read(&[30, 30, 30])]];
        trim_to_max_bytes(&mut r, 100);
        assert_eq!(sizes(&r), [vec![90]]);
    }
}
