//! A full disk under the real broker, seen by an idempotent producer (ARCHITECTURE.md,
//! Bad input, limits, faults: "produce gets an error, nothing acknowledged is lost, the
//! broker recovers when space returns"). `enospc.rs` checks the storage log alone and
//! `tests/kafka/test_disk_full.py` the same with librdkafka; this one checks the answers
//! request by request, the retry of a refused batch above all: the refused batch stays
//! pending in memory, so its retry is a duplicate of it, and a duplicate waits for its
//! original's durability. That wait must end with the flush's error while the disk is
//! full (it was held until the client gave up), and with the original's offset once
//! space returns. Meanwhile new writes are refused, acks=1 too (they were kept in memory).
//!
//! Needs root, `mkfs.ext4` and loop mounts (`strand_tests::mount`).

use std::time::Duration;

use bytes::Bytes;
use strand_tests::broker::{Broker, Options};
use strand_tests::clock::Deadline;
use strand_tests::mount::LoopMount;
use strand_wire::BatchBuilder;

const TOPIC: &str = "full";
const IMAGE_BYTES: u64 = 32 * 1024 * 1024;
/// Deleting it is what "space returns" means.
const FILLER_BYTES: usize = 8 * 1024 * 1024;
/// One record of this many bytes per batch: the image fills in a few hundred produces.
const VALUE_BYTES: usize = 64 * 1024;
/// Give up if this many batches were acknowledged without a full disk (twice the image).
const BATCHES_MAX: i32 = (2 * IMAGE_BYTES / VALUE_BYTES as u64) as i32;
const ACKS_ALL: i16 = -1;
/// KAFKA_STORAGE_ERROR.
const KAFKA_STORAGE_ERROR: i16 = 56;
/// Longer than a flush's retry delay and far shorter than the 30 s a held duplicate waited
/// before its wait was tied to the flush.
const ANSWER_WITHIN: Duration = Duration::from_secs(10);

/// A one-record batch of producer `pid`/`epoch` with sequence `seq`.
fn batch(pid: i64, epoch: i16, seq: i32) -> Bytes {
    let ts = 1_700_000_000_000;
    let mut b = BatchBuilder::new(ts).producer(pid, epoch, seq);
    let mut value = vec![b'.'; VALUE_BYTES];
    value[..4].copy_from_slice(&seq.to_be_bytes());
    b.push(ts, None, Some(&value), &[]);
    b.build()
}

/// A batch of no producer (acks=1 writers need no idempotence).
fn plain_batch() -> Bytes {
    let ts = 1_700_000_000_000;
    let mut b = BatchBuilder::new(ts);
    b.push(ts, None, Some(b"acks=1 while full"), &[]);
    b.build()
}

#[test]
fn a_refused_batchs_retry_is_answered_while_full_and_finds_it_once_space_returns() {
    let root = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).expect("temp dir");
    let Some(mount) = LoopMount::or_skip(root.path(), IMAGE_BYTES) else {
        return;
    };
    let filler = mount.fill("filler", FILLER_BYTES);
    let mut broker = Broker::start(&mount.point, Options::default());
    let mut c = broker.connect();
    c.set_read_timeout(ANSWER_WITHIN);
    c.create_topic(TOPIC, 1);
    let (pid, epoch) = c.init_producer_id();

    // acks=all until the disk is full: every answer before is an acknowledgement.
    let mut seq = 0;
    let refused = loop {
        assert!(
            seq < BATCHES_MAX,
            "{seq} batches acknowledged on a full disk"
        );
        let r = c.produce(TOPIC, 0, batch(pid, epoch, seq), ACKS_ALL);
        if r.error_code != 0 {
            assert_eq!(r.error_code, KAFKA_STORAGE_ERROR, "batch {seq}: {r:?}");
            break seq;
        }
        assert_eq!(r.base_offset, i64::from(seq), "batch {seq}");
        seq += 1;
    };

    eprintln!("disk full after {refused} acknowledged batches of {VALUE_BYTES} B");
    // Its retry while the disk is still full: answered, with the flush's error.
    let r = c.produce(TOPIC, 0, batch(pid, epoch, refused), ACKS_ALL);
    assert_eq!(r.error_code, KAFKA_STORAGE_ERROR, "retry while full: {r:?}");
    assert_eq!(
        c.latest_offset(TOPIC, 0),
        i64::from(refused),
        "nothing more is readable"
    );
    // acks=1 is refused too, not kept in memory (it would be readable at the end).
    let r = c.produce(TOPIC, 0, plain_batch(), 1);
    assert_eq!(
        r.error_code, KAFKA_STORAGE_ERROR,
        "acks=1 while full: {r:?}"
    );

    // Space returns: the retry finds its original, durable now, and nothing is appended
    // twice.
    mount.free(&filler);
    let deadline = Deadline::after(ANSWER_WITHIN);
    let r = loop {
        let r = c.produce(TOPIC, 0, batch(pid, epoch, refused), ACKS_ALL);
        if r.error_code != KAFKA_STORAGE_ERROR || deadline.remaining().is_none() {
            break r;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(
        (r.error_code, r.base_offset),
        (0, i64::from(refused)),
        "retry after space returned: {r:?}"
    );
    let r = c.produce(TOPIC, 0, batch(pid, epoch, refused + 1), ACKS_ALL);
    assert_eq!((r.error_code, r.base_offset), (0, i64::from(refused + 1)));

    broker.kill9();
    broker.restart();
    let mut c = broker.connect();
    assert_eq!(
        c.latest_offset(TOPIC, 0),
        i64::from(refused + 2),
        "every acknowledged batch, once, after kill -9"
    );
    broker.stop();
}
