//! Native protocol connections on a shard (ARCHITECTURE.md, Native protocol): the shared
//! handshake listener (`native_addr`, SO_REUSEPORT: every shard accepts) and this shard's
//! own port, whose connections only this shard serves. Frames are read here, decoded with
//! `strand_wire::native`, run as concurrent tasks, and answered as they complete (out of
//! order; the correlation id matches them up). A home of glommio names (STYLE.md 1).
//!
//! Invariant: a length is checked against `REQUEST_BYTES_MAX` before anything is
//! allocated for it; a malformed frame or body closes this connection only; at most
//! `PIPELINE_DEPTH` requests of one connection run at once (then reading stops); request
//! bytes count against the shard's in-flight bound like Kafka requests.

use std::net::SocketAddr;
use std::rc::Rc;

use anyhow::Context;
use futures::io::{AsyncReadExt, AsyncWriteExt};
use glommio::channels::local_channel;
use glommio::net::{TcpListener, TcpStream};
use strand_wire::native::generated::{BodyT, ErrorResponseT, MessageT};
use strand_wire::native::{
    codes, decode_body, error, Encoder, FrameHeader, FRAME_HEADER_BYTES, PROTOCOL_VERSION,
};

use crate::common::config::REQUEST_BYTES_MAX;
use crate::gateway::kafka::net::{IDLE_TIMEOUT, PIPELINE_DEPTH, REQUEST_READ_TIMEOUT};
use crate::runtime::task::spawn_local;
use crate::shard::budget::Held;
use crate::shard::Shard;

/// Binds the handshake listener and this shard's port, publishes the port, and spawns
/// their accept loops. Fails (and with it start-up) when an address cannot be bound.
pub fn listen(shard: &Rc<Shard>) -> anyhow::Result<()> {
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
    spawn_local(accept(shard.clone(), shared_listener));
    spawn_local(accept(shard.clone(), own_listener));
    Ok(())
}

async fn accept(shard: Rc<Shard>, listener: TcpListener) {
    while !shard.stopping() {
        match listener.accept().await {
            Ok(stream) => {
                let _ = stream.set_nodelay(true);
                spawn_local(connection(shard.clone(), stream));
            }
            Err(e) => {
                tracing::warn!(shard = shard.id, error = %e, "native accept failed");
                crate::runtime::task::sleep(std::time::Duration::from_millis(10)).await;
            }
        }
    }
}

/// A response to write: correlation id, message, and the in-flight bytes it holds until
/// written (none for a refusal written before closing).
type Outgoing = (u64, MessageT, Option<Held>);

#[expect(
    clippy::too_many_lines,
    reason = "longer than 70 lines when the lint came in (issue 27): split it when it next changes"
)]
async fn connection(shard: Rc<Shard>, stream: TcpStream) {
    let peer = stream.peer_addr().ok();
    shard.count_native_connection(true);
    let (mut rd, mut wr) = stream.split();
    let (tx, rx) = local_channel::new_bounded::<Outgoing>(PIPELINE_DEPTH);
    let tx = Rc::new(tx);
    let running = Rc::new(glommio::sync::Semaphore::new(PIPELINE_DEPTH as u64));
    let writer = glommio::spawn_local(async move {
        let mut encoder = Encoder::new();
        while let Some((correlation_id, msg, held)) = rx.recv().await {
            let frame = encoder.frame(PROTOCOL_VERSION, correlation_id, &msg);
            drop(msg);
            if let Some(held) = &held {
                held.shrink_to(frame.len());
            }
            if wr.write_all(&frame).await.is_err() {
                break;
            }
            drop(held);
        }
        let _ = wr.close().await;
    });
    loop {
        if shard.stopping() {
            break;
        }
        let mut head = [0u8; FRAME_HEADER_BYTES];
        match crate::runtime::task::timeout(IDLE_TIMEOUT, rd.read_exact(&mut head)).await {
            Some(Ok(())) => {}
            _ => break,
        }
        let h = match FrameHeader::parse(&head, REQUEST_BYTES_MAX) {
            Ok(h) => h,
            Err(e) => {
                tracing::debug!(?peer, error = %e, "bad native frame: closing connection");
                break;
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
            let _ = tx.send((h.correlation_id, msg, None)).await;
            break;
        }
        let Some(held) = shard.reserve_request_bytes(h.body_bytes.max(1)).await else {
            break;
        };
        let mut body = vec![0u8; h.body_bytes];
        match crate::runtime::task::timeout(REQUEST_READ_TIMEOUT, rd.read_exact(&mut body)).await {
            Some(Ok(())) => {}
            _ => {
                tracing::debug!(?peer, "half-sent native frame: closing connection");
                break;
            }
        }
        let msg = match decode_body(&body) {
            Ok(m) => m,
            Err(e) => {
                tracing::debug!(?peer, error = %e, "malformed native body: closing connection");
                break;
            }
        };
        drop(body);
        let Ok(slot) = running.acquire_static_permit(1).await else {
            break;
        };
        let (s, tx) = (shard.clone(), tx.clone());
        shard.request_started();
        spawn_local(async move {
            let answer = crate::gateway::native::handle(&s, msg.body, &held).await;
            s.request_finished();
            if let Some(body) = answer {
                let _ = tx
                    .send((h.correlation_id, MessageT { body }, Some(held)))
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

fn error_message(code: i16, message: String) -> MessageT {
    MessageT {
        body: BodyT::ErrorResponse(Box::new(ErrorResponseT {
            error: error(code, message, false),
        })),
    }
}
