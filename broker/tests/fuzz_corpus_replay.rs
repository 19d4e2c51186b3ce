//! Replays the broker's fuzz corpora (`broker/fuzz/corpus/<target>/`), and seeded mutations
//! of them, through the target bodies (`strand_broker::fuzz`) on stable Rust, so `make
//! test` covers what `cargo fuzz` found (STYLE.md 9.2). A crash input goes into the target's
//! corpus directory and runs here from then on. `STRAND_WRITE_FUZZ_SEEDS=1 cargo test -p
//! strand-broker --test fuzz_corpus_replay` rewrites the seeds.

use std::collections::BTreeMap;
use std::path::PathBuf;

use strand_broker::cluster::metadata::{Command, Endpoint, NodeInfo};
use strand_broker::partition::checkpoint::Checkpoint;
use strand_broker::security::acl::AclBinding;
use strand_broker::security::quota::{QuotaEntity, QuotaValue};
use strand_storage::KafkaOffset;

#[path = "../../wire/tests/mutate/mod.rs"]
mod mutate;
use mutate::{check_seeds, corpus_files, mutate, SplitMix64};

/// Mutations derived from each corpus file.
const MUTATIONS_PER_INPUT: usize = 300;
const SEED: u64 = 0x5712_a9d0_f022_0003;

type Target = fn(&[u8]);
/// A seed's file name and bytes.
type Seeds = Vec<(&'static str, Vec<u8>)>;

fn corpus_dir(target: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("fuzz/corpus")
        .join(target)
}

fn checkpoint_seeds() -> Seeds {
    let plain = Checkpoint::empty(KafkaOffset(42), None).encode();
    let offsets = Checkpoint::empty(
        KafkaOffset(7),
        Some(strand_broker::group::records::scope_of),
    )
    .encode();
    // An offsets partition's checkpoint holding a TxnOffsetCommit of an open transaction.
    let mut pending = Checkpoint::empty(
        KafkaOffset(12),
        Some(strand_broker::group::records::scope_of),
    );
    pending.pending.stage(
        9,
        10,
        br#"{"k":"Offset","group":"g","topic":"t","partition":0}"#,
        Some(br#"{"offset":5,"leader_epoch":-1,"metadata":""}"#),
    );
    let pending = pending.encode();
    let mut bad_crc = plain.clone();
    let last = bad_crc.len() - 1;
    bad_crc[last] ^= 1;
    // Without its CRC: the target appends the right one and decodes past it.
    let body = plain[..plain.len() - 4].to_vec();
    // A checkpoint with an open and an aborted transaction (issue 22's index).
    let mut txns = strand_broker::partition::checkpoint::Checkpoint::empty(KafkaOffset(9), None);
    let marker = strand_wire::Marker {
        kind: strand_wire::MarkerKind::Abort,
        coordinator_epoch: 0,
    };
    for (pid, offset, is_marker) in [(3, 4, false), (5, 5, false), (5, 8, true)] {
        let b = if is_marker {
            strand_wire::marker_batch(pid, 0, marker, 0)
        } else {
            let mut b = strand_wire::BatchBuilder::new(0).producer(pid, 0, 0);
            b.push(0, None, Some(b"v"), &[]);
            let plain = strand_wire::RecordBatch::parse(b.build()).expect("batch");
            strand_wire::BatchHeader {
                attributes: strand_wire::Attributes::from_raw(
                    strand_wire::Attributes::TRANSACTIONAL,
                ),
                ..strand_wire::BatchHeader::of(&plain)
            }
            .encode(&plain.as_bytes()[strand_wire::BATCH_HEADER_BYTES..])
        };
        let view = strand_wire::RecordBatch::parse(b).expect("batch");
        txns.txns.apply(&view, offset);
    }
    txns.txns.settle(9);
    vec![
        ("with-txns", txns.encode()),
        ("empty-plain", plain),
        ("empty-offsets", offsets),
        ("offsets-pending-txn", pending),
        ("bad-crc", bad_crc),
        ("no-crc", body),
        ("truncated", b"SPST\x01".to_vec()),
    ]
}

fn node(id: i32) -> NodeInfo {
    NodeInfo {
        id,
        host: "127.0.0.1".into(),
        kafka_port: 9092,
        native_port: 9093,
        shards: 2,
        rpc_port: 33145,
        admin_port: 9644,
        incarnation: 0,
        listeners: vec![Endpoint {
            name: "PLAINTEXT".into(),
            host: "127.0.0.1".into(),
            port: 9092,
        }],
    }
}

fn commands() -> Vec<Command> {
    let configs: BTreeMap<String, String> =
        [("retention.ms".to_string(), "1000".to_string())].into();
    vec![
        Command::InitCluster {
            cluster_id: "fuzz-cluster".into(),
        },
        Command::RegisterNode(node(1)),
        Command::AdmitNode {
            token: "t".into(),
            info: node(0),
            seeds: vec![1],
        },
        Command::CreateTopic {
            name: "t".into(),
            id: 5,
            shards: vec![0, 1],
            configs: configs.clone(),
            replicas: vec![vec![1], vec![1]],
        },
        Command::CreatePartitions {
            name: "t".into(),
            shards: vec![0],
            replicas: vec![vec![1]],
            // Some(_) is in the log from this version on; None keeps the seed as it was.
            from_count: None,
            // Likewise: 0 is not written.
            token: 0,
        },
        Command::ReserveProducerIds {
            up_to: 1000,
            owner: Some(1),
        },
        Command::ReassignPartition {
            name: "t".into(),
            partition: 0,
            target: Some(vec![1]),
        },
        Command::FinishReassignment {
            name: "t".into(),
            partition: 0,
            target: vec![1],
        },
        Command::SetControllerVoters { voters: vec![1] },
        Command::AlterConfig {
            name: "t".into(),
            set: configs,
            delete: vec!["segment.ms".into()],
        },
        Command::DeleteTopic {
            name: "t".into(),
            token: 0,
        },
        Command::RemoveNode { id: 2 },
        Command::CreateAcls { acls: vec![acl()] },
        Command::DeleteAcls { acls: vec![acl()] },
        Command::AlterClientQuota {
            entity: QuotaEntity {
                user: Some(None),
                client_id: Some(Some("app".into())),
            },
            set: [("producer_byte_rate".to_string(), QuotaValue(1e6))].into(),
            remove: vec!["consumer_byte_rate".into()],
        },
    ]
}

fn acl() -> AclBinding {
    AclBinding {
        resource_type: 2,
        resource_name: "t".into(),
        pattern_type: 4,
        principal: "User:alice".into(),
        host: "*".into(),
        operation: 3,
        permission: 3,
    }
}

fn meta_seeds() -> Seeds {
    let lines = commands()
        .iter()
        .map(|c| serde_json::to_string(c).expect("json"))
        .collect::<Vec<_>>()
        .join("\n");
    // As `cluster::encode_commands` writes it, at a fixed time (seeds must not change).
    let at_ms = 1_700_000_000_000;
    let mut b = strand_wire::BatchBuilder::new(at_ms);
    for c in commands() {
        b.push(
            at_ms,
            None,
            Some(&serde_json::to_vec(&c).expect("json")),
            &[],
        );
    }
    let batch = b.build();
    vec![
        ("command-lines", lines.into_bytes()),
        ("log-batch", batch.to_vec()),
    ]
}

fn txn_seeds() -> Seeds {
    use strand_broker::txn::metadata::{TxnMetadata, TxnState};
    use strand_broker::txn::records::{encode_key, encode_value};
    let mut m = TxnMetadata::new("orders-tx", 4_000, 60_000, 1_700_000_000_000);
    m.state = TxnState::Ongoing;
    m.start_ms = 1_700_000_000_000;
    m.partitions.insert(("orders".into(), 0));
    m.partitions.insert(("orders".into(), 3));
    m.partitions.insert(("__consumer_offsets".into(), 12));
    vec![
        ("key", encode_key("orders-tx")),
        ("value-ongoing", encode_value(&m)),
        ("value-empty", encode_value(&TxnMetadata::new("t", 1, 1, 0))),
    ]
}

/// A WriteTxnMarkers v1 response and an AddPartitionsToTxn v4 response, each as a peer
/// sends it (header and body, after the size prefix).
fn txn_peer_seeds() -> Seeds {
    use kafka_protocol::messages::add_partitions_to_txn_response::{
        AddPartitionsToTxnPartitionResult, AddPartitionsToTxnResult, AddPartitionsToTxnTopicResult,
    };
    use kafka_protocol::messages::write_txn_markers_response::{
        WritableTxnMarkerPartitionResult, WritableTxnMarkerResult, WritableTxnMarkerTopicResult,
    };
    use kafka_protocol::messages::{
        AddPartitionsToTxnResponse, ApiKey, ProducerId, ResponseHeader, TopicName, TransactionalId,
        WriteTxnMarkersResponse,
    };
    use kafka_protocol::protocol::{Encodable, StrBytes};
    fn encode<T: Encodable>(api: ApiKey, version: i16, body: &T) -> Vec<u8> {
        let mut out = bytes::BytesMut::new();
        ResponseHeader::default()
            .with_correlation_id(1)
            .encode(&mut out, api.response_header_version(version))
            .expect("header");
        body.encode(&mut out, version).expect("body");
        out.to_vec()
    }
    let markers =
        WriteTxnMarkersResponse::default().with_markers(vec![WritableTxnMarkerResult::default()
            .with_producer_id(ProducerId(7))
            .with_topics(vec![WritableTxnMarkerTopicResult::default()
                .with_name(TopicName(StrBytes::from_static_str("a")))
                .with_partitions(vec![
                    WritableTxnMarkerPartitionResult::default().with_partition_index(0),
                    WritableTxnMarkerPartitionResult::default()
                        .with_partition_index(1)
                        .with_error_code(6),
                ])])]);
    let verify = AddPartitionsToTxnResponse::default().with_results_by_transaction(vec![
        AddPartitionsToTxnResult::default()
            .with_transactional_id(TransactionalId(StrBytes::from_static_str("t")))
            .with_topic_results(vec![AddPartitionsToTxnTopicResult::default()
                .with_name(TopicName(StrBytes::from_static_str("a")))
                .with_results_by_partition(vec![
                    AddPartitionsToTxnPartitionResult::default()
                        .with_partition_index(0)
                        .with_partition_error_code(48),
                ])]),
    ]);
    vec![
        ("markers", encode(ApiKey::WriteTxnMarkers, 1, &markers)),
        ("verify", encode(ApiKey::AddPartitionsToTxn, 4, &verify)),
    ]
}

/// A ReadShareGroupState answer with a state, one with none, and a WriteShareGroupState
/// answer refusing a deposed leader.
fn share_peer_seeds() -> Seeds {
    use kafka_protocol::messages::read_share_group_state_response::{
        PartitionResult, ReadStateResult, StateBatch,
    };
    use kafka_protocol::messages::write_share_group_state_response as write;
    use kafka_protocol::messages::{
        ApiKey, ReadShareGroupStateResponse, ResponseHeader, WriteShareGroupStateResponse,
    };
    use kafka_protocol::protocol::Encodable;
    fn encode<T: Encodable>(api: ApiKey, body: &T) -> Vec<u8> {
        let mut out = bytes::BytesMut::new();
        ResponseHeader::default()
            .with_correlation_id(1)
            .encode(&mut out, api.response_header_version(0))
            .expect("header");
        body.encode(&mut out, 0).expect("body");
        out.to_vec()
    }
    let batch = |first: i64, last: i64, state: i8, count: i16| {
        StateBatch::default()
            .with_first_offset(first)
            .with_last_offset(last)
            .with_delivery_state(state)
            .with_delivery_count(count)
    };
    let read = |start: i64, batches: Vec<StateBatch>| {
        ReadShareGroupStateResponse::default().with_results(vec![ReadStateResult::default()
            .with_partitions(vec![PartitionResult::default()
                .with_start_offset(start)
                .with_state_batches(batches)])])
    };
    let state = read(
        100,
        vec![
            batch(100, 104, 2, 0),
            batch(105, 109, 0, 2),
            batch(110, 119, 2, 0),
        ],
    );
    let write = WriteShareGroupStateResponse::default()
        .with_results(vec![write::WriteStateResult::default().with_partitions(
            vec![write::PartitionResult::default().with_error_code(74)],
        )]);
    vec![
        ("read-state", encode(ApiKey::ReadShareGroupState, &state)),
        (
            "read-none",
            encode(ApiKey::ReadShareGroupState, &read(-1, vec![])),
        ),
        ("write-fenced", encode(ApiKey::WriteShareGroupState, &write)),
    ]
}

fn admin_seeds() -> Seeds {
    let put = "PUT /v1/log-level HTTP/1.1\r\nContent-Length: 5\r\n\r\ndebug";
    vec![
        (
            "get-status",
            b"GET /v1/status HTTP/1.1\r\nHost: x\r\n\r\n".to_vec(),
        ),
        ("put-log-level", put.as_bytes().to_vec()),
        (
            "blob",
            b"GET /v1/self-test/blob?bytes=10 HTTP/1.1\r\n\r\n".to_vec(),
        ),
        (
            "bad-length",
            b"PUT /v1/log-level HTTP/1.1\r\nContent-Length: -1\r\n\r\n".to_vec(),
        ),
        ("no-end", b"GET /metrics HTTP/1.1\r\nHost: x\r\n".to_vec()),
    ]
}

/// OAUTHBEARER messages as librdkafka and the Java client send them, with tokens signed by
/// the key of `fuzz::FUZZ_JWKS` (RSA PKCS#1 v1.5 signatures are deterministic), and JWK
/// sets.
fn oauth_seeds() -> Seeds {
    use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64URL;
    use base64::Engine as _;
    use rustls::pki_types::pem::PemObject;
    let pem = std::fs::read(
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("src/security/testdata/jwt-rsa.key"),
    )
    .expect("key");
    let der = rustls::pki_types::PrivatePkcs8KeyDer::from_pem_slice(&pem).expect("pkcs8");
    let key = ring::signature::RsaKeyPair::from_pkcs8(der.secret_pkcs8_der()).expect("rsa");
    let header = B64URL.encode(r#"{"alg":"RS256","typ":"JWT","kid":"fuzz"}"#);
    let claims = B64URL
        .encode(r#"{"sub":"svc","iat":1800000000,"exp":1800000600,"aud":["kafka"],"scope":"a b"}"#);
    let signed = format!("{header}.{claims}");
    let mut sig = vec![0; key.public().modulus_len()];
    key.sign(
        &ring::signature::RSA_PKCS1_SHA256,
        &ring::rand::SystemRandom::new(),
        signed.as_bytes(),
        &mut sig,
    )
    .expect("sign");
    let token = format!("{signed}.{}", B64URL.encode(sig));
    vec![
        (
            "librdkafka",
            format!("n,,\u{1}auth=Bearer {token}\u{1}\u{1}").into_bytes(),
        ),
        (
            "java-extensions",
            format!("n,a=svc,\u{1}auth=Bearer {token}\u{1}traceId=7\u{1}\u{1}").into_bytes(),
        ),
        ("token", token.into_bytes()),
        ("jwks", strand_broker::fuzz::FUZZ_JWKS.as_bytes().to_vec()),
        (
            "jwks-ec",
            br#"{"keys":[{"kty":"EC","crv":"P-256","kid":"e","x":"MKBCTNIcKUSDii11ySs3526iDZ8AiTo7Tu6KPAqv7D4","y":"4Etl6SRW2YiLUrN5vfvVHuhp7x8PxltmWWlbbM4IFyM"}]}"#.to_vec(),
        ),
    ]
}

/// `__consumer_offsets` records, key NUL value: an offset, a classic group, a
/// consumer-protocol group (KIP-848) with a member mid-revocation, and a share group
/// (KIP-932) of two members.
fn group_seeds() -> Seeds {
    let record = |k: &str, v: &str| [k.as_bytes(), b"\0", v.as_bytes()].concat();
    vec![
        (
            "offset",
            record(
                r#"{"k":"Offset","group":"g","topic":"t","partition":0}"#,
                r#"{"offset":5,"leader_epoch":-1,"metadata":""}"#,
            ),
        ),
        (
            "classic-group",
            record(
                r#"{"k":"Group","group":"g"}"#,
                r#"{"generation":1,"protocol_type":"consumer","protocol":"range","leader":null,"members":[]}"#,
            ),
        ),
        (
            "consumer-group",
            record(
                r#"{"k":"ConsumerGroup","group":"g"}"#,
                r#"{"version":3,"group_epoch":2,"assignment_epoch":2,"members":{"a":{"id":"a","instance_id":null,"rack_id":null,"client_id":"c","client_host":"h","rebalance_timeout_ms":1000,"subscribed_topic_names":["t"],"subscribed_topic_regex":"t.*","server_assignor":"range","member_epoch":1,"previous_member_epoch":0,"state":"UnrevokedPartitions","assigned":{"t":[0]},"revoking":{"t":[1,2]}},"b":{"id":"b","instance_id":"i","rack_id":null,"client_id":"c","client_host":"h","rebalance_timeout_ms":1000,"subscribed_topic_names":["t","u"],"subscribed_topic_regex":null,"server_assignor":null,"member_epoch":2,"previous_member_epoch":1,"state":"UnreleasedPartitions","assigned":{"u":[0]},"revoking":{}}},"target":{"a":{"t":[0]},"b":{"t":[1,2],"u":[0]}},"subscribed":{"t":3,"u":1}}"#,
            ),
        ),
        (
            "consumer-tombstone",
            br#"{"k":"ConsumerGroup","group":"g"}"#.to_vec(),
        ),
        (
            "share-group",
            record(
                r#"{"k":"ShareGroup","group":"s"}"#,
                r#"{"version":3,"epoch":2,"assignment_epoch":2,"members":{"a":{"id":"a","rack_id":null,"client_id":"c","client_host":"h","subscribed":["t"],"epoch":2,"previous_epoch":1,"assigned":{"t":[0,1]}},"b":{"id":"b","rack_id":"r","client_id":"c","client_host":"h","subscribed":["t"],"epoch":2,"previous_epoch":1,"assigned":{"t":[2]}}},"topics_seen":{"t":3},"target":{"a":{"t":[0,1]},"b":{"t":[2]}}}"#,
            ),
        ),
    ]
}

/// A `__share_group_state` record (key, NUL, value) and a tombstone.
fn share_seeds() -> Seeds {
    use strand_broker::share::partition::ShareState;
    use strand_broker::share::records::{key_bytes, value_bytes};
    let key = key_bytes(&("queue".to_string(), "jobs".to_string(), 2));
    let state = ShareState {
        start: 100,
        end: 140,
        available: vec![(100, 104, 2), (120, 139, 1)],
        leader_epoch: 0,
    };
    let mut record = key.clone();
    record.push(0);
    record.extend(value_bytes(&state));
    vec![("state", record), ("tombstone", key)]
}

/// Every target with its seeds.
fn targets() -> Vec<(&'static str, Target, Seeds)> {
    use strand_broker::fuzz;
    vec![
        ("checkpoint", fuzz::checkpoint as Target, checkpoint_seeds()),
        ("meta_commands", fuzz::meta_commands, meta_seeds()),
        ("admin_http", fuzz::admin_http, admin_seeds()),
        ("txn_records", fuzz::txn_records, txn_seeds()),
        ("group_records", fuzz::group_records, group_seeds()),
        ("txn_peer_answers", fuzz::txn_peer_answers, txn_peer_seeds()),
        ("oauthbearer", fuzz::oauthbearer, oauth_seeds()),
        ("share_records", fuzz::share_records, share_seeds()),
        (
            "share_peer_answers",
            fuzz::share_peer_answers,
            share_peer_seeds(),
        ),
    ]
}

fn corpus(target: &str) -> Vec<(String, Vec<u8>)> {
    corpus_files(&corpus_dir(target))
}

#[test]
fn seeds_are_in_the_corpus() {
    for (target, _, seeds) in targets() {
        check_seeds(&corpus_dir(target), &seeds);
    }
}

#[test]
fn corpora_and_their_mutations_replay() {
    let mut rng = SplitMix64(SEED);
    for (target, run, seeds) in targets() {
        let files = corpus(target);
        assert!(
            files.len() >= seeds.len(),
            "{target}: {} files",
            files.len()
        );
        for (_, data) in &files {
            run(data);
            for _ in 0..MUTATIONS_PER_INPUT {
                run(&mutate(data, &files, &mut rng));
            }
        }
    }
}
