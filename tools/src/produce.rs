//! `strandctl produce`: records from stdin, one per line, into one topic (Produce), each
//! partition's batches sent to its leader (`route`: on a cluster, partitions have
//! different leaders; a leader change is followed, the batch sent again to the new one).
//!
//! Invariant: a record is counted as produced only after the broker's response for its
//! batch carried error code 0 (with `--acks 0` there is no response, and the summary
//! says so). Records are batched per partition, at most `--batch-records` per batch and
//! at most [`BATCH_BYTES_MAX`] bytes, and sent in input order within a partition.

use std::collections::BTreeMap;
use std::io::BufRead;
use std::time::{SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::{ProduceRequest, TopicName};
use kafka_protocol::protocol::StrBytes;
use strand_wire::BatchBuilder;

use crate::cli::{Acks, ProduceArgs};
use crate::kafka::{check_code, KafkaClient, KafkaError};
use crate::route::{leader_moved, Router};

/// Largest batch we build: under Kafka's `message.max.bytes` default (1,048,588) so a
/// default broker accepts it. A single line larger than this goes alone in its batch,
/// and the broker's answer (MESSAGE_TOO_LARGE) is reported.
pub const BATCH_BYTES_MAX: usize = 1_000_000;

/// How long the broker may wait for acknowledgements, in milliseconds.
const PRODUCE_TIMEOUT_MS: i32 = 30_000;

/// The partition Kafka's default partitioner (murmur2) picks for `key`.
pub fn partition_for_key(key: &[u8], partitions: i32) -> i32 {
    let n = u32::try_from(partitions.max(1)).unwrap_or(1);
    i32::try_from(strand_wire::partitioner::partition_for_key(key, n)).unwrap_or(0)
}

/// One input line as a record: (key, value).
pub fn split_line<'a>(line: &'a [u8], separator: Option<&str>) -> (Option<&'a [u8]>, &'a [u8]) {
    let Some(sep) = separator.map(str::as_bytes).filter(|s| !s.is_empty()) else {
        return (None, line);
    };
    match line.windows(sep.len()).position(|w| w == sep) {
        Some(at) => (Some(&line[..at]), &line[at + sep.len()..]),
        None => (None, line),
    }
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

/// Per-partition batches waiting to be sent.
struct Pending {
    batches: BTreeMap<i32, BatchBuilder>,
    produced: BTreeMap<i32, (i64, u64)>,
}

/// Reads stdin and produces; returns the summary to print.
pub fn run(
    client: &mut KafkaClient,
    args: &ProduceArgs,
    input: &mut dyn BufRead,
) -> Result<String, KafkaError> {
    let mut router = Router::new(client, &args.topic, true)?;
    let partitions = i32::try_from(router.partitions()).unwrap_or(i32::MAX);
    let headers: Vec<(&str, Option<&[u8]>)> = args
        .headers
        .iter()
        .map(|(k, v)| (k.as_str(), Some(v.as_bytes())))
        .collect();
    let mut pending = Pending {
        batches: BTreeMap::new(),
        produced: BTreeMap::new(),
    };
    let mut line = Vec::new();
    loop {
        line.clear();
        let n = input
            .read_until(b'\n', &mut line)
            .map_err(|cause| KafkaError::Io {
                addr: "stdin".into(),
                api: kafka_protocol::messages::ApiKey::Produce,
                cause,
            })?;
        if n == 0 {
            break;
        }
        let record = line.strip_suffix(b"\n").unwrap_or(&line);
        let record = record.strip_suffix(b"\r").unwrap_or(record);
        let (key, value) = split_line(record, args.key_separator.as_deref());
        let partition = match (args.partition, key) {
            (Some(p), _) => p,
            (None, Some(k)) => partition_for_key(k, partitions),
            (None, None) => 0,
        };
        let batch = pending
            .batches
            .entry(partition)
            .or_insert_with(|| BatchBuilder::new(now_ms()));
        batch.push(now_ms(), key, Some(value), &headers);
        let full = batch.len() >= i32::try_from(args.batch_records).unwrap_or(i32::MAX)
            || batch.size_bytes() >= BATCH_BYTES_MAX;
        if full {
            send(client, &mut router, args, &mut pending)?;
        }
    }
    send(client, &mut router, args, &mut pending)?;
    Ok(summary(&args.topic, args.acks, &pending.produced))
}

fn summary(topic: &str, acks: Acks, produced: &BTreeMap<i32, (i64, u64)>) -> String {
    let total: u64 = produced.values().map(|(_, n)| n).sum();
    let mut out = format!("produced {total} records to {topic}");
    if acks == Acks::None {
        out.push_str(" (acks=0: not confirmed by the broker)");
    }
    out.push('\n');
    for (p, (first, n)) in produced {
        if acks == Acks::None {
            out.push_str(&format!("  partition {p}: {n} records\n"));
        } else {
            out.push_str(&format!(
                "  partition {p}: {n} records at offsets {first}..={}\n",
                first + i64::try_from(*n).unwrap_or(i64::MAX) - 1
            ));
        }
    }
    out
}

/// Sends the pending batches, one Produce request per leader; a partition whose leader
/// moved (or whose leader cannot be reached) is sent again after a Metadata refresh.
fn send(
    seed: &mut KafkaClient,
    router: &mut Router,
    args: &ProduceArgs,
    pending: &mut Pending,
) -> Result<(), KafkaError> {
    let mut todo = std::mem::take(&mut pending.batches);
    while !todo.is_empty() {
        let mut by_leader: BTreeMap<i32, Vec<i32>> = BTreeMap::new();
        let mut moved: Option<KafkaError> = None;
        for &p in todo.keys() {
            match router.leader_of(p) {
                Some(l) => by_leader.entry(l).or_default().push(p),
                None => {
                    let e = KafkaError::Broker {
                        what: format!("produce to {} partition {p}", args.topic),
                        name: "LEADER_NOT_AVAILABLE".into(),
                        code: 5,
                        detail: String::new(),
                    };
                    moved.get_or_insert(e);
                }
            }
        }
        for (leader, parts) in by_leader {
            let data: Vec<PartitionProduceData> = parts
                .iter()
                .filter_map(|p| todo.get(p).map(|b| (p, b)))
                .map(|(p, b)| {
                    PartitionProduceData::default()
                        .with_index(*p)
                        .with_records(Some(b.build()))
                })
                .collect();
            let client = match router.client(leader) {
                Ok(c) => c,
                Err(e @ KafkaError::Connect { .. }) => {
                    moved.get_or_insert(e);
                    continue;
                }
                Err(e) => return Err(e),
            };
            let mut results = produce_partitions(client, &args.topic, args.acks, data)?;
            for p in parts {
                let (base, count) = match results.remove(&p) {
                    Some(Ok(base)) => (base, todo.get(&p).map_or(0, |b| b.len())),
                    Some(Err((code, e))) if leader_moved(code) => {
                        moved.get_or_insert(e);
                        continue;
                    }
                    Some(Err((_, e))) => return Err(e),
                    // acks=0: no answer to wait for.
                    None if args.acks == Acks::None => (-1, todo.get(&p).map_or(0, |b| b.len())),
                    None => {
                        return Err(KafkaError::Broker {
                            what: format!("produce to {} partition {p}", args.topic),
                            name: "UNKNOWN_SERVER_ERROR".into(),
                            code: -1,
                            detail: ": the partition is missing from the response".into(),
                        })
                    }
                };
                todo.remove(&p);
                let e = pending.produced.entry(p).or_insert((base, 0));
                e.1 += u64::try_from(count).unwrap_or(0);
            }
        }
        if let Some(why) = moved {
            router.refresh(seed, why)?;
        }
    }
    Ok(())
}

/// Sends one Produce request with one batch per partition; returns each partition's base
/// offset (empty with acks=0).
pub fn produce_batches(
    client: &mut KafkaClient,
    topic: &str,
    acks: Acks,
    data: Vec<PartitionProduceData>,
) -> Result<BTreeMap<i32, i64>, KafkaError> {
    let mut offsets = BTreeMap::new();
    for (p, r) in produce_partitions(client, topic, acks, data)? {
        offsets.insert(p, r.map_err(|(_, e)| e)?);
    }
    Ok(offsets)
}

/// A partition's answer: its base offset, or its error code and error.
type PartitionResult = Result<i64, (i16, KafkaError)>;

/// Sends one Produce request with one batch per partition; returns each partition's
/// result (none with acks=0).
fn produce_partitions(
    client: &mut KafkaClient,
    topic: &str,
    acks: Acks,
    data: Vec<PartitionProduceData>,
) -> Result<BTreeMap<i32, PartitionResult>, KafkaError> {
    let req = ProduceRequest::default()
        .with_acks(acks.wire())
        .with_timeout_ms(PRODUCE_TIMEOUT_MS)
        .with_topic_data(vec![TopicProduceData::default()
            .with_name(TopicName(StrBytes::from_string(topic.to_string())))
            .with_partition_data(data)]);
    if acks == Acks::None {
        client.send_without_response(&req)?;
        return Ok(BTreeMap::new());
    }
    let resp = client.send(&req)?;
    let mut out = BTreeMap::new();
    for t in &resp.responses {
        for p in &t.partition_responses {
            let r = check_code(
                p.error_code,
                &format!("produce to {topic} partition {}", p.index),
                p.error_message.as_ref(),
            )
            .map(|()| p.base_offset)
            .map_err(|e| (p.error_code, e));
            out.insert(p.index, r);
        }
    }
    Ok(out)
}

/// A batch of `count` records of `value_bytes` each, for load (self-test).
pub fn filler_batch(count: u32, value_bytes: usize) -> Bytes {
    let value = vec![b'x'; value_bytes];
    let ts = now_ms();
    let mut b = BatchBuilder::new(ts);
    for _ in 0..count {
        b.push(ts, None, Some(&value), &[]);
    }
    b.build()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_split_at_the_first_separator() {
        assert_eq!(
            split_line(b"k:v:w", Some(":")),
            (Some(&b"k"[..]), &b"v:w"[..])
        );
        assert_eq!(split_line(b"no-sep", Some(":")), (None, &b"no-sep"[..]));
        assert_eq!(
            split_line(b"k::v", Some("::")),
            (Some(&b"k"[..]), &b"v"[..])
        );
        assert_eq!(split_line(b"a:b", None), (None, &b"a:b"[..]));
        assert_eq!(split_line(b":v", Some(":")), (Some(&b""[..]), &b"v"[..]));
    }

    #[test]
    fn summary_names_offsets() {
        let mut p = BTreeMap::new();
        p.insert(0, (10, 3));
        assert_eq!(
            summary("t", Acks::All, &p),
            "produced 3 records to t\n  partition 0: 3 records at offsets 10..=12\n"
        );
    }
}
