//! Transactions between nodes, with Kafka's own broker-to-broker requests sent to the
//! other node's Kafka listener: a coordinator asks the leader of a partition to write a
//! producer's commit or abort marker (WriteTxnMarkers v1), and a partition leader asks a
//! transaction's coordinator whether a producer's open transaction has the partition
//! before it takes the producer's first transactional batch (AddPartitionsToTxn v4 with
//! `verify_only`, KIP-890 part 1).
//!
//! Invariant: every answer is a code per partition asked, in order; a connection, send or
//! read that fails or takes longer than `MARKER_RPC_TIMEOUT` answers
//! REQUEST_TIMED_OUT for all of them (the coordinator retries).

use std::time::Duration;

use bytes::Bytes;
use kafka_protocol::messages::write_txn_markers_request::{
    WritableTxnMarker, WritableTxnMarkerTopic,
};
use kafka_protocol::messages::{
    ApiKey, ProducerId, TopicName, WriteTxnMarkersRequest, WriteTxnMarkersResponse,
};
use kafka_protocol::protocol::StrBytes;

use crate::common::errors::code;

/// Longest a marker request to another node may take, connection included.
pub const MARKER_RPC_TIMEOUT: Duration = Duration::from_secs(10);
/// The WriteTxnMarkers version sent.
const VERSION: i16 = 1;

/// The markers ending one producer's transaction, for the partitions named.
#[derive(Clone, Debug)]
pub struct Markers {
    /// Producer id.
    pub producer_id: i64,
    /// The epoch the markers carry.
    pub producer_epoch: i16,
    /// Commit (`true`) or abort.
    pub commit: bool,
    /// The coordinator's epoch (its `__transaction_state` partition's leader epoch).
    pub coordinator_epoch: i32,
    /// (topic, partition) to write the marker to.
    pub partitions: Vec<(String, i32)>,
}

/// Sends `markers` to the node listening for Kafka clients on `host`:`port`; a code per
/// partition, in order.
pub async fn send(host: &str, port: u16, markers: &Markers) -> Vec<i16> {
    let request = encode_request(markers, 1);
    let api = ("WriteTxnMarkers", MARKER_RPC_TIMEOUT);
    super::net::ask((host, port), api, request, |b| decode_response(markers, b))
        .await
        .unwrap_or_else(|| vec![code::REQUEST_TIMED_OUT; markers.partitions.len()])
}

/// The request's bytes, size prefix included.
pub fn encode_request(markers: &Markers, correlation_id: i32) -> anyhow::Result<Bytes> {
    let mut topics: Vec<WritableTxnMarkerTopic> = Vec::new();
    for (t, p) in &markers.partitions {
        match topics.last_mut() {
            Some(last) if last.name.0.as_str() == t => last.partition_indexes.push(*p),
            _ => topics.push(
                WritableTxnMarkerTopic::default()
                    .with_name(TopicName(StrBytes::from_string(t.clone())))
                    .with_partition_indexes(vec![*p]),
            ),
        }
    }
    let req = WriteTxnMarkersRequest::default().with_markers(vec![WritableTxnMarker::default()
        .with_producer_id(ProducerId(markers.producer_id))
        .with_producer_epoch(markers.producer_epoch)
        .with_transaction_result(markers.commit)
        .with_coordinator_epoch(markers.coordinator_epoch)
        .with_topics(topics)]);
    super::net::encode_request(
        ApiKey::WriteTxnMarkers,
        VERSION,
        &req,
        "strand-txn-coordinator",
        correlation_id,
    )
}

/// The code of each partition of `markers` in a response body (after its size prefix);
/// a partition the response does not name gets REQUEST_TIMED_OUT.
pub fn decode_response(markers: &Markers, body: Bytes) -> anyhow::Result<Vec<i16>> {
    let resp: WriteTxnMarkersResponse =
        super::net::decode_response(ApiKey::WriteTxnMarkers, VERSION, body)?;
    let mut codes = std::collections::HashMap::new();
    for m in resp
        .markers
        .iter()
        .filter(|m| m.producer_id.0 == markers.producer_id)
    {
        for t in &m.topics {
            for p in &t.partitions {
                codes.insert((t.name.0.to_string(), p.partition_index), p.error_code);
            }
        }
    }
    Ok(markers
        .partitions
        .iter()
        .map(|tp| codes.get(tp).copied().unwrap_or(code::REQUEST_TIMED_OUT))
        .collect())
}

/// The AddPartitionsToTxn version a partition leader sends to verify.
const VERIFY_VERSION: i16 = 4;

/// Asks the coordinator listening on `host`:`port` whether producer (id, epoch) has an
/// open transaction of `transactional_id` with every partition of `partitions` (`add`: to
/// add them); the first error otherwise (REQUEST_TIMED_OUT when the coordinator cannot be
/// asked).
pub async fn verify(
    host: &str,
    port: u16,
    transactional_id: &str,
    (producer_id, epoch): (i64, i16),
    partitions: &[(String, i32)],
    add: bool,
) -> Result<(), i16> {
    let request = encode_verify(transactional_id, (producer_id, epoch), partitions, add, 1);
    let api = ("AddPartitionsToTxn", MARKER_RPC_TIMEOUT);
    match super::net::ask((host, port), api, request, decode_verify).await {
        Some(c) if c == code::NONE => Ok(()),
        Some(c) => Err(c),
        None => Err(code::REQUEST_TIMED_OUT),
    }
}

/// AddPartitionsToTxn v4, verify_only unless `add`, size prefix included.
pub fn encode_verify(
    transactional_id: &str,
    (producer_id, epoch): (i64, i16),
    partitions: &[(String, i32)],
    add: bool,
    correlation_id: i32,
) -> anyhow::Result<Bytes> {
    use kafka_protocol::messages::add_partitions_to_txn_request::{
        AddPartitionsToTxnTopic, AddPartitionsToTxnTransaction,
    };
    use kafka_protocol::messages::{AddPartitionsToTxnRequest, TransactionalId};
    let mut topics: Vec<AddPartitionsToTxnTopic> = Vec::new();
    for (t, p) in partitions {
        match topics.last_mut() {
            Some(last) if last.name.0.as_str() == t => last.partitions.push(*p),
            _ => topics.push(
                AddPartitionsToTxnTopic::default()
                    .with_name(TopicName(StrBytes::from_string(t.clone())))
                    .with_partitions(vec![*p]),
            ),
        }
    }
    let req = AddPartitionsToTxnRequest::default().with_transactions(vec![
        AddPartitionsToTxnTransaction::default()
            .with_transactional_id(TransactionalId(StrBytes::from_string(
                transactional_id.to_string(),
            )))
            .with_producer_id(ProducerId(producer_id))
            .with_producer_epoch(epoch)
            .with_verify_only(!add)
            .with_topics(topics),
    ]);
    super::net::encode_request(
        ApiKey::AddPartitionsToTxn,
        VERIFY_VERSION,
        &req,
        "strand-partition-leader",
        correlation_id,
    )
}

/// The first error of a verify answer (NONE when every partition is verified).
pub fn decode_verify(body: Bytes) -> anyhow::Result<i16> {
    use kafka_protocol::messages::AddPartitionsToTxnResponse;
    let resp: AddPartitionsToTxnResponse =
        super::net::decode_response(ApiKey::AddPartitionsToTxn, VERIFY_VERSION, body)?;
    if resp.error_code != code::NONE {
        return Ok(resp.error_code);
    }
    let first = resp
        .results_by_transaction
        .iter()
        .flat_map(|t| t.topic_results.iter())
        .flat_map(|t| t.results_by_partition.iter())
        .map(|p| p.partition_error_code)
        .find(|c| *c != code::NONE);
    Ok(first.unwrap_or(code::NONE))
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::BytesMut;
    use kafka_protocol::messages::{RequestHeader, ResponseHeader};
    use kafka_protocol::protocol::{Decodable, Encodable};

    fn markers() -> Markers {
        Markers {
            producer_id: 7,
            producer_epoch: 2,
            commit: true,
            coordinator_epoch: 3,
            partitions: vec![("a".into(), 0), ("a".into(), 1), ("b".into(), 0)],
        }
    }

    #[test]
    fn a_request_decodes_as_kafka_reads_it() {
        let mut bytes = encode_request(&markers(), 9).expect("encode");
        let _size = bytes.split_to(4);
        let hv = ApiKey::WriteTxnMarkers.request_header_version(VERSION);
        let h = RequestHeader::decode(&mut bytes, hv).expect("header");
        assert_eq!(h.request_api_key, ApiKey::WriteTxnMarkers as i16);
        assert_eq!(h.correlation_id, 9);
        let r = WriteTxnMarkersRequest::decode(&mut bytes, VERSION).expect("body");
        let m = &r.markers[0];
        assert_eq!((m.producer_id.0, m.producer_epoch), (7, 2));
        assert!(m.transaction_result);
        assert_eq!(m.coordinator_epoch, 3);
        let named: Vec<(String, Vec<i32>)> = m
            .topics
            .iter()
            .map(|t| (t.name.0.to_string(), t.partition_indexes.clone()))
            .collect();
        assert_eq!(named, vec![("a".into(), vec![0, 1]), ("b".into(), vec![0])]);
    }

    #[test]
    fn a_response_gives_a_code_per_partition_asked() {
        use kafka_protocol::messages::write_txn_markers_response::{
            WritableTxnMarkerPartitionResult, WritableTxnMarkerResult, WritableTxnMarkerTopicResult,
        };
        let resp = WriteTxnMarkersResponse::default().with_markers(vec![
            WritableTxnMarkerResult::default()
                .with_producer_id(ProducerId(7))
                .with_topics(vec![WritableTxnMarkerTopicResult::default()
                    .with_name(TopicName(StrBytes::from_static_str("a")))
                    .with_partitions(vec![
                        WritableTxnMarkerPartitionResult::default().with_partition_index(1),
                        WritableTxnMarkerPartitionResult::default()
                            .with_partition_index(0)
                            .with_error_code(code::NOT_LEADER_OR_FOLLOWER),
                    ])]),
        ]);
        let hv = ApiKey::WriteTxnMarkers.response_header_version(VERSION);
        let mut out = BytesMut::new();
        ResponseHeader::default()
            .with_correlation_id(1)
            .encode(&mut out, hv)
            .expect("header");
        resp.encode(&mut out, VERSION).expect("body");
        let codes = decode_response(&markers(), out.freeze()).expect("decode");
        assert_eq!(
            codes,
            vec![
                code::NOT_LEADER_OR_FOLLOWER,
                code::NONE,
                code::REQUEST_TIMED_OUT
            ]
        );
    }
}
