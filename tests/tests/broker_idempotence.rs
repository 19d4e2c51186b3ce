//! Idempotent producers against the real broker (KAFKA-NOTES.md, Produce): InitProducerId,
//! a retried batch answered with its original offset and not appended again, a sequence gap
//! refused with OUT_OF_ORDER_SEQUENCE_NUMBER, and all of it still true after kill -9 and a
//! restart, which also never hands out a producer id twice.

use std::collections::BTreeSet;
use std::time::Duration;

use bytes::Bytes;
use strand_tests::broker::{Broker, Client, Options, RETRIABLE_PARTITION_ERRORS};
use strand_tests::clock::{Deadline, Stopwatch};
use strand_wire::BatchBuilder;

const TOPIC: &str = "idempotence";
/// Records per batch.
const RECORDS: i32 = 5;
/// OUT_OF_ORDER_SEQUENCE_NUMBER.
const OUT_OF_ORDER_SEQUENCE_NUMBER: i16 = 45;
/// acks=all: every answer below is about durable data.
const ACKS_ALL: i16 = -1;

/// A batch of `RECORDS` records from producer `pid`/`epoch`, sequences `base_seq..`.
fn batch(pid: i64, epoch: i16, base_seq: i32) -> Bytes {
    let ts = 1_700_000_000_000;
    let mut b = BatchBuilder::new(ts).producer(pid, epoch, base_seq);
    for k in 0..RECORDS {
        let value = format!("seq {}", base_seq + k);
        b.push(ts, None, Some(value.as_bytes()), &[]);
    }
    b.build()
}

/// Produces `batch` and checks error 0 and the base offset (retrying the errors a Kafka
/// producer retries while a partition is not served yet).
fn produce_ok(c: &mut Client, batch: Bytes, base_offset: i64, what: &str) {
    let deadline = Deadline::after(Duration::from_secs(5));
    loop {
        let r = c.produce(TOPIC, 0, batch.clone(), ACKS_ALL);
        if RETRIABLE_PARTITION_ERRORS.contains(&r.error_code) && deadline.remaining().is_some() {
            std::thread::sleep(Duration::from_millis(5));
            continue;
        }
        assert_eq!(
            (r.error_code, r.base_offset),
            (0, base_offset),
            "{what}: {r:?}"
        );
        return;
    }
}

/// Two shards: produce requests are routed to the partition's shard and producer ids are
/// allocated on shard 0.
fn options() -> Options {
    Options {
        smp: 2,
        ..Options::default()
    }
}

#[test]
#[expect(
    clippy::too_many_lines,
    reason = "longer than 70 lines when the lint came in (issue 27): split it when it next changes"
)]
fn retries_are_deduplicated_across_kill9_and_producer_ids_never_repeat() {
    let watch = Stopwatch::start();
    let mut broker = Broker::start(env!("CARGO_TARGET_TMPDIR").as_ref(), options());
    let mut c = broker.connect();
    c.create_topic(TOPIC, 1);
    let mut pids = BTreeSet::new();

    let (pid, epoch) = c.init_producer_id();
    assert!(pid >= 0, "producer id {pid}");
    assert_eq!(epoch, 0, "a new producer id starts at epoch 0");
    pids.insert(pid);

    produce_ok(&mut c, batch(pid, 0, 0), 0, "first batch, seq 0..4");
    assert_eq!(c.latest_offset(TOPIC, 0), 5);
    produce_ok(&mut c, batch(pid, 0, 0), 0, "retry of seq 0..4");
    assert_eq!(c.latest_offset(TOPIC, 0), 5, "a retry must not append");

    let r = c.produce(TOPIC, 0, batch(pid, 0, 10), ACKS_ALL);
    assert_eq!(r.error_code, OUT_OF_ORDER_SEQUENCE_NUMBER, "gap: {r:?}");
    assert_eq!(
        c.latest_offset(TOPIC, 0),
        5,
        "a refused batch must not append"
    );

    // A second producer id from the same incarnation, for the uniqueness check.
    let (other, _) = c.init_producer_id();
    assert!(pids.insert(other), "producer id {other} handed out twice");

    broker.kill9();
    broker.restart();
    let mut c = broker.connect();
    produce_ok(
        &mut c,
        batch(pid, 0, 0),
        0,
        "retry of seq 0..4 after kill -9",
    );
    assert_eq!(
        c.latest_offset(TOPIC, 0),
        5,
        "a retry after a restart must not append"
    );
    let r = c.produce(TOPIC, 0, batch(pid, 0, 10), ACKS_ALL);
    assert_eq!(
        r.error_code, OUT_OF_ORDER_SEQUENCE_NUMBER,
        "gap after restart: {r:?}"
    );
    produce_ok(
        &mut c,
        batch(pid, 0, 5),
        5,
        "next batch seq 5..9 after restart",
    );
    assert_eq!(c.latest_offset(TOPIC, 0), 10);
    produce_ok(&mut c, batch(pid, 0, 5), 5, "retry of seq 5..9");
    let (after_kill, epoch) = c.init_producer_id();
    assert_eq!(epoch, 0);
    assert!(
        pids.insert(after_kill),
        "producer id {after_kill} after kill -9 was handed out before: {pids:?}"
    );

    // A clean restart: state and id uniqueness hold too.
    broker.stop();
    broker.restart();
    let mut c = broker.connect();
    produce_ok(
        &mut c,
        batch(pid, 0, 5),
        5,
        "retry of seq 5..9 after SIGTERM",
    );
    produce_ok(&mut c, batch(pid, 0, 10), 10, "seq 10..14 after SIGTERM");
    produce_ok(
        &mut c,
        batch(pid, 0, 0),
        0,
        "retry of seq 0..4, 3 batches back",
    );
    assert_eq!(c.latest_offset(TOPIC, 0), 15);
    let (after_stop, _) = c.init_producer_id();
    assert!(
        pids.insert(after_stop),
        "producer id {after_stop} after a clean restart was handed out before: {pids:?}"
    );
    eprintln!("producer ids {pids:?}; {:?}", watch.elapsed());
}
