//! Native protocol requests on a shard (ARCHITECTURE.md, Native protocol). The frames
//! and their connections are `net`'s; this module turns one decoded request into
//! its response.
//!
//! Invariant: produce, fetch and list-offsets are served only for partitions this shard
//! owns. Any other partition gets NOT_LEADER_OR_FOLLOWER carrying the owning shard and its
//! port ("moved"); it is never forwarded, so native data traffic makes no cross-shard hop.
//! Group offsets go to the group's coordinator shard; such hops are counted
//! (`native_cross_shard_hops`) like every other cross-shard message.
//! Native and Kafka produce append the same frames to the same logs through `Op::Produce`.

pub mod net;

use std::rc::Rc;
use std::time::Duration;

use strand_wire::native::generated::*;
use strand_wire::native::{codes, error, ProduceView, Request, PROTOCOL_VERSION};

use crate::common::errors::code;
use crate::common::errors::KafkaError;
use crate::gateway::kafka::response::PIECE_MIN_BYTES;
use crate::group::state::Committed;
use crate::partition::record_set::RecordSet;
use crate::shard::budget::Held;
use crate::shard::ops::{
    FetchLimit, FetchPart, FetchResult, ListOffsetsPart, Op, ProducePart, Reply,
};
use crate::shard::Shard;

/// Longest produce timeout honoured (Kafka's `request.timeout.ms` default is 30 s).
pub const PRODUCE_TIMEOUT_MS_MAX: u64 = 300_000;
/// How long a handshake waits for every shard to have bound its native port at start-up.
pub const PORTS_BOUND_WAIT: Duration = Duration::from_secs(5);

/// Whether Kafka treats this error code as retriable (the client may retry the request):
/// Kafka's own table, as kafka-protocol's `ResponseError` carries it.
pub fn retriable(code: i16) -> bool {
    kafka_protocol::error::ResponseError::try_from_code(code).is_some_and(|e| e.is_retriable())
}

fn kafka_error(e: &KafkaError) -> Option<Box<ErrorT>> {
    error(e.code(), e.to_string(), retriable(e.code()))
}

fn code_error(code: i16, message: &str) -> Option<Box<ErrorT>> {
    error(code, message, retriable(code))
}

/// The response to one request body; `None` when none is due (produce with acks 0).
/// `held` is the request's share of the shard's in-flight bytes; a fetch adds its records'.
/// `received`: when the request was read (a slow produce's timeline starts there).
pub async fn handle(
    shard: &Rc<Shard>,
    request: Request,
    held: &Held,
    received: std::time::Instant,
) -> Option<Answer> {
    shard.count_native_request();
    let body = match request {
        Request::Produce(r) => return produce(shard, r, received).await.map(Answer::from),
        Request::Other(m) => m.body,
    };
    Some(Answer::from(match body {
        BodyT::HandshakeRequest(r) => handshake(shard, *r).await,
        BodyT::MetadataRequest(r) => {
            let topics = r.topics.unwrap_or_default();
            if r.allow_auto_create {
                crate::gateway::kafka::metadata::auto_create(shard, &topics).await;
            }
            BodyT::MetadataResponse(Box::new(MetadataResponseT {
                topics: Some(placements(shard, &topics)),
                shard_ports: Some(ports(shard).await),
            }))
        }
        BodyT::FetchRequest(r) => return Some(fetch(shard, *r, held).await),
        BodyT::ListOffsetsRequest(r) => list_offsets(shard, *r).await,
        BodyT::CommitOffsetsRequest(r) => commit_offsets(shard, *r).await,
        BodyT::FetchOffsetsRequest(r) => fetch_offsets(shard, *r).await,
        BodyT::InitProducerIdRequest(r) => init_producer_id(shard, *r).await,
        other => BodyT::ErrorResponse(Box::new(ErrorResponseT {
            error: error(
                codes::INVALID_REQUEST,
                format!(
                    "{} is not a request",
                    strand_wire::native::body_name(&other)
                ),
                false,
            ),
        })),
    }))
}

/// A response body and the records to send after it in the frame's trailer (a fetch with
/// `records_in_trailer`; empty otherwise).
#[derive(Debug)]
pub struct Answer {
    /// The response.
    pub body: BodyT,
    /// The trailer's pieces, in the order the body's `trailer_bytes` name them.
    pub trailer: Vec<bytes::Bytes>,
}

impl From<BodyT> for Answer {
    fn from(body: BodyT) -> Self {
        Answer {
            body,
            trailer: Vec::new(),
        }
    }
}

async fn handshake(shard: &Rc<Shard>, r: HandshakeRequestT) -> BodyT {
    let topics = r.topics.unwrap_or_default();
    if r.allow_auto_create {
        crate::gateway::kafka::metadata::auto_create(shard, &topics).await;
    }
    let meta = shard.metadata();
    BodyT::HandshakeResponse(Box::new(HandshakeResponseT {
        protocol_version: PROTOCOL_VERSION,
        cluster_id: Some(meta.cluster_id.clone()),
        node_id: shard.config.node_id,
        shard_ports: Some(ports(shard).await),
        topics: Some(placements(shard, &topics)),
        frame_bytes_max: u32::try_from(crate::common::config::REQUEST_BYTES_MAX)
            .unwrap_or(u32::MAX),
        batch_bytes_max: u32::try_from(shard.config.message_max_bytes).unwrap_or(u32::MAX),
        serving_shard: i32::try_from(shard.id).unwrap_or(-1),
        kafka_host: Some(shard.config.advertised_host.clone()),
        kafka_port: i32::from(shard.config.kafka_addr.port()),
    }))
}

/// Every shard's native port, waiting briefly for shards still binding at start-up.
async fn ports(shard: &Rc<Shard>) -> Vec<u16> {
    let deadline = crate::common::clock::now() + PORTS_BOUND_WAIT;
    loop {
        let ports = shard.native_ports();
        if ports.iter().all(|&p| p != 0) || crate::common::clock::now() >= deadline {
            return ports;
        }
        crate::runtime::task::sleep(Duration::from_millis(5)).await;
    }
}

fn placements(shard: &Shard, topics: &[String]) -> Vec<TopicPlacementT> {
    let meta = shard.metadata();
    topics
        .iter()
        .map(|name| match meta.topics.get(name) {
            Some(t) => TopicPlacementT {
                name: Some(name.clone()),
                partition_shards: Some(t.shards.clone()),
                error: None,
            },
            None => TopicPlacementT {
                name: Some(name.clone()),
                partition_shards: None,
                error: code_error(
                    codes::UNKNOWN_TOPIC_OR_PARTITION,
                    &format!("topic {name:?} does not exist"),
                ),
            },
        })
        .collect()
}

/// `None` when this shard owns the partition, else the error to answer.
fn not_here(shard: &Shard, topic: &str, partition: i32) -> Option<Box<ErrorT>> {
    match shard.metadata().shard_of(topic, partition) {
        Some(s) if s == shard.id => None,
        Some(s) => {
            shard.count_native_moved();
            let port = shard.native_ports().get(s).copied().unwrap_or(0);
            Some(Box::new(ErrorT {
                code: codes::NOT_LEADER_OR_FOLLOWER,
                message: Some(format!(
                    "{topic}-{partition} is served by shard {s} (native port {port}), not shard {}",
                    shard.id
                )),
                retriable: true,
                moved_to_shard: i32::try_from(s).unwrap_or(-1),
                moved_to_port: i32::from(port),
            }))
        }
        None => code_error(
            codes::UNKNOWN_TOPIC_OR_PARTITION,
            &format!("{topic}-{partition} does not exist"),
        ),
    }
}

#[expect(
    clippy::too_many_lines,
    reason = "longer than 70 lines when the lint came in (issue 27): split it when it next changes"
)]
async fn produce(shard: &Rc<Shard>, r: ProduceView, received: std::time::Instant) -> Option<BodyT> {
    let handler_started = crate::common::clock::now();
    let acks = r.acks;
    let requested = r.partitions;
    let mut results: Vec<ProducePartitionResultT> = Vec::with_capacity(requested.len());
    let mut parts = Vec::new();
    let mut slots = Vec::new();
    for (i, p) in requested.into_iter().enumerate() {
        let topic = p.topic;
        let batch = p.records;
        let err = if !matches!(acks, -1..=1) {
            code_error(code::INVALID_REQUIRED_ACKS, "acks must be 0, 1 or -1")
        } else if let Some(e) = not_here(shard, &topic, p.partition) {
            Some(e)
        } else {
            crate::gateway::kafka::produce::check_one_batch(&batch)
                .err()
                .and_then(|e| kafka_error(&e))
        };
        results.push(ProducePartitionResultT {
            topic: Some(topic.clone()),
            partition: p.partition,
            base_offset: -1,
            log_start_offset: -1,
            error: err.clone(),
        });
        if err.is_none() {
            slots.push(i);
            parts.push(ProducePart {
                topic,
                partition: p.partition,
                batch,
                transactional_id: None,
                add_to_txn: false,
            });
        }
    }
    if !parts.is_empty() {
        let timeout_ms = u64::try_from(r.timeout_ms)
            .unwrap_or(0)
            .min(PRODUCE_TIMEOUT_MS_MAX);
        // The append runs to completion in its own task: a timed-out request must not
        // abandon an append half way.
        let (tx, rx) = futures::channel::oneshot::channel();
        let s = shard.clone();
        let op = Op::Produce {
            parts,
            acks_all: acks == -1,
        };
        crate::runtime::task::spawn_local(async move {
            let _ = tx.send(s.call(s.id, op).await);
        });
        match crate::runtime::task::timeout(Duration::from_millis(timeout_ms), rx).await {
            Some(Ok(Reply::Produce(rs))) => {
                log_if_slow(
                    shard,
                    i16::from(acks),
                    &results,
                    &slots,
                    &rs,
                    received,
                    handler_started,
                );
                for (slot, pr) in slots.into_iter().zip(rs) {
                    if let Some(out) = results.get_mut(slot) {
                        out.base_offset = pr.base_offset.0;
                        out.log_start_offset = pr.log_start_offset.0;
                        out.error = pr.error.as_ref().and_then(kafka_error);
                    }
                }
            }
            outcome => {
                let (code, why) = match outcome {
                    None => (codes::REQUEST_TIMED_OUT, "produce timed out"),
                    _ => (codes::UNKNOWN_SERVER_ERROR, "shard stopped"),
                };
                for slot in slots {
                    if let Some(out) = results.get_mut(slot) {
                        out.error = code_error(code, why);
                    }
                }
            }
        }
    }
    (acks != 0).then(|| {
        BodyT::ProduceResponse(Box::new(ProduceResponseT {
            partitions: Some(results),
        }))
    })
}

/// Hands a native produce's timeline to the slow-produce log (`slow_log`), which logs it
/// if it was slow.
fn log_if_slow(
    shard: &Rc<Shard>,
    acks: i16,
    results: &[ProducePartitionResultT],
    slots: &[usize],
    replies: &[crate::shard::ops::ProduceResult],
    received: std::time::Instant,
    handler_started: std::time::Instant,
) {
    let stamps = crate::gateway::kafka::slow_log::Stamps {
        received,
        handler_started,
        parts_done: crate::common::clock::now(),
    };
    let threshold_ms = shard.config.produce_slow_log_ms;
    crate::gateway::kafka::slow_log::check(threshold_ms, stamps, acks, "native", || {
        slots
            .iter()
            .zip(replies)
            .filter_map(|(&slot, r)| {
                let p = results.get(slot)?;
                let topic = p.topic.as_deref().unwrap_or("");
                Some((topic, p.partition, Some(shard.id), r))
            })
            .collect()
    });
}

async fn fetch(shard: &Rc<Shard>, r: FetchRequestT, held: &Held) -> Answer {
    let max_wait_ms = u64::try_from(r.max_wait_ms)
        .unwrap_or(0)
        .min(crate::gateway::kafka::fetch::MAX_WAIT_MS_MAX);
    let deadline = crate::common::clock::now() + Duration::from_millis(max_wait_ms);
    let min_bytes = usize::try_from(r.min_bytes).unwrap_or(0);
    let max_bytes = usize::try_from(r.max_bytes)
        .unwrap_or(0)
        .min(shard.config.fetch_max_bytes);
    // The records answered count against the shard's in-flight bytes until written.
    let request_bytes = held.bytes();
    let records_in_trailer = r.records_in_trailer;
    let requested = r.partitions.unwrap_or_default();
    let mut out: Vec<FetchPartitionResultT> = Vec::with_capacity(requested.len());
    let mut parts = Vec::new();
    let mut slots = Vec::new();
    for (i, p) in requested.into_iter().enumerate() {
        let topic = p.topic.unwrap_or_default();
        let err = not_here(shard, &topic, p.partition);
        out.push(FetchPartitionResultT {
            topic: Some(topic.clone()),
            partition: p.partition,
            error: err.clone(),
            ..Default::default()
        });
        if err.is_none() {
            slots.push(i);
            parts.push(FetchPart {
                topic,
                partition: p.partition,
                offset: strand_storage::KafkaOffset(p.offset),
                max_bytes: usize::try_from(p.max_bytes).unwrap_or(0),
                read_committed: false,
            });
        }
    }
    let (room, mut results) =
        read_until(shard, &parts, (held, max_bytes), min_bytes, deadline).await;
    let records: usize = results.iter().map(|r| r.records.len()).sum();
    if !held.cover(records, room, deadline).await {
        for r in &mut results {
            r.records = RecordSet::default();
        }
    }
    held.shrink_to(request_bytes + results.iter().map(|r| r.records.len()).sum::<usize>());
    // `slots` rise, so the trailer's pieces follow the partitions' order.
    let mut trailer = Vec::new();
    for (slot, r) in slots.into_iter().zip(results) {
        let Some(o) = out.get_mut(slot) else { continue };
        o.high_watermark = r.high_watermark.0;
        o.log_start_offset = r.log_start_offset.0;
        o.error = r.error.as_ref().and_then(kafka_error);
        if r.records.is_empty() {
            continue;
        }
        // A fetch answer is bounded by `fetch_max_bytes`, far below 4 GiB.
        match u32::try_from(r.records.len()) {
            Ok(n) if records_in_trailer => {
                o.trailer_bytes = n;
                trailer.extend(r.records.pieces(PIECE_MIN_BYTES));
            }
            _ => o.records = Some(r.records.to_bytes().to_vec()),
        }
    }
    Answer {
        body: BodyT::FetchResponse(Box::new(FetchResponseT {
            partitions: Some(out),
        })),
        trailer,
    }
}

/// Reads `parts` on this shard until `min_bytes` are there, an error shows or `deadline`
/// passes, waiting for appends in between. Room for up to `max_bytes` of records is taken
/// into `held` for each read and given back before a wait (a long poll holds only its
/// request's bytes). Returns the room of the last read and its results.
async fn read_until(
    shard: &Rc<Shard>,
    parts: &[FetchPart],
    (held, max_bytes): (&Held, usize),
    min_bytes: usize,
    deadline: std::time::Instant,
) -> (usize, Vec<FetchResult>) {
    let request_bytes = held.bytes();
    let mut results: Vec<FetchResult> = Vec::new();
    let mut room = 0;
    while !parts.is_empty() {
        room = held.take_room(max_bytes, deadline).await;
        let limit = FetchLimit {
            max_bytes: room,
            first_batch_whole: room > 0,
        };
        let op = Op::Fetch {
            parts: parts.to_vec(),
            limit,
        };
        let Reply::Fetch(rs) = shard.call(shard.id, op).await else {
            break;
        };
        results = rs;
        let total: usize = results.iter().map(|r| r.records.len()).sum();
        let any_error = results.iter().any(|r| r.error.is_some());
        let now = crate::common::clock::now();
        if total >= min_bytes.max(1) || any_error || now >= deadline {
            break;
        }
        for r in &mut results {
            r.records = RecordSet::default();
        }
        held.shrink_to(request_bytes);
        // Wake when a high watermark passes what this read saw.
        let waits = parts
            .iter()
            .zip(&results)
            .map(|(p, r)| (p.topic.clone(), p.partition, p.offset.max(r.high_watermark)))
            .collect();
        let wait = Op::WaitAppend {
            parts: waits,
            timeout: deadline - now,
        };
        shard.call(shard.id, wait).await;
    }
    (room, results)
}

async fn list_offsets(shard: &Rc<Shard>, r: ListOffsetsRequestT) -> BodyT {
    let requested = r.partitions.unwrap_or_default();
    let mut out = Vec::with_capacity(requested.len());
    let mut parts = Vec::new();
    let mut slots = Vec::new();
    for (i, p) in requested.into_iter().enumerate() {
        let topic = p.topic.unwrap_or_default();
        let err = not_here(shard, &topic, p.partition);
        out.push(ListOffsetsPartitionResultT {
            topic: Some(topic.clone()),
            partition: p.partition,
            error: err.clone(),
            ..Default::default()
        });
        if err.is_none() {
            slots.push(i);
            parts.push(ListOffsetsPart {
                topic,
                partition: p.partition,
                timestamp: p.timestamp_ms,
                read_committed: false,
            });
        }
    }
    if !parts.is_empty() {
        if let Reply::ListOffsets(rs) = shard.call(shard.id, Op::ListOffsets { parts }).await {
            for (slot, (e, ts, offset, _epoch)) in slots.into_iter().zip(rs) {
                if let Some(o) = out.get_mut(slot) {
                    o.error = e.as_ref().and_then(kafka_error);
                    o.offset = offset.0;
                    o.timestamp_ms = ts;
                }
            }
        }
    }
    BodyT::ListOffsetsResponse(Box::new(ListOffsetsResponseT {
        partitions: Some(out),
    }))
}

/// The coordinator shard of `group`, counting the hop when it is another shard.
fn coordinator(shard: &Shard, group: &str) -> Result<usize, Option<Box<ErrorT>>> {
    if group.is_empty() {
        return Err(code_error(code::INVALID_GROUP_ID, "group id is empty"));
    }
    let target =
        crate::gateway::kafka::groups::coordinator_shard(shard, group).ok_or_else(|| {
            code_error(
                code::COORDINATOR_NOT_AVAILABLE,
                "the offsets topic does not exist yet",
            )
        })?;
    if target != shard.id {
        shard.count_native_hop();
    }
    Ok(target)
}

async fn commit_offsets(shard: &Rc<Shard>, r: CommitOffsetsRequestT) -> BodyT {
    let group = r.group.unwrap_or_default();
    let offsets: Vec<(String, i32, Committed)> = r
        .offsets
        .unwrap_or_default()
        .into_iter()
        .map(|o| {
            let committed = Committed {
                offset: o.offset,
                leader_epoch: -1,
                metadata: o.metadata.unwrap_or_default(),
                commit_timestamp_ms: crate::common::clock::wall_ms(),
            };
            (o.topic.unwrap_or_default(), o.partition, committed)
        })
        .collect();
    let keys: Vec<(String, i32)> = offsets.iter().map(|(t, p, _)| (t.clone(), *p)).collect();
    let codes: Vec<i16> = match coordinator(shard, &group) {
        Err(e) => vec![e.map_or(codes::UNKNOWN_SERVER_ERROR, |e| e.code); keys.len()],
        Ok(target) => match shard
            .call(target, Op::CommitOffsets { group, offsets })
            .await
        {
            Reply::Codes(c) => c,
            _ => vec![code::COORDINATOR_NOT_AVAILABLE; keys.len()],
        },
    };
    let partitions = keys
        .into_iter()
        .enumerate()
        .map(|(i, (topic, partition))| {
            let code = codes
                .get(i)
                .copied()
                .unwrap_or(code::COORDINATOR_NOT_AVAILABLE);
            PartitionErrorT {
                topic: Some(topic),
                partition,
                error: code_error(code, "offset commit failed"),
            }
        })
        .collect();
    BodyT::CommitOffsetsResponse(Box::new(CommitOffsetsResponseT {
        partitions: Some(partitions),
    }))
}

async fn fetch_offsets(shard: &Rc<Shard>, r: FetchOffsetsRequestT) -> BodyT {
    let group = r.group.unwrap_or_default();
    let target = match coordinator(shard, &group) {
        Ok(t) => t,
        Err(error) => {
            return BodyT::FetchOffsetsResponse(Box::new(FetchOffsetsResponseT {
                offsets: None,
                error,
            }))
        }
    };
    // Requested partitions grouped by topic, in first-seen order.
    let mut wanted: Vec<(String, Vec<i32>)> = Vec::new();
    for tp in r.partitions.unwrap_or_default() {
        let topic = tp.topic.unwrap_or_default();
        match wanted.iter_mut().find(|(t, _)| *t == topic) {
            Some((_, ps)) => ps.push(tp.partition),
            None => wanted.push((topic, vec![tp.partition])),
        }
    }
    let wanted = (!wanted.is_empty()).then_some(wanted);
    match shard
        .call(target, Op::OffsetFetch(vec![(group, wanted, None)], false))
        .await
    {
        Reply::Offsets(mut groups) if !groups.is_empty() => {
            let offsets = match groups.swap_remove(0) {
                Ok(o) => o,
                Err(code) => {
                    return BodyT::FetchOffsetsResponse(Box::new(FetchOffsetsResponseT {
                        offsets: None,
                        error: code_error(code, "this node does not coordinate the group now"),
                    }))
                }
            };
            let offsets = offsets
                .into_iter()
                .flat_map(|(topic, ps)| {
                    ps.into_iter().map(move |(partition, c, _)| GroupOffsetT {
                        topic: Some(topic.clone()),
                        partition,
                        offset: c.as_ref().map_or(-1, |c| c.offset),
                        metadata: c.map(|c| c.metadata),
                    })
                })
                .collect();
            BodyT::FetchOffsetsResponse(Box::new(FetchOffsetsResponseT {
                offsets: Some(offsets),
                error: None,
            }))
        }
        _ => BodyT::FetchOffsetsResponse(Box::new(FetchOffsetsResponseT {
            offsets: None,
            error: code_error(
                code::COORDINATOR_NOT_AVAILABLE,
                "coordinator shard unavailable",
            ),
        })),
    }
}

async fn init_producer_id(shard: &Rc<Shard>, r: InitProducerIdRequestT) -> BodyT {
    let answer = |producer_id, producer_epoch, error| {
        BodyT::InitProducerIdResponse(Box::new(InitProducerIdResponseT {
            producer_id,
            producer_epoch,
            error,
        }))
    };
    if r.transactional_id.is_some_and(|t| !t.is_empty()) {
        return answer(
            -1,
            -1,
            code_error(codes::INVALID_REQUEST, "transactions are not supported"),
        );
    }
    // Producer ids come from the metadata log on shard 0.
    if shard.id != 0 {
        shard.count_native_hop();
    }
    match shard.call(0, Op::AllocateProducerId).await {
        Reply::ProducerId(Ok(id)) => answer(id, 0, None),
        Reply::ProducerId(Err(e)) => answer(
            -1,
            -1,
            code_error(e.kafka_code(), &format!("no producer id: {e}")),
        ),
        _ => answer(
            -1,
            -1,
            code_error(codes::UNKNOWN_SERVER_ERROR, "shard 0 unavailable"),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::retriable;

    #[test]
    fn retriable_codes_follow_kafka() {
        assert!(retriable(6)); // NOT_LEADER_OR_FOLLOWER
        assert!(retriable(7)); // REQUEST_TIMED_OUT
        assert!(!retriable(1)); // OFFSET_OUT_OF_RANGE
        assert!(!retriable(10)); // MESSAGE_TOO_LARGE
        assert!(!retriable(45)); // OUT_OF_ORDER_SEQUENCE_NUMBER
    }
}
