//! Replays the `kafka_request` fuzz corpus (`wire/fuzz/corpus/kafka_request/`), and seeded
//! mutations of it, through the target body on stable Rust, so `make test` covers what
//! `cargo fuzz run kafka_request` found. The seeds are real requests of the APIs the broker
//! serves, encoded by kafka-protocol with their headers; `STRAND_WRITE_FUZZ_SEEDS=1 cargo
//! test -p strand-wire --test kafka_request_replay` writes them into the corpus.

use std::fs;
use std::path::PathBuf;

use bytes::{Bytes, BytesMut};
use kafka_protocol::messages::alter_client_quotas_request::{EntryData, OpData};
use kafka_protocol::messages::create_topics_request::{CreatableReplicaAssignment, CreatableTopic};
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::join_group_request::JoinGroupRequestProtocol;
use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::{
    AlterClientQuotasRequest, ApiKey, ApiVersionsRequest, BrokerId, CreateTopicsRequest,
    FetchRequest, JoinGroupRequest, MetadataRequest, ProduceRequest, RequestHeader, TopicName,
};
use kafka_protocol::protocol::{Encodable, Request, StrBytes};

#[path = "../fuzz/kafka_request.rs"]
mod kafka_request;
mod mutate;
use mutate::{mutate, SplitMix64};

const MUTATIONS_PER_INPUT: usize = 2_000;
const SEED: u64 = 0x5712_a9d0_f022_0002;

fn corpus_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("fuzz/corpus/kafka_request")
}

/// A request frame's payload (no length prefix): header of the API's version, then body.
fn frame<R: Request + Encodable>(version: i16, body: &R) -> Vec<u8> {
    let api = ApiKey::try_from(R::KEY).expect("known API");
    let header = RequestHeader::default()
        .with_request_api_key(R::KEY)
        .with_request_api_version(version)
        .with_correlation_id(7)
        .with_client_id(Some(StrBytes::from_static_str("fuzz")));
    let mut out = BytesMut::new();
    header
        .encode(&mut out, api.request_header_version(version))
        .expect("header encodes");
    body.encode(&mut out, version).expect("body encodes");
    out.to_vec()
}

fn name(s: &'static str) -> TopicName {
    TopicName(StrBytes::from_static_str(s))
}

/// Requests of the APIs the broker serves, at old and new versions.
fn seeds() -> Vec<(&'static str, Vec<u8>)> {
    let produce = ProduceRequest::default()
        .with_acks(-1)
        .with_timeout_ms(1000)
        .with_topic_data(vec![TopicProduceData::default()
            .with_name(name("t"))
            .with_partition_data(vec![PartitionProduceData::default()
                .with_index(0)
                .with_records(Some(Bytes::from_static(&[0; 70])))])]);
    let fetch = |v: i16| {
        FetchRequest::default()
            .with_replica_id(BrokerId(-1))
            .with_max_wait_ms(500)
            .with_max_bytes(1 << 20)
            .with_topics(vec![FetchTopic::default()
                .with_topic(if v < 13 { name("t") } else { name("") })
                .with_partitions(vec![FetchPartition::default()
                    .with_partition(0)
                    .with_partition_max_bytes(1 << 20)])])
    };
    let metadata = MetadataRequest::default().with_topics(Some(vec![
        MetadataRequestTopic::default().with_name(Some(name("t"))),
    ]));
    let join = JoinGroupRequest::default()
        .with_group_id(StrBytes::from_static_str("g").into())
        .with_session_timeout_ms(10_000)
        .with_member_id(StrBytes::from_static_str(""))
        .with_protocol_type(StrBytes::from_static_str("consumer"))
        .with_protocols(vec![JoinGroupRequestProtocol::default()
            .with_name(StrBytes::from_static_str("range"))
            .with_metadata(Bytes::from_static(&[0, 1, 0, 0, 0, 0]))]);
    let create = CreateTopicsRequest::default().with_topics(vec![CreatableTopic::default()
        .with_name(name("t"))
        .with_num_partitions(-1)
        .with_replication_factor(-1)
        .with_assignments(vec![CreatableReplicaAssignment::default()
            .with_partition_index(0)
            .with_broker_ids(vec![BrokerId(1)])])]);
    let quotas_nan = AlterClientQuotasRequest::default()
        .with_entries(vec![EntryData::default().with_ops(vec![OpData::default()
            .with_key(StrBytes::from_static_str("producer_byte_rate"))
            .with_value(f64::NAN)])]);
    vec![
        ("api-versions-v0", frame(0, &ApiVersionsRequest::default())),
        ("api-versions-v3", frame(3, &ApiVersionsRequest::default())),
        ("produce-v3", frame(3, &produce)),
        ("produce-v9", frame(9, &produce)),
        ("fetch-v4", frame(4, &fetch(4))),
        ("fetch-v12", frame(12, &fetch(12))),
        ("fetch-v15", frame(15, &fetch(15))),
        ("metadata-v1", frame(1, &metadata)),
        ("metadata-v12", frame(12, &metadata)),
        ("join-group-v5", frame(5, &join)),
        ("join-group-v9", frame(9, &join)),
        ("create-topics-v5", frame(5, &create)),
        // A float field holding NaN (not equal to itself): the property compares bytes.
        ("alter-client-quotas-nan-v1", frame(1, &quotas_nan)),
    ]
}

/// The committed corpus files, sorted, and the seeds (written first when asked).
fn corpus() -> Vec<(String, Vec<u8>)> {
    if std::env::var_os("STRAND_WRITE_FUZZ_SEEDS").is_some() {
        fs::create_dir_all(corpus_dir()).expect("corpus dir");
        for (name, bytes) in seeds() {
            fs::write(corpus_dir().join(name), bytes).expect("write seed");
        }
    }
    let mut files: Vec<(String, Vec<u8>)> = fs::read_dir(corpus_dir())
        .map(|dir| {
            dir.flatten()
                .map(|e| {
                    let n = e.file_name().to_string_lossy().into_owned();
                    (n, fs::read(e.path()).expect("read corpus file"))
                })
                .collect()
        })
        .unwrap_or_default();
    files.sort();
    files.extend(seeds().into_iter().map(|(n, b)| (n.to_string(), b)));
    files
}

#[test]
fn every_seed_is_a_request_that_decodes_and_survives_re_encoding() {
    for (name, bytes) in seeds() {
        assert!(
            kafka_request::kafka_request(&bytes),
            "{name} does not decode"
        );
    }
}

#[test]
fn corpus_and_seeded_mutations_replay() {
    // Every corpus file once (what the fuzzer kept, however many), then mutations of the
    // seeds, spliced with the whole corpus.
    let corpus = corpus();
    assert!(corpus.len() >= seeds().len());
    for (_name, data) in &corpus {
        let _ = kafka_request::kafka_request(data);
    }
    let mut rng = SplitMix64(SEED);
    let mut runs = 0;
    for (_name, data) in seeds() {
        for _ in 0..MUTATIONS_PER_INPUT {
            let _ = kafka_request::kafka_request(&mutate(&data, &corpus, &mut rng));
            runs += 1;
        }
    }
    assert!(runs >= 20_000, "only {runs} runs");
}
