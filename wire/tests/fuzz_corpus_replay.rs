//! Replays the fuzz corpus, and seeded mutations of it, through the fuzz target bodies on
//! stable Rust, so `cargo test` covers what `cargo fuzz` found without needing nightly
//! (STYLE.md 9.2). A crash input from `cargo fuzz` goes into `wire/fuzz/corpus/<target>/`
//! and from then on runs here.
//!
//! The seed corpus is regenerated with `STRAND_WRITE_FUZZ_SEEDS=1 cargo test -p strand-wire
//! --test fuzz_corpus_replay`; otherwise `seed_corpus_has_its_verdicts` only checks it.

use std::fs;
use std::path::PathBuf;

use bytes::{Bytes, BytesMut};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::records as kp;
use strand_wire::{batches, fuzz};

mod mutate;
use mutate::{mutate, SplitMix64};

/// Mutations derived from each corpus file; with the 10 seeds, 5,000 runs (about a second).
const MUTATIONS_PER_INPUT: usize = 500;
const SEED: u64 = 0x5712_a9d0_f022_0001;

fn corpus_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("fuzz/corpus/record_batch")
}

/// Every file in the corpus directory, sorted by name so runs are reproducible.
fn corpus() -> Vec<(String, Vec<u8>)> {
    let mut files: Vec<(String, Vec<u8>)> = fs::read_dir(corpus_dir())
        .unwrap()
        .map(|entry| {
            let path = entry.unwrap().path();
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            (name, fs::read(&path).unwrap())
        })
        .collect();
    files.sort();
    files
}

#[test]
fn corpus_replays() {
    let corpus = corpus();
    assert!(
        corpus.len() >= seeds().len(),
        "corpus has {} files",
        corpus.len()
    );
    for (_name, data) in &corpus {
        fuzz::record_batch(data);
    }
}

#[test]
fn seeded_mutations_replay() {
    let mut rng = SplitMix64(SEED);
    let corpus = corpus();
    let mut runs = 0;
    for (_name, data) in &corpus {
        for _ in 0..MUTATIONS_PER_INPUT {
            let mutated = mutate(data, &corpus, &mut rng);
            fuzz::record_batch(&mutated);
            runs += 1;
        }
    }
    assert!(runs >= 5_000, "only {runs} runs");
}

#[test]
fn seed_corpus_has_its_verdicts() {
    let write = std::env::var_os("STRAND_WRITE_FUZZ_SEEDS").is_some();
    for (name, bytes, expected) in seeds() {
        let path = corpus_dir().join(name);
        if write {
            fs::write(&path, &bytes).unwrap();
        }
        let data = fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        assert_eq!(verdicts(&data), expected, "{name}");
    }
}

/// The verdict on each item `batches` yields: "ok" or the error variant's name.
fn verdicts(data: &[u8]) -> Vec<String> {
    let verdict = |item: Result<strand_wire::RecordBatch, strand_wire::BatchError>| match item
        .and_then(|batch| batch.validate())
    {
        Ok(()) => "ok".to_string(),
        Err(error) => {
            let debug = format!("{error:?}");
            debug.split([' ', '{']).next().unwrap().to_string()
        }
    };
    batches(Bytes::copy_from_slice(data)).map(verdict).collect()
}

/// The seed corpus: file name, bytes, and the verdicts `batches` + `validate` give.
fn seeds() -> Vec<(&'static str, Vec<u8>, Vec<String>)> {
    let plain = encode(kp::Compression::None, -1, -1, 3);
    let idempotent = [
        encode(kp::Compression::None, 1_000, 0, 2),
        encode(kp::Compression::None, 1_000, 2, 1),
    ]
    .concat();
    let with = |at: usize, value: &[u8]| {
        let mut bytes = plain.clone();
        bytes[at..at + value.len()].copy_from_slice(value);
        bytes
    };
    let last = plain.len() - 1;
    let seeds = [
        ("valid-none", plain.clone(), vec!["ok"]),
        ("valid-idempotent-2-batches", idempotent, vec!["ok", "ok"]),
        (
            "valid-gzip",
            encode(kp::Compression::Gzip, -1, -1, 4),
            vec!["ok"],
        ),
        (
            "valid-zstd",
            encode(kp::Compression::Zstd, 7, 3, 5),
            vec!["ok"],
        ),
        ("empty", vec![], vec![]),
        ("truncated", plain[..last - 6].to_vec(), vec!["Truncated"]),
        ("short-header", plain[..10].to_vec(), vec!["Truncated"]),
        ("bad-magic", with(16, &[1]), vec!["BadMagic"]),
        (
            "bad-crc",
            with(last, &[plain[last] ^ 0x10]),
            vec!["CrcMismatch"],
        ),
        (
            "huge-length",
            with(8, &i32::MAX.to_be_bytes()),
            vec!["TooLarge"],
        ),
    ];
    seeds
        .into_iter()
        .map(|(name, bytes, verdicts)| {
            let verdicts = verdicts.into_iter().map(String::from).collect();
            (name, bytes, verdicts)
        })
        .collect()
}

/// One batch of `count` records from kafka-protocol's encoder. A non-idempotent producer
/// has `producer_id` and `base_sequence` -1.
fn encode(
    compression: kp::Compression,
    producer_id: i64,
    base_sequence: i32,
    count: i32,
) -> Vec<u8> {
    let records: Vec<kp::Record> = (0..count)
        .map(|index| {
            let mut record = kp::Record {
                transactional: false,
                control: false,
                delete_horizon: false,
                partition_leader_epoch: -1,
                producer_id,
                producer_epoch: if producer_id < 0 { -1 } else { 0 },
                timestamp_type: kp::TimestampType::Creation,
                offset: i64::from(index),
                // The encoder starts a new batch when offset - sequence changes, so even a
                // non-idempotent producer's sequences count up from the base sequence -1.
                sequence: base_sequence + index,
                timestamp: 1_700_000_000_000 + i64::from(index),
                key: Some(Bytes::from(format!("key-{index}"))),
                value: Some(Bytes::from(format!(
                    "value {index} of the strand seed corpus"
                ))),
                headers: Default::default(),
            };
            let header = StrBytes::from_static_str("trace");
            record
                .headers
                .insert(header, Some(Bytes::from_static(b"abc")));
            record
        })
        .collect();
    let options = kp::RecordEncodeOptions {
        version: 2,
        compression,
    };
    let mut buf = BytesMut::new();
    kp::RecordBatchEncoder::encode(&mut buf, &records, &options).unwrap();
    buf.to_vec()
}
