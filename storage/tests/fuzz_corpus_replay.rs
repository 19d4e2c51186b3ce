//! Replays the storage fuzz corpora (`storage/fuzz/corpus/<target>/`), and seeded mutations
//! of them, through the target bodies (`strand_storage::fuzz`) on stable Rust, so `make
//! test` covers what `cargo fuzz` found (STYLE.md 9.2). A crash input goes into the
//! target's corpus directory and runs here from then on. `STRAND_WRITE_FUZZ_SEEDS=1 cargo
//! test -p strand-storage --test fuzz_corpus_replay` rewrites the seeds.

use std::path::PathBuf;

use strand_storage::frame::encode_frame;
use strand_storage::{fuzz, FrameKind, KafkaOffset, RaftIndex, RaftTerm};

#[path = "../../wire/tests/mutate/mod.rs"]
mod mutate;
use mutate::{check_seeds, corpus_files, mutate, SplitMix64};

const SEED: u64 = 0x5712_a9d0_f022_0004;
/// Mutations of each file for the pure scan, and for recovery (which does file I/O).
const SCAN_MUTATIONS: usize = 1_000;
const RECOVERY_MUTATIONS: usize = 40;

fn corpus_dir(target: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("fuzz/corpus")
        .join(target)
}

/// A segment of `n` frames as a log writes them: data frames of one-record batches, a
/// no-op, indexes from 1, offsets from 0.
fn segment(n: u64) -> Vec<u8> {
    let mut out = Vec::new();
    let mut offset = 0i64;
    for index in 1..=n {
        if index == 2 {
            encode_frame(
                &mut out,
                FrameKind::NoOp,
                RaftTerm(1),
                RaftIndex(index),
                KafkaOffset(offset),
                0,
                b"",
            );
            continue;
        }
        let mut b = strand_wire::BatchBuilder::new(1_700_000_000_000);
        b.push(1_700_000_000_000, Some(b"k"), Some(b"value"), &[]);
        let mut batch = b.build().to_vec();
        batch[..8].copy_from_slice(&offset.to_be_bytes());
        encode_frame(
            &mut out,
            FrameKind::Data,
            RaftTerm(1),
            RaftIndex(index),
            KafkaOffset(offset),
            1,
            &batch,
        );
        offset += 1;
    }
    out
}

fn seeds() -> Vec<(&'static str, Vec<u8>)> {
    let three = segment(3);
    let mut torn = three.clone();
    torn.truncate(three.len() - 7);
    let mut padded = three.clone();
    padded.resize(8192, 0);
    let mut flipped = three.clone();
    flipped[60] ^= 0x10;
    vec![
        ("three-frames", three),
        ("torn-tail", torn),
        ("zero-padded", padded),
        ("body-bit-flip", flipped),
        ("garbage", b"not a frame at all, just bytes".to_vec()),
    ]
}

fn corpus(target: &str) -> Vec<(String, Vec<u8>)> {
    corpus_files(&corpus_dir(target))
}

#[test]
fn seeds_are_in_the_corpus() {
    for target in ["frame_scan", "segment_recovery"] {
        check_seeds(&corpus_dir(target), &seeds());
    }
}

#[test]
fn frame_scan_corpus_and_mutations_replay() {
    let mut rng = SplitMix64(SEED);
    let files = corpus("frame_scan");
    assert!(files.len() >= seeds().len());
    for (_, data) in &files {
        fuzz::frame_scan(data);
        for _ in 0..SCAN_MUTATIONS {
            fuzz::frame_scan(&mutate(data, &files, &mut rng));
        }
    }
}

#[test]
fn segment_recovery_corpus_and_mutations_replay() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path().join("log");
    let files = corpus("segment_recovery");
    assert!(files.len() >= seeds().len());
    strand_storage::io_runtime::block_on("fuzz-replay", 1, async {
        // The seeds recover as a restart would: whole frames kept, a torn one dropped.
        assert_eq!(fuzz::segment_recovery(&dir, &segment(3)).await, Some(3));
        let mut torn = segment(3);
        torn.truncate(torn.len() - 7);
        assert_eq!(fuzz::segment_recovery(&dir, &torn).await, Some(2));
        let mut rng = SplitMix64(SEED);
        for (_, data) in &files {
            fuzz::segment_recovery(&dir, data).await;
            for _ in 0..RECOVERY_MUTATIONS {
                fuzz::segment_recovery(&dir, &mutate(data, &files, &mut rng)).await;
            }
        }
    })
    .expect("executor");
}
