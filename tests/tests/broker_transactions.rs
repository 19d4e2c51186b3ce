//! Transactions against the real broker at the protocol level (issue 22): a transactional
//! batch of a producer with no transaction is refused with INVALID_TXN_STATE and appends
//! nothing (KIP-890: never a hanging transaction), and the read_committed answers
//! (ListOffsets and Fetch with isolation_level 1) hold what Kafka sends for a partition
//! without transactions: the last stable offset is the high watermark, the
//! aborted-transaction list is empty, and read_uncommitted gets null. A transaction's
//! Produce naming partitions it added and partitions it did not is refused for the latter
//! only, as Kafka's per-partition verification answers. A commit's completion record,
//! written lazily, is durable shortly after with no further write.

use bytes::Bytes;
use kafka_protocol::messages::add_partitions_to_txn_request::AddPartitionsToTxnTopic;
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic};
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::{
    AddPartitionsToTxnRequest, EndTxnRequest, FetchRequest, InitProducerIdRequest,
    ListOffsetsRequest, ProduceRequest, ProducerId, TransactionalId,
};
use kafka_protocol::protocol::StrBytes;
use strand_tests::broker::{topic_name, Broker, Client, Options};
use strand_tests::clock::Deadline;
use strand_wire::{Attributes, BatchBuilder, BatchHeader, RecordBatch, BATCH_HEADER_BYTES};

const TOPIC: &str = "txn";
/// INVALID_TXN_STATE.
const INVALID_TXN_STATE: i16 = 48;
/// acks=all.
const ACKS_ALL: i16 = -1;

/// Five records of producer `pid` at epoch 0 from sequence 0, transactional or not.
fn batch(pid: i64, transactional: bool) -> Bytes {
    batch_at(pid, 0, transactional)
}

/// Five records of producer `pid` at `epoch` from sequence 0, transactional or not.
fn batch_at(pid: i64, epoch: i16, transactional: bool) -> Bytes {
    let ts = 1_700_000_000_000;
    let mut b = BatchBuilder::new(ts).producer(pid, epoch, 0);
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

/// FindCoordinator for transactional id `tid` (which creates `__transaction_state`, as a
/// client's first one does), then InitProducerId v3 for it, both asked again while the
/// coordinator loads: (producer id, epoch).
fn init_transactional(c: &mut Client, tid: &str) -> (i64, i16) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    c.wait_coordinator_of(tid, 1, Deadline::after(std::time::Duration::from_secs(30)));
    loop {
        let req = InitProducerIdRequest::default()
            .with_transactional_id(Some(TransactionalId(StrBytes::from_string(tid.into()))))
            .with_transaction_timeout_ms(60_000)
            .with_producer_id(ProducerId(-1))
            .with_producer_epoch(-1);
        let resp = c.request(3, &req);
        if resp.error_code == 0 {
            return (resp.producer_id.0, resp.producer_epoch);
        }
        assert!(
            std::time::Instant::now() < deadline,
            "InitProducerId: error {}",
            resp.error_code
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

/// AddPartitionsToTxn v3 of `partitions` of TOPIC: a code per partition.
fn add_partitions(
    c: &mut Client,
    tid: &str,
    (pid, epoch): (i64, i16),
    partitions: &[i32],
) -> Vec<i16> {
    let add = AddPartitionsToTxnRequest::default()
        .with_v3_and_below_transactional_id(TransactionalId(StrBytes::from_string(tid.into())))
        .with_v3_and_below_producer_id(ProducerId(pid))
        .with_v3_and_below_producer_epoch(epoch)
        .with_v3_and_below_topics(vec![AddPartitionsToTxnTopic::default()
            .with_name(topic_name(TOPIC))
            .with_partitions(partitions.to_vec())]);
    let resp = c.request(3, &add);
    resp.results_by_topic_v3_and_below
        .iter()
        .flat_map(|t| {
            t.results_by_partition
                .iter()
                .map(|p| p.partition_error_code)
        })
        .collect()
}

/// EndTxn v3 of `tid`, committing or aborting: its code.
fn end_txn(c: &mut Client, tid: &str, (pid, epoch): (i64, i16), commit: bool) -> i16 {
    let end = EndTxnRequest::default()
        .with_transactional_id(TransactionalId(StrBytes::from_string(tid.into())))
        .with_producer_id(ProducerId(pid))
        .with_producer_epoch(epoch)
        .with_committed(commit);
    c.request(3, &end).error_code
}

/// One transactional Produce v9 of `tid` with a batch for each of TOPIC's first
/// `partitions`: (partition, code) as answered.
fn produce_to_each(
    c: &mut Client,
    tid: &str,
    (pid, epoch): (i64, i16),
    partitions: i32,
) -> Vec<(i32, i16)> {
    let produce = ProduceRequest::default()
        .with_transactional_id(Some(TransactionalId(StrBytes::from_string(tid.into()))))
        .with_acks(ACKS_ALL)
        .with_timeout_ms(10_000)
        .with_topic_data(vec![TopicProduceData::default()
            .with_name(topic_name(TOPIC))
            .with_partition_data(
                (0..partitions)
                    .map(|p| {
                        PartitionProduceData::default()
                            .with_index(p)
                            .with_records(Some(batch_at(pid, epoch, true)))
                    })
                    .collect(),
            )]);
    let resp = c.request(9, &produce);
    resp.responses
        .iter()
        .flat_map(|t| {
            t.partition_responses
                .iter()
                .map(|p| (p.index, p.error_code))
        })
        .collect()
}

#[test]
fn a_produce_naming_partitions_outside_the_transaction_is_refused_for_those_only() {
    // Two shards: whichever way the four partitions spread over them, partitions 0 and 3
    // (added) share a shard with one not added, so each shard checks a mix at once.
    let mut broker = Broker::start(
        env!("CARGO_TARGET_TMPDIR").as_ref(),
        Options {
            smp: 2,
            ..Options::default()
        },
    );
    let mut c = broker.connect();
    c.create_topic(TOPIC, 4);
    let tid = "verify-mix";
    let (pid, epoch) = init_transactional(&mut c, tid);
    assert_eq!(
        add_partitions(&mut c, tid, (pid, epoch), &[0, 3]),
        vec![0, 0]
    );
    let mut codes = produce_to_each(&mut c, tid, (pid, epoch), 4);
    codes.sort();
    assert_eq!(
        codes,
        vec![
            (0, 0),
            (1, INVALID_TXN_STATE),
            (2, INVALID_TXN_STATE),
            (3, 0)
        ]
    );
    for p in [1, 2] {
        assert_eq!(
            c.latest_offset(TOPIC, p),
            0,
            "partition {p}: nothing appended"
        );
    }

    assert_eq!(end_txn(&mut c, tid, (pid, epoch), true), 0);
    for p in [0, 3] {
        // Five records and the commit marker.
        assert_eq!(c.latest_offset(TOPIC, p), 6, "partition {p}");
    }
    broker.stop();
}

#[test]
fn a_commits_completion_is_made_durable_without_another_write() {
    // The Complete* record is written lazily (the id's next change takes it along); with
    // no next change it is flushed on its own shortly after. Were it lost, the
    // coordinator would find the transaction in PrepareCommit after a restart and write
    // its marker again: one more offset in the partition.
    let mut broker = Broker::start(env!("CARGO_TARGET_TMPDIR").as_ref(), Options::default());
    let mut c = broker.connect();
    c.create_topic(TOPIC, 1);
    let tid = "lazy-complete";
    let (pid, epoch) = init_transactional(&mut c, tid);
    assert_eq!(add_partitions(&mut c, tid, (pid, epoch), &[0]), vec![0]);
    assert_eq!(produce_to_each(&mut c, tid, (pid, epoch), 1), vec![(0, 0)]);
    assert_eq!(end_txn(&mut c, tid, (pid, epoch), true), 0);
    assert_eq!(c.latest_offset(TOPIC, 0), 6, "five records and the marker");
    std::thread::sleep(std::time::Duration::from_millis(600));
    broker.kill9();
    broker.restart();
    let mut c = broker.connect();
    // The coordinator has loaded the id (and completed it, had it found it preparing).
    let (pid2, _) = init_transactional(&mut c, tid);
    assert_eq!(pid2, pid, "the same producer id, a new epoch");
    std::thread::sleep(std::time::Duration::from_millis(300));
    assert_eq!(
        c.latest_offset(TOPIC, 0),
        6,
        "no marker written again: the completion was durable"
    );
    broker.stop();
}
