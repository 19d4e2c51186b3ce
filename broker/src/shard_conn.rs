//! Kafka connections on a shard: accept (SO_REUSEPORT, every shard accepts), read
//! length-prefixed frames, run requests concurrently, write responses in request order.
//!
//! Invariant: a length prefix is checked against `REQUEST_BYTES_MAX` before anything is
//! allocated for it; a framing error closes this connection only; at most
//! `PIPELINE_DEPTH` requests of one connection are in flight (then reading stops).

use std::rc::Rc;
use std::time::Duration;

use anyhow::Context;
use bytes::Bytes;
use futures::channel::oneshot;
use futures::io::{AsyncReadExt, AsyncWriteExt};
use glommio::channels::local_channel;
use glommio::net::{TcpListener, TcpStream};

use crate::config::REQUEST_BYTES_MAX;
use crate::kafka::{self, FramingError};
use crate::shard::{spawn_local, Shard};

/// Requests of one connection in flight before the reader waits (Kafka clients default
/// to 5 in-flight requests per connection; 64 leaves room for pipelining consumers).
pub const PIPELINE_DEPTH: usize = 64;
/// A connection with no request for this long is closed (Kafka's
/// `connections.max.idle.ms` default).
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(600);
/// A request whose length arrived must be complete within this (half-sent requests).
pub const REQUEST_READ_TIMEOUT: Duration = Duration::from_secs(30);
/// Request bytes a shard holds in memory at once; past it, connections stop reading
/// (backpressure). At least one largest request fits.
pub const IN_FLIGHT_BYTES_MAX: usize = 256 * 1024 * 1024;
const _: () = assert!(REQUEST_BYTES_MAX <= IN_FLIGHT_BYTES_MAX);

/// Accepts connections until `stop` fires.
pub async fn serve(shard: Rc<Shard>, stop: oneshot::Receiver<()>) -> anyhow::Result<()> {
    let addr = shard.config.kafka_addr;
    let listener = TcpListener::bind(addr)
        .map_err(std::io::Error::from)
        .with_context(|| {
            format!("cannot listen on {addr}; pick another address with --kafka-addr")
        })?;
    let mut stop = stop;
    loop {
        let accept = std::pin::pin!(listener.accept());
        match futures::future::select(accept, &mut stop).await {
            futures::future::Either::Left((Ok(stream), _)) => {
                let _ = stream.set_nodelay(true);
                spawn_local(connection(shard.clone(), stream));
            }
            futures::future::Either::Left((Err(e), _)) => {
                tracing::warn!(shard = shard.id, error = %e, "accept failed");
                crate::shard::sleep(Duration::from_millis(10)).await;
            }
            futures::future::Either::Right(_) => return Ok(()),
        }
    }
}

type Pending = glommio::Task<Result<Option<Bytes>, FramingError>>;

async fn connection(shard: Rc<Shard>, stream: TcpStream) {
    let peer = stream.peer_addr().ok();
    let host: Rc<str> = peer.map_or_else(|| "".into(), |p| format!("/{}", p.ip()).into());
    shard.count_connection(true);
    let (mut rd, mut wr) = stream.split();
    let (tx, rx) = local_channel::new_bounded::<Pending>(PIPELINE_DEPTH);
    let writer = glommio::spawn_local(async move {
        while let Some(task) = rx.recv().await {
            match task.await {
                Ok(Some(resp)) => {
                    if wr.write_all(&resp).await.is_err() {
                        break;
                    }
                }
                Ok(None) => {}
                Err(e) => {
                    tracing::debug!(error = %e, "closing connection after a framing error");
                    break;
                }
            }
        }
        let _ = wr.close().await;
    });
    loop {
        if shard.stopping() {
            break;
        }
        let mut len = [0u8; 4];
        match crate::shard::timeout(IDLE_TIMEOUT, rd.read_exact(&mut len)).await {
            Some(Ok(())) => {}
            Some(Err(_)) => break,
            None => {
                tracing::debug!(?peer, "idle connection closed");
                break;
            }
        }
        let n = i32::from_be_bytes(len);
        let Some(n) = usize::try_from(n)
            .ok()
            .filter(|&n| n > 0 && n <= REQUEST_BYTES_MAX)
        else {
            tracing::debug!(
                ?peer,
                len = n,
                "request length outside limits: closing connection"
            );
            break;
        };
        let Some(permit) = shard.reserve_request_bytes(n).await else {
            break;
        };
        let mut buf = vec![0u8; n];
        match crate::shard::timeout(REQUEST_READ_TIMEOUT, rd.read_exact(&mut buf)).await {
            Some(Ok(())) => {}
            Some(Err(_)) => break,
            None => {
                tracing::debug!(?peer, "half-sent request timed out: closing connection");
                break;
            }
        }
        let frame = Bytes::from(buf);
        shard.request_started();
        let s = shard.clone();
        let host = host.clone();
        let task = glommio::spawn_local(async move {
            let r = kafka::handle(&s, frame, &host).await;
            s.request_finished();
            drop(permit);
            r
        });
        if tx.send(task).await.is_err() {
            break;
        }
    }
    drop(tx);
    writer.await;
    shard.count_connection(false);
}
