//! A broker restarted after a crash or a clean stop listens on its old port at once, while
//! connections of the previous process still linger in TIME_WAIT. Apache Kafka does (the
//! JVM sets SO_REUSEADDR on server sockets); clients and operators know a broker by its
//! address, so a broker that cannot rebind for a minute (the TIME_WAIT period) after every
//! restart is down for that minute.
//!
//! The same restart serves every partition its metadata names from its first answer.
//!
//! Also group commit pacing (what was acknowledged survives kill -9) and the slow-produce
//! log that pacing makes easy to provoke.

use strand_tests::broker::{Broker, Options};

#[test]
fn restart_rebinds_its_port_while_old_connections_linger() {
    let mut broker = Broker::start(env!("CARGO_TARGET_TMPDIR").as_ref(), Options::default());
    let mut c = broker.connect();
    c.api_versions().expect("ApiVersions");

    // kill -9 with a client connected; the client then closes too, as real ones do, so the
    // broker's side of the connection is in TIME_WAIT.
    broker.kill9();
    drop(c);
    broker.restart();
    let mut c = broker.connect();
    c.api_versions().expect("ApiVersions after kill -9");

    // A clean stop with a client connected.
    broker.stop();
    drop(c);
    broker.restart();
    broker
        .connect()
        .api_versions()
        .expect("ApiVersions after SIGTERM");
}

/// Group commit pacing (`--group-commit-min-interval-us`): concurrent acks=all producers
/// share flushes that start at most once per interval, and what was acknowledged is on
/// disk after kill -9. The bound on flushes can fail only if pacing does not work (a slow
/// machine makes fewer flushes, not more).
#[test]
fn paced_group_commit_shares_flushes_and_loses_nothing_acknowledged() {
    use strand_storage::RaftIndex;
    use strand_tests::clock::Stopwatch;

    const INTERVAL_MS: u64 = 100;
    const PRODUCERS: u64 = 6;
    const BATCHES_EACH: u64 = 8;
    let mut broker = Broker::start(
        env!("CARGO_TARGET_TMPDIR").as_ref(),
        Options {
            extra_args: vec![
                "--group-commit-min-interval-us".into(),
                (INTERVAL_MS * 1000).to_string(),
            ],
            ..Options::default()
        },
    );
    broker.connect().create_topic("paced", 1);
    let syncs_before = broker.metric_sum("strand_storage_fdatasync_total");
    let clock = Stopwatch::start();
    let acked: Vec<i64> = std::thread::scope(|s| {
        let producers: Vec<_> = (0..PRODUCERS)
            .map(|p| {
                let mut c = broker.connect();
                s.spawn(move || {
                    (0..BATCHES_EACH)
                        .map(|i| {
                            let batch = strand_tests::crash_workload::batch(p, RaftIndex(i + 1));
                            let r = c.produce("paced", 0, batch, -1);
                            assert_eq!(r.error_code, 0, "produce: {r:?}");
                            r.base_offset
                        })
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        producers
            .into_iter()
            .flat_map(|h| h.join().expect("producer thread"))
            .collect()
    });
    let elapsed_ms = u64::try_from(clock.elapsed().as_millis()).unwrap_or(u64::MAX);
    let syncs = broker.metric_sum("strand_storage_fdatasync_total") - syncs_before;
    let mut bases = acked.clone();
    bases.sort_unstable();
    bases.dedup();
    assert_eq!(
        bases.len(),
        acked.len(),
        "two batches at one offset: {acked:?}"
    );
    // One flush may start at once, then one per interval; +2 for another log's flush.
    let most = elapsed_ms / INTERVAL_MS + 3;
    println!(
        "PACED-GROUP-COMMIT {} acks in {elapsed_ms} ms with {syncs} fdatasyncs (at most {most})",
        acked.len()
    );
    assert!(
        syncs <= most as f64,
        "{syncs} fdatasyncs in {elapsed_ms} ms: flushes were not paced at {INTERVAL_MS} ms"
    );
    let mut c = broker.connect();
    let durable = c.latest_offset("paced", 0);
    drop(c);
    broker.kill9();
    broker.restart();
    let after = broker.connect().latest_offset("paced", 0);
    assert!(
        after >= durable && durable > *bases.last().unwrap_or(&0),
        "acknowledged up to {durable}, {after} after kill -9"
    );
}

/// The slow-produce log (`--produce-slow-log-ms`): with flushes paced at 100 ms, a produce
/// appended while a flush is in flight waits for the next one, and the broker logs such a
/// request with its timeline, its flush's start apart from its append. Concurrent acks=all
/// producers on one partition always meet it (the test above bounds the flushes they share).
#[test]
fn a_slow_produce_is_logged_with_its_timeline() {
    use strand_storage::RaftIndex;

    const THRESHOLD_MS: f64 = 30.0;
    let mut broker = Broker::start(
        env!("CARGO_TARGET_TMPDIR").as_ref(),
        Options::slow_produces_logged(),
    );
    broker.connect().create_topic("slow", 1);
    std::thread::scope(|s| {
        for p in 0..6 {
            let mut c = broker.connect();
            s.spawn(move || {
                for i in 0..4 {
                    let batch = strand_tests::crash_workload::batch(p, RaftIndex(i + 1));
                    let r = c.produce("slow", 0, batch, -1);
                    assert_eq!(r.error_code, 0, "produce: {r:?}");
                }
            });
        }
    });
    let line = broker.log_line_with(&["slow produce", "client_id=\"strand-tests\""]);
    for part in [
        "handler ",
        "slow-0 on shard 0: began ",
        "after the append), durable ",
        "durable ",
        "all partitions answered ",
        "acks=-1",
    ] {
        assert!(line.contains(part), "{part:?} missing from: {line}");
    }
    let took_ms: f64 = line
        .split("took_ms=")
        .nth(1)
        .and_then(|r| r.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no took_ms in: {line}"));
    assert!(took_ms >= THRESHOLD_MS, "logged at {took_ms} ms: {line}");
    broker.assert_alive();
}

/// A restarted broker serves Kafka only once every shard has opened the partitions its
/// metadata names: a partition still opening on its shard was answered
/// UNKNOWN_TOPIC_OR_PARTITION (a client is told the topic may not exist; librdkafka's
/// watermark query fails at once), while Kafka does not listen before its logs are loaded.
/// One partition with a long tail to recover after kill -9 opens well after the other
/// shard is ready; the query goes to whichever shard accepts the connection. Readiness
/// (`/v1/health/ready`, which shard 0 answers) must not say ready before either.
#[test]
fn a_restarted_broker_serves_every_partition_it_names() {
    use strand_storage::RaftIndex;

    const BATCHES: u64 = 6_000;
    const RESTARTS: usize = 4;
    let options = Options {
        smp: 2,
        ..Options::default()
    };
    let mut broker = Broker::start(env!("CARGO_TARGET_TMPDIR").as_ref(), options);
    let mut c = broker.connect();
    c.create_topic("opening", 2);
    for i in 0..BATCHES {
        let batch = strand_tests::crash_workload::batch(7, RaftIndex(i + 1));
        let r = c.produce("opening", 1, batch, 1);
        assert_eq!(r.error_code, 0, "produce: {r:?}");
    }
    drop(c);
    for restart in 0..RESTARTS {
        broker.kill9();
        broker.restart_observing(&mut |b| ready_only_once_every_partition_is_open(b));
        assert_eq!(broker.admin_get("/v1/health/ready").trim(), "ready");
        let answers: Vec<(i32, i16, i64)> = broker
            .connect()
            .list_latest("opening", &[0, 1])
            .iter()
            .map(|p| (p.partition_index, p.error_code, p.offset))
            .collect();
        assert_eq!(
            answers.iter().map(|a| (a.0, a.1)).collect::<Vec<_>>(),
            [(0, 0), (1, 0)],
            "after kill -9 number {restart}: {answers:?}"
        );
        assert!(answers[1].2 > 0, "{answers:?}");
    }
}

/// A new broker's `__consumer_offsets` is there from its first Kafka answer, on every shard
/// (clients describe it or commit at once; it was created after the first metadata reached
/// the shards, so a connection on another shard could be told it does not exist).
#[test]
fn a_new_broker_names_the_offsets_topic_from_its_first_answer() {
    use kafka_protocol::messages::{metadata_request::MetadataRequestTopic, MetadataRequest};
    use strand_tests::broker::topic_name;

    const STARTS: usize = 3;
    const CONNECTIONS: usize = 8;
    for start in 0..STARTS {
        let options = Options {
            smp: 2,
            ..Options::default()
        };
        let broker = Broker::start(env!("CARGO_TARGET_TMPDIR").as_ref(), options);
        let mut clients: Vec<_> = (0..CONNECTIONS).map(|_| broker.connect()).collect();
        let req = MetadataRequest::default()
            .with_allow_auto_topic_creation(false)
            .with_topics(Some(vec![
                MetadataRequestTopic::default().with_name(Some(topic_name("__consumer_offsets")))
            ]));
        for (i, c) in clients.iter_mut().enumerate() {
            let r = c.request(9, &req);
            assert_eq!(
                r.topics[0].error_code, 0,
                "start {start}, connection {i}: {:?}",
                r.topics[0]
            );
        }
    }
}

/// While a broker starts: `/v1/health/ready` says ready only once every shard opened the
/// partitions it hosts (`/v1/status` lists both of topic "opening").
fn ready_only_once_every_partition_is_open(b: &Broker) {
    let Ok(ready) = b.try_admin_get("/v1/health/ready") else {
        return;
    };
    if ready.trim() != "ready" {
        return;
    }
    let status = b.admin_get("/v1/status");
    let listed = status.matches(r#""topic":"opening""#).count();
    // Each partition shows twice: its shard's row and the leaders list.
    assert_eq!(
        listed, 4,
        "ready while a partition is not open yet: {status}"
    );
}
