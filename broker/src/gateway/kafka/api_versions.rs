//! ApiVersions: advertises exactly [`super::SUPPORTED`].

use bytes::{BufMut, Bytes, BytesMut};
use kafka_protocol::messages::api_versions_response::ApiVersion;
use kafka_protocol::messages::{ApiVersionsRequest, ApiVersionsResponse};
use kafka_protocol::protocol::Encodable;

use super::{Ctx, FramingError, SUPPORTED};
use crate::common::errors::code;

fn body(error_code: i16) -> ApiVersionsResponse {
    let keys = SUPPORTED
        .iter()
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

/// Answers a supported-version ApiVersions.
pub fn handle(ctx: &Ctx, req: Bytes) -> Result<Bytes, FramingError> {
    let _req: ApiVersionsRequest = ctx.decode(req)?;
    ctx.respond(&body(0))
}

/// Answers an ApiVersions at a version we do not know: error 35 and a v0-shaped body.
pub fn unsupported_version(correlation_id: i32) -> Result<Bytes, FramingError> {
    let b = body(code::UNSUPPORTED_VERSION);
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
