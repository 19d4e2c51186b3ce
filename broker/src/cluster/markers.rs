//! Transaction markers between nodes: a coordinator asks the leader of a partition on
//! another node to write a producer's commit or abort marker with Kafka's own
//! broker-to-broker request, WriteTxnMarkers (v1), sent to that node's Kafka listener.
//!
//! Invariant: every answer is a code per partition asked, in order; a connection, send or
//! read that fails or takes longer than `MARKER_RPC_TIMEOUT` answers
//! REQUEST_TIMED_OUT for all of them (the coordinator retries), and a response is read
//! only up to `MARKER_RESPONSE_BYTES_MAX`.

use std::time::Duration;

use bytes::{BufMut, Bytes, BytesMut};
use futures::{AsyncReadExt, AsyncWriteExt};
use glommio::net::TcpStream;
use kafka_protocol::messages::write_txn_markers_request::{
    WritableTxnMarker, WritableTxnMarkerTopic,
};
use kafka_protocol::messages::{
    ApiKey, ProducerId, RequestHeader, ResponseHeader, TopicName, WriteTxnMarkersRequest,
    WriteTxnMarkersResponse,
};
use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};

use crate::common::errors::code;

/// Longest a marker request to another node may take, connection included.
pub const MARKER_RPC_TIMEOUT: Duration = Duration::from_secs(10);
/// Largest WriteTxnMarkers response read from a peer.
pub const MARKER_RESPONSE_BYTES_MAX: usize = 1024 * 1024;
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
    let n = markers.partitions.len();
    let r = crate::runtime::task::timeout(MARKER_RPC_TIMEOUT, exchange(host, port, markers)).await;
    match r {
        Some(Ok(codes)) => codes,
        Some(Err(e)) => {
            tracing::debug!(%host, port, error = %e, "WriteTxnMarkers to a peer failed");
            vec![code::REQUEST_TIMED_OUT; n]
        }
        None => vec![code::REQUEST_TIMED_OUT; n],
    }
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
    let header = RequestHeader::default()
        .with_request_api_key(ApiKey::WriteTxnMarkers as i16)
        .with_request_api_version(VERSION)
        .with_correlation_id(correlation_id)
        .with_client_id(Some(StrBytes::from_static_str("strand-txn-coordinator")));
    let hv = ApiKey::WriteTxnMarkers.request_header_version(VERSION);
    let size = header.compute_size(hv)? + req.compute_size(VERSION)?;
    let mut out = BytesMut::with_capacity(4 + size);
    out.put_i32(i32::try_from(size)?);
    header.encode(&mut out, hv)?;
    req.encode(&mut out, VERSION)?;
    Ok(out.freeze())
}

/// The code of each partition of `markers` in a response body (after its size prefix);
/// a partition the response does not name gets REQUEST_TIMED_OUT.
pub fn decode_response(markers: &Markers, mut body: Bytes) -> anyhow::Result<Vec<i16>> {
    let hv = ApiKey::WriteTxnMarkers.response_header_version(VERSION);
    ResponseHeader::decode(&mut body, hv)?;
    let resp = WriteTxnMarkersResponse::decode(&mut body, VERSION)?;
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

async fn exchange(host: &str, port: u16, markers: &Markers) -> anyhow::Result<Vec<i16>> {
    let mut stream = TcpStream::connect(format!("{host}:{port}"))
        .await
        .map_err(|e| anyhow::anyhow!("connecting: {e}"))?;
    let _ = stream.set_nodelay(true);
    stream.write_all(&encode_request(markers, 1)?).await?;
    let mut size = [0u8; 4];
    stream.read_exact(&mut size).await?;
    let size = usize::try_from(i32::from_be_bytes(size))?;
    if size > MARKER_RESPONSE_BYTES_MAX {
        anyhow::bail!("WriteTxnMarkers response of {size} bytes");
    }
    let mut body = vec![0u8; size];
    stream.read_exact(&mut body).await?;
    decode_response(markers, Bytes::from(body))
}

#[cfg(test)]
mod tests {
    use super::*;

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
