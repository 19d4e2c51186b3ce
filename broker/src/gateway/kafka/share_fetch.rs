//! ShareFetch and ShareAcknowledge (KIP-932), served only with `group_share_enable`: the
//! member's share session on this shard (`share::session`), then each partition's work on
//! its shard (`Op::Share`: acknowledgements, a session's release, acquisition of records).
//!
//! Invariants: a request its session refuses gets only the top-level error and applies no
//! acknowledgement; every partition a request acknowledges appears in the answer (the Java
//! client fails one that does not); a ShareFetch that acquired nothing waits, up to its
//! `MaxWaitMs`, trying again at once when one of its partitions is appended to, and every
//! `SHARE_FETCH_POLL` otherwise (records released, or whose lock ran out, meanwhile),
//! acknowledging only the first time.

use std::collections::{BTreeMap, BTreeSet};
use std::rc::Rc;
use std::time::Duration;

use bytes::Bytes;
use kafka_protocol::messages::share_fetch_response::{
    AcquiredRecords, PartitionData, ShareFetchableTopicResponse,
};
use kafka_protocol::messages::*;

use super::response::{Response, PIECE_MIN_BYTES};
use super::{Ctx, FramingError};
use crate::common::errors::code;
use crate::security::acl::{op as acl_op, resource};
use crate::shard::ops::{Op, Reply, ShareDone, ShareWork};
use crate::shard::Shard;
use crate::share::partition::AckType;
use crate::share::session::{Step, TopicPartition};
use strand_storage::KafkaOffset;

/// How often a waiting ShareFetch looks again for records to acquire.
const SHARE_FETCH_POLL: Duration = Duration::from_millis(50);
/// Longest wait accepted (as Fetch's).
const MAX_WAIT_MS_MAX: u64 = 30_000;

/// Acknowledgements of one partition as the request gave them: Err for a malformed batch
/// list (INVALID_REQUEST for that partition, as Kafka's `validateAcknowledgementBatches`).
type Acks = Result<Vec<(i64, i64, Vec<AckType>)>, i16>;

/// Reads a partition's acknowledgement batches, checked as Kafka checks them.
fn read_acks<'a>(batches: impl Iterator<Item = (i64, i64, &'a [i8])>) -> Acks {
    let mut out = Vec::new();
    let mut previous_last: Option<i64> = None;
    for (first, last, types) in batches {
        let width = last.checked_sub(first).and_then(|w| w.checked_add(1));
        let bad_width = width.is_none_or(|w| w < 1);
        let out_of_order = previous_last.is_some_and(|p| first < p);
        let bad_count =
            types.is_empty() || (types.len() > 1 && width != i64::try_from(types.len()).ok());
        let types: Option<Vec<AckType>> = types.iter().map(|&t| AckType::from_wire(t)).collect();
        let (false, false, false, Some(types)) = (bad_width, out_of_order, bad_count, types) else {
            return Err(code::INVALID_REQUEST);
        };
        previous_last = Some(last);
        out.push((first, last, types));
    }
    Ok(out)
}

/// One partition a request names: its topic (by id, and its name if known), index,
/// acknowledgements, and its error before any work (unknown id, not readable).
struct Named {
    topic_id: uuid::Uuid,
    topic: Option<String>,
    partition: i32,
    acks: Acks,
    error: i16,
}

/// Each partition a ShareFetch or ShareAcknowledge names (`$topics`: its topics, whose
/// partitions carry acknowledgement batches), looked up, its acknowledgements read. A
/// macro: the two requests' topic and batch types differ but have the same fields.
macro_rules! named_of {
    ($shard:expr, $ctx:expr, $topics:expr) => {
        $topics
            .iter()
            .flat_map(|t| {
                t.partitions.iter().map(move |p| {
                    let batches = p.acknowledgement_batches.iter();
                    let acks = read_acks(batches.map(|b| {
                        (
                            b.first_offset,
                            b.last_offset,
                            b.acknowledge_types.as_slice(),
                        )
                    }));
                    name_partition($shard, $ctx, t.topic_id, p.partition_index, acks)
                })
            })
            .collect::<Vec<Named>>()
    };
}

fn name_partition(
    shard: &Shard,
    ctx: &Ctx,
    topic_id: uuid::Uuid,
    partition: i32,
    acks: Acks,
) -> Named {
    let meta = shard.metadata();
    let topic = meta.topic_name_of(topic_id.as_u128()).map(str::to_string);
    let error = match &topic {
        None => code::UNKNOWN_TOPIC_ID,
        Some(t) if !ctx.allowed(shard, acl_op::READ, resource::TOPIC, t) => {
            code::TOPIC_AUTHORIZATION_FAILED
        }
        Some(_) => code::NONE,
    };
    Named {
        topic_id,
        topic,
        partition,
        acks,
        error,
    }
}

/// The work for each partition, grouped by its shard on this node; a partition with no
/// shard here is answered NOT_LEADER_OR_FOLLOWER.
/// Work per shard of this node, and the work answered at once.
type Split = (BTreeMap<usize, Vec<ShareWork>>, Vec<(ShareWork, ShareDone)>);

fn split_work(shard: &Shard, work: Vec<ShareWork>) -> Split {
    let meta = shard.metadata();
    let mut by_shard: BTreeMap<usize, Vec<ShareWork>> = BTreeMap::new();
    let mut not_here = Vec::new();
    for w in work {
        match meta.shard_of(&w.topic, w.partition) {
            Some(s) => by_shard.entry(s).or_default().push(w),
            None => not_here.push((
                w,
                ShareDone {
                    error: code::NOT_LEADER_OR_FOLLOWER,
                    ..ShareDone::default()
                },
            )),
        }
    }
    (by_shard, not_here)
}

/// Runs the work on the partitions' shards; the answers keyed by (topic, partition).
async fn run_work(shard: &Rc<Shard>, work: Vec<ShareWork>) -> BTreeMap<TopicPartition, ShareDone> {
    let (by_shard, not_here) = split_work(shard, work);
    let mut out: BTreeMap<TopicPartition, ShareDone> = not_here
        .into_iter()
        .map(|(w, d)| ((w.topic, w.partition), d))
        .collect();
    for (target, ws) in by_shard {
        let keys: Vec<TopicPartition> = ws.iter().map(|w| (w.topic.clone(), w.partition)).collect();
        let done = match shard.call(target, Op::Share(ws)).await {
            Reply::Share(done) => done,
            _ => Vec::new(),
        };
        let mut done = done.into_iter();
        for k in keys {
            let d = done.next().unwrap_or(ShareDone {
                error: code::UNKNOWN_SERVER_ERROR,
                ..ShareDone::default()
            });
            out.insert(k, d);
        }
    }
    out
}

/// The session's partitions and the acknowledged ones as work items.
fn work_items(
    member: (&str, &str),
    named: &[Named],
    step: &Step,
    max_records: usize,
    max_bytes: usize,
) -> Vec<ShareWork> {
    let mut acks: BTreeMap<TopicPartition, Vec<(i64, i64, Vec<AckType>)>> = BTreeMap::new();
    for n in named {
        if let (Some(t), Ok(a), code::NONE) = (&n.topic, &n.acks, n.error) {
            if !a.is_empty() {
                acks.entry((t.clone(), n.partition))
                    .or_default()
                    .extend(a.iter().cloned());
            }
        }
    }
    let (fetching, release): (BTreeSet<TopicPartition>, bool) = match step {
        Step::Fetch(ps) => (ps.clone(), false),
        Step::Close(ps) => (ps.clone(), true),
    };
    let every: BTreeSet<TopicPartition> = fetching.iter().chain(acks.keys()).cloned().collect();
    let share = if release || fetching.is_empty() {
        0
    } else {
        (max_bytes / fetching.len()).max(1)
    };
    every
        .into_iter()
        .map(|tp| ShareWork {
            group: member.0.to_string(),
            member: member.1.to_string(),
            acks: acks.remove(&tp).unwrap_or_default(),
            release: release && fetching.contains(&tp),
            max_records: if !release && fetching.contains(&tp) {
                max_records
            } else {
                0
            },
            max_bytes: share,
            topic: tp.0,
            partition: tp.1,
        })
        .collect()
}

/// The member's session after this ShareFetch (partitions it names are added, the
/// forgotten ones removed), or the top-level error that refuses it.
fn session_step(
    shard: &Shard,
    (member, conn): ((&str, &str), u64),
    r: &ShareFetchRequest,
    named: &[Named],
) -> Result<Step, i16> {
    let meta = shard.metadata();
    let forgotten: Vec<TopicPartition> = r
        .forgotten_topics_data
        .iter()
        .filter_map(|t| {
            let name = meta.topic_name_of(t.topic_id.as_u128())?.to_string();
            Some(t.partitions.iter().map(move |&p| (name.clone(), p)))
        })
        .flatten()
        .collect();
    let added: Vec<TopicPartition> = named
        .iter()
        .filter(|n| n.error == code::NONE)
        .filter_map(|n| Some((n.topic.clone()?, n.partition)))
        .collect();
    let has_acks = named
        .iter()
        .any(|n| n.acks.as_ref().is_ok_and(|a| !a.is_empty()));
    shard.share_sessions.borrow_mut().fetch(
        member,
        r.share_session_epoch,
        (&added, &forgotten),
        has_acks,
        conn,
    )
}

/// Connection `conn` ended: the share sessions it opened end too, and their members'
/// records go back, their delivery not counted (as Kafka's disconnect listener does).
pub async fn connection_closed(shard: &Rc<Shard>, conn: u64) {
    let closed = shard.share_sessions.borrow_mut().closed(conn);
    for ((group, member), partitions) in closed {
        let work = work_items((&group, &member), &[], &Step::Close(partitions), 0, 0);
        run_work(shard, work).await;
    }
}

/// ShareFetch.
pub async fn fetch(shard: &Rc<Shard>, ctx: &Ctx, body: Bytes) -> Result<Response, FramingError> {
    let r: ShareFetchRequest = ctx.decode(body)?;
    let top = |error: i16| -> Result<Response, FramingError> {
        Ok(ctx
            .respond(&ShareFetchResponse::default().with_error_code(error))?
            .into())
    };
    let (Some(group), Some(member)) = (r.group_id.as_ref(), r.member_id.as_ref()) else {
        return top(code::INVALID_REQUEST);
    };
    let (group, member) = (group.0.to_string(), member.to_string());
    if !ctx.allowed(shard, acl_op::READ, resource::GROUP, &group) {
        return top(code::GROUP_AUTHORIZATION_FAILED);
    }
    super::share_groups::ensure_share_state_topic(shard).await;
    let named = named_of!(shard, ctx, r.topics);
    let step = session_step(shard, ((&group, &member), ctx.conn_id), &r, &named);
    let step = match step {
        Ok(step) => step,
        Err(error) => return top(error),
    };
    let max_records = usize::try_from(r.max_records).unwrap_or(0).max(1);
    let max_bytes = usize::try_from(r.max_bytes)
        .unwrap_or(0)
        .min(shard.config.fetch_max_bytes);
    let deadline = crate::common::clock::now()
        + Duration::from_millis(
            u64::try_from(r.max_wait_ms)
                .unwrap_or(0)
                .min(MAX_WAIT_MS_MAX),
        );
    let work = work_items((&group, &member), &named, &step, max_records, max_bytes);
    let mut done = run_work(shard, work).await;
    if matches!(step, Step::Fetch(ref ps) if !ps.is_empty()) {
        let again = || work_items((&group, &member), &[], &step, max_records, max_bytes);
        wait_for_records(shard, &again, deadline, &mut done).await;
    }
    answer_fetch(shard, (ctx, &group), &named, done)
}

/// While nothing was acquired and no partition failed, runs `work()` (the fetch without
/// its acknowledgements) again every `SHARE_FETCH_POLL` until `deadline`.
async fn wait_for_records(
    shard: &Rc<Shard>,
    work: &dyn Fn() -> Vec<ShareWork>,
    deadline: std::time::Instant,
    done: &mut BTreeMap<TopicPartition, ShareDone>,
) {
    while done
        .values()
        .all(|d| d.acquired.is_empty() && d.error == code::NONE)
    {
        let now = crate::common::clock::now();
        if now >= deadline {
            break;
        }
        wait_for_appends(shard, done, SHARE_FETCH_POLL.min(deadline - now)).await;
        for (k, d) in run_work(shard, work()).await {
            let slot = done.entry(k).or_default();
            slot.error = d.error;
            slot.records = d.records;
            slot.acquired = d.acquired;
            slot.high_watermark = d.high_watermark;
        }
    }
}

/// Waits until one of the partitions of `done` has records past the high watermark its
/// work saw (an append: wakes at once), or `timeout` (records released, or whose lock ran
/// out, are seen at the next look).
async fn wait_for_appends(
    shard: &Rc<Shard>,
    done: &BTreeMap<TopicPartition, ShareDone>,
    timeout: Duration,
) {
    let meta = shard.metadata();
    let mut by_shard: BTreeMap<usize, Vec<(String, i32, KafkaOffset)>> = BTreeMap::new();
    for ((topic, p), d) in done {
        if let Some(s) = meta.shard_of(topic, *p) {
            let seen = KafkaOffset(d.high_watermark);
            by_shard
                .entry(s)
                .or_default()
                .push((topic.clone(), *p, seen));
        }
    }
    if by_shard.is_empty() {
        crate::runtime::task::sleep(timeout).await;
        return;
    }
    let waits = by_shard
        .into_iter()
        .map(|(s, parts)| Box::pin(shard.call(s, Op::WaitAppend { parts, timeout })));
    let _ = futures::future::select_all(waits).await;
}

/// The ShareFetch answer: every partition with an error, records or acknowledgements.
fn answer_fetch(
    shard: &Shard,
    (ctx, group): (&Ctx, &str),
    named: &[Named],
    mut done: BTreeMap<TopicPartition, ShareDone>,
) -> Result<Response, FramingError> {
    let meta = shard.metadata();
    let mut by_topic: BTreeMap<uuid::Uuid, Vec<PartitionData>> = BTreeMap::new();
    // Partitions the request named that did no work (an unknown id, not readable) carry
    // their error; a malformed acknowledgement list, its acknowledgement error.
    for n in named {
        let ack_error = n.acks.as_ref().err().copied().unwrap_or(code::NONE);
        match &n.topic {
            Some(t) if n.error == code::NONE => {
                if ack_error != code::NONE {
                    done.entry((t.clone(), n.partition)).or_default().ack_error = ack_error;
                }
            }
            _ => by_topic.entry(n.topic_id).or_default().push(
                PartitionData::default()
                    .with_partition_index(n.partition)
                    .with_error_code(n.error)
                    .with_acknowledge_error_code(ack_error)
                    .with_records(Some(Bytes::new())),
            ),
        }
    }
    let mut sources = Vec::new();
    for ((topic, p), d) in std::mem::take(&mut done) {
        let Some(id) = meta.topics.get(&topic).map(|t| uuid::Uuid::from_u128(t.id)) else {
            continue;
        };
        if d.records.len() >= PIECE_MIN_BYTES {
            sources.push(d.records.clone());
        }
        let acquired = d
            .acquired
            .iter()
            .map(|a| {
                AcquiredRecords::default()
                    .with_first_offset(a.first)
                    .with_last_offset(a.last)
                    .with_delivery_count(i16::try_from(a.delivery_count).unwrap_or(i16::MAX))
            })
            .collect();
        by_topic.entry(id).or_default().push(
            PartitionData::default()
                .with_partition_index(p)
                .with_error_code(d.error)
                .with_acknowledge_error_code(d.ack_error)
                .with_records(Some(d.records))
                .with_acquired_records(acquired),
        );
    }
    let responses = by_topic
        .into_iter()
        .map(|(id, partitions)| {
            ShareFetchableTopicResponse::default()
                .with_topic_id(id)
                .with_partitions(partitions)
        })
        .collect();
    let lock_ms = crate::cluster::group_config::number(
        meta.group_configs.get(group),
        crate::cluster::group_config::SHARE_RECORD_LOCK_DURATION_MS,
        shard.config.group_share_record_lock_duration_ms,
    );
    let body = ShareFetchResponse::default()
        .with_acquisition_lock_timeout_ms(i32::try_from(lock_ms).unwrap_or(i32::MAX))
        .with_responses(responses);
    ctx.respond_pieces(&body, &super::response::RecordPieces::of_sources(sources))
}

/// ShareAcknowledge.
pub async fn acknowledge(shard: &Rc<Shard>, ctx: &Ctx, body: Bytes) -> Result<Bytes, FramingError> {
    let r: ShareAcknowledgeRequest = ctx.decode(body)?;
    let top = |error: i16| ctx.respond(&ShareAcknowledgeResponse::default().with_error_code(error));
    let (Some(group), Some(member)) = (r.group_id.as_ref(), r.member_id.as_ref()) else {
        return top(code::INVALID_REQUEST);
    };
    let (group, member) = (group.0.to_string(), member.to_string());
    if !ctx.allowed(shard, acl_op::READ, resource::GROUP, &group) {
        return top(code::GROUP_AUTHORIZATION_FAILED);
    }
    let named = named_of!(shard, ctx, r.topics);
    let step = shard
        .share_sessions
        .borrow_mut()
        .acknowledge((&group, &member), r.share_session_epoch);
    let step = match step {
        Ok(Step::Fetch(_)) => Step::Fetch(BTreeSet::new()),
        Ok(close) => close,
        Err(error) => return top(error),
    };
    let work = work_items((&group, &member), &named, &step, 0, 0);
    let done = run_work(shard, work).await;
    ctx.respond(&answer_acknowledge(&named, &done))
}

/// The ShareAcknowledge answer: a code for every partition the request named.
fn answer_acknowledge(
    named: &[Named],
    done: &BTreeMap<TopicPartition, ShareDone>,
) -> ShareAcknowledgeResponse {
    use kafka_protocol::messages::share_acknowledge_response::{
        PartitionData as AckData, ShareAcknowledgeTopicResponse,
    };
    let mut by_topic: BTreeMap<uuid::Uuid, Vec<AckData>> = BTreeMap::new();
    for n in named {
        let code = if n.error != code::NONE {
            n.error
        } else if let Err(e) = n.acks {
            e
        } else {
            n.topic
                .as_ref()
                .and_then(|t| done.get(&(t.clone(), n.partition)))
                .map_or(code::NONE, |d| {
                    if d.error != code::NONE {
                        d.error
                    } else {
                        d.ack_error
                    }
                })
        };
        by_topic.entry(n.topic_id).or_default().push(
            AckData::default()
                .with_partition_index(n.partition)
                .with_error_code(code),
        );
    }
    let responses = by_topic
        .into_iter()
        .map(|(id, partitions)| {
            ShareAcknowledgeTopicResponse::default()
                .with_topic_id(id)
                .with_partitions(partitions)
        })
        .collect();
    ShareAcknowledgeResponse::default().with_responses(responses)
}
