//! One TCP connection to a broker port: pipelined requests matched to responses by
//! correlation id (responses may arrive out of order).
//!
//! Invariant: at most `max_in_flight` requests await a response on one connection (callers
//! wait for a slot); a frame longer than the limit the broker announced, or that does not
//! decode, closes the connection and fails every outstanding request with `Error::Closed`;
//! a closed connection is never reused (the client opens a new one).

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use strand_wire::native::generated::{BodyT, MessageT};
use strand_wire::native::{
    decode_body, split_trailer, Encoder, FrameError, FrameHeader, FRAME_BYTES_MAX,
    FRAME_HEADER_BYTES, PROTOCOL_VERSION,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::{mpsc, oneshot, OwnedSemaphorePermit, Semaphore};

use crate::client::ClientConfig;
use crate::error::{Error, Result};

/// Writes queued frames as they come, flushing whenever the queue is empty (a TLS stream
/// holds what is written until flushed); a failure fails the connection.
async fn write_frames<W: tokio::io::AsyncWrite + Unpin>(
    mut wr: W,
    mut rx: mpsc::Receiver<Bytes>,
    fail: impl Fn(String),
) {
    while let Some(mut frame) = rx.recv().await {
        loop {
            if let Err(e) = wr.write_all(&frame).await {
                return fail(format!("write failed: {e}"));
            }
            match rx.try_recv() {
                Ok(next) => frame = next,
                Err(_) => break,
            }
        }
        if let Err(e) = wr.flush().await {
            return fail(format!("write failed: {e}"));
        }
    }
    let _ = wr.shutdown().await;
}

/// The answer a frame from the broker carries (an error for another protocol version), or
/// why the frame is not one (the connection then fails).
fn answer_of(
    h: &FrameHeader,
    body: Vec<u8>,
) -> std::result::Result<Result<(BodyT, Bytes)>, FrameError> {
    let (message, trailer) = split_trailer(h, Bytes::from(body))?;
    let m = decode_body(&message)?;
    if h.version == PROTOCOL_VERSION {
        return Ok(Ok((m.body, trailer)));
    }
    Ok(Err(match m.body {
        BodyT::ErrorResponse(e) => Error::UnsupportedVersion(
            e.error
                .and_then(|e| e.message)
                .unwrap_or_else(|| format!("broker speaks version {}", h.version)),
        ),
        _ => Error::UnsupportedVersion(format!(
            "broker answered in version {}, we speak {PROTOCOL_VERSION}",
            h.version
        )),
    }))
}

/// Frames queued for the socket writer before senders wait.
const WRITE_QUEUE_FRAMES: usize = 256;

/// Waits for an answer: its body and its frame's trailer (empty without one).
type Waiter = oneshot::Sender<Result<(BodyT, Bytes)>>;

struct Pending {
    waiters: HashMap<u64, Waiter>,
    closed: Option<String>,
}

/// A connection; cheap to share (`Arc`).
pub(crate) struct Connection {
    addr: SocketAddr,
    writer: mpsc::Sender<Bytes>,
    pending: Arc<Mutex<Pending>>,
    next_correlation_id: AtomicU64,
    slots: Arc<Semaphore>,
    encoder: Mutex<Encoder>,
    closed: Arc<AtomicBool>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // A panic while holding these short critical sections leaves plain data; go on.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Connection {
    /// Connects to `addr` (TLS first when `config.tls` is set).
    pub(crate) async fn open(addr: SocketAddr, config: &ClientConfig) -> Result<Arc<Connection>> {
        let connect_error = |reason: String| Error::Connect {
            addr: addr.to_string(),
            reason,
        };
        let connect = tokio::time::timeout(config.connect_timeout, TcpStream::connect(addr)).await;
        let stream = match connect {
            Ok(Ok(s)) => s,
            Ok(Err(e)) => return Err(connect_error(e.to_string())),
            Err(_) => return Err(connect_error("timed out".into())),
        };
        let _ = stream.set_nodelay(true);
        let Some(tls) = &config.tls else {
            let (rd, wr) = stream.into_split();
            return Ok(Connection::start(
                addr,
                rd,
                wr,
                config.max_in_flight_per_connection,
            ));
        };
        let name = rustls::pki_types::ServerName::try_from(config.server_name().to_string())
            .map_err(|e| Error::Tls(format!("server name {}: {e}", config.server_name())))?;
        let handshake = tokio_rustls::TlsConnector::from(tls.clone()).connect(name, stream);
        let stream = match tokio::time::timeout(config.connect_timeout, handshake).await {
            Ok(Ok(s)) => s,
            Ok(Err(e)) => return Err(Error::Tls(format!("handshake with {addr}: {e}"))),
            Err(_) => return Err(connect_error("TLS handshake timed out".into())),
        };
        let (rd, wr) = tokio::io::split(stream);
        Ok(Connection::start(
            addr,
            rd,
            wr,
            config.max_in_flight_per_connection,
        ))
    }

    /// Runs the connection's writer and reader tasks over a connected stream.
    fn start<R, W>(addr: SocketAddr, rd: R, wr: W, max_in_flight: usize) -> Arc<Connection>
    where
        R: tokio::io::AsyncRead + Unpin + Send + 'static,
        W: tokio::io::AsyncWrite + Unpin + Send + 'static,
    {
        let (tx, rx) = mpsc::channel::<Bytes>(WRITE_QUEUE_FRAMES);
        let pending = Arc::new(Mutex::new(Pending {
            waiters: HashMap::new(),
            closed: None,
        }));
        let closed = Arc::new(AtomicBool::new(false));
        let fail_all = {
            let pending = pending.clone();
            let closed = closed.clone();
            move |reason: String| {
                closed.store(true, Ordering::Release);
                let mut p = lock(&pending);
                p.closed.get_or_insert(reason.clone());
                for (_, w) in p.waiters.drain() {
                    let _ = w.send(Err(Error::Closed {
                        addr,
                        reason: reason.clone(),
                    }));
                }
            }
        };
        let fail_writer = fail_all.clone();
        tokio::spawn(write_frames(wr, rx, fail_writer));
        let reader_pending = pending.clone();
        tokio::spawn(async move {
            let mut rd = rd;
            let reason = loop {
                let mut head = [0u8; FRAME_HEADER_BYTES];
                if let Err(e) = rd.read_exact(&mut head).await {
                    break format!("read failed: {e}");
                }
                let h = match FrameHeader::parse(&head, FRAME_BYTES_MAX) {
                    Ok(h) => h,
                    Err(e) => break format!("bad frame from broker: {e}"),
                };
                let mut body = vec![0u8; h.body_bytes];
                if let Err(e) = rd.read_exact(&mut body).await {
                    break format!("read failed: {e}");
                }
                let answer = match answer_of(&h, body) {
                    Ok(answer) => answer,
                    Err(e) => break format!("undecodable frame from broker: {e}"),
                };
                let waiter = lock(&reader_pending).waiters.remove(&h.correlation_id);
                if let Some(w) = waiter {
                    let _ = w.send(answer);
                }
            };
            fail_all(reason);
        });
        Arc::new(Connection {
            addr,
            writer: tx,
            pending,
            next_correlation_id: AtomicU64::new(1),
            slots: Arc::new(Semaphore::new(max_in_flight.max(1))),
            encoder: Mutex::new(Encoder::new()),
            closed,
        })
    }

    /// The peer address.
    pub(crate) fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Whether the connection failed (a new one is needed).
    pub(crate) fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }

    fn frame(&self, correlation_id: u64, body: BodyT) -> Bytes {
        lock(&self.encoder).frame(PROTOCOL_VERSION, correlation_id, &MessageT { body })
    }

    /// Sends `body` and waits for its answer (an `ErrorResponse` becomes an `Err`).
    pub(crate) async fn request(self: &Arc<Self>, body: BodyT, timeout: Duration) -> Result<BodyT> {
        self.request_with_trailer(body, timeout)
            .await
            .map(|(body, _)| body)
    }

    /// [`Connection::request`], with the answer's frame trailer (a fetch's records).
    pub(crate) async fn request_with_trailer(
        self: &Arc<Self>,
        body: BodyT,
        timeout: Duration,
    ) -> Result<(BodyT, Bytes)> {
        self.send_request(body).await?.answer(timeout).await
    }

    /// Queues `body` for the socket once a slot is free and returns its answer to await.
    /// Requests queued one after another (each call awaited before the next) leave in
    /// that order: a producer's batches of one partition reach the broker in sequence.
    pub(crate) async fn send_request(self: &Arc<Self>, body: BodyT) -> Result<Sent> {
        let slot = self
            .slots
            .clone()
            .acquire_owned()
            .await
            .map_err(|_| self.closed_error())?;
        let id = self.next_correlation_id.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = oneshot::channel();
        {
            let mut p = lock(&self.pending);
            if let Some(reason) = &p.closed {
                return Err(Error::Closed {
                    addr: self.addr,
                    reason: reason.clone(),
                });
            }
            p.waiters.insert(id, tx);
        }
        let frame = self.frame(id, body);
        if self.writer.send(frame).await.is_err() {
            lock(&self.pending).waiters.remove(&id);
            return Err(self.closed_error());
        }
        Ok(Sent {
            conn: self.clone(),
            id,
            rx,
            _slot: slot,
        })
    }

    /// Sends `body` expecting no answer (produce with acks 0).
    pub(crate) async fn send_only(&self, body: BodyT) -> Result<()> {
        let id = self.next_correlation_id.fetch_add(1, Ordering::Relaxed);
        let frame = self.frame(id, body);
        self.writer
            .send(frame)
            .await
            .map_err(|_| self.closed_error())
    }

    fn closed_error(&self) -> Error {
        Error::Closed {
            addr: self.addr,
            reason: lock(&self.pending)
                .closed
                .clone()
                .unwrap_or_else(|| "connection closed".into()),
        }
    }
}

/// A request on its way: [`Sent::answer`] waits for what the broker says. Holds one of
/// the connection's in-flight slots until answered or dropped.
pub(crate) struct Sent {
    conn: Arc<Connection>,
    id: u64,
    rx: oneshot::Receiver<Result<(BodyT, Bytes)>>,
    _slot: OwnedSemaphorePermit,
}

impl Sent {
    /// The answer and its frame trailer, or `Error::Timeout` after `timeout` (an
    /// `ErrorResponse` becomes an `Err`).
    pub(crate) async fn answer(self, timeout: Duration) -> Result<(BodyT, Bytes)> {
        let conn = &self.conn;
        let answer = match tokio::time::timeout(timeout, self.rx).await {
            Ok(Ok(a)) => a,
            Ok(Err(_)) => Err(conn.closed_error()),
            Err(_) => {
                lock(&conn.pending).waiters.remove(&self.id);
                Err(Error::Timeout {
                    timeout_ms: u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX),
                })
            }
        }?;
        match answer {
            (BodyT::ErrorResponse(e), _) => Err(e
                .error
                .as_deref()
                .map(Error::from_wire)
                .unwrap_or_else(|| Error::Protocol("error response without an error".into()))),
            other => Ok(other),
        }
    }
}
