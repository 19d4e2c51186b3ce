//! Where a response carries `throttle_time_ms`, so that a throttle decided outside its
//! handler (the request quota of KIP-124, measured around the handler) reaches the client
//! in the answer it throttles. `THROTTLE_FIELD` lists, per API, the first version with the
//! field and its offset in the body, from Kafka's message definitions (kafka-protocol's
//! generated types; checked by the tests below by decoding patched answers).
//!
//! Invariant: only an answer whose API and version carry the field where the table says
//! is changed, and only its four bytes, to the larger of its value and the throttle;
//! Produce (the field last) gets its throttle from `Ctx::throttle_ms` in its handler, and
//! ApiVersions (the field after the API list) is not throttled.

use bytes::{Bytes, BytesMut};
use kafka_protocol::messages::ApiKey;

/// (API, first version with `throttle_time_ms`, its offset in the body).
const THROTTLE_FIELD: &[(ApiKey, i16, usize)] = &[
    (ApiKey::AddOffsetsToTxn, 0, 0),
    (ApiKey::AddPartitionsToTxn, 0, 0),
    (ApiKey::AddRaftVoter, 0, 0),
    (ApiKey::AlterClientQuotas, 0, 0),
    (ApiKey::AlterConfigs, 0, 0),
    (ApiKey::AlterPartitionReassignments, 0, 0),
    (ApiKey::AlterUserScramCredentials, 0, 0),
    (ApiKey::CreateAcls, 1, 0),
    (ApiKey::CreatePartitions, 0, 0),
    (ApiKey::CreateTopics, 2, 0),
    (ApiKey::DeleteAcls, 1, 0),
    (ApiKey::DeleteGroups, 0, 0),
    (ApiKey::DeleteRecords, 0, 0),
    (ApiKey::DeleteTopics, 1, 0),
    (ApiKey::DescribeAcls, 1, 0),
    (ApiKey::DescribeClientQuotas, 0, 0),
    (ApiKey::DescribeCluster, 0, 0),
    (ApiKey::DescribeConfigs, 1, 0),
    (ApiKey::DescribeGroups, 1, 0),
    (ApiKey::DescribeProducers, 0, 0),
    (ApiKey::DescribeTransactions, 0, 0),
    (ApiKey::DescribeUserScramCredentials, 0, 0),
    (ApiKey::EndTxn, 0, 0),
    (ApiKey::Fetch, 4, 0),
    (ApiKey::FindCoordinator, 1, 0),
    (ApiKey::Heartbeat, 1, 0),
    (ApiKey::IncrementalAlterConfigs, 0, 0),
    (ApiKey::InitProducerId, 0, 0),
    (ApiKey::JoinGroup, 2, 0),
    (ApiKey::LeaveGroup, 1, 0),
    (ApiKey::ListGroups, 1, 0),
    (ApiKey::ListOffsets, 2, 0),
    (ApiKey::ListPartitionReassignments, 0, 0),
    (ApiKey::ListTransactions, 0, 0),
    (ApiKey::Metadata, 3, 0),
    (ApiKey::OffsetCommit, 3, 0),
    (ApiKey::OffsetFetch, 3, 0),
    (ApiKey::OffsetForLeaderEpoch, 2, 0),
    (ApiKey::RemoveRaftVoter, 0, 0),
    (ApiKey::SyncGroup, 1, 0),
    (ApiKey::TxnOffsetCommit, 0, 0),
    (ApiKey::UnregisterBroker, 0, 0),
    (ApiKey::ConsumerGroupDescribe, 0, 0),
    (ApiKey::ConsumerGroupHeartbeat, 0, 0),
    (ApiKey::DescribeTopicPartitions, 0, 0),
    (ApiKey::ElectLeaders, 0, 0),
    (ApiKey::UpdateFeatures, 0, 0),
    (ApiKey::OffsetDelete, 0, 2),
];

/// `answer` (size-prefixed, its header without tagged fields, as `Ctx::respond` writes
/// it) with `throttle_time_ms` at least `throttle_ms`, when its API and version carry the
/// field.
pub fn with_throttle(answer: Bytes, key: ApiKey, version: i16, throttle_ms: u64) -> Bytes {
    let Some(&(_, _, field)) = THROTTLE_FIELD
        .iter()
        .find(|(k, since, _)| *k == key && version >= *since)
    else {
        return answer;
    };
    let header_bytes = 4 + usize::from(key.response_header_version(version) >= 1);
    let at = 4 + header_bytes + field;
    let Some(current) = answer.get(at..at + 4).and_then(|b| b.first_chunk::<4>()) else {
        return answer;
    };
    let wanted = i32::try_from(throttle_ms).unwrap_or(i32::MAX);
    if i32::from_be_bytes(*current) >= wanted {
        return answer;
    }
    let mut out = BytesMut::from(&answer[..]);
    out[at..at + 4].copy_from_slice(&wanted.to_be_bytes());
    out.freeze()
}

#[cfg(test)]
mod tests {
    use super::*;
    use kafka_protocol::messages::{
        DescribeClusterResponse, FetchResponse, FindCoordinatorResponse, JoinGroupResponse,
        MetadataResponse, OffsetDeleteResponse, ResponseHeader,
    };
    use kafka_protocol::protocol::{Decodable, Encodable};

    fn answer<T: Encodable>(key: ApiKey, version: i16, body: &T) -> Bytes {
        use bytes::BufMut;
        let hv = key.response_header_version(version);
        let header = ResponseHeader::default().with_correlation_id(9);
        let size =
            header.compute_size(hv).expect("size") + body.compute_size(version).expect("size");
        let mut out = BytesMut::new();
        out.put_i32(i32::try_from(size).expect("size"));
        header.encode(&mut out, hv).expect("header");
        body.encode(&mut out, version).expect("body");
        out.freeze()
    }

    /// `answer` patched to `throttle_ms`, decoded again.
    fn patched<T: Encodable + Decodable>(
        key: ApiKey,
        version: i16,
        body: &T,
        throttle_ms: u64,
    ) -> T {
        let mut b = with_throttle(answer(key, version, body), key, version, throttle_ms);
        let _ = bytes::Buf::get_i32(&mut b);
        ResponseHeader::decode(&mut b, key.response_header_version(version)).expect("header");
        T::decode(&mut b, version).expect("body")
    }

    #[test]
    fn the_throttle_lands_in_the_field_of_every_kind_of_answer() {
        for v in [4, 12, 17] {
            let r = patched(
                ApiKey::Fetch,
                v,
                &FetchResponse::default().with_throttle_time_ms(5),
                700,
            );
            assert_eq!(r.throttle_time_ms, 700, "fetch v{v}");
        }
        for v in [3, 9, 12] {
            let m = MetadataResponse::default().with_cluster_id(None);
            assert_eq!(
                patched(ApiKey::Metadata, v, &m, 42).throttle_time_ms,
                42,
                "metadata v{v}"
            );
        }
        let od = OffsetDeleteResponse::default().with_error_code(3);
        let r = patched(ApiKey::OffsetDelete, 0, &od, 9);
        assert_eq!((r.error_code, r.throttle_time_ms), (3, 9));
        for v in [2, 9] {
            let r = patched(ApiKey::JoinGroup, v, &JoinGroupResponse::default(), 11);
            assert_eq!(r.throttle_time_ms, 11);
        }
        let r = patched(
            ApiKey::DescribeCluster,
            1,
            &DescribeClusterResponse::default(),
            12,
        );
        assert_eq!(r.throttle_time_ms, 12);
        let r = patched(
            ApiKey::FindCoordinator,
            4,
            &FindCoordinatorResponse::default(),
            13,
        );
        assert_eq!(r.throttle_time_ms, 13);
    }

    #[test]
    fn a_larger_throttle_stays_and_versions_without_the_field_are_left_alone() {
        let f = FetchResponse::default().with_throttle_time_ms(900);
        assert_eq!(patched(ApiKey::Fetch, 12, &f, 700).throttle_time_ms, 900);
        let a = answer(
            ApiKey::FindCoordinator,
            0,
            &FindCoordinatorResponse::default(),
        );
        assert_eq!(with_throttle(a.clone(), ApiKey::FindCoordinator, 0, 50), a);
        let short = Bytes::from_static(&[0, 0, 0, 4, 0, 0, 0, 9]);
        assert_eq!(with_throttle(short.clone(), ApiKey::Metadata, 9, 50), short);
    }
}
