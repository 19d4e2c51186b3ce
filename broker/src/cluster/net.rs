//! One Kafka-protocol request to another node's Kafka listener over a new connection (the
//! transaction requests between nodes of `markers`). When the inter-broker listener is
//! SSL the connection is mutual TLS with the node certificate of `rpc_tls_*` (`set_tls`),
//! the peer verified against the cluster CA and its advertised host.
//!
//! Invariant: a response is read only up to `PEER_RESPONSE_BYTES_MAX`, checked before the
//! body is allocated.

use std::cell::RefCell;

use bytes::Bytes;
use futures::io::{AsyncRead, AsyncWrite};
use futures::{AsyncReadExt, AsyncWriteExt};
use glommio::net::TcpStream;

use crate::replication::net::RpcTls;

thread_local! {
    /// This shard's TLS to the inter-broker listeners of other nodes (SSL ones).
    static TLS: RefCell<Option<RpcTls>> = const { RefCell::new(None) };
}

/// Connections to other nodes' inter-broker listeners go over TLS with `tls` (this
/// shard's node-to-node configuration) from now on.
pub fn set_tls(tls: Option<RpcTls>) {
    TLS.with(|t| *t.borrow_mut() = tls);
}

/// Largest response read from a peer.
pub const PEER_RESPONSE_BYTES_MAX: usize = 1024 * 1024;

/// Sends one request (size prefix included) on a new connection and reads the response
/// body (after its size prefix), at most `PEER_RESPONSE_BYTES_MAX` bytes.
pub async fn round_trip(host: &str, port: u16, request: Bytes) -> anyhow::Result<Bytes> {
    let stream = TcpStream::connect(format!("{host}:{port}"))
        .await
        .map_err(|e| anyhow::anyhow!("connecting: {e}"))?;
    let _ = stream.set_nodelay(true);
    let Some(tls) = TLS.with(|t| t.borrow().clone()) else {
        return exchange(stream, request).await;
    };
    let name = rustls::pki_types::ServerName::try_from(host.to_string())
        .map_err(|e| anyhow::anyhow!("peer name {host}: {e}"))?;
    let connector =
        futures_rustls::TlsConnector::from(crate::replication::net::rpc_configs(&tls).client);
    let stream = connector
        .connect(name, stream)
        .await
        .map_err(|e| anyhow::anyhow!("TLS to {host}:{port}: {e}"))?;
    exchange(stream, request).await
}

async fn exchange<S: AsyncRead + AsyncWrite + Unpin>(
    mut stream: S,
    request: Bytes,
) -> anyhow::Result<Bytes> {
    stream.write_all(&request).await?;
    stream.flush().await?;
    let mut size = [0u8; 4];
    stream.read_exact(&mut size).await?;
    let size = usize::try_from(i32::from_be_bytes(size))?;
    if size > PEER_RESPONSE_BYTES_MAX {
        anyhow::bail!("response of {size} bytes from a peer");
    }
    let mut body = vec![0u8; size];
    stream.read_exact(&mut body).await?;
    Ok(Bytes::from(body))
}

/// Request `req` of `key` at `version` as one frame: size prefix, header, body.
pub fn encode_request<R: kafka_protocol::protocol::Encodable>(
    key: kafka_protocol::messages::ApiKey,
    version: i16,
    req: &R,
    client_id: &'static str,
    correlation_id: i32,
) -> anyhow::Result<Bytes> {
    use bytes::BufMut;
    use kafka_protocol::protocol::{Encodable, StrBytes};
    let header = kafka_protocol::messages::RequestHeader::default()
        .with_request_api_key(key as i16)
        .with_request_api_version(version)
        .with_correlation_id(correlation_id)
        .with_client_id(Some(StrBytes::from_static_str(client_id)));
    let hv = key.request_header_version(version);
    let size = header.compute_size(hv)? + req.compute_size(version)?;
    let mut out = bytes::BytesMut::with_capacity(4 + size);
    out.put_i32(i32::try_from(size)?);
    header.encode(&mut out, hv)?;
    req.encode(&mut out, version)?;
    Ok(out.freeze())
}

/// The response of `key` at `version` in `body` (a response frame after its size prefix).
pub fn decode_response<R: kafka_protocol::protocol::Decodable>(
    key: kafka_protocol::messages::ApiKey,
    version: i16,
    mut body: Bytes,
) -> anyhow::Result<R> {
    let hv = key.response_header_version(version);
    <kafka_protocol::messages::ResponseHeader as kafka_protocol::protocol::Decodable>::decode(
        &mut body, hv,
    )?;
    R::decode(&mut body, version)
}

/// One request to the Kafka listener at `host`:`port` and its decoded answer, all within
/// `timeout`; `None` (logged at debug with `api`) when it cannot be sent, read or decoded.
pub async fn ask<T>(
    (host, port): (&str, u16),
    (api, timeout): (&str, std::time::Duration),
    request: anyhow::Result<Bytes>,
    decode: impl FnOnce(Bytes) -> anyhow::Result<T>,
) -> Option<T> {
    let exchange = async { decode(round_trip(host, port, request?).await?) };
    match crate::runtime::task::timeout(timeout, exchange).await {
        Some(Ok(answer)) => Some(answer),
        Some(Err(e)) => {
            tracing::debug!(%host, port, api, error = %e, "a request to a peer failed");
            None
        }
        None => None,
    }
}
