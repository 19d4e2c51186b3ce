//! `strandctl consume`: print records of a topic from explicit offsets or from a group's
//! committed offsets (Fetch, ListOffsets, OffsetFetch, OffsetCommit). Each partition is
//! fetched from its leader (`route`), following leader changes.
//!
//! Invariant: each partition's next offset only moves forward, past the records printed;
//! records below it (a fetch returns whole batches) and control records are skipped, so
//! no record is printed twice. With `--group`, exactly the printed positions are
//! committed at the end.

use std::collections::BTreeMap;
use std::io::Write;
use std::time::{Duration, Instant};

use bytes::{Buf, Bytes};
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::{BrokerId, FetchRequest, TopicName};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::records::{Record, RecordBatchDecoder};

use crate::cli::{ConsumeArgs, Format, StartOffset};
use crate::kafka::{check_code, KafkaClient, KafkaError};
use crate::offsets::{self, TopicPartition};
use crate::output::text_of;
use crate::route::{leader_moved, Router};

/// Most bytes one Fetch response may carry (the broker may exceed it by one batch).
pub const FETCH_BYTES_MAX: i32 = 8 * 1024 * 1024;
/// Most bytes per partition in one Fetch.
const PARTITION_FETCH_BYTES_MAX: i32 = 1024 * 1024;
/// How long the broker holds a Fetch with no data, in milliseconds.
const FETCH_WAIT_MS: i32 = 500;
/// Bytes of a record batch before and including its length field (base offset + length).
const BATCH_LENGTH_FIELD_END: usize = 12;

/// A consumed record, ready to print.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Printed {
    /// Topic.
    pub topic: String,
    /// Partition.
    pub partition: i32,
    /// Offset.
    pub offset: i64,
    /// Timestamp (ms).
    pub timestamp_ms: i64,
    /// Key.
    pub key: Option<Bytes>,
    /// Value.
    pub value: Option<Bytes>,
    /// Headers in order.
    pub headers: Vec<(String, Option<Bytes>)>,
}

impl Printed {
    fn of(topic: &str, partition: i32, r: &Record) -> Printed {
        Printed {
            topic: topic.to_string(),
            partition,
            offset: r.offset,
            timestamp_ms: r.timestamp,
            key: r.key.clone(),
            value: r.value.clone(),
            headers: r
                .headers
                .iter()
                .map(|(k, v)| (k.to_string(), v.clone()))
                .collect(),
        }
    }
}

/// One record as one output line (without the newline).
pub fn format_record(r: &Printed, args: &ConsumeArgs) -> String {
    match args.format {
        Format::Json => {
            let bytes = |b: &Option<Bytes>| b.as_ref().map(|b| text_of(b));
            let headers: serde_json::Map<String, serde_json::Value> = r
                .headers
                .iter()
                .map(|(k, v)| {
                    (
                        k.clone(),
                        bytes(v).map_or(serde_json::Value::Null, Into::into),
                    )
                })
                .collect();
            serde_json::json!({
                "topic": r.topic,
                "partition": r.partition,
                "offset": r.offset,
                "timestamp_ms": r.timestamp_ms,
                "key": bytes(&r.key),
                "value": bytes(&r.value),
                "headers": headers,
            })
            .to_string()
        }
        Format::Text => {
            let mut line = String::new();
            if args.print_headers {
                let hs: Vec<String> = r
                    .headers
                    .iter()
                    .map(|(k, v)| {
                        format!("{k}={}", v.as_ref().map_or(String::new(), |v| text_of(v)))
                    })
                    .collect();
                line.push_str(&hs.join(","));
                line.push('\t');
            }
            if args.print_key {
                line.push_str(&r.key.as_ref().map_or(String::new(), |k| text_of(k)));
                line.push_str(&args.key_separator);
            }
            line.push_str(&r.value.as_ref().map_or(String::new(), |v| text_of(v)));
            line
        }
    }
}

/// Splits fetched bytes into whole batches; a truncated last batch (allowed in a Fetch
/// response) is dropped and fetched again next time.
pub fn whole_batches(mut records: Bytes) -> Vec<Bytes> {
    let mut out = Vec::new();
    while records.len() >= BATCH_LENGTH_FIELD_END {
        let len = i32::from_be_bytes([records[8], records[9], records[10], records[11]]);
        let Some(total) = usize::try_from(len)
            .ok()
            .and_then(|l| l.checked_add(BATCH_LENGTH_FIELD_END))
        else {
            break;
        };
        if total > records.len() {
            break;
        }
        out.push(records.split_to(total));
    }
    out
}

/// Runs `consume`, writing records to `out` as they arrive; returns the summary for stderr.
pub fn run(
    client: &mut KafkaClient,
    args: &ConsumeArgs,
    timeout: Duration,
    out: &mut dyn Write,
) -> anyhow::Result<String> {
    let mut router = Router::new(client, &args.topic, false)?;
    let partitions: Vec<TopicPartition> = match args.partition {
        Some(p) => vec![(args.topic.clone(), p)],
        None => (0..i32::try_from(router.partitions()).unwrap_or(i32::MAX))
            .map(|p| (args.topic.clone(), p))
            .collect(),
    };
    let mut coordinator = match &args.group {
        Some(g) => offsets::coordinator(client, g, timeout)?,
        None => None,
    };
    let committed = match &args.group {
        Some(g) => {
            offsets::committed(coordinator.as_mut().unwrap_or(client), g, Some(&partitions))?
        }
        None => BTreeMap::new(),
    };
    let mut next = start_offsets(client, &partitions, args.offset, &committed)?;
    let consumed = fetch_loop(client, &mut router, args, &mut next, out)?;
    if let Some(g) = &args.group {
        let moved: BTreeMap<TopicPartition, i64> = next
            .iter()
            .filter(|(tp, o)| committed.get(*tp) != Some(*o))
            .map(|(tp, o)| (tp.clone(), *o))
            .collect();
        if !moved.is_empty() {
            offsets::commit(coordinator.as_mut().unwrap_or(client), g, &moved)?;
        }
    }
    Ok(format!("consumed {consumed} records\n"))
}

fn start_offsets(
    client: &mut KafkaClient,
    partitions: &[TopicPartition],
    start: StartOffset,
    committed: &BTreeMap<TopicPartition, i64>,
) -> Result<BTreeMap<TopicPartition, i64>, KafkaError> {
    let missing: Vec<TopicPartition> = partitions
        .iter()
        .filter(|tp| !committed.contains_key(*tp))
        .cloned()
        .collect();
    let mut next: BTreeMap<TopicPartition, i64> = committed
        .iter()
        .filter(|(tp, _)| partitions.contains(tp))
        .map(|(tp, o)| (tp.clone(), *o))
        .collect();
    let resolved = match start {
        StartOffset::At(o) => missing.into_iter().map(|tp| (tp, o)).collect(),
        StartOffset::Earliest if !missing.is_empty() => {
            offsets::list_offsets(client, &missing, offsets::EARLIEST_TIMESTAMP)?
        }
        StartOffset::Latest if !missing.is_empty() => {
            offsets::list_offsets(client, &missing, offsets::LATEST_TIMESTAMP)?
        }
        _ => BTreeMap::new(),
    };
    next.extend(resolved);
    Ok(next)
}

fn fetch_loop(
    seed: &mut KafkaClient,
    router: &mut Router,
    args: &ConsumeArgs,
    next: &mut BTreeMap<TopicPartition, i64>,
    out: &mut dyn Write,
) -> anyhow::Result<u64> {
    let idle = Duration::from_millis(args.timeout_ms);
    let mut consumed = 0u64;
    let mut last_record_at = Instant::now();
    while args.num.is_none_or(|n| consumed < n) && last_record_at.elapsed() < idle {
        let mut by_leader: BTreeMap<i32, BTreeMap<TopicPartition, i64>> = BTreeMap::new();
        let mut moved: Option<KafkaError> = None;
        for (tp, o) in next.iter() {
            match router.leader_of(tp.1) {
                Some(l) => {
                    by_leader.entry(l).or_default().insert(tp.clone(), *o);
                }
                None => {
                    moved.get_or_insert(KafkaError::Broker {
                        what: format!("fetch {} partition {}", tp.0, tp.1),
                        name: "LEADER_NOT_AVAILABLE".into(),
                        code: 5,
                        detail: String::new(),
                    });
                }
            }
        }
        // The leaders are asked one after the other: each may hold its Fetch this long.
        let leaders = i32::try_from(by_leader.len().max(1)).unwrap_or(1);
        let wait_ms = i32::try_from(idle.saturating_sub(last_record_at.elapsed()).as_millis())
            .unwrap_or(i32::MAX)
            .clamp(1, FETCH_WAIT_MS)
            / leaders;
        let (mut records, mut batch_ends) = (Vec::new(), Vec::new());
        for (leader, at) in by_leader {
            let client = match router.client(leader) {
                Ok(c) => c,
                Err(e @ KafkaError::Connect { .. }) => {
                    moved.get_or_insert(e);
                    continue;
                }
                Err(e) => return Err(e.into()),
            };
            let got = fetch_once(client, &args.topic, &at, wait_ms.max(1))?;
            records.extend(got.records);
            batch_ends.extend(got.batch_ends);
            if let Some(e) = got.moved {
                moved.get_or_insert(e);
            }
        }
        let mut all_printed = true;
        for r in records {
            if args.num.is_some_and(|n| consumed >= n) {
                all_printed = false;
                break;
            }
            writeln!(out, "{}", format_record(&r, args))?;
            next.insert((r.topic.clone(), r.partition), r.offset + 1);
            consumed += 1;
            last_record_at = Instant::now();
        }
        // Past batches without records to print (emptied by compaction, control batches).
        if all_printed {
            for (tp, end) in batch_ends {
                let at = next.entry(tp).or_insert(end);
                *at = (*at).max(end);
            }
        }
        out.flush()?;
        if let Some(why) = moved {
            router.refresh(seed, why)?;
        }
    }
    Ok(consumed)
}

/// What one Fetch brought.
struct Fetched {
    /// The new records, in offset order per partition.
    records: Vec<Printed>,
    /// Per partition, the offset after the last batch fetched (records or not).
    batch_ends: Vec<(TopicPartition, i64)>,
    /// The error of a partition this broker no longer leads (its records come later,
    /// from its new leader).
    moved: Option<KafkaError>,
}

/// One Fetch at the `next` offsets.
fn fetch_once(
    client: &mut KafkaClient,
    topic: &str,
    next: &BTreeMap<TopicPartition, i64>,
    wait_ms: i32,
) -> anyhow::Result<Fetched> {
    let parts = next
        .iter()
        .map(|((_, p), o)| {
            FetchPartition::default()
                .with_partition(*p)
                .with_current_leader_epoch(-1)
                .with_fetch_offset(*o)
                .with_log_start_offset(-1)
                .with_partition_max_bytes(PARTITION_FETCH_BYTES_MAX)
        })
        .collect();
    let req = FetchRequest::default()
        .with_replica_id(BrokerId(-1))
        .with_max_wait_ms(wait_ms)
        .with_min_bytes(1)
        .with_max_bytes(FETCH_BYTES_MAX)
        .with_session_epoch(-1)
        .with_topics(vec![FetchTopic::default()
            .with_topic(TopicName(StrBytes::from_string(topic.to_string())))
            .with_partitions(parts)]);
    let resp = client.send(&req)?;
    check_code(resp.error_code, "fetch", None)?;
    let (mut printed, mut batch_ends) = (Vec::new(), Vec::new());
    let mut moved = None;
    for t in &resp.responses {
        for p in &t.partitions {
            let checked = check_code(
                p.error_code,
                &format!("fetch {} partition {}", t.topic.as_str(), p.partition_index),
                None,
            );
            match checked {
                Err(e) if leader_moved(p.error_code) => {
                    moved.get_or_insert(e);
                    continue;
                }
                other => other?,
            }
            let from = next
                .get(&(t.topic.to_string(), p.partition_index))
                .copied()
                .unwrap_or(0);
            let tp = (t.topic.to_string(), p.partition_index);
            for batch in whole_batches(p.records.clone().unwrap_or_default()) {
                if let Ok(view) = strand_wire::RecordBatch::parse(batch.clone()) {
                    batch_ends.push((tp.clone(), view.last_offset() + 1));
                }
                let mut buf = batch;
                let set = RecordBatchDecoder::decode(&mut buf).map_err(|e| {
                    anyhow::anyhow!(
                        "cannot decode a record batch of {} partition {}: {e:#}",
                        t.topic.as_str(),
                        p.partition_index
                    )
                })?;
                debug_assert!(!buf.has_remaining());
                printed.extend(
                    set.records
                        .iter()
                        .filter(|r| !r.control && r.offset >= from)
                        .map(|r| Printed::of(t.topic.as_str(), p.partition_index, r)),
                );
            }
        }
    }
    Ok(Fetched {
        records: printed,
        batch_ends,
        moved,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    fn args(extra: &[&str]) -> ConsumeArgs {
        let cli = crate::cli::Cli::try_parse_from(
            ["strandctl", "consume", "t"].iter().chain(extra.iter()),
        )
        .expect("valid");
        match cli.command {
            crate::cli::Command::Consume(c) => c,
            other => panic!("{other:?}"),
        }
    }

    fn record() -> Printed {
        Printed {
            topic: "t".into(),
            partition: 1,
            offset: 7,
            timestamp_ms: 1000,
            key: Some(Bytes::from_static(b"k")),
            value: Some(Bytes::from_static(b"v \"q\"")),
            headers: vec![
                ("h".into(), Some(Bytes::from_static(b"1"))),
                ("n".into(), None),
            ],
        }
    }

    #[test]
    fn records_format_as_text_and_json() {
        for (flags, want) in [
            (&[][..], "v \"q\""),
            (&["--print-key"][..], "k\tv \"q\""),
            (&["--print-key", "--key-separator", "="][..], "k=v \"q\""),
            (
                &["--print-headers", "--print-key"][..],
                "h=1,n=\tk\tv \"q\"",
            ),
        ] {
            assert_eq!(format_record(&record(), &args(flags)), want, "{flags:?}");
        }
        let json: serde_json::Value =
            serde_json::from_str(&format_record(&record(), &args(&["--format", "json"])))
                .expect("valid json");
        assert_eq!(
            json,
            serde_json::json!({"topic": "t", "partition": 1, "offset": 7, "timestamp_ms": 1000,
                "key": "k", "value": "v \"q\"", "headers": {"h": "1", "n": null}})
        );
    }

    /// kafka-protocol's decoder, which `fetch_once` uses, reads batches as compaction
    /// leaves them: records removed (offset gaps) or none left.
    #[test]
    fn compacted_batches_decode() {
        let mut b = strand_wire::BatchBuilder::new(0);
        for v in [&b"a"[..], b"b", b"c"] {
            b.push(0, Some(b"k"), Some(v), &[]);
        }
        let full = strand_wire::RecordBatch::parse(b.build()).expect("parses");
        let records = strand_wire::records::decode_records(
            full.as_bytes().slice(strand_wire::BATCH_HEADER_BYTES..),
            3,
        )
        .expect("decodes");
        let mut kept = bytes::BytesMut::new();
        strand_wire::records::encode_record(&mut kept, &records[2]);
        let thinned = strand_wire::BatchHeader {
            record_count: 1,
            ..strand_wire::BatchHeader::of(&full)
        }
        .encode(&kept);
        let mut buf = thinned;
        let set = RecordBatchDecoder::decode(&mut buf).expect("thinned batch decodes");
        assert_eq!(set.records.len(), 1);
        assert_eq!(
            (set.records[0].offset, set.records[0].value.as_deref()),
            (2, Some(&b"c"[..]))
        );
        let mut buf = strand_wire::empty_batch(&full);
        let set = RecordBatchDecoder::decode(&mut buf).expect("empty batch decodes");
        assert!(set.records.is_empty());
    }

    #[test]
    fn truncated_batches_are_dropped() {
        let mut b = strand_wire::BatchBuilder::new(0);
        b.push(0, None, Some(b"x"), &[]);
        let one = b.build();
        let mut two = one.to_vec();
        two.extend_from_slice(&one);
        assert_eq!(whole_batches(Bytes::from(two.clone())).len(), 2);
        two.truncate(two.len() - 1);
        assert_eq!(whole_batches(Bytes::from(two)).len(), 1);
        assert!(whole_batches(Bytes::from_static(&[0; 11])).is_empty());
        let mut bad = one.to_vec();
        bad[8..12].copy_from_slice(&(-5i32).to_be_bytes());
        assert!(whole_batches(Bytes::from(bad)).is_empty());
    }
}
