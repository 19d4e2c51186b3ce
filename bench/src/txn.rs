//! `strand-bench txn`: transactions of N records (transaction protocol version 1, as a
//! Kafka client runs them: AddPartitionsToTxn, one Produce with a batch per partition,
//! EndTxn commit), closed loop, one transaction in flight per producer; then the same
//! records through an idempotent producer (one acks=all Produce per N records) for the
//! cost of transactions in records/s. Commit latency (EndTxn) and whole-transaction
//! latency are reported next to the physics: write+fdatasync p99 + loopback RTT p99.
//!
//! Invariant: both phases send the same batches (records per transaction, partitions,
//! record size) from the same number of producers, one request at a time, so the ratio
//! is the price of the transaction's extra round trips and markers.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use kafka_protocol::messages::add_partitions_to_txn_request::AddPartitionsToTxnTopic;
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::{
    AddPartitionsToTxnRequest, EndTxnRequest, FindCoordinatorRequest, InitProducerIdRequest,
    ProduceRequest, ProducerId, TopicName, TransactionalId,
};
use kafka_protocol::protocol::StrBytes;

use crate::driver::{Codec, Driver, DriverError, TopicSpec};
use crate::kafka_conn::Conn;
use crate::kafka_driver::{encode_records, KafkaDriver, ProducerFields};
use crate::physics::PhysicsReport;
use crate::stats::{Latency, Percentiles};

/// Versions sent under transaction protocol version 1 (every transactional Kafka broker
/// serves them).
const PRODUCE_VERSION: i16 = 9;
/// Versions of transaction protocol version 2 (KIP-890 part 2, Kafka 4.x): the Produce
/// adds its partitions to the transaction, the EndTxn answers the next epoch.
const PRODUCE_V2_VERSION: i16 = 12;
const END_TXN_V2_VERSION: i16 = 5;
const INIT_PRODUCER_ID_VERSION: i16 = 4;
const ADD_PARTITIONS_VERSION: i16 = 3;
const END_TXN_VERSION: i16 = 3;
const FIND_COORDINATOR_VERSION: i16 = 3;
/// Broker-side timeout of a produce.
const REQUEST_TIMEOUT_MS: i32 = 30_000;
/// How long a retriable coordinator answer (CONCURRENT_TRANSACTIONS, load in progress)
/// is retried before the run fails.
const RETRY_DEADLINE: Duration = Duration::from_secs(30);

/// Options of `strand-bench txn`.
#[derive(clap::Args, Debug, Clone)]
pub struct TxnArgs {
    /// Broker (HOST:PORT); a single node (every partition's leader and the coordinator).
    #[arg(long, default_value = "127.0.0.1:9092")]
    pub bootstrap: String,
    /// Topic (created when missing).
    #[arg(long, default_value = "strand-bench-txn")]
    pub topic: String,
    #[arg(long, default_value_t = 6)]
    pub partitions: i32,
    /// Records per transaction (and per idempotent request).
    #[arg(long, default_value_t = 100)]
    pub records_per_txn: usize,
    /// Bytes of each record's value.
    #[arg(long, default_value_t = 1024)]
    pub record_bytes: usize,
    /// Producers, each with its own transactional id and one transaction in flight.
    #[arg(long, default_value_t = 1)]
    pub producers: usize,
    /// Measured seconds of each phase.
    #[arg(long, default_value_t = 10.0)]
    pub duration_s: f64,
    /// Physics to divide by (a `strand-bench physics --out` file).
    #[arg(long)]
    pub physics: Option<PathBuf>,
    /// Transaction protocol version: 1 (AddPartitionsToTxn before the Produce: librdkafka,
    /// kafkajs, Java 3.x) or 2 (the Produce adds them, every EndTxn bumps the epoch: Java
    /// 4.x against a broker that finalizes `transaction.version` 2).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u8).range(1..=2))]
    pub protocol: u8,
}

/// One phase's figures.
#[derive(Debug, Clone)]
pub struct PhaseReport {
    pub records_per_s: f64,
    /// Per transaction (or idempotent request): first request sent to last answer.
    pub round: Percentiles,
    /// AddPartitionsToTxn alone (transactions of protocol version 1 only).
    pub add: Option<Percentiles>,
    /// The Produce alone.
    pub produce: Percentiles,
    /// EndTxn alone (transactions only).
    pub commit: Option<Percentiles>,
}

/// One producer's (or a phase's) latencies, each step on its own.
#[derive(Default)]
struct Steps {
    round: Latency,
    add: Latency,
    produce: Latency,
    commit: Latency,
}

impl Steps {
    fn merge(&mut self, o: &Steps) {
        self.round.merge(&o.round);
        self.add.merge(&o.add);
        self.produce.merge(&o.produce);
        self.commit.merge(&o.commit);
    }
}

pub fn run(args: TxnArgs) -> anyhow::Result<()> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let (txn, idem) = rt.block_on(measure(&args))?;
    println!(
        "{} records/transaction x {} B, {} partitions, {} producer(s), {:.0} s per phase, \
         transaction protocol version {}",
        args.records_per_txn,
        args.record_bytes,
        args.partitions,
        args.producers,
        args.duration_s,
        args.protocol
    );
    let row = |name: &str, p: &PhaseReport| {
        println!(
            "  {name:<12} {:>10.0} records/s  round p50 {:>7.3} ms p99 {:>7.3} ms p99.9 {:>7.3} ms",
            p.records_per_s,
            p.round.p50_us as f64 / 1000.0,
            p.round.p99_us as f64 / 1000.0,
            p.round.p999_us as f64 / 1000.0
        );
    };
    let step = |name: &str, p: &Percentiles| {
        println!(
            "    {name:<8} p50 {:>7.3} ms p99 {:>7.3} ms",
            p.p50_us as f64 / 1000.0,
            p.p99_us as f64 / 1000.0
        );
    };
    row("transactions", &txn);
    if let Some(a) = &txn.add {
        step("add", a);
    }
    step("produce", &txn.produce);
    if let Some(c) = &txn.commit {
        step("commit", c);
    }
    row("idempotent", &idem);
    step("produce", &idem.produce);
    println!(
        "  idempotent / transactional records/s: {:.2}x (goal <= 1.3x)",
        idem.records_per_s / txn.records_per_s.max(1e-9)
    );
    if let Some(c) = &txn.commit {
        println!(
            "  commit (EndTxn) p50 {:.3} ms p99 {:.3} ms p99.9 {:.3} ms",
            c.p50_us as f64 / 1000.0,
            c.p99_us as f64 / 1000.0,
            c.p999_us as f64 / 1000.0
        );
        if let Some(path) = &args.physics {
            let ph = PhysicsReport::load(path)?;
            let bound_us = ph.small_sync_p99_us() + ph.rtt.p99_us;
            for (name, v) in [("p50", c.p50_us), ("p99", c.p99_us), ("p99.9", c.p999_us)] {
                println!(
                    "  commit {name:<6} / (fdatasync p99 + rtt p99 = {:.3} ms) = {:.2}x",
                    bound_us as f64 / 1000.0,
                    v as f64 / bound_us.max(1) as f64
                );
            }
        }
    }
    Ok(())
}

async fn measure(args: &TxnArgs) -> anyhow::Result<(PhaseReport, PhaseReport)> {
    let driver = KafkaDriver::connect(&args.bootstrap).await?;
    driver
        .ensure_topic(&TopicSpec {
            name: args.topic.clone(),
            partitions: args.partitions,
            replication_factor: -1,
            configs: Vec::new(),
        })
        .await?;
    let txn = phase(args, true).await?;
    let idem = phase(args, false).await?;
    Ok((txn, idem))
}

/// Runs `args.producers` producers for `args.duration_s`, transactional or idempotent.
async fn phase(args: &TxnArgs, transactional: bool) -> anyhow::Result<PhaseReport> {
    let run = format!("{:x}", std::process::id());
    let mut tasks = Vec::new();
    for i in 0..args.producers {
        let args = args.clone();
        let tid = transactional.then(|| format!("strand-bench-{run}-{i}"));
        tasks.push(tokio::spawn(async move { produce_loop(&args, tid).await }));
    }
    let (mut steps, mut records) = (Steps::default(), 0u64);
    for t in tasks {
        let (s, n) = t.await??;
        steps.merge(&s);
        records += n;
    }
    Ok(PhaseReport {
        records_per_s: records as f64 / args.duration_s,
        round: steps.round.percentiles(),
        add: (transactional && args.protocol == 1).then(|| steps.add.percentiles()),
        produce: steps.produce.percentiles(),
        commit: transactional.then(|| steps.commit.percentiles()),
    })
}

/// One producer's loop: its latencies and the records acknowledged.
async fn produce_loop(args: &TxnArgs, tid: Option<String>) -> Result<(Steps, u64), DriverError> {
    let conn = Conn::connect(&args.bootstrap, 1).await?;
    let (coordinator, (mut pid, mut epoch)) = match &tid {
        Some(id) => {
            let (c, ids) = coordinated_init(&conn, id).await?;
            (Some(c), ids)
        }
        None => (None, init_producer_id(&conn, None).await?),
    };
    let coord = coordinator.as_ref().unwrap_or(&conn);
    let v2 = args.protocol == 2;
    let partitions: Vec<i32> = (0..args.partitions).collect();
    let value = Bytes::from(vec![b'x'; args.record_bytes]);
    let mut sequences = vec![0i32; partitions.len()];
    let (mut steps, mut records) = (Steps::default(), 0u64);
    let end = Instant::now() + Duration::from_secs_f64(args.duration_s);
    let mut buf = BytesMut::new();
    while Instant::now() < end {
        let started = Instant::now();
        if let Some(id) = tid.as_ref().filter(|_| !v2) {
            retrying(|| add_partitions(coord, id, (pid, epoch), &args.topic, &partitions)).await?;
            steps.add.record(started.elapsed());
        }
        let per = args.records_per_txn.div_ceil(partitions.len());
        let req = produce_request(
            args,
            tid.as_deref(),
            (pid, epoch),
            &mut sequences,
            (&value, &mut buf),
        )?;
        let version = if v2 && tid.is_some() {
            PRODUCE_V2_VERSION
        } else {
            PRODUCE_VERSION
        };
        let t0 = Instant::now();
        produce_retrying(&conn, &req, version).await?;
        steps.produce.record(t0.elapsed());
        if let Some(id) = &tid {
            let t0 = Instant::now();
            let next = retrying(|| end_txn(coord, id, (pid, epoch), v2)).await?;
            steps.commit.record(t0.elapsed());
            if v2 && next != (pid, epoch) {
                // The next transaction is the new epoch's (or producer id's): its
                // sequences start again at 0.
                (pid, epoch) = next;
                sequences.iter_mut().for_each(|s| *s = 0);
            }
        }
        steps.round.record(started.elapsed());
        records += (per * partitions.len()) as u64;
    }
    Ok((steps, records))
}

/// One Produce with a batch of `records_per_txn / partitions` records per partition,
/// transactional when `tid` is set; advances `sequences` (one per partition).
fn produce_request(
    args: &TxnArgs,
    tid: Option<&str>,
    (pid, epoch): (i64, i16),
    sequences: &mut [i32],
    (value, buf): (&Bytes, &mut BytesMut),
) -> Result<ProduceRequest, DriverError> {
    let per = args.records_per_txn.div_ceil(sequences.len().max(1));
    let mut data = Vec::with_capacity(sequences.len());
    for (p, seq) in sequences.iter_mut().enumerate() {
        let producer = ProducerFields {
            id: pid,
            epoch,
            base_sequence: *seq,
            transactional: tid.is_some(),
        };
        let records = std::iter::repeat_n((None, value.clone()), per);
        let batch = encode_records(records, Codec::None, producer, buf)?;
        *seq = seq.wrapping_add(per as i32);
        data.push(
            PartitionProduceData::default()
                .with_index(p as i32)
                .with_records(Some(batch)),
        );
    }
    Ok(ProduceRequest::default()
        .with_transactional_id(tid.map(|t| TransactionalId(StrBytes::from_string(t.to_string()))))
        .with_acks(-1)
        .with_timeout_ms(REQUEST_TIMEOUT_MS)
        .with_topic_data(vec![TopicProduceData::default()
            .with_name(TopicName(StrBytes::from_string(args.topic.clone())))
            .with_partition_data(data)]))
}

fn check(api: &'static str, code: i16) -> Result<(), DriverError> {
    match kafka_protocol::error::ResponseError::try_from_code(code) {
        None => Ok(()),
        Some(e) => Err(DriverError::Broker {
            api,
            code,
            name: e.to_string(),
        }),
    }
}

/// Sends `req` again while a partition answers NOT_LEADER_OR_FOLLOWER (6) or
/// UNKNOWN_TOPIC_OR_PARTITION (3), up to `RETRY_DEADLINE`: Kafka's leader refuses writes for
/// a moment after the topic's creation although Metadata names it. The batches keep their
/// sequences, so a partition that wrote its batch answers the resend as a duplicate.
async fn produce_retrying(
    conn: &Conn,
    req: &ProduceRequest,
    version: i16,
) -> Result<(), DriverError> {
    let deadline = Instant::now() + RETRY_DEADLINE;
    loop {
        let resp = conn.request(req, version).await?;
        let mut again = false;
        for p in resp.responses.iter().flat_map(|t| &t.partition_responses) {
            match p.error_code {
                6 | 3 if Instant::now() < deadline => again = true,
                code => check("Produce", code)?,
            }
        }
        if !again {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Retries `f` while the coordinator answers a retriable error, up to `RETRY_DEADLINE`.
async fn retrying<T, F, Fut>(mut f: F) -> Result<T, DriverError>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, DriverError>>,
{
    let deadline = Instant::now() + RETRY_DEADLINE;
    loop {
        match f().await {
            // CONCURRENT_TRANSACTIONS, COORDINATOR_LOAD_IN_PROGRESS
            Err(DriverError::Broker { code: 51 | 14, .. }) if Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            r => return r,
        }
    }
}

async fn find_coordinator(conn: &Conn, id: &str) -> Result<Conn, DriverError> {
    let deadline = Instant::now() + RETRY_DEADLINE;
    loop {
        let req = FindCoordinatorRequest::default()
            .with_key(StrBytes::from_string(id.to_string()))
            .with_key_type(1);
        let resp = conn.request(&req, FIND_COORDINATOR_VERSION).await?;
        // COORDINATOR_NOT_AVAILABLE while `__transaction_state` is being created.
        if resp.error_code == 15 && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(50)).await;
            continue;
        }
        check("FindCoordinator", resp.error_code)?;
        return Conn::connect(&format!("{}:{}", resp.host.as_str(), resp.port), 1).await;
    }
}

/// The coordinator of `id` and its producer id and epoch, looking the coordinator up again
/// while one answers NOT_COORDINATOR or COORDINATOR_NOT_AVAILABLE (Apache Kafka does
/// while it loads a new `__transaction_state` partition), as clients do.
async fn coordinated_init(conn: &Conn, id: &str) -> Result<(Conn, (i64, i16)), DriverError> {
    let deadline = Instant::now() + RETRY_DEADLINE;
    loop {
        let coord = find_coordinator(conn, id).await?;
        match init_producer_id(&coord, Some(id)).await {
            Err(DriverError::Broker { code: 15 | 16, .. }) if Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            r => return r.map(|ids| (coord, ids)),
        }
    }
}

async fn init_producer_id(conn: &Conn, tid: Option<&str>) -> Result<(i64, i16), DriverError> {
    let req = InitProducerIdRequest::default()
        .with_transactional_id(tid.map(|t| TransactionalId(StrBytes::from_string(t.to_string()))))
        .with_transaction_timeout_ms(60_000)
        .with_producer_id(ProducerId(-1))
        .with_producer_epoch(-1);
    let deadline = Instant::now() + RETRY_DEADLINE;
    loop {
        let resp = conn.request(&req, INIT_PRODUCER_ID_VERSION).await?;
        if matches!(resp.error_code, 51 | 14) && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(20)).await;
            continue;
        }
        check("InitProducerId", resp.error_code)?;
        return Ok((resp.producer_id.0, resp.producer_epoch));
    }
}

async fn add_partitions(
    conn: &Conn,
    id: &str,
    (pid, epoch): (i64, i16),
    topic: &str,
    partitions: &[i32],
) -> Result<(), DriverError> {
    let req = AddPartitionsToTxnRequest::default()
        .with_v3_and_below_transactional_id(TransactionalId(StrBytes::from_string(id.to_string())))
        .with_v3_and_below_producer_id(ProducerId(pid))
        .with_v3_and_below_producer_epoch(epoch)
        .with_v3_and_below_topics(vec![AddPartitionsToTxnTopic::default()
            .with_name(TopicName(StrBytes::from_string(topic.to_string())))
            .with_partitions(partitions.to_vec())]);
    let resp = conn.request(&req, ADD_PARTITIONS_VERSION).await?;
    for t in &resp.results_by_topic_v3_and_below {
        for p in &t.results_by_partition {
            check("AddPartitionsToTxn", p.partition_error_code)?;
        }
    }
    Ok(())
}

/// Commits; the producer id and epoch of the next transaction (bumped under version 2).
async fn end_txn(
    conn: &Conn,
    id: &str,
    (pid, epoch): (i64, i16),
    v2: bool,
) -> Result<(i64, i16), DriverError> {
    let req = EndTxnRequest::default()
        .with_transactional_id(TransactionalId(StrBytes::from_string(id.to_string())))
        .with_producer_id(ProducerId(pid))
        .with_producer_epoch(epoch)
        .with_committed(true);
    let version = if v2 {
        END_TXN_V2_VERSION
    } else {
        END_TXN_VERSION
    };
    let resp = conn.request(&req, version).await?;
    check("EndTxn", resp.error_code)?;
    Ok(if v2 {
        (resp.producer_id.0, resp.producer_epoch)
    } else {
        (pid, epoch)
    })
}
