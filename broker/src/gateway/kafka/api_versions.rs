//! ApiVersions: advertises exactly [`super::SUPPORTED`] (the share-group APIs only with
//! `group_share_enable`), and the features this build
//! finalizes ([`FINALIZED`]: transaction version 2, which Java 4.x and franz-go producers
//! use once they see it; `share.version` 1 with `group_share_enable`).

use bytes::{BufMut, Bytes, BytesMut};
use kafka_protocol::messages::api_versions_response::{
    ApiVersion, FinalizedFeatureKey, SupportedFeatureKey,
};
use kafka_protocol::messages::{ApiVersionsRequest, ApiVersionsResponse};
use kafka_protocol::protocol::{Encodable, StrBytes};

use super::{Ctx, FramingError, SUPPORTED};
use crate::common::errors::code;

/// The features every Strand node finalizes, with their level: `transaction.version` 2
/// (KIP-890 part 2: Produce v12 adds its partition to the transaction, EndTxn v5 bumps the
/// epoch), and `group.version` 1 (KIP-848: the consumer group protocol). Fixed by the
/// build, so the same on every node of a cluster of one build.
pub const FINALIZED: &[(&str, i16)] = &[("transaction.version", 2), ("group.version", 1)];
/// `share.version` 1 (KIP-932: share groups), finalized beside [`FINALIZED`] only on a node
/// serving share groups (`group_share_enable`), as a Kafka 4.1 cluster finalizes it once
/// `kafka-features.sh upgrade --feature share.version=1` enabled them.
pub const SHARE_VERSION: (&str, i16) = ("share.version", 1);
/// The epoch of the finalized features: raise it whenever a level there changes (a client
/// keeps the features of the highest epoch it saw; -1 would make it ignore them).
pub const FINALIZED_FEATURES_EPOCH: i64 = 3;
/// The features supported, with their (min, max) levels.
const SUPPORTED_FEATURES: &[(&str, i16, i16)] = &[
    ("transaction.version", 0, 2),
    ("group.version", 0, 1),
    ("share.version", 0, 1),
];

/// The features a node finalizes (`share`: `group_share_enable`).
fn finalized(share: bool) -> impl Iterator<Item = (&'static str, i16)> {
    FINALIZED
        .iter()
        .copied()
        .chain(share.then_some(SHARE_VERSION))
}
/// The first ApiVersions version shown supported features whose minimum is 0 (older
/// clients took a minimum of 0 for "unsupported": KAFKA-17011).
const ZERO_MIN_FEATURES_SINCE: i16 = 4;

/// `SUPPORTED`, less the share-group APIs unless `share` (`group_share_enable`).
fn body(error_code: i16, share: bool) -> ApiVersionsResponse {
    let keys = SUPPORTED
        .iter()
        .filter(|(k, _, _)| share || !super::share_groups::is_share_api(*k))
        .map(|&(k, lo, hi)| {
            ApiVersion::default()
                .with_api_key(k as i16)
                .with_min_version(lo)
                .with_max_version(hi)
        })
        .collect();
    ApiVersionsResponse::default()
        .with_error_code(error_code)
        .with_api_keys(keys)
}

/// Answers a supported-version ApiVersions (the features are tagged fields, written from
/// v3 on).
pub fn handle(ctx: &Ctx, req: Bytes, share: bool) -> Result<Bytes, FramingError> {
    let _req: ApiVersionsRequest = ctx.decode(req)?;
    let supported = SUPPORTED_FEATURES
        .iter()
        .filter(|(_, min, _)| *min > 0 || ctx.version >= ZERO_MIN_FEATURES_SINCE)
        .map(|&(name, min, max)| {
            SupportedFeatureKey::default()
                .with_name(StrBytes::from_static_str(name))
                .with_min_version(min)
                .with_max_version(max)
        })
        .collect();
    let finalized = finalized(share)
        .map(|(name, level)| {
            FinalizedFeatureKey::default()
                .with_name(StrBytes::from_static_str(name))
                .with_max_version_level(level)
                .with_min_version_level(level)
        })
        .collect();
    ctx.respond(
        &body(0, share)
            .with_supported_features(supported)
            .with_finalized_features_epoch(FINALIZED_FEATURES_EPOCH)
            .with_finalized_features(finalized),
    )
}

/// Answers an ApiVersions at a version we do not know: error 35 and a v0-shaped body.
pub fn unsupported_version(correlation_id: i32, share: bool) -> Result<Bytes, FramingError> {
    let b = body(code::UNSUPPORTED_VERSION, share);
    let size = b
        .compute_size(0)
        .map_err(|e| FramingError::Malformed(e.to_string()))?;
    let mut out = BytesMut::with_capacity(8 + size);
    out.put_i32((4 + size) as i32);
    out.put_i32(correlation_id);
    b.encode(&mut out, 0)
        .map_err(|e| FramingError::Malformed(e.to_string()))?;
    Ok(out.freeze())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn share_version_is_finalized_exactly_when_share_groups_are_served() {
        let names = |share| finalized(share).map(|(n, _)| n).collect::<Vec<_>>();
        assert!(!names(false).contains(&"share.version"));
        assert!(finalized(true).any(|f| f == ("share.version", 1)));
        for (name, level) in finalized(true) {
            let (_, min, max) = SUPPORTED_FEATURES
                .iter()
                .find(|(n, _, _)| *n == name)
                .expect("a finalized feature is supported");
            assert!((*min..=*max).contains(&level), "{name} {level}");
        }
    }
}
