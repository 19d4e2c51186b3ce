//! A tiny blocking HTTP/1.1 GET client for the broker's admin API (`/v1/health`,
//! `/v1/status`): one request per connection (`Connection: close`).
//!
//! Invariant: at most [`RESPONSE_BYTES_MAX`] bytes are read from the peer; a longer
//! response is an error, never truncated silently. No TLS, no redirects, no chunked
//! encoding (the admin API sends `Content-Length` and closes).

use std::io::{Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::time::Duration;

/// Largest admin response read: `/v1/status` of a large node is tens of KiB.
pub const RESPONSE_BYTES_MAX: u64 = 4 * 1024 * 1024;

/// A response: status code and body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpResponse {
    /// e.g. 200.
    pub status: u16,
    /// Body text (lossy UTF-8).
    pub body: String,
}

/// What can go wrong.
#[derive(Debug, thiserror::Error)]
pub enum HttpError {
    /// No connection.
    #[error(
        "cannot connect to the admin API at {addr}: {cause} — is strand running? its admin \
         listener is --admin-addr (default 127.0.0.1:9644); point --admin (env STRANDCTL_ADMIN) at it"
    )]
    Connect {
        /// Address.
        addr: String,
        /// Socket error.
        cause: std::io::Error,
    },
    /// Failed mid-request.
    #[error("admin API {addr}{path}: {cause}")]
    Io {
        /// Address.
        addr: String,
        /// Path.
        path: String,
        /// Socket error.
        cause: std::io::Error,
    },
    /// Not HTTP, or too long.
    #[error("admin API {addr}{path}: {detail}")]
    Malformed {
        /// Address.
        addr: String,
        /// Path.
        path: String,
        /// What was wrong.
        detail: String,
    },
}

/// `GET path` from `addr` (HOST:PORT).
pub fn get(addr: &str, path: &str, timeout: Duration) -> Result<HttpResponse, HttpError> {
    let connect_err = |cause| HttpError::Connect {
        addr: addr.to_string(),
        cause,
    };
    let sock = addr
        .to_socket_addrs()
        .map_err(connect_err)?
        .next()
        .ok_or_else(|| connect_err(std::io::Error::other("address resolves to nothing")))?;
    let mut stream = TcpStream::connect_timeout(&sock, timeout).map_err(connect_err)?;
    let io = |cause| HttpError::Io {
        addr: addr.to_string(),
        path: path.to_string(),
        cause,
    };
    stream.set_read_timeout(Some(timeout)).map_err(io)?;
    stream.set_write_timeout(Some(timeout)).map_err(io)?;
    let request = format!(
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nUser-Agent: strandctl\r\nConnection: close\r\n\r\n"
    );
    stream.write_all(request.as_bytes()).map_err(io)?;
    let mut raw = Vec::new();
    stream
        .take(RESPONSE_BYTES_MAX + 1)
        .read_to_end(&mut raw)
        .map_err(io)?;
    if u64::try_from(raw.len()).unwrap_or(u64::MAX) > RESPONSE_BYTES_MAX {
        return Err(HttpError::Malformed {
            addr: addr.to_string(),
            path: path.to_string(),
            detail: format!("response longer than {RESPONSE_BYTES_MAX} bytes"),
        });
    }
    parse_response(&raw).map_err(|detail| HttpError::Malformed {
        addr: addr.to_string(),
        path: path.to_string(),
        detail,
    })
}

/// Parses a whole `Connection: close` response (pure).
pub fn parse_response(raw: &[u8]) -> Result<HttpResponse, String> {
    let split = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or("no end of headers: is this an HTTP port?")?;
    let head = String::from_utf8_lossy(&raw[..split]);
    let status_line = head.lines().next().unwrap_or_default();
    let mut parts = status_line.split_whitespace();
    let status = match (parts.next(), parts.next()) {
        (Some(v), Some(code)) if v.starts_with("HTTP/1.") => code
            .parse::<u16>()
            .map_err(|_| format!("bad status line {status_line:?}"))?,
        _ => return Err(format!("bad status line {status_line:?}")),
    };
    let body = String::from_utf8_lossy(&raw[split + 4..]).into_owned();
    Ok(HttpResponse { status, body })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn responses_parse() {
        let r = parse_response(b"HTTP/1.1 503 Service Unavailable\r\nA: b\r\n\r\nnot ready\n")
            .expect("valid");
        assert_eq!((r.status, r.body.as_str()), (503, "not ready\n"));
        assert!(parse_response(b"garbage").is_err());
        assert!(parse_response(b"SSH-2.0 x\r\n\r\n").is_err());
        assert!(parse_response(b"HTTP/1.1 abc\r\n\r\n").is_err());
    }
}
