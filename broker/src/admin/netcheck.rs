//! Network self-test through the admin API (`strandctl self-test --peer-admin`): this node
//! measures HTTP round trips and a bulk transfer to a peer node's admin listener, so an
//! operator sees the network *between nodes*, not just from their own desk.
//!
//! Invariant: every peer-controlled size is bounded before anything is allocated
//! (`BLOB_BYTES_MAX`, `ROUNDS_MAX`, the response read is capped); every connect and read
//! has `PEER_TIMEOUT`. A home of glommio names (STYLE.md 1).

use std::net::SocketAddr;
use std::time::Duration;

use futures::io::{AsyncReadExt, AsyncWriteExt};
use glommio::net::TcpStream;

use crate::admin::Response;

/// Largest blob served or fetched (a transfer long enough to measure, short enough to
/// not disturb a serving node).
pub const BLOB_BYTES_MAX: usize = 64 * 1024 * 1024;
/// Most round trips one test makes.
pub const ROUNDS_MAX: u32 = 1000;
/// Deadline for each connect and each response.
pub const PEER_TIMEOUT: Duration = Duration::from_secs(10);
/// Response head bytes allowed beyond the body.
const HEAD_BYTES_MAX: usize = 8 * 1024;
/// Defaults when the query does not say.
const ROUNDS_DEFAULT: u32 = 100;
const BYTES_DEFAULT: usize = 16 * 1024 * 1024;

fn param<'a>(query: &'a str, key: &str) -> Option<&'a str> {
    query
        .split('&')
        .filter_map(|kv| kv.split_once('='))
        .find(|(k, _)| *k == key)
        .map(|(_, v)| v)
}

fn error(status: &'static str, message: String) -> Response {
    Response {
        status,
        content_type: "application/json",
        body: serde_json::json!({ "error": message }).to_string(),
    }
}

/// `GET /v1/self-test/blob?bytes=N`: N bytes to download.
pub fn blob(query: &str) -> Response {
    match param(query, "bytes").map(str::parse::<usize>) {
        Some(Ok(n)) if n <= BLOB_BYTES_MAX => Response {
            status: "200 OK",
            content_type: "application/octet-stream",
            body: "0".repeat(n),
        },
        _ => error(
            "400 Bad Request",
            format!("bytes must be an integer in 0..={BLOB_BYTES_MAX}"),
        ),
    }
}

/// One HTTP/1.0 GET to `peer`; returns the body length.
async fn get(peer: SocketAddr, path: &str, body_max: usize) -> Result<usize, String> {
    let connect = crate::runtime::task::timeout(PEER_TIMEOUT, TcpStream::connect(peer)).await;
    let mut s = match connect {
        Some(Ok(s)) => s,
        Some(Err(e)) => return Err(format!("connect to {peer}: {e}")),
        None => return Err(format!("connect to {peer}: timed out")),
    };
    let req = format!("GET {path} HTTP/1.0\r\nHost: {peer}\r\n\r\n");
    s.write_all(req.as_bytes())
        .await
        .map_err(|e| format!("write to {peer}: {e}"))?;
    let limit = body_max + HEAD_BYTES_MAX;
    let mut got = Vec::with_capacity(limit.min(1 << 20));
    let mut chunk = vec![0u8; 64 * 1024];
    loop {
        let n = match crate::runtime::task::timeout(PEER_TIMEOUT, s.read(&mut chunk)).await {
            Some(Ok(n)) => n,
            Some(Err(e)) => return Err(format!("read from {peer}: {e}")),
            None => return Err(format!("read from {peer}: timed out")),
        };
        if n == 0 {
            break;
        }
        if got.len() + n > limit {
            return Err(format!("{peer} sent more than {limit} bytes"));
        }
        got.extend_from_slice(&chunk[..n]);
    }
    let head_end = got
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or_else(|| format!("{peer} sent no HTTP response head"))?;
    let status_line = String::from_utf8_lossy(&got[..head_end.min(64)]).into_owned();
    if !status_line.contains(" 200 ") {
        return Err(format!("{peer} answered {status_line:?}"));
    }
    Ok(got.len() - head_end - 4)
}

fn quantile_ms(sorted: &[Duration], q: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    // Nearest rank.
    let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1].as_secs_f64() * 1e3
}

/// `GET /v1/self-test/network?peer=HOST:PORT&rounds=N&bytes=M`: N round trips to the
/// peer's `/v1/health/live` (a fresh connection each, as a client's first request pays) and
/// one download of M bytes from its `/v1/self-test/blob`.
pub async fn network(query: &str) -> Response {
    let Some(Ok(peer)) = param(query, "peer").map(str::parse::<SocketAddr>) else {
        return error(
            "400 Bad Request",
            "peer=IP:PORT (the other node's admin address) is required".into(),
        );
    };
    let rounds = match param(query, "rounds").map(str::parse::<u32>) {
        None => ROUNDS_DEFAULT,
        Some(Ok(n)) if (1..=ROUNDS_MAX).contains(&n) => n,
        _ => {
            return error(
                "400 Bad Request",
                format!("rounds must be in 1..={ROUNDS_MAX}"),
            )
        }
    };
    let bytes = match param(query, "bytes").map(str::parse::<usize>) {
        None => BYTES_DEFAULT,
        Some(Ok(n)) if n <= BLOB_BYTES_MAX => n,
        _ => {
            return error(
                "400 Bad Request",
                format!("bytes must be in 0..={BLOB_BYTES_MAX}"),
            )
        }
    };
    let mut rtts = Vec::with_capacity(rounds as usize);
    for _ in 0..rounds {
        let t = crate::common::clock::now();
        if let Err(e) = get(peer, "/v1/health/live", 64).await {
            return error("502 Bad Gateway", e);
        }
        rtts.push(crate::common::clock::now() - t);
    }
    rtts.sort();
    let t = crate::common::clock::now();
    let received = match get(peer, &format!("/v1/self-test/blob?bytes={bytes}"), bytes).await {
        Ok(n) => n,
        Err(e) => return error("502 Bad Gateway", e),
    };
    let secs = (crate::common::clock::now() - t).as_secs_f64().max(1e-9);
    Response {
        status: "200 OK",
        content_type: "application/json",
        body: serde_json::json!({
            "peer": peer.to_string(),
            "rounds": rounds,
            "rtt_p50_ms": quantile_ms(&rtts, 0.5),
            "rtt_p99_ms": quantile_ms(&rtts, 0.99),
            "rtt_max_ms": quantile_ms(&rtts, 1.0),
            "bytes": received,
            "throughput_mb_per_s": received as f64 / secs / 1e6,
        })
        .to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blob_sizes_are_bounded() {
        assert_eq!(blob("bytes=5").body, "00000");
        assert!(blob(&format!("bytes={}", BLOB_BYTES_MAX + 1))
            .status
            .starts_with("400"));
        assert!(blob("bytes=x").status.starts_with("400"));
        assert!(blob("").status.starts_with("400"));
    }

    #[test]
    fn quantiles_use_nearest_rank() {
        let d: Vec<Duration> = (1..=100).map(Duration::from_millis).collect();
        assert_eq!(quantile_ms(&d, 0.5), 50.0);
        assert_eq!(quantile_ms(&d, 0.99), 99.0);
        assert_eq!(quantile_ms(&d, 1.0), 100.0);
    }
}
