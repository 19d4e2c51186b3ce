//! kill -9 the broker while its cleaner compacts, again and again, and check after each
//! restart that compaction lost nothing acknowledged (issue 21, crash safety): every key's
//! latest acknowledged value is the last value the partition holds for it, offsets only
//! grow and none repeats, and no record removed before a kill is there after it (a
//! rewrite is all or nothing: never the old segment back, never a mix). A compacted topic with 4 KiB segments
//! and a dirty ratio of 0.01 under a 20 ms cleaner backoff keeps the cleaner rewriting
//! segments nearly all the time, so a seeded kill lands in every step of a rewrite and
//! swap (writing `.cleaned`, the rename, the index files) over the iterations.
//!
//! `STRAND_SOAK_ITERATIONS` sets the number of kills (default 12); `STRAND_SEED` replays.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use bytes::Bytes;
use kafka_protocol::messages::create_topics_request::{CreatableTopic, CreatableTopicConfig};
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::{CreateTopicsRequest, FetchRequest};
use kafka_protocol::protocol::StrBytes;
use strand_tests::broker::{topic_name, Broker, Client, Options};
use strand_tests::seed::{self, mix, OnPanic, Rng};
use strand_wire::records::decode_records;
use strand_wire::{BatchBuilder, BATCH_HEADER_BYTES};

const TOPIC: &str = "compacted";
const ITERATIONS_DEFAULT: u64 = 12;
/// Distinct keys: few, so most records are superseded and the cleaner removes them.
const KEYS: u64 = 24;
/// Records per produced batch, at most.
const BATCH_RECORDS_MAX: u64 = 8;
/// Batches produced per iteration, at most.
const BATCHES_MAX: u64 = 40;
/// A kill comes up to this long after the last acknowledged produce of an iteration.
const KILL_AFTER_MS_MAX: u64 = 300;
/// Bytes of one value besides its sequence number (so 4 KiB segments fill quickly).
const VALUE_PAD_BYTES: usize = 100;
/// Separates the kill-plan stream from the workload stream of the same seed.
const KILL_SALT: u64 = 0x636c_6561;

#[test]
fn kill9_during_compaction_never_loses_a_latest_value() {
    let seed = seed::test_seed("crash_compaction");
    let iterations = seed::env_u64("STRAND_SOAK_ITERATIONS", ITERATIONS_DEFAULT);
    let mut broker = Broker::start(env!("CARGO_TARGET_TMPDIR").as_ref(), options());
    create_compacted_topic(&mut broker.connect());
    let mut rng = Rng::new(mix(seed.value, KILL_SALT));
    // key -> latest acknowledged sequence number.
    let mut latest: BTreeMap<u64, u64> = BTreeMap::new();
    let mut seq = 0u64;
    // The offsets the partition held at the last check, and its end then.
    let (mut present, mut end) = (BTreeSet::new(), 0i64);
    // Compaction passes the killed processes ran (read just before each kill).
    let mut passes = 0.0;
    for iteration in 0..iterations {
        let _context = OnPanic(format!("iteration {iteration}"));
        let mut c = broker.connect();
        for _ in 0..rng.range(1, BATCHES_MAX) {
            let n = rng.range(1, BATCH_RECORDS_MAX);
            let keys: Vec<u64> = (0..n).map(|_| rng.below(KEYS)).collect();
            let mut b = BatchBuilder::new(1_700_000_000_000);
            for &k in &keys {
                seq += 1;
                b.push(1_700_000_000_000, Some(&key(k)), Some(&value(seq)), &[]);
            }
            let r = c.produce(TOPIC, 0, b.build(), -1);
            assert_eq!(r.error_code, 0, "produce: {r:?}");
            // The batch's records get increasing offsets, so its last value of a key wins.
            let first = seq + 1 - n;
            for (i, &k) in keys.iter().enumerate() {
                latest.insert(k, first + i as u64);
            }
        }
        std::thread::sleep(Duration::from_millis(rng.below(KILL_AFTER_MS_MAX + 1)));
        passes += broker.metric_sum("strand_cleaner_passes_total");
        broker.kill9();
        broker.restart();
        let (now, now_end) = check(&mut broker.connect(), &latest);
        let back: Vec<&i64> = now.range(..end).filter(|o| !present.contains(*o)).collect();
        assert!(
            back.is_empty(),
            "removed records came back: offsets {back:?}"
        );
        (present, end) = (now, now_end);
    }
    eprintln!("{passes} compaction passes over {iterations} kills");
    assert!(passes > 0.0, "the cleaner never ran before a kill");
    broker.stop();
}

/// One shard, the cleaner looking every 20 ms.
fn options() -> Options {
    Options {
        extra_args: ["--log-cleaner-backoff-ms", "20"]
            .map(String::from)
            .to_vec(),
        ..Options::default()
    }
}

fn key(k: u64) -> Vec<u8> {
    format!("key-{k}").into_bytes()
}

fn value(seq: u64) -> Vec<u8> {
    let mut v = seq.to_be_bytes().to_vec();
    v.resize(8 + VALUE_PAD_BYTES, b'v');
    v
}

fn create_compacted_topic(c: &mut Client) {
    let configs = [
        ("cleanup.policy", "compact"),
        ("segment.bytes", "4096"),
        ("segment.ms", "200"),
        ("min.cleanable.dirty.ratio", "0.01"),
    ]
    .map(|(k, v)| {
        CreatableTopicConfig::default()
            .with_name(StrBytes::from_static_str(k))
            .with_value(Some(StrBytes::from_static_str(v)))
    })
    .to_vec();
    let t = CreatableTopic::default()
        .with_name(topic_name(TOPIC))
        .with_num_partitions(1)
        .with_replication_factor(1)
        .with_configs(configs);
    let req = CreateTopicsRequest::default()
        .with_topics(vec![t])
        .with_timeout_ms(10_000);
    let resp = c.request(5, &req);
    assert_eq!(resp.topics[0].error_code, 0, "CreateTopics: {resp:?}");
}

/// Reads the whole partition and checks it against the acknowledged values; returns the
/// offsets it holds and its end.
fn check(c: &mut Client, latest: &BTreeMap<u64, u64>) -> (BTreeSet<i64>, i64) {
    let end = c.latest_offset(TOPIC, 0);
    let mut present = BTreeSet::new();
    let mut last_of: BTreeMap<u64, u64> = BTreeMap::new();
    let (mut next, mut previous) = (0i64, -1i64);
    while next < end {
        let records = fetch(c, next);
        assert!(!records.is_empty(), "no batch at offset {next} below {end}");
        for b in strand_wire::batches(records) {
            let Ok(b) = b else { break }; // a partial batch at the end of the answer
            let section = b.as_bytes().slice(BATCH_HEADER_BYTES..);
            for r in decode_records(section, b.record_count()).expect("records decode") {
                let offset = b.base_offset() + i64::from(r.offset_delta);
                if offset < next {
                    continue;
                }
                assert!(offset > previous, "offset {offset} after {previous}");
                previous = offset;
                present.insert(offset);
                let k: u64 = std::str::from_utf8(r.key.as_deref().expect("keyed"))
                    .ok()
                    .and_then(|s| s.strip_prefix("key-")?.parse().ok())
                    .expect("a key of this test");
                let v = r.value.as_deref().expect("no tombstones here");
                let s = u64::from_be_bytes(v[..8].try_into().expect("8 bytes"));
                if let Some(old) = last_of.insert(k, s) {
                    assert!(
                        s > old,
                        "key {k}: value {s} after {old} (an older value came back)"
                    );
                }
            }
            next = next.max(b.last_offset() + 1);
        }
    }
    assert_eq!(&last_of, latest, "the latest value of each key");
    (present, end)
}

/// One Fetch v12 from `offset`, retried while the partition is not served yet.
fn fetch(c: &mut Client, offset: i64) -> Bytes {
    for _ in 0..1000 {
        let t = FetchTopic::default()
            .with_topic(topic_name(TOPIC))
            .with_partitions(vec![FetchPartition::default()
                .with_partition(0)
                .with_fetch_offset(offset)
                .with_partition_max_bytes(1 << 20)]);
        let req = FetchRequest::default()
            .with_replica_id((-1).into())
            .with_max_wait_ms(0)
            .with_max_bytes(1 << 20)
            .with_topics(vec![t]);
        let resp = c.request(12, &req);
        let p = &resp.responses[0].partitions[0];
        if p.error_code == 0 {
            return p.records.clone().unwrap_or_default();
        }
        assert!(
            strand_tests::broker::RETRIABLE_PARTITION_ERRORS.contains(&p.error_code),
            "fetch at {offset}: {p:?}"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    panic!("partition not served after a restart");
}

/// An idempotent producer's retry after compaction, before and after kill -9, is answered
/// with its original offset and not appended again, and its next batch is accepted: the
/// cleaner keeps each producer's last batch (ARCHITECTURE.md, Produce).
#[test]
fn idempotent_retries_survive_compaction_and_kill9() {
    let mut broker = Broker::start(env!("CARGO_TARGET_TMPDIR").as_ref(), options());
    let mut c = broker.connect();
    create_compacted_topic(&mut c);
    let (pid, epoch) = c.init_producer_id();
    let batch = |seq: i32| {
        let mut b = BatchBuilder::new(1_700_000_000_000).producer(pid, epoch, seq);
        b.push(
            1_700_000_000_000,
            Some(&key(0)),
            Some(&value(seq as u64)),
            &[],
        );
        b.build()
    };
    let mut last = 0;
    for seq in 0..60 {
        let r = c.produce(TOPIC, 0, batch(seq), -1);
        assert_eq!(r.error_code, 0, "produce {seq}: {r:?}");
        last = r.base_offset;
    }
    let deadline = strand_tests::clock::Deadline::after(Duration::from_secs(30));
    while broker.metric_sum("strand_cleaner_records_removed_total") < 10.0 {
        assert!(deadline.remaining().is_some(), "nothing compacted");
        std::thread::sleep(Duration::from_millis(50));
    }
    let r = c.produce(TOPIC, 0, batch(59), -1);
    assert_eq!((r.error_code, r.base_offset), (0, last), "retry: {r:?}");
    broker.kill9();
    broker.restart();
    let mut c = broker.connect();
    let end = c.latest_offset(TOPIC, 0);
    let r = c.produce(TOPIC, 0, batch(59), -1);
    assert_eq!(
        (r.error_code, r.base_offset),
        (0, last),
        "retry after kill -9: {r:?}"
    );
    let r = c.produce(TOPIC, 0, batch(60), -1);
    assert_eq!(
        (r.error_code, r.base_offset),
        (0, end),
        "the next batch: {r:?}"
    );
    let mut latest = BTreeMap::new();
    latest.insert(0, 60);
    check(&mut c, &latest);
    broker.stop();
}
