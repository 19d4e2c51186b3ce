//! Share-partition state between nodes, with Kafka's own share-coordinator requests sent
//! to the Kafka listener of the node leading the state's `__share_group_state` partition:
//! a data partition's leader reads (ReadShareGroupState v0) and writes
//! (WriteShareGroupState v0) the state of its share partitions there.
//!
//! A `ShareState` travels as Kafka's state batches: its unfinished runs as AVAILABLE
//! batches with their delivery counts, and the finished offsets between them (and after
//! the last, up to its end) as ACKNOWLEDGED batches, so `[start, end)` is covered
//! exactly and [`from_batches`] gives back the state [`to_batches`] was given.
//!
//! Invariant: a call answers one code (NONE when done); a connection, send or read that
//! fails or takes longer than `SHARE_STATE_RPC_TIMEOUT` answers COORDINATOR_NOT_AVAILABLE
//! (the share fetch that needed it is answered with it and the client retries).

use std::time::Duration;

use bytes::Bytes;
use kafka_protocol::messages::{
    ApiKey, ReadShareGroupStateRequest, ReadShareGroupStateResponse, WriteShareGroupStateRequest,
    WriteShareGroupStateResponse,
};
use kafka_protocol::protocol::StrBytes;

use crate::common::errors::code;
use crate::share::partition::ShareState;
use crate::share::records::{Forget, ShareKey};

/// Longest a share-state request to another node may take, connection included.
pub const SHARE_STATE_RPC_TIMEOUT: Duration = Duration::from_secs(10);
/// The version of both requests (the only one Kafka 4.x has).
const VERSION: i16 = 0;
/// Kafka's delivery states of a state batch (`RecordState`).
pub const AVAILABLE: i8 = 0;
/// An acquired record (written by Kafka only in transit; read as available).
pub const ACQUIRED: i8 = 1;
/// A finished record (accepted; archived ones travel the same way).
pub const ACKNOWLEDGED: i8 = 2;
/// The start offset of a share partition that has no state yet (Kafka's
/// `UNINITIALIZED_START_OFFSET`).
pub const UNINITIALIZED_START_OFFSET: i64 = -1;

/// One state batch: first and last offset, delivery state, delivery count.
pub type Batch = (i64, i64, i8, i16);

/// The `Batch`es of Kafka state batches (any of the generated `StateBatch` types).
macro_rules! batches_of {
    ($state_batches:expr) => {
        $state_batches
            .iter()
            .map(|b| {
                (
                    b.first_offset,
                    b.last_offset,
                    b.delivery_state,
                    b.delivery_count,
                )
            })
            .collect::<Vec<$crate::share::remote::Batch>>()
    };
}
pub(crate) use batches_of;

/// A state's batches as Kafka state batches of the generated type `$ty`.
macro_rules! state_batches {
    ($ty:ty, $state:expr) => {
        $crate::share::remote::to_batches($state)
            .into_iter()
            .map(|(first, last, delivery_state, count)| {
                <$ty>::default()
                    .with_first_offset(first)
                    .with_last_offset(last)
                    .with_delivery_state(delivery_state)
                    .with_delivery_count(count)
            })
            .collect()
    };
}
pub(crate) use state_batches;

/// `state`'s `[start, end)` as state batches (see the module doc).
pub fn to_batches(state: &ShareState) -> Vec<Batch> {
    let mut out = Vec::with_capacity(2 * state.available.len() + 1);
    let mut at = state.start;
    for &(first, last, count) in &state.available {
        let (first, last) = (first.max(at), last.min(state.end.saturating_sub(1)));
        if first > last {
            continue;
        }
        if first > at {
            out.push((at, first - 1, ACKNOWLEDGED, 0));
        }
        out.push((
            first,
            last,
            AVAILABLE,
            i16::try_from(count).unwrap_or(i16::MAX),
        ));
        at = last + 1;
    }
    if at < state.end {
        out.push((at, state.end - 1, ACKNOWLEDGED, 0));
    }
    out
}

/// The state that `start` and `batches` describe (ends after the last batch; a batch
/// that is not a range is ignored).
pub fn from_batches(start: i64, leader_epoch: i32, batches: &[Batch]) -> ShareState {
    let mut end = start;
    let mut available = Vec::new();
    for &(first, last, delivery_state, count) in batches.iter().filter(|b| b.0 <= b.1) {
        end = end.max(last.saturating_add(1));
        if delivery_state == AVAILABLE || delivery_state == ACQUIRED {
            available.push((first, last, u16::try_from(count.max(0)).unwrap_or(0)));
        }
    }
    ShareState {
        start,
        end,
        available,
        leader_epoch,
    }
}

fn uuid(id: u128) -> uuid::Uuid {
    uuid::Uuid::from_u128(id)
}

/// ReadShareGroupState of `key` (its topic's id `topic_id`) by a leader at `leader_epoch`.
pub fn encode_read(key: &ShareKey, topic_id: u128, leader_epoch: i32) -> anyhow::Result<Bytes> {
    use kafka_protocol::messages::read_share_group_state_request::{PartitionData, ReadStateData};
    let req = ReadShareGroupStateRequest::default()
        .with_group_id(StrBytes::from_string(key.0.clone()))
        .with_topics(vec![ReadStateData::default()
            .with_topic_id(uuid(topic_id))
            .with_partitions(vec![PartitionData::default()
                .with_partition(key.2)
                .with_leader_epoch(leader_epoch)])]);
    crate::cluster::net::encode_request(
        ApiKey::ReadShareGroupState,
        VERSION,
        &req,
        "strand-share",
        1,
    )
}

/// The state in a ReadShareGroupState answer for `key` (`None`: none written yet), or
/// its error code.
pub fn decode_read(key: &ShareKey, body: Bytes) -> anyhow::Result<Result<Option<ShareState>, i16>> {
    let resp: ReadShareGroupStateResponse =
        crate::cluster::net::decode_response(ApiKey::ReadShareGroupState, VERSION, body)?;
    let Some(p) = resp
        .results
        .iter()
        .flat_map(|t| t.partitions.iter())
        .find(|p| p.partition == key.2)
    else {
        anyhow::bail!("the answer does not name partition {}", key.2);
    };
    if p.error_code != code::NONE {
        return Ok(Err(p.error_code));
    }
    if p.start_offset == UNINITIALIZED_START_OFFSET {
        return Ok(Ok(None));
    }
    if p.start_offset < 0 {
        anyhow::bail!("start offset {} in a share state", p.start_offset);
    }
    let batches = batches_of!(p.state_batches);
    Ok(Ok(Some(from_batches(p.start_offset, 0, &batches))))
}

/// WriteShareGroupState of `state` for `key` (its topic's id `topic_id`).
pub fn encode_write(key: &ShareKey, topic_id: u128, state: &ShareState) -> anyhow::Result<Bytes> {
    use kafka_protocol::messages::write_share_group_state_request::{
        PartitionData, StateBatch, WriteStateData,
    };
    let batches = state_batches!(StateBatch, state);
    let req = WriteShareGroupStateRequest::default()
        .with_group_id(StrBytes::from_string(key.0.clone()))
        .with_topics(vec![WriteStateData::default()
            .with_topic_id(uuid(topic_id))
            .with_partitions(vec![PartitionData::default()
                .with_partition(key.2)
                .with_leader_epoch(state.leader_epoch)
                .with_start_offset(state.start)
                .with_state_batches(batches)])]);
    crate::cluster::net::encode_request(
        ApiKey::WriteShareGroupState,
        VERSION,
        &req,
        "strand-share",
        1,
    )
}

/// The code of `key`'s partition in a WriteShareGroupState answer.
pub fn decode_write(key: &ShareKey, body: Bytes) -> anyhow::Result<i16> {
    let resp: WriteShareGroupStateResponse =
        crate::cluster::net::decode_response(ApiKey::WriteShareGroupState, VERSION, body)?;
    resp.results
        .iter()
        .flat_map(|t| t.partitions.iter())
        .find(|p| p.partition == key.2)
        .map(|p| p.error_code)
        .ok_or_else(|| anyhow::anyhow!("the answer does not name partition {}", key.2))
}

/// One share-state request to the node at `node` (`cluster::net::ask`).
async fn ask<T>(
    node: (&str, u16),
    api: &str,
    request: anyhow::Result<Bytes>,
    decode: impl FnOnce(Bytes) -> anyhow::Result<T>,
) -> Option<T> {
    crate::cluster::net::ask(node, (api, SHARE_STATE_RPC_TIMEOUT), request, decode).await
}

/// Reads `key`'s state from the node listening on `host`:`port`.
pub async fn read(
    node: (&str, u16),
    key: &ShareKey,
    topic_id: u128,
    leader_epoch: i32,
) -> Result<Option<ShareState>, i16> {
    let request = encode_read(key, topic_id, leader_epoch);
    ask(node, "ReadShareGroupState", request, |b| {
        decode_read(key, b)
    })
    .await
    .unwrap_or(Err(code::COORDINATOR_NOT_AVAILABLE))
}

/// Writes `key`'s `state` at the node listening on `host`:`port`; a code.
pub async fn write(node: (&str, u16), key: &ShareKey, topic_id: u128, state: &ShareState) -> i16 {
    let request = encode_write(key, topic_id, state);
    ask(node, "WriteShareGroupState", request, |b| {
        decode_write(key, b)
    })
    .await
    .unwrap_or(code::COORDINATOR_NOT_AVAILABLE)
}

/// DeleteShareGroupState of what `forget` names. Between strand nodes it asks the node to
/// forget it wherever it holds some of it (its share partitions, the states it keeps): no
/// topics for a whole group (the deleting coordinator cannot name its partitions), else
/// the partitions by topic id (`id_of`; a topic without one is left out).
pub fn encode_forget(
    forget: &Forget,
    id_of: &dyn Fn(&str) -> Option<u128>,
) -> anyhow::Result<Bytes> {
    use kafka_protocol::messages::delete_share_group_state_request::{
        DeleteStateData, PartitionData,
    };
    use kafka_protocol::messages::DeleteShareGroupStateRequest;
    let topics = forget.only.iter().flatten().filter_map(|(t, ps)| {
        let partitions = ps
            .iter()
            .map(|&p| PartitionData::default().with_partition(p))
            .collect();
        Some(
            DeleteStateData::default()
                .with_topic_id(uuid(id_of(t)?))
                .with_partitions(partitions),
        )
    });
    let req = DeleteShareGroupStateRequest::default()
        .with_group_id(StrBytes::from_string(forget.group.clone()))
        .with_topics(topics.collect());
    crate::cluster::net::encode_request(
        ApiKey::DeleteShareGroupState,
        VERSION,
        &req,
        "strand-share",
        1,
    )
}

/// What a DeleteShareGroupState asks a strand node to forget (`encode_forget`); `name_of`
/// gives a topic id's name (a topic it does not know is left out).
pub fn decode_forget(
    r: &kafka_protocol::messages::DeleteShareGroupStateRequest,
    name_of: &dyn Fn(u128) -> Option<String>,
) -> Forget {
    let group = r.group_id.to_string();
    if r.topics.is_empty() {
        return Forget::group(&group);
    }
    let mut only = std::collections::BTreeMap::<String, std::collections::BTreeSet<i32>>::new();
    for t in &r.topics {
        if let Some(name) = name_of(t.topic_id.as_u128()) {
            only.entry(name)
                .or_default()
                .extend(t.partitions.iter().map(|p| p.partition));
        }
    }
    Forget {
        group,
        only: Some(only),
    }
}

/// Asks the node listening on `host`:`port` to forget what `forget` names; whether it
/// answered that it did (every partition named answered without error).
pub async fn forget(
    node: (&str, u16),
    forget: &Forget,
    id_of: &dyn Fn(&str) -> Option<u128>,
) -> bool {
    use kafka_protocol::messages::DeleteShareGroupStateResponse;
    let decode = |b| {
        crate::cluster::net::decode_response::<DeleteShareGroupStateResponse>(
            ApiKey::DeleteShareGroupState,
            VERSION,
            b,
        )
    };
    let answer = ask(
        node,
        "DeleteShareGroupState",
        encode_forget(forget, id_of),
        decode,
    )
    .await;
    answer.is_some_and(|a| {
        a.results
            .iter()
            .flat_map(|t| t.partitions.iter())
            .all(|p| p.error_code == code::NONE)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn state(start: i64, end: i64, available: Vec<(i64, i64, u16)>) -> ShareState {
        ShareState {
            start,
            end,
            available,
            leader_epoch: 3,
        }
    }

    #[test]
    fn finished_offsets_between_and_after_runs_travel_as_acknowledged() {
        let s = state(5, 20, vec![(7, 8, 1), (9, 9, 2), (15, 16, 1)]);
        assert_eq!(
            to_batches(&s),
            vec![
                (5, 6, ACKNOWLEDGED, 0),
                (7, 8, AVAILABLE, 1),
                (9, 9, AVAILABLE, 2),
                (10, 14, ACKNOWLEDGED, 0),
                (15, 16, AVAILABLE, 1),
                (17, 19, ACKNOWLEDGED, 0),
            ]
        );
        assert_eq!(from_batches(5, 3, &to_batches(&s)), s);
        assert_eq!(to_batches(&state(4, 4, vec![])), vec![]);
    }

    proptest! {
        #[test]
        fn any_state_round_trips(start in 0i64..1000, gaps in proptest::collection::vec((0i64..5, 0i64..5, 0u16..9), 0..20), tail in 0i64..5) {
            let mut available = Vec::new();
            let mut at = start;
            for (gap, len, count) in gaps {
                let first = at + gap;
                available.push((first, first + len, count));
                at = first + len + 1;
            }
            let s = state(start, at + tail, available);
            let back = from_batches(start, 3, &to_batches(&s));
            // Adjacent runs may travel merged or split; the offsets and counts are kept.
            let expand = |s: &ShareState| -> Vec<(i64, u16)> {
                s.available.iter().flat_map(|&(f, l, c)| (f..=l).map(move |o| (o, c))).collect()
            };
            prop_assert_eq!(expand(&back), expand(&s));
            prop_assert_eq!((back.start, back.end), (s.start, s.end));
        }

        #[test]
        fn any_answer_decodes_without_panicking(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
            let key: ShareKey = ("g".into(), "t".into(), 0);
            let _ = decode_read(&key, Bytes::from(bytes.clone()));
            let _ = decode_write(&key, Bytes::from(bytes));
        }
    }

    #[test]
    fn a_forget_travels_by_topic_id_and_comes_back_by_name() {
        use kafka_protocol::messages::DeleteShareGroupStateRequest;
        use kafka_protocol::protocol::Decodable;
        let id_of = |t: &str| (t == "t").then_some(7u128);
        let name_of = |id: u128| (id == 7).then(|| "t".to_string());
        let decoded = |f: &Forget| {
            let mut bytes = encode_forget(f, &id_of).expect("encode");
            let _size = bytes.split_to(4);
            let hv = ApiKey::DeleteShareGroupState.request_header_version(VERSION);
            kafka_protocol::messages::RequestHeader::decode(&mut bytes, hv).expect("header");
            let r = DeleteShareGroupStateRequest::decode(&mut bytes, VERSION).expect("body");
            decode_forget(&r, &name_of)
        };
        let all = Forget::group("g");
        assert_eq!(decoded(&all), all);
        let some = Forget {
            group: "g".into(),
            only: Some(
                [
                    ("t".to_string(), [0, 2].into()),
                    ("gone".to_string(), [1].into()),
                ]
                .into(),
            ),
        };
        let back = decoded(&some);
        assert_eq!(
            back.only,
            Some([("t".to_string(), [0, 2].into())].into()),
            "a topic without an id is left out"
        );
    }

    #[test]
    fn requests_carry_the_state_and_answers_decode() {
        use kafka_protocol::messages::read_share_group_state_response::{
            PartitionResult, ReadStateResult, StateBatch,
        };
        use kafka_protocol::protocol::{Decodable, Encodable};
        let key: ShareKey = ("g".into(), "t".into(), 2);
        let s = state(10, 14, vec![(11, 12, 2)]);
        let mut bytes = encode_write(&key, 7, &s).expect("encode");
        let _size = bytes.split_to(4);
        let hv = ApiKey::WriteShareGroupState.request_header_version(VERSION);
        kafka_protocol::messages::RequestHeader::decode(&mut bytes, hv).expect("header");
        let r = WriteShareGroupStateRequest::decode(&mut bytes, VERSION).expect("body");
        let p = &r.topics[0].partitions[0];
        assert_eq!((p.partition, p.leader_epoch, p.start_offset), (2, 3, 10));
        assert_eq!(p.state_batches.len(), 3);

        let answer = |start: i64, error: i16| {
            let resp = ReadShareGroupStateResponse::default().with_results(vec![
                ReadStateResult::default().with_partitions(vec![PartitionResult::default()
                    .with_partition(2)
                    .with_error_code(error)
                    .with_start_offset(start)
                    .with_state_batches(vec![StateBatch::default()
                        .with_first_offset(11)
                        .with_last_offset(13)
                        .with_delivery_state(AVAILABLE)
                        .with_delivery_count(1)])]),
            ]);
            let hv = ApiKey::ReadShareGroupState.response_header_version(VERSION);
            let mut out = bytes::BytesMut::new();
            kafka_protocol::messages::ResponseHeader::default()
                .encode(&mut out, hv)
                .expect("header");
            resp.encode(&mut out, VERSION).expect("body");
            out.freeze()
        };
        let got = decode_read(&key, answer(10, code::NONE)).expect("decode");
        assert_eq!(
            got,
            Ok(Some(from_batches(10, 0, &[(11, 13, AVAILABLE, 1)])))
        );
        let none = decode_read(&key, answer(UNINITIALIZED_START_OFFSET, code::NONE));
        assert_eq!(none.expect("decode"), Ok(None));
        let err = decode_read(&key, answer(0, code::NOT_COORDINATOR));
        assert_eq!(err.expect("decode"), Err(code::NOT_COORDINATOR));
    }
}
