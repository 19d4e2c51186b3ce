//! One Kafka-protocol request to another node's Kafka listener over a new connection (the
//! transaction requests between nodes of `markers`).
//!
//! Invariant: a response is read only up to `PEER_RESPONSE_BYTES_MAX`, checked before the
//! body is allocated.

use bytes::Bytes;
use futures::{AsyncReadExt, AsyncWriteExt};
use glommio::net::TcpStream;

/// Largest response read from a peer.
pub const PEER_RESPONSE_BYTES_MAX: usize = 1024 * 1024;

/// Sends one request (size prefix included) on a new connection and reads the response
/// body (after its size prefix), at most `PEER_RESPONSE_BYTES_MAX` bytes.
pub async fn round_trip(host: &str, port: u16, request: Bytes) -> anyhow::Result<Bytes> {
    let mut stream = TcpStream::connect(format!("{host}:{port}"))
        .await
        .map_err(|e| anyhow::anyhow!("connecting: {e}"))?;
    let _ = stream.set_nodelay(true);
    stream.write_all(&request).await?;
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
