//! Transactions against the real broker, as far as they are built (issue 22): with no
//! transaction coordinator yet, a client's transactional batch is refused with
//! INVALID_TXN_STATE and appends nothing (KIP-890: never a hanging transaction), and the
//! read_committed answers (ListOffsets and Fetch with isolation_level 1) hold what Kafka
//! sends for a partition without transactions: the last stable offset is the high
//! watermark, the aborted-transaction list is empty, and read_uncommitted gets null.

use bytes::Bytes;
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic};
use kafka_protocol::messages::{FetchRequest, ListOffsetsRequest};
use strand_tests::broker::{topic_name, Broker, Client, Options};
use strand_wire::{Attributes, BatchBuilder, BatchHeader, RecordBatch, BATCH_HEADER_BYTES};

const TOPIC: &str = "txn";
/// INVALID_TXN_STATE.
const INVALID_TXN_STATE: i16 = 48;
/// acks=all.
const ACKS_ALL: i16 = -1;

/// Five records of producer `pid` at epoch 0 from sequence 0, transactional or not.
fn batch(pid: i64, transactional: bool) -> Bytes {
    let ts = 1_700_000_000_000;
    let mut b = BatchBuilder::new(ts).producer(pid, 0, 0);
    for k in 0..5 {
        b.push(ts, None, Some(format!("v{k}").as_bytes()), &[]);
    }
    let plain = b.build();
    if !transactional {
        return plain;
    }
    let view = RecordBatch::parse(plain).expect("batch");
    BatchHeader {
        attributes: Attributes::from_raw(Attributes::TRANSACTIONAL),
        ..BatchHeader::of(&view)
    }
    .encode(&view.as_bytes()[BATCH_HEADER_BYTES..])
}

/// ListOffsets v5 latest with `isolation_level`: (error, offset).
fn latest(c: &mut Client, isolation_level: i8) -> (i16, i64) {
    let req = ListOffsetsRequest::default()
        .with_replica_id((-1).into())
        .with_isolation_level(isolation_level)
        .with_topics(vec![ListOffsetsTopic::default()
            .with_name(topic_name(TOPIC))
            .with_partitions(vec![ListOffsetsPartition::default()
                .with_partition_index(0)
                .with_current_leader_epoch(-1)
                .with_timestamp(-1)])]);
    let resp = c.request(5, &req);
    let p = &resp.topics[0].partitions[0];
    (p.error_code, p.offset)
}

/// Fetch v11 from offset 0 with `isolation_level`: (error, high watermark, last stable
/// offset, whether the aborted list is null, its length, record bytes).
fn fetch(c: &mut Client, isolation_level: i8) -> (i16, i64, i64, bool, usize, usize) {
    let req = FetchRequest::default()
        .with_replica_id((-1).into())
        .with_max_wait_ms(0)
        .with_min_bytes(1)
        .with_max_bytes(1 << 20)
        .with_isolation_level(isolation_level)
        .with_topics(vec![FetchTopic::default()
            .with_topic(topic_name(TOPIC))
            .with_partitions(vec![FetchPartition::default()
                .with_partition(0)
                .with_current_leader_epoch(-1)
                .with_fetch_offset(0)
                .with_log_start_offset(-1)
                .with_partition_max_bytes(1 << 20)])]);
    let resp = c.request(11, &req);
    let p = &resp.responses[0].partitions[0];
    (
        p.error_code,
        p.high_watermark,
        p.last_stable_offset,
        p.aborted_transactions.is_none(),
        p.aborted_transactions.as_ref().map_or(0, Vec::len),
        p.records.as_ref().map_or(0, Bytes::len),
    )
}

#[test]
fn a_transactional_batch_is_refused_and_read_committed_sees_the_high_watermark() {
    let mut broker = Broker::start(env!("CARGO_TARGET_TMPDIR").as_ref(), Options::default());
    let mut c = broker.connect();
    c.create_topic(TOPIC, 1);
    let r = c.produce(TOPIC, 0, batch(1, false), ACKS_ALL);
    assert_eq!((r.error_code, r.base_offset), (0, 0), "{r:?}");

    let r = c.produce(TOPIC, 0, batch(2, true), ACKS_ALL);
    assert_eq!(r.error_code, INVALID_TXN_STATE, "{r:?}");
    assert_eq!(
        c.latest_offset(TOPIC, 0),
        5,
        "a refused batch appends nothing"
    );

    assert_eq!(latest(&mut c, 0), (0, 5));
    assert_eq!(
        latest(&mut c, 1),
        (0, 5),
        "read_committed latest = LSO = HW"
    );

    let (error, hw, lso, null, aborted, bytes) = fetch(&mut c, 1);
    assert_eq!((error, hw, lso, null, aborted), (0, 5, 5, false, 0));
    assert!(bytes > 0, "read_committed returns the stable records");
    let (error, hw, lso, null, _, bytes) = fetch(&mut c, 0);
    assert_eq!(
        (error, hw, lso, null),
        (0, 5, 5, true),
        "read_uncommitted: null list"
    );
    assert!(bytes > 0);
    broker.stop();
}
