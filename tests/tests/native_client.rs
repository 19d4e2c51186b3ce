//! The native protocol and `strand-client` against the real `strand` binary: shard routing
//! with no cross-shard hop, recovery from a stale shard map through "moved", a pipelined
//! idempotent producer keeping send order, idempotent retries across kill -9 without
//! duplicates, and hostile native frames.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::time::Duration;

use strand_client::{
    Acks, Client, ClientConfig, ConsumerConfig, Offset, ProducerConfig, ProducerRecord, TopicBatch,
};
use strand_tests::broker::{Broker, Options};
use strand_wire::native::generated::*;
use strand_wire::native::{
    codes, decode_body, split_trailer, take_trailer, Encoder, FrameHeader, FLAG_TRAILER,
    FRAME_HEADER_BYTES,
};

fn tmp() -> &'static Path {
    Path::new(env!("CARGO_TARGET_TMPDIR"))
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime")
}

/// A broker of two shards whose auto-created topics get `partitions` partitions.
fn two_shards(partitions: i32) -> Broker {
    Broker::start(
        tmp(),
        Options {
            smp: 2,
            num_partitions: partitions,
            ..Options::default()
        },
    )
}

async fn client(b: &Broker) -> Client {
    Client::connect(ClientConfig::new(b.native_addr().to_string()))
        .await
        .expect("native handshake")
}

/// Reads every partition of `topic` from the start until `want` records or 20 s.
async fn consume_all(c: &Client, topic: &str, want: usize) -> Vec<strand_client::ConsumedRecord> {
    let mut consumer = c.consumer(ConsumerConfig {
        max_wait: Duration::from_millis(200),
        ..ConsumerConfig::default()
    });
    for p in 0..c.partition_count(topic).await.expect("partitions") {
        consumer
            .assign(topic, p as i32, Offset::Earliest)
            .await
            .expect("assign");
    }
    let mut out = Vec::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while out.len() < want && tokio::time::Instant::now() < deadline {
        out.extend(consumer.poll().await.expect("poll"));
    }
    out
}

#[test]
fn native_traffic_never_hops_shards_and_kafka_offsets_match() {
    let broker = two_shards(8);
    let broker_shards = 2;
    runtime().block_on(async {
        let c = client(&broker).await;
        assert_eq!(c.shard_ports().len(), broker_shards, "one port per shard");
        assert_eq!(c.partition_count("routed").await.expect("created"), 8);
        let shards: Vec<u32> = (0..8)
            .map(|p| c.shard_of("routed", p).expect("placed"))
            .collect();
        assert!(shards.contains(&0) && shards.contains(&1), "{shards:?}");
        let producer = c
            .producer(ProducerConfig::default())
            .await
            .expect("producer");
        // Control traffic (topic creation, producer id) may cross shards; data must not.
        let hops_before = broker.metric_sum("strand_shard_cross_shard_messages_total");
        let mut deliveries = Vec::new();
        for i in 0..400 {
            let rec = ProducerRecord::new("routed")
                .key(format!("key-{i}"))
                .value(format!("value-{i}"));
            deliveries.push(producer.send(rec).await.expect("queued"));
        }
        let mut by_partition: BTreeMap<i32, Vec<i64>> = BTreeMap::new();
        for d in deliveries {
            let m = d.await.expect("delivered");
            by_partition.entry(m.partition).or_default().push(m.offset);
        }
        for offsets in by_partition.values() {
            let dense: Vec<i64> = (0..offsets.len() as i64).collect();
            assert_eq!(
                offsets, &dense,
                "offsets per partition are dense and in order"
            );
        }
        let records = consume_all(&c, "routed", 400).await;
        assert_eq!(records.len(), 400);
        for r in &records {
            let i: usize = std::str::from_utf8(r.key.as_deref().unwrap())
                .unwrap()
                .trim_start_matches("key-")
                .parse()
                .unwrap();
            assert_eq!(r.value.as_deref(), Some(format!("value-{i}").as_bytes()));
            let want =
                strand_client::partitioner::partition_for_key(format!("key-{i}").as_bytes(), 8);
            assert_eq!(r.partition as u32, want, "murmur2 placement");
        }
        let hops_after = broker.metric_sum("strand_shard_cross_shard_messages_total");
        // The one hop between the two readings is the first scrape itself: the admin
        // server on shard 0 asks shard 1 for its counters.
        let scrape_hops = (broker_shards - 1) as f64;
        assert_eq!(
            hops_after - hops_before,
            scrape_hops,
            "native produce and fetch made cross-shard hops"
        );
        assert_eq!(
            broker.metric_sum("strand_native_moved_partitions_total"),
            0.0
        );
        assert_eq!(
            c.shard_connection_count().await,
            2,
            "one connection per shard"
        );
    });
}

/// One Kafka RecordBatch v2 holding `value`.
fn one_record_batch(value: &str) -> bytes::Bytes {
    let mut b = strand_wire::BatchBuilder::new(1_700_000_000_000);
    b.push(0, None, Some(value.as_bytes()), &[]);
    b.build()
}

#[test]
fn batches_of_many_partitions_go_as_one_request_per_shard_each_answered() {
    let broker = two_shards(8);
    runtime().block_on(async {
        let c = client(&broker).await;
        assert_eq!(c.partition_count("many").await.expect("created"), 8);
        let send = |round: usize, partitions: i32| {
            let c = c.clone();
            async move {
                let batches: Vec<TopicBatch<'_>> = (0..partitions)
                    .map(|p| TopicBatch {
                        topic: "many",
                        partition: p,
                        batch: one_record_batch(&format!("r{round}-p{p}")),
                    })
                    .collect();
                c.produce_batches(Acks::All, &batches, Duration::from_secs(10))
                    .await
            }
        };
        // Every partition, and one that does not exist: its error is its own.
        let first = send(0, 9).await;
        assert!(
            matches!(
                first[8],
                Err(strand_client::Error::UnknownPartition { partition: 8, .. })
            ),
            "{:?}",
            first[8]
        );
        let requests_before = broker.metric_sum("strand_native_requests_total");
        let second = send(1, 8).await;
        let requests = broker.metric_sum("strand_native_requests_total") - requests_before;
        assert_eq!(requests, 2.0, "one produce request per shard");
        for (p, (a, b)) in first.iter().zip(&second).enumerate() {
            assert_eq!(a.as_ref().ok(), Some(&0), "partition {p}: {a:?}");
            assert_eq!(b.as_ref().ok(), Some(&1), "partition {p}: {b:?}");
        }
        let records = consume_all(&c, "many", 16).await;
        let mut values: Vec<String> = records
            .iter()
            .map(|r| String::from_utf8_lossy(r.value.as_deref().unwrap_or_default()).into_owned())
            .collect();
        values.sort();
        let mut want: Vec<String> = (0..2)
            .flat_map(|round| (0..8).map(move |p| format!("r{round}-p{p}")))
            .collect();
        want.sort();
        assert_eq!(values, want);
    });
}

#[test]
fn a_stale_shard_map_recovers_through_moved() {
    let broker = two_shards(2);
    runtime().block_on(async {
        let c = client(&broker).await;
        c.partition_count("moving").await.expect("created");
        let owner = c.shard_of("moving", 0).expect("placed");
        c.debug_set_shard("moving", 0, 1 - owner);
        let producer = c
            .producer(ProducerConfig::default())
            .await
            .expect("producer");
        let m = producer
            .send(ProducerRecord::new("moving").partition(0).value("v"))
            .await
            .expect("queued")
            .await
            .expect("delivered after moved");
        assert_eq!((m.partition, m.offset), (0, 0));
        assert_eq!(c.shard_of("moving", 0), Some(owner), "map corrected");
        assert!(broker.metric_sum("strand_native_moved_partitions_total") >= 1.0);
        // A consumer with a stale map is redirected too.
        c.debug_set_shard("moving", 0, 1 - owner);
        let records = consume_all(&c, "moving", 1).await;
        assert_eq!(records.len(), 1);
    });
}

/// The slow-produce log covers native produces too: with flushes paced at 100 ms,
/// concurrent producers on one partition wait for the next flush, and one such request is
/// logged with its timeline from the frame's read.
#[test]
fn a_slow_native_produce_is_logged_with_its_timeline() {
    let broker = Broker::start(tmp(), Options::slow_produces_logged());
    runtime().block_on(async {
        let first = client(&broker).await;
        first.partition_count("slow").await.expect("created");
        let addr = broker.native_addr().to_string();
        let producers: Vec<_> = (0..4)
            .map(|p| {
                let addr = addr.clone();
                tokio::spawn(async move {
                    let c = Client::connect(ClientConfig::new(addr))
                        .await
                        .expect("native handshake");
                    let producer = c
                        .producer(ProducerConfig::default())
                        .await
                        .expect("producer");
                    for i in 0..5 {
                        let value = format!("{p}-{i}");
                        producer
                            .send(ProducerRecord::new("slow").partition(0).value(value))
                            .await
                            .expect("queued")
                            .await
                            .expect("delivered");
                    }
                })
            })
            .collect();
        for p in producers {
            p.await.expect("producer task");
        }
    });
    let line = broker.log_line_with(&["slow produce", "client_id=\"native\""]);
    for part in [
        "handler ",
        "slow-0 on shard 0: began ",
        "durable ",
        "acks=-1",
    ] {
        assert!(line.contains(part), "{part:?} missing from: {line}");
    }
}

#[test]
fn a_pipelined_idempotent_producer_keeps_each_partitions_send_order() {
    // Small batches, so each partition has several in flight at once (up to five), over
    // two shards: every record lands at its send position in its partition.
    let broker = two_shards(4);
    let rt = runtime();
    let c = rt.block_on(client(&broker));
    let producer = rt
        .block_on(c.producer(ProducerConfig {
            batch_size_bytes: 256,
            linger: Duration::ZERO,
            ..ProducerConfig::default()
        }))
        .expect("producer");
    const RECORDS: usize = 4_000;
    let deliveries = rt.block_on(async {
        let mut deliveries = Vec::new();
        for i in 0..RECORDS {
            let rec = ProducerRecord::new("piped")
                .partition((i % 4) as i32)
                .value(format!("v{i}"));
            deliveries.push(producer.send(rec).await.expect("queued"));
        }
        let mut offsets = Vec::new();
        for d in deliveries {
            offsets.push(d.await.expect("acknowledged"));
        }
        offsets
    });
    for (i, m) in deliveries.iter().enumerate() {
        assert_eq!(
            (m.partition, m.offset),
            ((i % 4) as i32, (i / 4) as i64),
            "record {i}"
        );
    }
    let records = rt.block_on(consume_all(&c, "piped", RECORDS));
    assert_eq!(records.len(), RECORDS);
    for r in &records {
        let i = usize::try_from(r.partition).expect("partition")
            + 4 * usize::try_from(r.offset).expect("offset");
        assert_eq!(
            r.value.as_deref(),
            Some(format!("v{i}").as_bytes()),
            "offset {} of {}",
            r.offset,
            r.partition
        );
    }
}

#[test]
fn idempotent_retries_across_kill9_lose_and_duplicate_nothing() {
    let mut broker = Broker::start(tmp(), Options::default());
    let rt = runtime();
    let c = rt.block_on(client(&broker));
    let producer = rt
        .block_on(c.producer(ProducerConfig {
            delivery_timeout: Duration::from_secs(60),
            ..ProducerConfig::default()
        }))
        .expect("producer");
    const RECORDS: usize = 600;
    let sender = {
        let producer = producer.clone();
        rt.spawn(async move {
            let mut acked = Vec::new();
            let mut deliveries = Vec::new();
            for i in 0..RECORDS {
                let rec = ProducerRecord::new("idem").value(format!("v{i}"));
                deliveries.push((i, producer.send(rec).await.expect("queued")));
                if i % 20 == 0 {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            }
            for (i, d) in deliveries {
                if d.await.is_ok() {
                    acked.push(i);
                }
            }
            acked
        })
    };
    std::thread::sleep(Duration::from_millis(200));
    assert!(!sender.is_finished(), "the kill must land mid-stream");
    broker.kill9();
    std::thread::sleep(Duration::from_millis(300));
    broker.restart();
    let acked = rt.block_on(sender).expect("sender task");
    assert!(
        acked.len() > RECORDS / 2,
        "most records acknowledged after the restart ({} of {RECORDS})",
        acked.len()
    );
    let c2 = rt.block_on(client(&broker));
    let records = rt.block_on(consume_all(&c2, "idem", RECORDS));
    let mut seen = BTreeMap::new();
    for r in &records {
        *seen
            .entry(String::from_utf8_lossy(r.value.as_deref().unwrap()).into_owned())
            .or_insert(0) += 1;
    }
    let dups: Vec<_> = seen.iter().filter(|(_, n)| **n > 1).collect();
    assert!(dups.is_empty(), "duplicates: {dups:?}");
    for i in acked {
        assert!(
            seen.contains_key(&format!("v{i}")),
            "acknowledged v{i} lost"
        );
    }
    let offsets: Vec<i64> = records.iter().map(|r| r.offset).collect();
    let dense: Vec<i64> = (0..records.len() as i64).collect();
    assert_eq!(offsets, dense, "offsets dense");
}

fn read_frame(s: &mut TcpStream) -> Option<(FrameHeader, MessageT)> {
    let mut h = [0u8; FRAME_HEADER_BYTES];
    s.read_exact(&mut h).ok()?;
    let h = FrameHeader::parse(&h, 1 << 26).ok()?;
    let mut body = vec![0u8; h.body_bytes];
    s.read_exact(&mut body).ok()?;
    Some((h, decode_body(&body).ok()?))
}

/// Reads a frame whose body may carry a trailer: header, message, trailer.
fn read_frame_with_trailer(s: &mut TcpStream) -> (FrameHeader, MessageT, bytes::Bytes) {
    let mut h = [0u8; FRAME_HEADER_BYTES];
    s.read_exact(&mut h).expect("header");
    let h = FrameHeader::parse(&h, 1 << 26).expect("valid header");
    let mut body = vec![0u8; h.body_bytes];
    s.read_exact(&mut body).expect("body");
    let (message, trailer) = split_trailer(&h, body.into()).expect("valid trailer");
    (h, decode_body(&message).expect("valid body"), trailer)
}

/// A fetch of partition 0 of `topic` from its start, asking for the records in the trailer
/// or not: each partition's (records, trailer_bytes) and the frame's trailer.
fn raw_fetch(
    s: &mut TcpStream,
    topic: &str,
    records_in_trailer: bool,
) -> (bool, FetchPartitionResultT, bytes::Bytes) {
    let req = MessageT {
        body: BodyT::FetchRequest(Box::new(FetchRequestT {
            max_wait_ms: 0,
            min_bytes: 1,
            max_bytes: 1 << 20,
            isolation: Isolation::ReadUncommitted,
            partitions: Some(vec![FetchPartitionT {
                topic: Some(topic.into()),
                partition: 0,
                offset: 0,
                max_bytes: 1 << 20,
            }]),
            records_in_trailer,
        })),
    };
    s.write_all(&Encoder::new().frame(1, 3, &req))
        .expect("send");
    let (h, msg, trailer) = read_frame_with_trailer(s);
    let BodyT::FetchResponse(r) = msg.body else {
        panic!("expected FetchResponse, got {:?}", msg.body)
    };
    let mut parts = r.partitions.expect("partitions");
    assert_eq!(parts.len(), 1);
    (h.trailer, parts.remove(0), trailer)
}

/// A client that asks gets a fetch's records in the frame's trailer (sent from where the
/// broker read them; the client slices them out), and one that does not — every client
/// before the trailer — gets them inline as before: the same bytes either way.
#[test]
fn a_fetch_answers_records_in_the_trailer_only_when_asked() {
    let broker = Broker::start(
        tmp(),
        Options {
            smp: 1,
            ..Options::default()
        },
    );
    runtime().block_on(async {
        let c = client(&broker).await;
        let p = c.producer(ProducerConfig::default()).await.unwrap();
        for i in 0..50 {
            p.send(
                ProducerRecord::new("trailer")
                    .partition(0)
                    .value(format!("v{i}")),
            )
            .await
            .unwrap()
            .await
            .expect("produced");
        }
        let got = consume_all(&c, "trailer", 50).await;
        let values: Vec<_> = got
            .iter()
            .map(|r| r.value.clone().unwrap_or_default())
            .collect();
        let want: Vec<bytes::Bytes> = (0..50).map(|i| format!("v{i}").into()).collect();
        assert_eq!(
            values, want,
            "the client reads what it wrote through the trailer"
        );
    });
    let mut s = TcpStream::connect(broker.native_addr()).unwrap();
    let (flagged, inline, trailer) = raw_fetch(&mut s, "trailer", false);
    assert!(!flagged && trailer.is_empty() && inline.trailer_bytes == 0);
    let inline = inline.records.expect("records inline");
    let (flagged, part, mut trailer) = raw_fetch(&mut s, "trailer", true);
    assert!(flagged && part.records.is_none());
    let records = take_trailer(&mut trailer, part.trailer_bytes).expect("in the trailer");
    assert_eq!(&records[..], &inline[..], "the same records either way");
    assert!(trailer.is_empty());
    // A request may not carry a trailer: the connection closes.
    let mut frame = Encoder::new()
        .frame(
            1,
            9,
            &MessageT {
                body: BodyT::HandshakeRequest(Box::default()),
            },
        )
        .to_vec();
    frame[6..8].copy_from_slice(&FLAG_TRAILER.to_le_bytes());
    s.write_all(&frame).unwrap();
    assert!(
        closed(&mut s),
        "a request with a trailer closes its connection"
    );
}

fn closed(s: &mut TcpStream) -> bool {
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut b = [0u8; 1];
    matches!(s.read(&mut b), Ok(0) | Err(_))
}

#[test]
fn hostile_native_frames_close_only_their_connection() {
    let broker = Broker::start(tmp(), Options::default());
    let addr = broker.native_addr();
    // A length past the limit.
    let mut s = TcpStream::connect(addr).unwrap();
    s.write_all(&[0xff, 0xff, 0xff, 0x7f, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0])
        .unwrap();
    assert!(closed(&mut s), "oversized frame closes the connection");
    // A body that is not a flatbuffer.
    let mut s = TcpStream::connect(addr).unwrap();
    let mut f = vec![];
    f.extend_from_slice(&(12u32 + 8).to_le_bytes());
    f.extend_from_slice(&1u16.to_le_bytes());
    f.extend_from_slice(&0u16.to_le_bytes());
    f.extend_from_slice(&5u64.to_le_bytes());
    f.extend_from_slice(&[0xde, 0xad, 0xbe, 0xef, 1, 2, 3, 4]);
    s.write_all(&f).unwrap();
    assert!(closed(&mut s), "garbage body closes the connection");
    // Another protocol version gets a clear error, then the connection closes.
    let mut s = TcpStream::connect(addr).unwrap();
    let hello = MessageT {
        body: BodyT::HandshakeRequest(Box::default()),
    };
    let frame = Encoder::new().frame(99, 42, &hello);
    s.write_all(&frame).unwrap();
    let (h, msg) = read_frame(&mut s).expect("an error response");
    assert_eq!(h.correlation_id, 42);
    let BodyT::ErrorResponse(e) = msg.body else {
        panic!("expected ErrorResponse, got {:?}", msg.body)
    };
    let e = e.error.expect("error");
    assert_eq!(e.code, codes::UNSUPPORTED_VERSION);
    assert!(e.message.unwrap().contains("version 99"));
    assert!(closed(&mut s));
    // A response type sent as a request gets INVALID_REQUEST, and the connection lives on.
    let mut s = TcpStream::connect(addr).unwrap();
    let wrong = MessageT {
        body: BodyT::ProduceResponse(Box::default()),
    };
    s.write_all(&Encoder::new().frame(1, 7, &wrong)).unwrap();
    let (_, msg) = read_frame(&mut s).expect("answer");
    assert!(
        matches!(&msg.body, BodyT::ErrorResponse(e) if e.error.as_ref().unwrap().code == codes::INVALID_REQUEST)
    );
    // The broker still serves everyone.
    runtime().block_on(async {
        let c = client(&broker).await;
        let p = c.producer(ProducerConfig::default()).await.unwrap();
        p.send(ProducerRecord::new("after").value("x"))
            .await
            .unwrap()
            .await
            .expect("served after hostile frames");
    });
}

fn testdata(name: &str) -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../broker/src/security/testdata")
        .join(name)
}

/// A broker of two shards whose native listeners serve TLS and require a client
/// certificate of the test CA.
fn tls_broker() -> Broker {
    let file = |name: &str| testdata(name).display().to_string();
    Broker::start(
        tmp(),
        Options {
            smp: 2,
            num_partitions: 4,
            extra_args: [
                "--native-tls",
                "true",
                "--ssl-certificate-location",
                &file("node.pem"),
                "--ssl-key-location",
                &file("node.key"),
                "--ssl-ca-location",
                &file("ca.pem"),
                "--ssl-client-auth",
                "required",
            ]
            .map(str::to_string)
            .to_vec(),
            ..Options::default()
        },
    )
}

/// A client of `addr` trusting `ca`, with alice's certificate if `cert`.
fn tls_client(addr: &str, ca: &str, cert: bool) -> ClientConfig {
    let (pem, key) = (testdata("alice.pem"), testdata("alice.key"));
    let client_cert = cert.then_some((pem.as_path(), key.as_path()));
    let mut c = ClientConfig::new(addr);
    c.tls = Some(strand_client::tls_config(&testdata(ca), client_cert).expect("tls"));
    c.connect_timeout = Duration::from_secs(5);
    c.request_timeout = Duration::from_secs(5);
    c
}

/// `native_tls` with client certificates required: a client with the CA and a client
/// certificate produces to partitions of both shards and reads them back over TLS; a plain
/// client, one without a certificate and one that does not trust the broker's CA get
/// nothing.
#[test]
fn native_tls_serves_tls_clients_only() {
    let broker = tls_broker();
    let addr = broker.native_addr().to_string();
    runtime().block_on(async {
        let c = Client::connect(tls_client(&addr, "ca.pem", true))
            .await
            .expect("TLS handshake");
        assert_eq!(c.partition_count("sealed").await.expect("created"), 4);
        let producer = c
            .producer(ProducerConfig::default())
            .await
            .expect("producer");
        let mut deliveries = Vec::new();
        for i in 0..40 {
            let rec = ProducerRecord::new("sealed")
                .key(format!("k{i}"))
                .value(format!("v{i}"));
            deliveries.push(producer.send(rec).await.expect("queued"));
        }
        for d in deliveries {
            d.await.expect("delivered");
        }
        assert_eq!(consume_all(&c, "sealed", 40).await.len(), 40);
        assert_eq!(
            c.shard_connection_count().await,
            2,
            "both shard ports over TLS"
        );

        let mut plain = ClientConfig::new(addr.clone());
        plain.request_timeout = Duration::from_secs(5);
        assert!(Client::connect(plain).await.is_err(), "a plain client");
        assert!(
            Client::connect(tls_client(&addr, "ca.pem", false))
                .await
                .is_err(),
            "a client without a certificate"
        );
        let foreign = Client::connect(tls_client(&addr, "foreign-ca.pem", true)).await;
        assert!(
            matches!(foreign, Err(strand_client::Error::Tls(_))),
            "a client that does not trust the broker: {foreign:?}"
        );
    });
    assert!(broker.metric_sum("strand_kafka_tls_handshake_failures_total") >= 3.0);
}
