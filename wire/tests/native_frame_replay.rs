//! Replays the `native_frame` fuzz corpus (`wire/fuzz/corpus/native_frame/`), and seeded
//! mutations of it, through the target body on stable Rust (STYLE.md 9.2). The seeds are
//! frames of the native protocol's requests as the client encodes them (and a fetch answer
//! with its records in the trailer); a crash input
//! from `cargo fuzz run native_frame` goes into the corpus and runs here from then on.
//! `STRAND_WRITE_FUZZ_SEEDS=1 cargo test -p strand-wire --test native_frame_replay` rewrites
//! the seeds.

use std::path::PathBuf;

use strand_wire::fuzz;
use strand_wire::native::generated::*;
use strand_wire::native::{Encoder, PROTOCOL_VERSION};

mod mutate;
use mutate::{check_seeds, corpus_files, mutate, SplitMix64};

const MUTATIONS_PER_INPUT: usize = 1_000;
const SEED: u64 = 0x5712_a9d0_f022_0005;

fn corpus_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("fuzz/corpus/native_frame")
}

fn frame(correlation_id: u64, body: BodyT) -> Vec<u8> {
    Encoder::new()
        .frame(PROTOCOL_VERSION, correlation_id, &MessageT { body })
        .to_vec()
}

/// A fetch answer carrying `batch` in its trailer, as the broker writes it.
fn fetch_answer_with_trailer(batch: &[u8]) -> Vec<u8> {
    Encoder::new()
        .frame_with_trailer(
            PROTOCOL_VERSION,
            3,
            &MessageT {
                body: BodyT::FetchResponse(Box::new(FetchResponseT {
                    partitions: Some(vec![FetchPartitionResultT {
                        topic: Some("t".into()),
                        partition: 0,
                        high_watermark: 1,
                        log_start_offset: 0,
                        records: None,
                        error: None,
                        trailer_bytes: u32::try_from(batch.len()).expect("small"),
                    }]),
                })),
            },
            vec![bytes::Bytes::copy_from_slice(batch)],
        )
        .expect("encodes")
        .concat()
}

fn seeds() -> Vec<(&'static str, Vec<u8>)> {
    let batch = {
        let mut b = strand_wire::BatchBuilder::new(1_700_000_000_000);
        b.push(1_700_000_000_000, Some(b"k"), Some(b"v"), &[]);
        b.build().to_vec()
    };
    let produce = frame(
        2,
        BodyT::ProduceRequest(Box::new(ProduceRequestT {
            acks: -1,
            timeout_ms: 1000,
            partitions: Some(vec![ProducePartitionT {
                topic: Some("t".into()),
                partition: 0,
                records: Some(batch.clone()),
            }]),
        })),
    );
    let fetch = frame(
        3,
        BodyT::FetchRequest(Box::new(FetchRequestT {
            max_wait_ms: 100,
            min_bytes: 1,
            max_bytes: 1 << 20,
            isolation: Isolation::default(),
            partitions: Some(vec![FetchPartitionT {
                topic: Some("t".into()),
                partition: 0,
                offset: 0,
                max_bytes: 1 << 20,
            }]),
            records_in_trailer: true,
        })),
    );
    let fetched = fetch_answer_with_trailer(&batch);
    let handshake = frame(1, BodyT::HandshakeRequest(Box::default()));
    let metadata = frame(
        4,
        BodyT::MetadataRequest(Box::new(MetadataRequestT {
            topics: Some(vec!["t".into()]),
            allow_auto_create: true,
        })),
    );
    let pipelined = [handshake.clone(), produce.clone(), fetch.clone()].concat();
    let mut cut = produce.clone();
    cut.truncate(produce.len() - 3);
    vec![
        ("handshake", handshake),
        ("produce", produce),
        ("fetch", fetch),
        ("metadata", metadata),
        ("pipelined", pipelined),
        ("cut-produce", cut),
        ("fetch-answer-trailer", fetched),
    ]
}

#[test]
fn seeds_are_in_the_corpus() {
    check_seeds(&corpus_dir(), &seeds());
}

#[test]
fn corpus_and_its_mutations_replay() {
    let files = corpus_files(&corpus_dir());
    assert!(files.len() >= seeds().len());
    let mut rng = SplitMix64(SEED);
    for (_, data) in &files {
        fuzz::native_frame(data);
        for _ in 0..MUTATIONS_PER_INPUT {
            fuzz::native_frame(&mutate(data, &files, &mut rng));
        }
    }
}
