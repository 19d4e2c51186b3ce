//! The Kafka protocol gateway: request framing, version negotiation and dispatch.
//! Framing and non-hot-path messages use the `kafka-protocol` crate; record batches stay
//! `Bytes` end to end (ARCHITECTURE.md, Kafka gateway).
//!
//! Invariant: only APIs in [`SUPPORTED`] are advertised and served; any other API key or
//! version closes the connection, except ApiVersions, which answers UNSUPPORTED_VERSION
//! with the supported ranges so the client can retry (KAFKA-NOTES.md).

pub mod acls;
pub mod api_versions;
pub mod authorized;
pub mod cluster;
pub mod configs;
pub mod consumer_groups;
pub mod fetch;
pub mod groups;
pub mod list_offsets;
pub mod metadata;
pub mod net;
pub mod produce;
pub mod producer;
pub mod quorum;
pub mod quotas;
pub mod reassign;
pub mod records;
pub mod response;
pub mod sasl;
pub mod scram;
pub mod share_fetch;
pub mod share_groups;
pub mod share_offsets;
pub mod share_resets;
pub mod share_state;
pub mod slow_log;
pub mod throttle;
pub mod topics;
pub mod txn;

use std::rc::Rc;

use bytes::{BufMut, Bytes, BytesMut};
use kafka_protocol::messages::{ApiKey, RequestHeader, ResponseHeader};
use kafka_protocol::protocol::{Decodable, Encodable};

use crate::shard::Shard;

/// APIs and versions this broker implements: (api, min, max).
pub const SUPPORTED: &[(ApiKey, i16, i16)] = &[
    (ApiKey::Produce, 3, 12),
    (ApiKey::Fetch, 4, 17),
    (ApiKey::ListOffsets, 1, 7),
    (ApiKey::Metadata, 1, 12),
    (ApiKey::ApiVersions, 0, 4),
    (ApiKey::CreateTopics, 2, 7),
    (ApiKey::DeleteTopics, 1, 6),
    (ApiKey::DeleteRecords, 0, 2),
    (ApiKey::OffsetForLeaderEpoch, 2, 4),
    (ApiKey::DescribeConfigs, 1, 4),
    (ApiKey::AlterConfigs, 0, 2),
    (ApiKey::CreatePartitions, 0, 3),
    (ApiKey::IncrementalAlterConfigs, 0, 1),
    (ApiKey::DescribeCluster, 0, 1),
    (ApiKey::InitProducerId, 0, 5),
    (ApiKey::AddPartitionsToTxn, 0, 5),
    (ApiKey::AddOffsetsToTxn, 0, 4),
    (ApiKey::EndTxn, 0, 5),
    (ApiKey::TxnOffsetCommit, 0, 5),
    (ApiKey::WriteTxnMarkers, 1, 1),
    (ApiKey::DescribeTransactions, 0, 0),
    (ApiKey::ListTransactions, 0, 1),
    (ApiKey::DescribeProducers, 0, 0),
    (ApiKey::FindCoordinator, 0, 4),
    (ApiKey::JoinGroup, 0, 7),
    (ApiKey::SyncGroup, 0, 5),
    (ApiKey::Heartbeat, 0, 4),
    (ApiKey::LeaveGroup, 0, 5),
    (ApiKey::OffsetCommit, 2, 9),
    (ApiKey::OffsetFetch, 1, 9),
    (ApiKey::ConsumerGroupHeartbeat, 0, 1),
    (ApiKey::ConsumerGroupDescribe, 0, 1),
    // Advertised and served only with `group_share_enable` (`share_groups::is_share_api`).
    (ApiKey::ShareGroupHeartbeat, 1, 1),
    (ApiKey::ShareGroupDescribe, 1, 1),
    (ApiKey::ShareFetch, 1, 1),
    (ApiKey::ShareAcknowledge, 1, 1),
    (ApiKey::ReadShareGroupState, 0, 0),
    (ApiKey::DescribeShareGroupOffsets, 0, 0),
    (ApiKey::AlterShareGroupOffsets, 0, 0),
    (ApiKey::DeleteShareGroupOffsets, 0, 0),
    (ApiKey::DeleteShareGroupState, 0, 0),
    (ApiKey::WriteShareGroupState, 0, 0),
    (ApiKey::OffsetDelete, 0, 0),
    (ApiKey::ListGroups, 0, 5),
    (ApiKey::DescribeGroups, 0, 5),
    (ApiKey::DeleteGroups, 0, 2),
    (ApiKey::AlterPartitionReassignments, 0, 1),
    (ApiKey::ListPartitionReassignments, 0, 0),
    (ApiKey::UnregisterBroker, 0, 0),
    (ApiKey::DescribeQuorum, 0, 1),
    (ApiKey::AddRaftVoter, 0, 0),
    (ApiKey::RemoveRaftVoter, 0, 0),
    (ApiKey::DescribeUserScramCredentials, 0, 0),
    (ApiKey::AlterUserScramCredentials, 0, 0),
    (ApiKey::SaslHandshake, 0, 1),
    (ApiKey::SaslAuthenticate, 0, 2),
    (ApiKey::DescribeAcls, 1, 3),
    (ApiKey::CreateAcls, 1, 3),
    (ApiKey::DeleteAcls, 1, 3),
    (ApiKey::DescribeClientQuotas, 0, 1),
    (ApiKey::AlterClientQuotas, 0, 1),
];

/// A request that cannot be answered: the connection is closed.
#[derive(Debug, thiserror::Error)]
pub enum FramingError {
    /// Shorter than a request header.
    #[error("request shorter than its header")]
    Short,
    /// Unknown or unimplemented API key.
    #[error("api key {0} not supported")]
    UnsupportedApi(i16),
    /// Version outside the advertised range.
    #[error("api {api} version {version} not supported")]
    UnsupportedVersion {
        /// API key.
        api: i16,
        /// Version asked.
        version: i16,
    },
    /// The header or body failed to decode.
    #[error("malformed request: {0}")]
    Malformed(String),
}

/// Kafka's name of an API, for metric labels.
pub fn api_name(key: ApiKey) -> &'static str {
    match key {
        ApiKey::Produce => "produce",
        ApiKey::Fetch => "fetch",
        ApiKey::ListOffsets => "list_offsets",
        ApiKey::Metadata => "metadata",
        ApiKey::ApiVersions => "api_versions",
        ApiKey::CreateTopics => "create_topics",
        ApiKey::DeleteTopics => "delete_topics",
        ApiKey::DeleteRecords => "delete_records",
        ApiKey::OffsetForLeaderEpoch => "offset_for_leader_epoch",
        ApiKey::DescribeConfigs => "describe_configs",
        ApiKey::AlterConfigs => "alter_configs",
        ApiKey::CreatePartitions => "create_partitions",
        ApiKey::AlterPartitionReassignments => "alter_partition_reassignments",
        ApiKey::ListPartitionReassignments => "list_partition_reassignments",
        ApiKey::UnregisterBroker => "unregister_broker",
        ApiKey::DescribeQuorum => "describe_quorum",
        ApiKey::AddRaftVoter => "add_raft_voter",
        ApiKey::RemoveRaftVoter => "remove_raft_voter",
        ApiKey::DescribeUserScramCredentials => "describe_user_scram_credentials",
        ApiKey::AlterUserScramCredentials => "alter_user_scram_credentials",
        ApiKey::SaslHandshake => "sasl_handshake",
        ApiKey::SaslAuthenticate => "sasl_authenticate",
        ApiKey::IncrementalAlterConfigs => "incremental_alter_configs",
        ApiKey::DescribeCluster => "describe_cluster",
        ApiKey::InitProducerId => "init_producer_id",
        ApiKey::AddPartitionsToTxn => "add_partitions_to_txn",
        ApiKey::AddOffsetsToTxn => "add_offsets_to_txn",
        ApiKey::EndTxn => "end_txn",
        ApiKey::TxnOffsetCommit => "txn_offset_commit",
        ApiKey::WriteTxnMarkers => "write_txn_markers",
        ApiKey::DescribeTransactions => "describe_transactions",
        ApiKey::ListTransactions => "list_transactions",
        ApiKey::DescribeProducers => "describe_producers",
        ApiKey::FindCoordinator => "find_coordinator",
        ApiKey::JoinGroup => "join_group",
        ApiKey::SyncGroup => "sync_group",
        ApiKey::Heartbeat => "heartbeat",
        ApiKey::LeaveGroup => "leave_group",
        ApiKey::OffsetCommit => "offset_commit",
        ApiKey::OffsetFetch => "offset_fetch",
        ApiKey::OffsetDelete => "offset_delete",
        ApiKey::ListGroups => "list_groups",
        ApiKey::DescribeGroups => "describe_groups",
        ApiKey::ConsumerGroupHeartbeat => "consumer_group_heartbeat",
        ApiKey::ConsumerGroupDescribe => "consumer_group_describe",
        ApiKey::ShareGroupHeartbeat => "share_group_heartbeat",
        ApiKey::ShareGroupDescribe => "share_group_describe",
        ApiKey::ShareFetch => "share_fetch",
        ApiKey::ShareAcknowledge => "share_acknowledge",
        ApiKey::ReadShareGroupState => "read_share_group_state",
        ApiKey::DescribeShareGroupOffsets => "describe_share_group_offsets",
        ApiKey::AlterShareGroupOffsets => "alter_share_group_offsets",
        ApiKey::DeleteShareGroupOffsets => "delete_share_group_offsets",
        ApiKey::DeleteShareGroupState => "delete_share_group_state",
        ApiKey::WriteShareGroupState => "write_share_group_state",
        ApiKey::DeleteGroups => "delete_groups",
        _ => "other",
    }
}

/// Handles one request frame; `Ok(None)` means no response (acks=0 produce). `held` is the
/// request's share of the shard's in-flight bytes; a Fetch adds its records' to it.
#[expect(
    clippy::too_many_lines,
    reason = "longer than 70 lines when the lint came in (issue 27): split it when it next changes"
)]
pub async fn handle(
    shard: &Rc<Shard>,
    frame: Bytes,
    conn: &Conn,
    held: &crate::shard::budget::Held,
) -> Result<Option<response::Response>, FramingError> {
    let (key_raw, version) = match frame.first_chunk::<4>() {
        Some(h) => (
            i16::from_be_bytes([h[0], h[1]]),
            i16::from_be_bytes([h[2], h[3]]),
        ),
        None => return Err(FramingError::Short),
    };
    let key = ApiKey::try_from(key_raw).map_err(|_| FramingError::UnsupportedApi(key_raw))?;
    if share_groups::is_share_api(key) && !shard.config.group_share_enable {
        return Err(FramingError::UnsupportedApi(key_raw));
    }
    let index = SUPPORTED.iter().position(|(k, _, _)| *k == key);
    let Some(index) = index else {
        return Err(FramingError::UnsupportedApi(key_raw));
    };
    shard.count_request(index);
    let (_, lo, hi) = SUPPORTED[index];
    if version < lo || version > hi {
        if key == ApiKey::ApiVersions {
            let corr = frame
                .get(4..8)
                .and_then(|s| s.first_chunk::<4>())
                .map(|a| i32::from_be_bytes(*a));
            let corr = corr.ok_or(FramingError::Short)?;
            let share = shard.config.group_share_enable;
            return Ok(Some(api_versions::unsupported_version(corr, share)?.into()));
        }
        return Err(FramingError::UnsupportedVersion {
            api: key_raw,
            version,
        });
    }
    let (ctx, buf) = Ctx::from_frame(frame, key, version, conn)?;
    if key == ApiKey::Fetch {
        return fetch::handle(shard, &ctx, buf, held).await.map(Some);
    }
    if key == ApiKey::ShareFetch {
        return share_fetch::fetch(shard, &ctx, buf).await.map(Some);
    }
    let answer = match key {
        ApiKey::ApiVersions => {
            api_versions::handle(&ctx, buf, shard.config.group_share_enable).map(Some)
        }
        ApiKey::Metadata => metadata::handle(shard, &ctx, buf).await.map(Some),
        ApiKey::Produce => produce::handle(shard, &ctx, buf).await,
        ApiKey::ListOffsets => list_offsets::handle(shard, &ctx, buf).await.map(Some),
        ApiKey::CreateTopics => topics::create(shard, &ctx, buf).await.map(Some),
        ApiKey::DeleteTopics => topics::delete(shard, &ctx, buf).await.map(Some),
        ApiKey::CreatePartitions => topics::create_partitions(shard, &ctx, buf).await.map(Some),
        ApiKey::AlterPartitionReassignments => reassign::alter(shard, &ctx, buf).await.map(Some),
        ApiKey::ListPartitionReassignments => reassign::list(shard, &ctx, buf).await.map(Some),
        ApiKey::DescribeConfigs => configs::describe(shard, &ctx, buf).await.map(Some),
        ApiKey::AlterConfigs => configs::replace(shard, &ctx, buf).await.map(Some),
        ApiKey::IncrementalAlterConfigs => configs::incremental(shard, &ctx, buf).await.map(Some),
        ApiKey::FindCoordinator => groups::find_coordinator(shard, &ctx, buf).await.map(Some),
        ApiKey::JoinGroup
        | ApiKey::SyncGroup
        | ApiKey::Heartbeat
        | ApiKey::LeaveGroup
        | ApiKey::ConsumerGroupHeartbeat
        | ApiKey::ShareGroupHeartbeat
        | ApiKey::OffsetCommit
        | ApiKey::TxnOffsetCommit
        | ApiKey::OffsetDelete => {
            let group = groups::group_of(&ctx, &buf)?;
            groups::route(shard, &ctx, &group, buf).await.map(Some)
        }
        ApiKey::OffsetFetch => groups::offset_fetch(shard, &ctx, buf).await.map(Some),
        ApiKey::ListGroups => groups::list(shard, &ctx, buf).await.map(Some),
        ApiKey::DescribeGroups => groups::describe(shard, &ctx, buf).await.map(Some),
        ApiKey::ConsumerGroupDescribe => {
            consumer_groups::describe(shard, &ctx, buf).await.map(Some)
        }
        ApiKey::ShareGroupDescribe => share_groups::describe(shard, &ctx, buf).await.map(Some),
        ApiKey::ShareAcknowledge => share_fetch::acknowledge(shard, &ctx, buf).await.map(Some),
        ApiKey::ReadShareGroupState => share_state::read(shard, &ctx, buf).await.map(Some),
        ApiKey::DeleteShareGroupState => share_state::forget(shard, &ctx, buf).await.map(Some),
        ApiKey::DescribeShareGroupOffsets => {
            share_offsets::describe(shard, &ctx, buf).await.map(Some)
        }
        ApiKey::AlterShareGroupOffsets => share_resets::alter(shard, &ctx, buf).await.map(Some),
        ApiKey::DeleteShareGroupOffsets => share_resets::delete(shard, &ctx, buf).await.map(Some),
        ApiKey::WriteShareGroupState => share_state::write(shard, &ctx, buf).await.map(Some),
        ApiKey::DeleteGroups => groups::delete(shard, &ctx, buf).await.map(Some),
        ApiKey::InitProducerId => producer::init(shard, &ctx, buf).await.map(Some),
        ApiKey::AddPartitionsToTxn if version >= 4 => txn::add_partitions_batched(shard, &ctx, buf)
            .await
            .map(Some),
        ApiKey::AddPartitionsToTxn | ApiKey::AddOffsetsToTxn | ApiKey::EndTxn => {
            let id = txn::transactional_id_of(&ctx, &buf)?;
            txn::route(shard, &ctx, &id, buf).await.map(Some)
        }
        ApiKey::WriteTxnMarkers => txn::write_markers(shard, &ctx, buf).await.map(Some),
        ApiKey::DescribeTransactions => {
            txn::describe_transactions(shard, &ctx, buf).await.map(Some)
        }
        ApiKey::ListTransactions => txn::list_transactions(shard, &ctx, buf).await.map(Some),
        ApiKey::DescribeProducers => txn::describe_producers(shard, &ctx, buf).await.map(Some),
        ApiKey::DescribeCluster => cluster::describe(shard, &ctx, buf).await.map(Some),
        ApiKey::UnregisterBroker => cluster::unregister(shard, &ctx, buf).await.map(Some),
        ApiKey::DescribeQuorum => quorum::describe(shard, &ctx, buf).await.map(Some),
        ApiKey::AddRaftVoter => quorum::add(shard, &ctx, buf).await.map(Some),
        ApiKey::RemoveRaftVoter => quorum::remove(shard, &ctx, buf).await.map(Some),
        ApiKey::DeleteRecords => records::delete_records(shard, &ctx, buf).await.map(Some),
        ApiKey::DescribeUserScramCredentials => scram::describe(shard, &ctx, buf).await.map(Some),
        ApiKey::AlterUserScramCredentials => scram::alter(shard, &ctx, buf).await.map(Some),
        ApiKey::SaslHandshake | ApiKey::SaslAuthenticate => sasl::refused(&ctx, buf).map(Some),
        ApiKey::CreateAcls => acls::create(shard, &ctx, buf).await.map(Some),
        ApiKey::DescribeAcls => acls::describe(shard, &ctx, buf).await.map(Some),
        ApiKey::DeleteAcls => acls::delete(shard, &ctx, buf).await.map(Some),
        ApiKey::DescribeClientQuotas => quotas::describe(shard, &ctx, buf).await.map(Some),
        ApiKey::AlterClientQuotas => quotas::alter(shard, &ctx, buf).await.map(Some),
        ApiKey::OffsetForLeaderEpoch => records::offset_for_leader_epoch(shard, &ctx, buf)
            .await
            .map(Some),
        _ => Err(FramingError::UnsupportedApi(key_raw)),
    };
    answer.map(|a| a.map(response::Response::from))
}

/// The Kafka listener a connection came in on: its index in `config.listeners`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Listener(pub usize);

impl Listener {
    /// Its name (`config.listeners`); the inter-broker listener's for an index out of range.
    pub fn name(self, config: &crate::common::config::Config) -> &str {
        config
            .listeners
            .get(self.0)
            .or_else(|| config.listeners.get(config.inter_broker_listener))
            .map_or("PLAINTEXT", |l| l.name.as_str())
    }
}

/// The principal of a connection that did not authenticate (Kafka's `User:ANONYMOUS`).
pub const ANONYMOUS: &str = "User:ANONYMOUS";

/// What a connection knows of itself, given to each of its requests.
#[derive(Clone, Debug)]
pub struct Conn {
    /// This connection among the shard's (share sessions end with it).
    pub id: u64,
    /// The client's address as Kafka writes it (`/127.0.0.1`).
    pub host: Rc<str>,
    /// The listener it came in on.
    pub listener: Listener,
    /// Who it authenticated as (`ANONYMOUS` until then, and on PLAINTEXT listeners).
    pub principal: Rc<str>,
    /// Until when it reads no request (a client over its quota, KIP-219).
    pub muted_until: Rc<std::cell::Cell<Option<std::time::Instant>>>,
    /// The throttle time of the request this copy goes with (`quotas::record_produce`).
    pub throttle_ms: u64,
    /// When the frame of the request this copy goes with was read (`slow_log`).
    pub received: Option<std::time::Instant>,
}

/// What every handler needs from the request header.
pub struct Ctx {
    /// API.
    pub key: ApiKey,
    /// Version.
    pub version: i16,
    /// Correlation id to echo.
    pub correlation_id: i32,
    /// The client's id (request header).
    pub client_id: String,
    /// The client's address.
    pub client_host: String,
    /// The listener of its connection.
    pub listener: Listener,
    /// Who the connection authenticated as (`User:name`, or `ANONYMOUS`).
    pub principal: Rc<str>,
    /// The connection's `Conn::muted_until`.
    pub muted_until: Rc<std::cell::Cell<Option<std::time::Instant>>>,
    /// The request's throttle time so far (`Conn::throttle_ms`).
    pub throttle_ms: u64,
    /// The connection's `Conn::id` (0 for a request run away from its connection's shard).
    pub conn_id: u64,
    /// When the request's frame was read (`None` for a request run away from its
    /// connection's shard).
    pub received: Option<std::time::Instant>,
}

impl Ctx {
    /// Decodes a request's header: its context and the body after it.
    pub fn from_frame(
        frame: Bytes,
        key: ApiKey,
        version: i16,
        conn: &Conn,
    ) -> Result<(Ctx, Bytes), FramingError> {
        let mut buf = frame;
        let header = RequestHeader::decode(&mut buf, key.request_header_version(version))
            .map_err(|e| FramingError::Malformed(e.to_string()))?;
        let ctx = Ctx {
            key,
            version,
            correlation_id: header.correlation_id,
            client_id: header
                .client_id
                .as_ref()
                .map(|c| c.to_string())
                .unwrap_or_default(),
            client_host: conn.host.to_string(),
            listener: conn.listener,
            principal: conn.principal.clone(),
            muted_until: conn.muted_until.clone(),
            throttle_ms: conn.throttle_ms,
            conn_id: conn.id,
            received: conn.received,
        };
        Ok((ctx, buf))
    }

    /// Mutes the connection for `d` from now (or longer, if it already is).
    pub fn mute_for(&self, d: std::time::Duration) {
        let until = crate::common::clock::now() + d;
        if self.muted_until.get().is_none_or(|u| u < until) {
            self.muted_until.set(Some(until));
        }
    }

    /// The name of its listener: brokers and coordinators are named by their endpoints of it.
    pub fn listener_name<'c>(&self, shard: &'c Shard) -> &'c str {
        self.listener.name(&shard.config)
    }

    /// Decodes the request body.
    pub fn decode<T: Decodable>(&self, mut body: Bytes) -> Result<T, FramingError> {
        T::decode(&mut body, self.version).map_err(|e| FramingError::Malformed(e.to_string()))
    }

    /// Encodes a response as `respond` does, leaving each of `records.sources` (record
    /// sets the body holds) of at least `response::PIECE_MIN_BYTES` out of the copy: a
    /// piece of its own, and writing each of `records.chains`' pieces in place of its
    /// stand-in (see `response`).
    pub fn respond_pieces<T: Encodable>(
        &self,
        body: &T,
        records: &response::RecordPieces,
    ) -> Result<response::Response, FramingError> {
        let header = ResponseHeader::default().with_correlation_id(self.correlation_id);
        let hv = self.key.response_header_version(self.version);
        let bad = |e: anyhow::Error| FramingError::Malformed(format!("encoding response: {e}"));
        let size =
            header.compute_size(hv).map_err(bad)? + body.compute_size(self.version).map_err(bad)?;
        let inline = 4 + size - records.pieces_bytes().min(size);
        let mut out = response::PieceBuf::new(inline, &records.sources, response::PIECE_MIN_BYTES)
            .with_chains(&records.chains);
        out.put_i32(
            i32::try_from(size)
                .map_err(|_| FramingError::Malformed("response too large".into()))?,
        );
        header.encode(&mut out, hv).map_err(bad)?;
        body.encode(&mut out, self.version).map_err(bad)?;
        Ok(response::finish(out))
    }

    /// Encodes a response with its size prefix and header.
    pub fn respond<T: Encodable>(&self, body: &T) -> Result<Bytes, FramingError> {
        let header = ResponseHeader::default().with_correlation_id(self.correlation_id);
        let hv = self.key.response_header_version(self.version);
        let bad = |e: anyhow::Error| FramingError::Malformed(format!("encoding response: {e}"));
        let size =
            header.compute_size(hv).map_err(bad)? + body.compute_size(self.version).map_err(bad)?;
        let mut out = BytesMut::with_capacity(4 + size);
        out.put_i32(
            i32::try_from(size)
                .map_err(|_| FramingError::Malformed("response too large".into()))?,
        );
        header.encode(&mut out, hv).map_err(bad)?;
        body.encode(&mut out, self.version).map_err(bad)?;
        Ok(out.freeze())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kafka_protocol::messages::MetadataRequest;

    /// Every API advertised in `SUPPORTED` has an arm in `handle`'s dispatch (read from this
    /// file's text): one advertised without would be refused as unsupported after a client
    /// was told it is served.
    #[test]
    fn every_advertised_api_reaches_a_handler() {
        let src = include_str!("mod.rs");
        let start = src
            .find("    if key == ApiKey::Fetch {")
            .expect("the dispatch");
        let end = src[start..]
            .find("_ => Err(FramingError::UnsupportedApi(key_raw))")
            .map(|i| start + i)
            .expect("the dispatch's end");
        let dispatch = &src[start..end];
        let named = |name: &str| {
            dispatch.match_indices(name).any(|(i, _)| {
                !dispatch[i + name.len()..].starts_with(|c: char| c.is_alphanumeric() || c == '_')
            })
        };
        for (key, _, _) in SUPPORTED {
            let name = format!("ApiKey::{key:?}");
            assert!(
                named(&name),
                "{name} is advertised but `handle` has no arm for it"
            );
        }
    }

    /// A Fetch answer encoded in pieces is byte for byte the one `respond` encodes, at every
    /// version, with its large record sets as pieces of their own (not copies).
    #[test]
    fn a_fetch_answer_in_pieces_is_the_same_frame() {
        use kafka_protocol::messages::fetch_response::{
            AbortedTransaction, FetchableTopicResponse, PartitionData,
        };
        use kafka_protocol::messages::{FetchResponse, ProducerId, TopicName};
        use kafka_protocol::protocol::StrBytes;
        let big = |seed: u8| -> Bytes {
            (0..response::PIECE_MIN_BYTES + 333)
                .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
                .collect::<Vec<u8>>()
                .into()
        };
        let (a, b) = (big(1), big(2));
        let small = Bytes::from_static(b"a small record set");
        let part = |i: i32, records: Option<Bytes>| {
            PartitionData::default()
                .with_partition_index(i)
                .with_high_watermark(100 + i64::from(i))
                .with_last_stable_offset(90)
                .with_log_start_offset(3)
                .with_aborted_transactions(Some(vec![AbortedTransaction::default()
                    .with_producer_id(ProducerId(7))
                    .with_first_offset(12)]))
                .with_records(records)
        };
        let sources = [a.clone(), b.clone(), small.clone()];
        for version in 4..=17 {
            let mut topic = FetchableTopicResponse::default().with_partitions(vec![
                part(0, Some(a.clone())),
                part(1, Some(small.clone())),
                part(2, Some(Bytes::new())),
                part(3, Some(b.clone())),
            ]);
            if version >= 13 {
                topic = topic.with_topic_id(uuid::Uuid::from_u128(99));
            } else {
                topic = topic.with_topic(TopicName(StrBytes::from_static_str("t")));
            }
            let body = FetchResponse::default()
                .with_throttle_time_ms(5)
                .with_responses(vec![topic]);
            let c = ctx(ApiKey::Fetch, version);
            let whole = c.respond(&body).unwrap();
            let records = response::RecordPieces::of_sources(sources.to_vec());
            let pieces = c.respond_pieces(&body, &records).unwrap();
            let joined: Vec<u8> = pieces.pieces().iter().flat_map(|p| p.to_vec()).collect();
            assert_eq!(joined, whole.to_vec(), "version {version}");
            let p = pieces.pieces();
            // Flexible versions end with tagged fields: a tail after b.
            let want = if version >= 12 { 5 } else { 4 };
            assert_eq!(
                p.len(),
                want,
                "version {version}: head, a, middle, b (, tail)"
            );
            assert_eq!(p[1].as_ptr(), a.as_ptr(), "version {version}");
            assert_eq!(p[3].as_ptr(), b.as_ptr(), "version {version}");
        }
    }

    #[test]
    fn a_fetch_answer_of_batches_in_pieces_is_the_same_frame() {
        use kafka_protocol::messages::fetch_response::{FetchableTopicResponse, PartitionData};
        use kafka_protocol::messages::{FetchResponse, TopicName};
        use kafka_protocol::protocol::StrBytes;
        let batch = |len: usize, seed: u8| -> Bytes {
            (0..len)
                .map(|i| (i as u8).wrapping_mul(13).wrapping_add(seed))
                .collect::<Vec<u8>>()
                .into()
        };
        let big = response::PIECE_MIN_BYTES + 100;
        let sets = [
            // Large batches with runs of small ones between them.
            response::RecordSet::from_batches(vec![
                batch(big, 1),
                batch(700, 2),
                batch(900, 3),
                batch(big + 7, 4),
                batch(50, 5),
            ]),
            // Small batches only: one joined piece, copied.
            response::RecordSet::from_batches(vec![batch(300, 6), batch(400, 7)]),
            response::RecordSet::default(),
            // One large batch: the batch itself.
            response::RecordSet::from_batches(vec![batch(big * 2, 8)]),
        ];
        let body_of = |records: Vec<Bytes>, version: i16| {
            let parts = records
                .into_iter()
                .enumerate()
                .map(|(i, r)| {
                    PartitionData::default()
                        .with_partition_index(i as i32)
                        .with_records(Some(r))
                })
                .collect();
            let mut topic = FetchableTopicResponse::default().with_partitions(parts);
            if version >= 13 {
                topic = topic.with_topic_id(uuid::Uuid::from_u128(5));
            } else {
                topic = topic.with_topic(TopicName(StrBytes::from_static_str("t")));
            }
            FetchResponse::default().with_responses(vec![topic])
        };
        for version in 4..=17 {
            let c = ctx(ApiKey::Fetch, version);
            let whole = c
                .respond(&body_of(
                    sets.iter().map(|s| s.to_bytes()).collect(),
                    version,
                ))
                .unwrap();
            let mut records = response::RecordPieces::default();
            let stand_ins = sets.iter().map(|s| records.body_bytes(s)).collect();
            assert_eq!(records.chains.len(), 1, "only the first set needs a chain");
            let pieces = c
                .respond_pieces(&body_of(stand_ins, version), &records)
                .unwrap();
            let joined: Vec<u8> = pieces.pieces().iter().flat_map(|p| p.to_vec()).collect();
            assert_eq!(joined, whole.to_vec(), "version {version}");
            // Every large batch goes out as itself, not copied.
            let sent: Vec<*const u8> = pieces.pieces().iter().map(|p| p.as_ptr()).collect();
            for b in [
                &sets[0].batches()[0],
                &sets[0].batches()[3],
                &sets[3].batches()[0],
            ] {
                assert!(sent.contains(&b.as_ptr()), "version {version}");
            }
            assert!(
                pieces.len() - records.pieces_bytes() < 4096,
                "version {version}: only the small batches and the fields are copied"
            );
        }
    }

    #[test]
    fn stand_ins_are_cut_from_their_region_only() {
        use crate::runtime::piece_buf::STAND_IN_BYTES_MAX;
        let piece = |n: usize| vec![Bytes::from(vec![1u8; n])];
        let last = response::Chain::stand_in_for(piece(1), STAND_IN_BYTES_MAX - 1);
        let last = last.expect("the region's last byte");
        assert_eq!(last.stand_in.len(), 1);
        assert!(response::Chain::stand_in_for(piece(2), STAND_IN_BYTES_MAX - 1).is_none());
        assert!(response::Chain::stand_in_for(piece(1), usize::MAX).is_none());
        let a = response::Chain::stand_in_for(piece(10), 0).expect("fits");
        let b = response::Chain::stand_in_for(piece(10), 10).expect("fits");
        assert_eq!(
            a.stand_in.as_ptr() as usize + 10,
            b.stand_in.as_ptr() as usize
        );
        assert!(a.stand_in.iter().all(|&x| x == 0));
    }

    fn ctx(key: ApiKey, version: i16) -> Ctx {
        Ctx {
            key,
            version,
            correlation_id: 1,
            client_id: String::new(),
            client_host: String::new(),
            listener: Listener(0),
            principal: ANONYMOUS.into(),
            muted_until: Rc::default(),
            throttle_ms: 0,
            conn_id: 0,
            received: None,
        }
    }

    #[test]
    fn huge_array_count_in_a_tiny_body_is_an_error_not_an_allocation() {
        // Metadata v1 body: topics array count = i32::MAX, then nothing.
        let body = Bytes::from_static(&[0x7f, 0xff, 0xff, 0xff, 0, 0]);
        let r = ctx(ApiKey::Metadata, 1).decode::<MetadataRequest>(body);
        assert!(r.is_err());
        // Flexible version: compact array count varint of 2^32-1.
        let body = Bytes::from_static(&[0xff, 0xff, 0xff, 0xff, 0x0f, 0, 0, 0]);
        let r = ctx(ApiKey::Metadata, 9).decode::<MetadataRequest>(body);
        assert!(r.is_err());
    }

    #[test]
    fn only_implemented_apis_are_advertised() {
        for (key, lo, hi) in SUPPORTED {
            let range = key.valid_versions();
            assert!(
                range.min <= *lo && *hi <= range.max,
                "{key:?} {lo}..={hi} outside the codec's {range}"
            );
        }
    }
}
