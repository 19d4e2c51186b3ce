//! The producer's pipelining and retries against a scripted broker: a one-port native
//! server with one partition that checks idempotent sequences as a Strand partition does
//! (the next batch of a producer must start where its last ended; a retry of one of its
//! last five batches is a duplicate, answered with the original offset; anything else is
//! OUT_OF_ORDER_SEQUENCE_NUMBER), appends in arrival order and answers each produce a
//! fixed delay later, in order. Faults are scripted by produce request number.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use strand_client::{Client, ClientConfig, Error, ProducerConfig, ProducerRecord};
use strand_wire::native::generated::*;
use strand_wire::native::{decode_body, Encoder, FrameHeader, FRAME_HEADER_BYTES};
use strand_wire::records::decode_records;
use strand_wire::{RecordBatch, BATCH_HEADER_BYTES};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

const TOPIC: &str = "t";
const ANSWER_DELAY: Duration = Duration::from_millis(15);
const NOT_LEADER_OR_FOLLOWER: i16 = 6;
const CORRUPT_MESSAGE: i16 = 2;
const MESSAGE_TOO_LARGE: i16 = 10;
const OUT_OF_ORDER_SEQUENCE_NUMBER: i16 = 45;

/// What the scripted broker does and saw.
#[derive(Default)]
struct State {
    /// Produce requests answered with this retriable error, without appending.
    retriable_at: HashSet<usize>,
    /// Produce requests answered with a non-retriable error, without appending.
    fatal_at: HashSet<usize>,
    produce_requests: usize,
    /// Produce requests received and not yet answered, and the most at once.
    outstanding: usize,
    outstanding_max: usize,
    /// The partition: (producer id, value) of each record, in offset order.
    log: Vec<(i64, String)>,
    /// Per producer id: the next sequence and the last five batches (first seq, base offset).
    producers: HashMap<i64, (i32, VecDeque<(i32, i64)>)>,
    next_producer_id: i64,
}

impl State {
    /// The partition's answer to one batch: its base offset or an error code.
    fn append(&mut self, batch: &[u8]) -> Result<i64, i16> {
        let b = RecordBatch::parse(Bytes::copy_from_slice(batch)).map_err(|_| CORRUPT_MESSAGE)?;
        b.validate().map_err(|_| CORRUPT_MESSAGE)?;
        let (pid, seq, count) = (b.producer_id(), b.base_sequence(), b.record_count());
        let (next, recent) = self.producers.entry(pid).or_insert((0, VecDeque::new()));
        if let Some(&(_, offset)) = recent.iter().find(|(s, _)| *s == seq) {
            return Ok(offset); // a duplicate of a remembered batch
        }
        if seq != *next {
            return Err(OUT_OF_ORDER_SEQUENCE_NUMBER);
        }
        let base = i64::try_from(self.log.len()).expect("small log");
        *next = seq + count;
        recent.push_back((seq, base));
        if recent.len() > 5 {
            recent.pop_front();
        }
        let records = decode_records(b.as_bytes().slice(BATCH_HEADER_BYTES..), count)
            .expect("records decode");
        for r in records {
            let v = r.value.expect("value");
            self.log
                .push((pid, String::from_utf8_lossy(&v).into_owned()));
        }
        Ok(base)
    }

    /// The answer to one request, and whether it was a produce.
    fn answer(&mut self, request: BodyT, port: u16) -> (BodyT, bool) {
        let placement = || {
            Some(vec![TopicPlacementT {
                name: Some(TOPIC.into()),
                partition_shards: Some(vec![0]),
                error: None,
            }])
        };
        let answer = match request {
            BodyT::HandshakeRequest(_) => BodyT::HandshakeResponse(Box::new(HandshakeResponseT {
                protocol_version: strand_wire::native::PROTOCOL_VERSION,
                shard_ports: Some(vec![port]),
                batch_bytes_max: 1 << 20,
                frame_bytes_max: 1 << 24,
                topics: placement(),
                ..Default::default()
            })),
            BodyT::MetadataRequest(_) => BodyT::MetadataResponse(Box::new(MetadataResponseT {
                topics: placement(),
                shard_ports: Some(vec![port]),
            })),
            BodyT::InitProducerIdRequest(_) => {
                self.next_producer_id += 1;
                BodyT::InitProducerIdResponse(Box::new(InitProducerIdResponseT {
                    producer_id: self.next_producer_id,
                    producer_epoch: 0,
                    error: None,
                }))
            }
            BodyT::ProduceRequest(r) => {
                self.outstanding += 1;
                self.outstanding_max = self.outstanding_max.max(self.outstanding);
                return (BodyT::ProduceResponse(Box::new(self.produce(*r))), true);
            }
            other => panic!(
                "unexpected request {}",
                strand_wire::native::body_name(&other)
            ),
        };
        (answer, false)
    }

    fn produce(&mut self, r: ProduceRequestT) -> ProduceResponseT {
        let n = self.produce_requests;
        self.produce_requests += 1;
        let parts = r.partitions.unwrap_or_default().into_iter().map(|p| {
            let error = |code: i16, retriable: bool| {
                Some(Box::new(ErrorT {
                    code,
                    message: Some(format!("scripted {code}")),
                    retriable,
                    moved_to_shard: -1,
                    moved_to_port: -1,
                }))
            };
            let (base_offset, error) = if self.retriable_at.contains(&n) {
                (-1, error(NOT_LEADER_OR_FOLLOWER, true))
            } else if self.fatal_at.contains(&n) {
                (-1, error(MESSAGE_TOO_LARGE, false))
            } else {
                match self.append(&p.records.unwrap_or_default()) {
                    Ok(o) => (o, None),
                    Err(code) => (-1, error(code, false)),
                }
            };
            ProducePartitionResultT {
                topic: p.topic,
                partition: p.partition,
                base_offset,
                log_start_offset: 0,
                error,
            }
        });
        ProduceResponseT {
            partitions: Some(parts.collect()),
        }
    }
}

/// Starts the scripted broker; returns its address.
async fn scripted_broker(state: Arc<Mutex<State>>) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            tokio::spawn(connection(stream, addr.port(), state.clone()));
        }
    });
    addr.to_string()
}

async fn connection(stream: tokio::net::TcpStream, port: u16, state: Arc<Mutex<State>>) {
    let (mut rd, mut wr) = stream.into_split();
    // Answers leave in the order their requests came, each when its time is due.
    let (tx, mut rx) =
        tokio::sync::mpsc::unbounded_channel::<(tokio::time::Instant, Bytes, bool)>();
    let writer_state = state.clone();
    tokio::spawn(async move {
        while let Some((due, frame, produce)) = rx.recv().await {
            tokio::time::sleep_until(due).await;
            if produce {
                writer_state.lock().expect("state").outstanding -= 1;
            }
            if wr.write_all(&frame).await.is_err() {
                return;
            }
        }
    });
    let mut encoder = Encoder::new();
    loop {
        let mut head = [0u8; FRAME_HEADER_BYTES];
        if rd.read_exact(&mut head).await.is_err() {
            return;
        }
        let h = FrameHeader::parse(&head, 1 << 24).expect("frame header");
        let mut body = vec![0u8; h.body_bytes];
        if rd.read_exact(&mut body).await.is_err() {
            return;
        }
        let request = decode_body(&body).expect("request body").body;
        let (answer, produce) = state.lock().expect("state").answer(request, port);
        let due = tokio::time::Instant::now()
            + if produce {
                ANSWER_DELAY
            } else {
                Duration::ZERO
            };
        let frame = encoder.frame(
            strand_wire::native::PROTOCOL_VERSION,
            h.correlation_id,
            &MessageT { body: answer },
        );
        if tx.send((due, frame, produce)).is_err() {
            return;
        }
    }
}

/// Sends `records` one-record batches as fast as the producer takes them; returns each
/// record's outcome, in send order.
async fn produce(addr: &str, records: usize) -> Vec<Result<i64, Error>> {
    let client = Client::connect(ClientConfig::new(addr))
        .await
        .expect("connect");
    let producer = client
        .producer(ProducerConfig {
            // Every record seals its own batch: the batches outnumber what may be in flight.
            batch_size_bytes: 1,
            linger: Duration::ZERO,
            retry_backoff: Duration::from_millis(5),
            delivery_timeout: Duration::from_secs(20),
            ..ProducerConfig::default()
        })
        .await
        .expect("producer");
    let mut deliveries = Vec::new();
    for i in 0..records {
        let rec = ProducerRecord::new(TOPIC)
            .partition(0)
            .value(format!("v{i}"));
        deliveries.push(producer.send(rec).await.expect("queued"));
    }
    producer.flush().await.expect("flush");
    let mut out = Vec::new();
    for d in deliveries {
        out.push(d.await.map(|m| m.offset));
    }
    out
}

fn values(log: &[(i64, String)]) -> Vec<String> {
    log.iter().map(|(_, v)| v.clone()).collect()
}

fn expected(records: usize, skip: &[usize]) -> Vec<String> {
    (0..records)
        .filter(|i| !skip.contains(i))
        .map(|i| format!("v{i}"))
        .collect()
}

#[tokio::test]
async fn batches_of_one_partition_are_pipelined_and_land_in_send_order() {
    let state = Arc::new(Mutex::new(State::default()));
    let addr = scripted_broker(state.clone()).await;
    let results = produce(&addr, 200).await;
    let offsets: Vec<i64> = results
        .into_iter()
        .map(|r| r.expect("acknowledged"))
        .collect();
    assert_eq!(
        offsets,
        (0..200).collect::<Vec<i64>>(),
        "each record at its send position"
    );
    let st = state.lock().expect("state");
    assert_eq!(values(&st.log), expected(200, &[]));
    assert_eq!(
        st.outstanding_max,
        strand_client::BATCHES_IN_FLIGHT_IDEMPOTENT_MAX,
        "five batches of the partition in flight at once, never more"
    );
}

#[tokio::test]
async fn a_batch_answered_retriably_mid_pipeline_is_sent_again_before_those_after_it() {
    let state = Arc::new(Mutex::new(State::default()));
    state.lock().expect("state").retriable_at = [3, 40].into();
    let addr = scripted_broker(state.clone()).await;
    let results = produce(&addr, 100).await;
    let offsets: Vec<i64> = results
        .into_iter()
        .map(|r| r.expect("acknowledged"))
        .collect();
    assert_eq!(offsets, (0..100).collect::<Vec<i64>>());
    let st = state.lock().expect("state");
    assert_eq!(
        values(&st.log),
        expected(100, &[]),
        "no loss, no duplicate, in order"
    );
    assert_eq!(st.next_producer_id, 1, "retries keep the producer id");
    assert!(
        st.produce_requests > 100,
        "the refused batches were sent again"
    );
}

#[tokio::test]
async fn a_batch_failed_for_good_leaves_the_rest_delivered_in_order_under_a_new_producer_id() {
    let state = Arc::new(Mutex::new(State::default()));
    state.lock().expect("state").fatal_at = [3].into();
    let addr = scripted_broker(state.clone()).await;
    let results = produce(&addr, 50).await;
    match &results[3] {
        Err(e) => assert_eq!(e.code(), Some(MESSAGE_TOO_LARGE), "{e}"),
        Ok(o) => panic!("the refused record was acknowledged at {o}"),
    }
    let offsets: Vec<i64> = results
        .iter()
        .enumerate()
        .filter(|(i, _)| *i != 3)
        .map(|(i, r)| *r.as_ref().unwrap_or_else(|e| panic!("record {i}: {e}")))
        .collect();
    assert_eq!(offsets, (0..49).collect::<Vec<i64>>());
    let st = state.lock().expect("state");
    assert_eq!(values(&st.log), expected(50, &[3]));
    assert_eq!(
        st.next_producer_id, 2,
        "a new producer id after the failure"
    );
    assert!(
        st.log[3..].iter().all(|(pid, _)| *pid == 2),
        "the batches after the failed one went under the new id"
    );
}
