//! One pipelined Kafka connection: requests are written in order and their responses
//! (which Kafka returns in request order) are matched FIFO by a reader task.
//!
//! Invariant: at most `max_in_flight` requests expecting a response are outstanding; the
//! slot is freed by the reader the moment the response frame is read, and the response
//! carries that instant, so a slow poller never inflates a measured latency. A response
//! whose correlation id is not the oldest outstanding one closes the connection and fails
//! every outstanding request. Nothing here knows about records or load.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Instant;

use bytes::{Bytes, BytesMut};
use kafka_protocol::messages::{RequestHeader, ResponseHeader};
use kafka_protocol::protocol::{Decodable, Encodable, HeaderVersion, Request, StrBytes};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::{oneshot, OwnedSemaphorePermit, Semaphore};

use crate::driver::DriverError;

/// Largest response frame we allocate for: a fetch asks for at most
/// [`crate::kafka_driver::FETCH_BYTES_MAX`]; anything past this is a broken peer.
pub const RESPONSE_BYTES_MAX: usize = 128 << 20;
/// Client id sent in every request header.
const CLIENT_ID: &str = "strand-bench";

type Answer = Result<(Bytes, Instant), DriverError>;

/// A connection's read side (TCP, or TLS over it).
type Reader = Box<dyn AsyncRead + Send + Unpin>;
/// A connection's write side.
type Writer = Box<dyn AsyncWrite + Send + Unpin>;

/// The TLS client configuration every connection uses, once `use_tls` set it.
static TLS: OnceLock<Arc<rustls::ClientConfig>> = OnceLock::new();

/// Makes every later connection TLS, trusting the CA certificates of the PEM file `ca`
/// (the broker's SSL listener; `--tls-ca`).
#[expect(
    deprecated,
    reason = "ring's provider, as the broker's (see security::tls)"
)]
pub fn use_tls(ca: &std::path::Path) -> anyhow::Result<()> {
    use rustls::pki_types::pem::PemObject;
    let mut roots = rustls::RootCertStore::empty();
    for c in rustls::pki_types::CertificateDer::pem_file_iter(ca)
        .map_err(|e| anyhow::anyhow!("{}: {e}", ca.display()))?
    {
        roots.add(c.map_err(|e| anyhow::anyhow!("{}: {e}", ca.display()))?)?;
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_root_certificates(roots)
        .with_no_client_auth();
    let _ = TLS.set(Arc::new(config));
    Ok(())
}

/// Connects to `addr` (TCP_NODELAY), with TLS when `use_tls` was called.
async fn open(addr: &str) -> std::io::Result<(Reader, Writer)> {
    let stream = TcpStream::connect(addr).await?;
    stream.set_nodelay(true)?;
    let Some(config) = TLS.get() else {
        let (r, w) = stream.into_split();
        return Ok((Box::new(r), Box::new(w)));
    };
    let host = addr.rsplit_once(':').map_or(addr, |(h, _)| h);
    let host = host
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_string();
    let name = rustls::pki_types::ServerName::try_from(host)
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))?;
    let tls = tokio_rustls::TlsConnector::from(config.clone())
        .connect(name, stream)
        .await?;
    let (r, w) = tokio::io::split(tls);
    Ok((Box::new(r), Box::new(w)))
}

struct Pending {
    correlation_id: i32,
    tx: oneshot::Sender<Answer>,
    /// Held until the response is read: the in-flight slot.
    _slot: OwnedSemaphorePermit,
}

#[derive(Default)]
struct PendingQueue {
    queue: VecDeque<Pending>,
    /// Set when the reader ended: later requests fail at once.
    closed: bool,
}

/// A connection to one broker.
pub struct Conn {
    addr: String,
    writer: tokio::sync::Mutex<Writer>,
    pending: Arc<Mutex<PendingQueue>>,
    slots: Arc<Semaphore>,
    next_correlation_id: AtomicI32,
    reader: tokio::task::JoinHandle<()>,
}

impl Drop for Conn {
    fn drop(&mut self) {
        self.reader.abort();
    }
}

/// A response not yet read: resolves to its frame (after the header) and arrival time.
pub struct Reply {
    rx: oneshot::Receiver<Answer>,
    addr: String,
}

impl Reply {
    /// Waits for the response frame.
    pub async fn wait(self) -> Answer {
        match self.rx.await {
            Ok(a) => a,
            Err(_) => Err(DriverError::ConnectionClosed { addr: self.addr }),
        }
    }
}

impl Conn {
    /// Connects (TCP_NODELAY; TLS after `use_tls`) and starts the reader task.
    pub async fn connect(addr: &str, max_in_flight: usize) -> Result<Conn, DriverError> {
        let io = |source| DriverError::Io {
            addr: addr.to_string(),
            source,
        };
        let (r, w) = open(addr).await.map_err(io)?;
        let pending = Arc::new(Mutex::new(PendingQueue::default()));
        let reader = tokio::spawn(read_loop(r, pending.clone(), addr.to_string()));
        Ok(Conn {
            addr: addr.to_string(),
            writer: tokio::sync::Mutex::new(w),
            pending,
            slots: Arc::new(Semaphore::new(max_in_flight.max(1))),
            next_correlation_id: AtomicI32::new(1),
            reader,
        })
    }

    /// Waits for an in-flight slot, writes `req` at `version`, and returns the reply to
    /// wait for (`None` when `expect_response` is false: acks=0 produce), with the instant
    /// the write finished.
    pub async fn send<R: Request>(
        &self,
        req: &R,
        version: i16,
        expect_response: bool,
    ) -> Result<(Option<Reply>, Instant), DriverError> {
        let slot = self.slots.clone().acquire_owned().await.map_err(|_| {
            DriverError::ConnectionClosed {
                addr: self.addr.clone(),
            }
        })?;
        let correlation_id = self.next_correlation_id.fetch_add(1, Ordering::Relaxed);
        let frame = encode_request(req, version, correlation_id)?;
        let mut writer = self.writer.lock().await;
        let rx = if expect_response {
            let (tx, rx) = oneshot::channel();
            let mut p = self
                .pending
                .lock()
                .expect("pending queue lock is never poisoned");
            if p.closed {
                return Err(DriverError::ConnectionClosed {
                    addr: self.addr.clone(),
                });
            }
            // Queued before the write: the response cannot arrive before its entry.
            p.queue.push_back(Pending {
                correlation_id,
                tx,
                _slot: slot,
            });
            Some(rx)
        } else {
            drop(slot);
            None
        };
        // Flushed: a TLS stream may hold the end of the frame.
        let written = async {
            writer.write_all(&frame).await?;
            writer.flush().await
        };
        written.await.map_err(|source| DriverError::Io {
            addr: self.addr.clone(),
            source,
        })?;
        let written_at = Instant::now();
        drop(writer);
        let reply = rx.map(|rx| Reply {
            rx,
            addr: self.addr.clone(),
        });
        Ok((reply, written_at))
    }

    /// Sends `req` and decodes its response.
    pub async fn request<R: Request>(
        &self,
        req: &R,
        version: i16,
    ) -> Result<R::Response, DriverError> {
        let (reply, _) = self.send(req, version, true).await?;
        let reply = reply.expect("a reply was asked for");
        let (frame, _) = reply.wait().await?;
        decode_response::<R>(frame, version)
    }
}

/// Length prefix, request header and body.
pub fn encode_request<R: Request>(
    req: &R,
    version: i16,
    correlation_id: i32,
) -> Result<BytesMut, DriverError> {
    let header = RequestHeader::default()
        .with_request_api_key(R::KEY)
        .with_request_api_version(version)
        .with_correlation_id(correlation_id)
        .with_client_id(Some(StrBytes::from_static_str(CLIENT_ID)));
    let mut buf = BytesMut::with_capacity(256);
    buf.extend_from_slice(&[0u8; 4]);
    header
        .encode(&mut buf, R::header_version(version))
        .map_err(|e| DriverError::Protocol(format!("encoding request header: {e}")))?;
    req.encode(&mut buf, version)
        .map_err(|e| DriverError::Protocol(format!("encoding api {} v{version}: {e}", R::KEY)))?;
    let body_len = i32::try_from(buf.len() - 4)
        .map_err(|_| DriverError::Protocol(format!("request of {} bytes", buf.len())))?;
    buf[..4].copy_from_slice(&body_len.to_be_bytes());
    Ok(buf)
}

/// Decodes a response frame (header included) of `R` at `version`.
pub fn decode_response<R: Request>(
    mut frame: Bytes,
    version: i16,
) -> Result<R::Response, DriverError> {
    ResponseHeader::decode(&mut frame, R::Response::header_version(version))
        .map_err(|e| DriverError::Protocol(format!("response header: {e}")))?;
    R::Response::decode(&mut frame, version)
        .map_err(|e| DriverError::Protocol(format!("api {} v{version} response: {e}", R::KEY)))
}

async fn read_loop(mut r: Reader, pending: Arc<Mutex<PendingQueue>>, addr: String) {
    let why = loop {
        let mut len = [0u8; 4];
        if let Err(e) = r.read_exact(&mut len).await {
            break DriverError::Io {
                addr: addr.clone(),
                source: e,
            };
        }
        let n = i32::from_be_bytes(len);
        let Some(n) = usize::try_from(n)
            .ok()
            .filter(|&n| (4..=RESPONSE_BYTES_MAX).contains(&n))
        else {
            break DriverError::Protocol(format!("response length {n} from {addr}"));
        };
        let mut buf = vec![0u8; n];
        if let Err(e) = r.read_exact(&mut buf).await {
            break DriverError::Io {
                addr: addr.clone(),
                source: e,
            };
        }
        let at = Instant::now();
        let mut id = [0u8; 4];
        id.copy_from_slice(&buf[..4]);
        let correlation_id = i32::from_be_bytes(id);
        let next = pending
            .lock()
            .expect("pending queue lock is never poisoned")
            .queue
            .pop_front();
        match next {
            Some(p) if p.correlation_id == correlation_id => {
                // The requester may have stopped waiting; that is its business.
                let _ = p.tx.send(Ok((Bytes::from(buf), at)));
            }
            Some(p) => {
                let _ = p.tx.send(Err(DriverError::Protocol(format!(
                    "correlation id {correlation_id} from {addr}, expected {}",
                    p.correlation_id
                ))));
                break DriverError::Protocol("responses out of order".to_string());
            }
            None => break DriverError::Protocol(format!("unsolicited response from {addr}")),
        }
    };
    let mut p = pending
        .lock()
        .expect("pending queue lock is never poisoned");
    p.closed = true;
    for waiting in p.queue.drain(..) {
        let _ = waiting.tx.send(Err(match &why {
            DriverError::Protocol(s) => DriverError::Protocol(s.clone()),
            _ => DriverError::ConnectionClosed { addr: addr.clone() },
        }));
    }
}
