//! Bodies of the fuzz targets in `broker/fuzz/fuzz_targets/`, one public function per
//! target: the decoders of what the broker reads back from its own disk or takes from a
//! peer outside the Kafka protocol (the partition-state checkpoint, the controller's
//! metadata commands, the admin HTTP requests, the `__transaction_state` records), and
//! what a client's SASL/OAUTHBEARER message carries (a JWT, checked against a JWK set).
//!
//! They live in the library so that `cargo fuzz` (nightly) and the stable replay in
//! `broker/tests/fuzz_corpus_replay.rs` run the same code. Each takes arbitrary bytes and
//! panics only when a property is broken: an `Err` for bad input is success.

use std::hint::black_box;

use bytes::Bytes;

use crate::admin::status::{self, HeadScan, ADMIN_BODY_BYTES_MAX};
use crate::cluster::metadata::{Command, Metadata};
use crate::partition::checkpoint::Checkpoint;
use crate::partition::compacted::KeyScope;

/// The CRC-32C trailer a checkpoint file ends with.
const CHECKPOINT_CRC_BYTES: usize = 4;

/// Fuzz target `checkpoint`: decodes `data` as a partition-state checkpoint file, for a
/// partition that keeps no records and for an offsets partition, both as it is and with
/// its CRC made right (so the fuzzer reaches past the CRC into the state).
///
/// Panics if a checkpoint that decodes does not encode to bytes that decode to the same
/// checkpoint (encoded the same again).
pub fn checkpoint(data: &[u8]) {
    let mut fixed = data.to_vec();
    fixed.extend_from_slice(&crc32c::crc32c(data).to_be_bytes());
    let offsets: KeyScope = crate::group::records::scope_of;
    for bytes in [data, &fixed] {
        for keyed in [None, Some(offsets)] {
            match Checkpoint::decode(bytes, keyed) {
                Ok(c) => {
                    let encoded = c.encode();
                    let again = Checkpoint::decode(&encoded, keyed)
                        .unwrap_or_else(|e| panic!("re-encoded checkpoint refused: {e}"));
                    assert_eq!(again.encode(), encoded, "checkpoint round trip");
                    assert_eq!(again.offset, c.offset);
                    assert!(encoded.len() >= CHECKPOINT_CRC_BYTES);
                }
                Err(e) => {
                    black_box(e.to_string());
                }
            }
        }
    }
}

/// Fuzz target `txn_records`: decodes `data` as a `__transaction_state` record key and as
/// a record value.
///
/// Panics if a key that decodes does not encode back to its bytes, or a value that decodes
/// does not decode again to the same metadata once encoded (its partitions are a set:
/// their order and repeats in the input are not kept).
pub fn txn_records(data: &[u8]) {
    use crate::txn::records::{decode_key, decode_value, encode_key, encode_value};
    match decode_key(data) {
        Ok(id) => assert_eq!(encode_key(&id), data, "key round trip"),
        Err(e) => {
            black_box(e.to_string());
        }
    }
    match decode_value("fuzz", data) {
        Ok(m) => assert_eq!(
            decode_value("fuzz", &encode_value(&m)).as_ref(),
            Ok(&m),
            "value round trip"
        ),
        Err(e) => {
            black_box(e.to_string());
        }
    }
}

/// Fuzz target `share_records`: `data` split at its first NUL into a `__share_group_state`
/// record key and value, replayed (as opening the partition does); a share partition it
/// made is read back from its state, acquired from, acknowledged, expired and released,
/// and its state written again must read back the same.
///
/// Panics only by a bug: replay skips what it cannot read, and a state read back is cut
/// to `STATE_SPAN_MAX` offsets.
pub fn share_records(data: &[u8]) {
    use crate::share::partition::{AckType, Limits, LogBatch, SharePartition};
    let (key, value) = match data.iter().position(|&b| b == 0) {
        Some(at) => (&data[..at], Some(&data[at + 1..])),
        None => (data, None),
    };
    let mut states = std::collections::HashMap::new();
    crate::share::records::apply(&mut states, key, value);
    for state in states.values() {
        let mut sp = SharePartition::from_state(state, Limits::default());
        let member: std::rc::Rc<str> = std::rc::Rc::from("m");
        let start = sp.start();
        let log = [LogBatch {
            first: start,
            last: start.saturating_add(3),
            control: false,
        }];
        let got = sp.acquire(&member, &log, 2, 10);
        for a in &got {
            let _ = sp.acknowledge("m", &[(a.first, a.last, vec![AckType::Release])]);
        }
        sp.expire_locks(u64::MAX);
        sp.release_member("m");
        let again = SharePartition::from_state(&sp.state(), Limits::default());
        assert_eq!(again.state(), sp.state(), "state round trip");
    }
}

/// Fuzz target `group_records`: `data` split at its first NUL into an `__consumer_offsets`
/// record key and value, replayed into the groups (as loading a partition does), then a
/// consumer-protocol group it made (KIP-848) or a share group (KIP-932) heartbeated,
/// expired and snapshotted.
///
/// Panics only by a bug: replay skips what it cannot read, and a consumer group read back
/// must take a join, a heartbeat of each member and expiry.
pub fn group_records(data: &[u8]) {
    use crate::group::consumer::{Assignment, Heartbeat};
    let (key, value) = match data.iter().position(|&b| b == 0) {
        Some(at) => (&data[..at], Some(&data[at + 1..])),
        None => (data, None),
    };
    let mut groups = std::collections::HashMap::new();
    let mut shares = crate::group::records::ShareGroups::new();
    crate::group::records::apply(&mut groups, &mut shares, key, value);
    let topics: std::collections::BTreeMap<String, i32> =
        [("t".to_string(), 3), ("u".to_string(), 1)].into();
    let now = crate::common::clock::now();
    for g in groups.values_mut() {
        let Some(c) = g.consumer.as_mut() else {
            continue;
        };
        let ids: Vec<(String, i32)> = c
            .members
            .values()
            .map(|m| (m.id.clone(), m.member_epoch))
            .collect();
        let join = Heartbeat {
            member_id: "fuzz".into(),
            rebalance_timeout_ms: 1000,
            subscribed_topic_names: Some(vec!["t".into()]),
            owned: Some(Assignment::new()),
            ..Heartbeat::default()
        };
        black_box(c.heartbeat(join, &topics, now, 100));
        for (id, epoch) in ids {
            let beat = Heartbeat {
                member_id: id,
                member_epoch: epoch,
                rebalance_timeout_ms: -1,
                owned: Some(Assignment::new()),
                ..Heartbeat::default()
            };
            black_box(c.heartbeat(beat, &topics, now, 100));
        }
        black_box(c.expire(
            now + std::time::Duration::from_secs(60),
            std::time::Duration::from_secs(45),
        ));
        black_box(c.snapshot());
    }
    share_groups_replayed(&shares);
}

/// `group_records`' share groups: each snapshot replay kept, restored and heartbeated by
/// its members and a newcomer, expired, and snapshotted again.
fn share_groups_replayed(shares: &crate::group::records::ShareGroups) {
    use crate::share::group::{Heartbeat, ShareGroup};
    let partitions = |t: &str| (t == "t").then_some(3);
    for bytes in shares.values() {
        let Some(mut g) = ShareGroup::restored(bytes, 0) else {
            continue;
        };
        let ids: Vec<(String, i32)> = g
            .members
            .values()
            .map(|m| (m.id.clone(), m.epoch))
            .collect();
        let join = Heartbeat {
            member_id: "fuzz".into(),
            subscribed: Some(vec!["t".into()]),
            ..Heartbeat::default()
        };
        black_box(g.heartbeat(join, &partitions, 10, 1));
        for (member_id, member_epoch) in ids {
            let beat = Heartbeat {
                member_id,
                member_epoch,
                ..Heartbeat::default()
            };
            black_box(g.heartbeat(beat, &partitions, 10, 2));
        }
        black_box(g.expire(45_000, 60_000));
        black_box(g.snapshot());
    }
}

/// Fuzz target `txn_peer_answers`: decodes `data` as the answers a node reads from
/// another node's Kafka listener for transactions: a WriteTxnMarkers response (for a
/// fixed request of three partitions) and an AddPartitionsToTxn v4 verify response.
///
/// Panics if a markers answer does not have exactly one code per partition asked.
pub fn txn_peer_answers(data: &[u8]) {
    use crate::cluster::markers::{decode_response, decode_verify, Markers};
    let asked = Markers {
        producer_id: 7,
        producer_epoch: 1,
        commit: true,
        coordinator_epoch: 0,
        partitions: vec![("a".into(), 0), ("a".into(), 1), ("b".into(), 0)],
    };
    let body = bytes::Bytes::copy_from_slice(data);
    match decode_response(&asked, body.clone()) {
        Ok(codes) => assert_eq!(codes.len(), asked.partitions.len(), "a code per partition"),
        Err(e) => {
            black_box(e.to_string());
        }
    }
    match decode_verify(body) {
        Ok(code) => {
            black_box(code);
        }
        Err(e) => {
            black_box(e.to_string());
        }
    }
}

/// Fuzz target `share_peer_answers`: decodes `data` as the answers a data partition's
/// leader reads from the node keeping its share partitions' state: a ReadShareGroupState
/// response (for partition 0) and a WriteShareGroupState response.
///
/// Panics if the batches of a state read back are not their own normal form (the same
/// batches once more through a state), or if loading it panics.
pub fn share_peer_answers(data: &[u8]) {
    use crate::share::partition::{Limits, SharePartition};
    use crate::share::remote::{decode_read, decode_write, from_batches, to_batches};
    let key = ("g".to_string(), "t".to_string(), 0);
    let body = bytes::Bytes::copy_from_slice(data);
    if let Ok(Ok(Some(state))) = decode_read(&key, body.clone()) {
        let batches = to_batches(&state);
        let again = from_batches(state.start, state.leader_epoch, &batches);
        assert_eq!(to_batches(&again), batches, "state batches in normal form");
        black_box(SharePartition::from_state(&state, Limits::default()).state());
    }
    match decode_write(&key, body) {
        Ok(code) => {
            black_box(code);
        }
        Err(e) => {
            black_box(e.to_string());
        }
    }
}

/// Most commands one input applies (each line one JSON command).
const COMMANDS_PER_INPUT_MAX: usize = 64;

/// Fuzz target `meta_commands`: decodes `data` as a metadata log batch (as a controller
/// replays it), and reads it as lines of JSON commands applied in order to an empty
/// metadata state, as a replica applies the controller's log.
///
/// Panics if a command that `apply` refuses changed the state, if applying is not
/// deterministic, if `check` and `apply` disagree, or if commands do not survive the
/// metadata log's encoding.
pub fn meta_commands(data: &[u8]) {
    if let Ok(cmds) = crate::cluster::metastore::decode_commands(Bytes::copy_from_slice(data)) {
        black_box(cmds.len());
    }
    let cmds: Vec<Command> = data
        .split(|&b| b == b'\n')
        .take(COMMANDS_PER_INPUT_MAX)
        .filter_map(|line| serde_json::from_slice(line).ok())
        .collect();
    let mut state = Metadata::default();
    let mut twin = Metadata::default();
    for cmd in &cmds {
        let before = state.clone();
        let checked = state.check(cmd);
        match state.apply(cmd) {
            Ok(()) => assert!(checked.is_ok(), "apply took {cmd:?} that check refused"),
            Err(e) => {
                assert_eq!(checked, Err(e), "check and apply disagree on {cmd:?}");
                assert_eq!(state, before, "a refused {cmd:?} changed the metadata");
            }
        }
        let _ = twin.apply(cmd);
        assert_eq!(state, twin, "applying {cmd:?} is not deterministic");
    }
    if !cmds.is_empty() {
        let batch = crate::cluster::encode_commands(&cmds).expect("commands encode");
        let back = crate::cluster::metastore::decode_commands(batch).expect("batch decodes");
        assert_eq!(back, cmds, "commands through the metadata log's encoding");
    }
}

/// Fuzz target `admin_http`: scans `data` as the bytes an admin connection read, as each
/// read grows them, then parses the request line and the queries and bodies the pure
/// handlers take.
///
/// Panics if the scan of a prefix decides differently from the scan of all of it once the
/// head is complete, if a complete head does not end with its blank line, or if a length
/// bound is not kept.
pub fn admin_http(data: &[u8]) {
    const HEAD_MAX: usize = 256;
    let full = status::scan_head(data, HEAD_MAX);
    // As the connection reads it: growing prefixes, until the scan decides.
    let mut decided = None;
    for k in 0..=data.len() {
        let scan = status::scan_head(&data[..k], HEAD_MAX);
        if scan != HeadScan::Incomplete {
            decided = Some(scan);
            break;
        }
    }
    if let Some(d) = &decided {
        assert_eq!(d, &full, "growing reads and the whole disagree");
    }
    match &decided {
        Some(HeadScan::Complete { end, body_bytes }) => {
            assert_eq!(&data[end - 4..*end], b"\r\n\r\n");
            assert!(*end <= HEAD_MAX && *body_bytes <= ADMIN_BODY_BYTES_MAX);
            let head = String::from_utf8_lossy(&data[..*end]);
            if let Some((method, path, query)) = status::request_line(&head) {
                black_box((method, path));
                let blob = crate::admin::netcheck::blob(query);
                assert!(blob.body.len() <= crate::admin::netcheck::BLOB_BYTES_MAX);
            }
            let body = &data[*end..data.len().min(end + body_bytes)];
            if let Ok(text) = std::str::from_utf8(body) {
                black_box(crate::common::logging::parse_filter(text).is_ok());
            }
        }
        Some(HeadScan::Refused(..)) => {}
        Some(HeadScan::Incomplete) | None => {
            assert!(data.len() < HEAD_MAX, "an endless head kept being read");
            assert_eq!(full, HeadScan::Incomplete);
        }
    }
}

/// The JWK set the `oauthbearer` target verifies with: the public half of
/// `security/testdata/jwt-rsa.key`, kid `fuzz`.
pub const FUZZ_JWKS: &str = concat!(
    r#"{"keys":[{"kty":"RSA","kid":"fuzz","e":"AQAB","n":""#,
    "qSu_beYzoUcnHmBQH0RfiR3y8suUNmRxhNeZsQeqpSPmctm9U0HimXaMg-AzyPWz0U8WfAIaU7-p62PVQa1mv3tjBbe8KnHJ679K3f1--unUHFomnj3gf6SXVijeJ6M3zbiiQIgE8oqObjRNuAGTveWXI2EZanAyOvsxv_3WGMZ9dnttcJDYkI6mMDmj_LRtyFwP2e91u2SxqyOt_4-oqeaU9FgLeElMPr21kI8FNge9AH563dMKCUtLZ3MdhOHV-22wzM2Vt2lIFaENlaaHmWmbWLgZ90Ov0Pe7KiO8aq7-wJXr4zR93BqOSTvR8WgD7slsv500pCak8CK_ltwYcQ",
    r#""}]}"#
);
/// The `oauthbearer` target's clock (2100-01-01): every token of the seeds has expired.
const FUZZ_NOW_MS: i64 = 4_102_444_800_000;

/// Fuzz target `oauthbearer`: takes `data` as an OAUTHBEARER client message, as a bare
/// token and as a JWK set.
///
/// Panics if a message that parses does not parse the same once written again, or if
/// anything authenticates (the fuzzer holds no key of `FUZZ_JWKS`, and the seeds' tokens,
/// signed by it, expired before `FUZZ_NOW_MS`).
pub fn oauthbearer(data: &[u8]) {
    use crate::security::{jwt, oauthbearer};
    if let Ok(first) = oauthbearer::parse(data) {
        let mut again = format!(
            "n,{},\u{1}auth=Bearer {}\u{1}",
            first
                .authzid
                .as_deref()
                .map(|a| format!("a={a}"))
                .unwrap_or_default(),
            first.token
        );
        for (k, v) in &first.extensions {
            again.push_str(&format!("{k}={v}\u{1}"));
        }
        again.push('\u{1}');
        assert_eq!(
            oauthbearer::parse(again.as_bytes()).as_ref(),
            Ok(&first),
            "message round trip"
        );
    }
    let jwks = jwt::Jwks::parse(FUZZ_JWKS.as_bytes()).expect("the fixed JWK set parses");
    let rules = jwt::ClaimRules::new(std::path::PathBuf::new());
    assert!(
        oauthbearer::authenticate(data, &jwks, &rules, FUZZ_NOW_MS).is_err(),
        "a fuzzed OAUTHBEARER message authenticated"
    );
    if let Ok(token) = std::str::from_utf8(data) {
        assert!(
            jwt::validate(token, &jwks, &rules, FUZZ_NOW_MS).is_err(),
            "a fuzzed token validated"
        );
    }
    match jwt::Jwks::parse(data) {
        Ok(set) => {
            black_box(set);
        }
        Err(e) => {
            black_box(e.to_string());
        }
    }
}
