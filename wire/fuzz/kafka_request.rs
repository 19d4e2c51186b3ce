//! Body of the `kafka_request` fuzz target, kept out of strand-wire (which does not depend
//! on kafka-protocol): `fuzz_targets/kafka_request.rs` (cargo fuzz, nightly) and
//! `wire/tests/kafka_request_replay.rs` (stable, in `make test`) both include this file.

use std::hint::black_box;

use bytes::Bytes;

/// Fuzz target `kafka_request`: reads `data` as the broker reads a Kafka request frame's
/// payload (API key, version, the request header of that version, then the body), for every
/// API key and version kafka-protocol knows. A body that decodes is encoded again; those
/// bytes must decode, and encode to the same bytes.
///
/// Returns whether the body decoded (and so was checked). Panics if decoding panics, or if a decoded request does not survive re-encoding. The
/// allocation bound is kafka-protocol's (third_party/kafka-protocol/PATCHED.md): a peer's
/// array count is never trusted for a reservation, so a fuzzer's huge counts must not abort.
pub fn kafka_request(data: &[u8]) -> bool {
    use kafka_protocol::messages::{ApiKey, RequestHeader, RequestKind};
    use kafka_protocol::protocol::Decodable;
    let Some((head, _)) = data.split_first_chunk::<4>() else {
        return false;
    };
    let key = i16::from_be_bytes([head[0], head[1]]);
    let version = i16::from_be_bytes([head[2], head[3]]);
    let Ok(api) = ApiKey::try_from(key) else {
        return false;
    };
    let range = api.valid_versions();
    if version < range.min || version > range.max {
        return false;
    }
    let mut buf = Bytes::copy_from_slice(data);
    let Ok(header) = RequestHeader::decode(&mut buf, api.request_header_version(version)) else {
        return false;
    };
    black_box(&header);
    let Ok(request) = RequestKind::decode(api, &mut buf, version) else {
        return false;
    };
    // Compared as bytes, not as values: a float field may hold NaN, which is not equal to
    // itself. Encoding what decoded must give bytes that decode and encode to the same.
    let mut first = bytes::BytesMut::new();
    if request.encode(&mut first, version).is_err() {
        return false;
    }
    let first = first.freeze();
    let decoded = RequestKind::decode(api, &mut first.clone(), version)
        .expect("a re-encoded request decodes");
    let mut second = bytes::BytesMut::new();
    decoded
        .encode(&mut second, version)
        .expect("a decoded request encodes again");
    assert_eq!(first, second.freeze(), "re-encoding is not stable");
    true
}
