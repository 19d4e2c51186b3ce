//! Native protocol connections on a shard (ARCHITECTURE.md, Native protocol): the shared
//! handshake listener (`native_addr`, SO_REUSEPORT: every shard accepts) and this shard's
//! own port, whose connections only this shard serves. Frames are read here, decoded with
//! `strand_wire::native`, run as concurrent tasks, and answered as they complete (out of
//! order; the correlation id matches them up). With `native_tls` both listeners serve TLS
//! with the Kafka listeners' certificate (`ssl_*`, client certificates as
//! `ssl_client_auth` says). A home of glommio names (STYLE.md 1).
//!
//! Invariant: a length is checked against `REQUEST_BYTES_MAX` before anything is
//! allocated for it; a malformed frame or body closes this connection only; at most
//! `PIPELINE_DEPTH` requests of one connection run at once (then reading stops); request
//! bytes count against the shard's in-flight bound like Kafka requests.

use std::net::SocketAddr;
use std::rc::Rc;

use anyhow::Context;
use bytes::Bytes;
use futures::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use glommio::channels::local_channel;
use glommio::net::{TcpListener, TcpStream};
use strand_wire::native::generated::{BodyT, ErrorResponseT, MessageT};
use strand_wire::native::{
    codes, decode_request, error, Encoder, FrameHeader, Request, FRAME_HEADER_BYTES,
    PROTOCOL_VERSION,
};

use crate::common::config::REQUEST_BYTES_MAX;
use crate::gateway::kafka::net::{
    IDLE_TIMEOUT, PIPELINE_DEPTH, REQUEST_READ_TIMEOUT, TLS_HANDSHAKE_TIMEOUT,
};
use crate::gateway::kafka::response::Response;
use crate::runtime::task::spawn_local;
use crate::security::tls::Reloading;
use crate::shard::budget::Held;
use crate::shard::Shard;

/// Binds the handshake listener and this shard's port, publishes the port, and spawns
/// their accept loops (TLS with `tls`, the shard's listener configuration). Fails (and
/// with it start-up) when an address cannot be bound.
pub fn listen(shard: &Rc<Shard>, tls: Option<Rc<Reloading>>) -> anyhow::Result<()> {
    let shared = shard.config.native_addr;
    let own = SocketAddr::new(
        shared.ip(),
        match shard.config.native_shard_base_port {
            0 => 0,
            base => u16::try_from(usize::from(base) + shard.id)
                .context("native shard port past 65535")?,
        },
    );
    let bind = |addr: SocketAddr, flag: &str| {
        TcpListener::bind(addr)
            .map_err(std::io::Error::from)
            .with_context(|| format!("cannot listen on {addr}; pick another address with {flag}"))
    };
    let shared_listener = bind(shared, "--native-addr")?;
    let own_listener = bind(own, "--native-shard-base-port")?;
    let port = own_listener
        .local_addr()
        .map_err(std::io::Error::from)
        .context("native shard listener address")?
        .port();
    shard.set_native_port(port);
    tracing::debug!(shard = shard.id, port, "native shard port bound");
    spawn_local(accept(shard.clone(), shared_listener, tls.clone()));
    spawn_local(accept(shard.clone(), own_listener, tls));
    Ok(())
}

async fn accept(shard: Rc<Shard>, listener: TcpListener, tls: Option<Rc<Reloading>>) {
    while !shard.stopping() {
        match listener.accept().await {
            Ok(stream) => {
                let _ = stream.set_nodelay(true);
                spawn_local(secured(shard.clone(), stream, tls.clone()));
            }
            Err(e) => {
                tracing::warn!(shard = shard.id, error = %e, "native accept failed");
                crate::runtime::task::sleep(std::time::Duration::from_millis(10)).await;
            }
        }
    }
}

/// Serves a connection, after its TLS handshake when the listeners serve TLS (a failed
/// one is counted with the Kafka listeners' and closes the connection).
async fn secured(shard: Rc<Shard>, stream: TcpStream, tls: Option<Rc<Reloading>>) {
    let peer = stream.peer_addr().ok();
    let Some(tls) = tls else {
        return connection(shard, stream, peer).await;
    };
    let acceptor = futures_rustls::TlsAcceptor::from(tls.config(false));
    match crate::runtime::task::timeout(TLS_HANDSHAKE_TIMEOUT, acceptor.accept(stream)).await {
        Some(Ok(s)) => connection(shard, s, peer).await,
        refused => {
            shard.metrics.tls_failure();
            let why = match refused {
                Some(Err(e)) => e.to_string(),
                _ => "the handshake timed out".into(),
            };
            tracing::debug!(?peer, "native TLS connection refused: {why}");
        }
    }
}

/// A response to write: correlation id, message, its trailer's pieces, and the
/// in-flight bytes it holds until written (none for a refusal written before closing).
type Outgoing = (u64, MessageT, Vec<Bytes>, Option<Held>);

/// Writes the answers as they complete, each flushed (a TLS stream holds what is written
/// until flushed; plain TCP has nothing to flush); each answer's in-flight bytes are
/// released once written.
async fn write_answers<W: AsyncWrite + Unpin>(
    mut wr: W,
    rx: local_channel::LocalReceiver<Outgoing>,
) {
    let mut encoder = Encoder::new();
    while let Some((correlation_id, msg, trailer, held)) = rx.recv().await {
        let frame = if trailer.is_empty() {
            Response::One(encoder.frame(PROTOCOL_VERSION, correlation_id, &msg))
        } else {
            match encoder.frame_with_trailer(PROTOCOL_VERSION, correlation_id, &msg, trailer) {
                Ok(pieces) => Response::Pieces(pieces),
                Err(e) => {
                    tracing::warn!(error = %e, "native answer not encodable: closing connection");
                    break;
                }
            }
        };
        drop(msg);
        if let Some(held) = &held {
            held.shrink_to(frame.len());
        }
        if frame.write_to(&mut wr).await.is_err() || wr.flush().await.is_err() {
            break;
        }
        drop(held);
    }
    let _ = wr.close().await;
}

async fn connection<S: AsyncRead + AsyncWrite + Unpin + 'static>(
    shard: Rc<Shard>,
    stream: S,
    peer: Option<SocketAddr>,
) {
    shard.count_native_connection(true);
    let (mut rd, wr) = stream.split();
    let (tx, rx) = local_channel::new_bounded::<Outgoing>(PIPELINE_DEPTH);
    let tx = Rc::new(tx);
    let running = Rc::new(glommio::sync::Semaphore::new(PIPELINE_DEPTH as u64));
    let writer = glommio::spawn_local(write_answers(wr, rx));
    while !shard.stopping() {
        let Some((h, msg, held)) = read_request(&shard, &mut rd, peer, &tx).await else {
            break;
        };
        let received = crate::common::clock::now();
        let Ok(slot) = running.acquire_static_permit(1).await else {
            break;
        };
        let (s, tx) = (shard.clone(), tx.clone());
        shard.request_started();
        spawn_local(async move {
            let answer = crate::gateway::native::handle(&s, msg, &held, received).await;
            s.request_finished();
            if let Some(a) = answer {
                let msg = MessageT { body: a.body };
                let _ = tx
                    .send((h.correlation_id, msg, a.trailer, Some(held)))
                    .await;
            }
            drop(slot);
        });
    }
    // Let running requests answer before the writer ends.
    let _ = running.acquire(PIPELINE_DEPTH as u64).await;
    drop(tx);
    writer.await;
    shard.count_native_connection(false);
}

/// Reads the next request: its header, decoded message and the in-flight bytes it holds;
/// `None` when the connection is to close (idle, closed, a bad frame or body, or another
/// protocol version, which is answered first).
async fn read_request<R: AsyncRead + Unpin>(
    shard: &Shard,
    rd: &mut R,
    peer: Option<SocketAddr>,
    tx: &local_channel::LocalSender<Outgoing>,
) -> Option<(FrameHeader, Request, Held)> {
    let mut head = [0u8; FRAME_HEADER_BYTES];
    crate::runtime::task::timeout(IDLE_TIMEOUT, rd.read_exact(&mut head))
        .await?
        .ok()?;
    let h = match FrameHeader::parse(&head, REQUEST_BYTES_MAX) {
        Ok(h) => h,
        Err(e) => {
            tracing::debug!(?peer, error = %e, "bad native frame: closing connection");
            return None;
        }
    };
    if h.version != PROTOCOL_VERSION {
        let msg = error_message(
            codes::UNSUPPORTED_VERSION,
            format!(
                "native protocol version {} is not supported; this broker speaks version \
                 {PROTOCOL_VERSION}",
                h.version
            ),
        );
        let _ = tx.send((h.correlation_id, msg, Vec::new(), None)).await;
        return None;
    }
    if h.trailer {
        tracing::debug!(?peer, "native request with a trailer: closing connection");
        return None;
    }
    let held = shard.reserve_request_bytes(h.body_bytes.max(1)).await?;
    let mut body = vec![0u8; h.body_bytes];
    if !matches!(
        crate::runtime::task::timeout(REQUEST_READ_TIMEOUT, rd.read_exact(&mut body)).await,
        Some(Ok(()))
    ) {
        tracing::debug!(?peer, "half-sent native frame: closing connection");
        return None;
    }
    match decode_request(Bytes::from(body)) {
        Ok(m) => Some((h, m, held)),
        Err(e) => {
            tracing::debug!(?peer, error = %e, "malformed native body: closing connection");
            None
        }
    }
}

fn error_message(code: i16, message: String) -> MessageT {
    MessageT {
        body: BodyT::ErrorResponse(Box::new(ErrorResponseT {
            error: error(code, message, false),
        })),
    }
}
