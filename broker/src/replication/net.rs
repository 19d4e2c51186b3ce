//! The replication RPC between nodes: one outgoing connection per (peer node, shard) fed by
//! a bounded queue (`RpcOut`, the driver's `Transport`), the listener on this shard's RPC
//! port, and the reading side of a peer connection (a checked `Hello`, then batches and
//! control frames). With `rpc_tls_*` every connection is mutual TLS: the dialling node
//! verifies the peer's certificate against the cluster CA and the address it dialled, the
//! listening one requires a client certificate of the cluster CA. A home of glommio names
//! (STYLE.md 1).
//!
//! Invariant: at most `PEER_QUEUE_BYTES_MAX` bytes wait for one peer (then batches are
//! dropped and counted: Raft retries); a frame is checked against `strand_raft::rpc`'s
//! limits before anything is allocated for it; a connection whose `Hello` names another
//! node, shard or cluster is closed; with `rpc_tls_*`, no frame is read from or written to
//! a peer before its certificate has been verified.

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::net::SocketAddr;
use std::rc::{Rc, Weak};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use futures::channel::mpsc;
use futures::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use futures::StreamExt;
use glommio::net::{TcpListener, TcpStream};
use strand_raft::rpc::{self, Hello, RpcFrame};
use strand_raft::types::ShardId;
use strand_raft::{MessageBatch, NodeId, Transport};

use super::{ControlMsg, Replicator};
use crate::common::metrics::add;
use crate::security::tls::{Reloading, RpcConfigs};

/// Bytes queued for one peer connection before batches are dropped.
pub const PEER_QUEUE_BYTES_MAX: usize = 64 * 1024 * 1024;
/// Wait between attempts to connect to a peer.
pub const PEER_RECONNECT: Duration = Duration::from_millis(100);
/// Longest a connect attempt waits.
pub const PEER_CONNECT_TIMEOUT: Duration = Duration::from_secs(1);
/// Bytes read from a peer socket per call.
const READ_CHUNK_BYTES: usize = 256 * 1024;
/// Longest a TLS handshake between nodes may take.
const PEER_TLS_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(5);
/// Refused TLS peers are logged at most once per this interval (per shard).
const PEER_TLS_REFUSAL_LOG_INTERVAL: Duration = Duration::from_secs(10);

/// The node-to-node TLS configurations of a shard (`rpc_tls_*`), read again when their
/// files change.
pub type RpcTls = Rc<Reloading<RpcConfigs>>;

/// The configurations in service for a new connection, after reading the files again if
/// they changed (a change that does not load keeps the previous ones, warned once).
pub fn rpc_configs(tls: &Reloading<RpcConfigs>) -> RpcConfigs {
    match tls.reload_if_changed() {
        Ok(false) => {}
        Ok(true) => {
            tracing::info!("node TLS files changed: new connections between nodes use them")
        }
        Err(e) => tracing::warn!(
            error = %e,
            "node TLS files changed but do not load: still using the previous ones"
        ),
    }
    tls.current()
}

/// One peer connection's queue.
pub(super) struct PeerQueue {
    tx: mpsc::UnboundedSender<Bytes>,
    queued_bytes: Rc<Cell<usize>>,
}

/// Sends each batch to its node's connection task (see the module doc).
pub struct RpcOut {
    pub(super) me: NodeId,
    pub(super) shard: usize,
    pub(super) cluster_tag: u64,
    pub(super) peers: HashMap<NodeId, SocketAddr>,
    /// The seeds (`--seeds`): peers even before they register.
    pub(super) seeds: Vec<NodeId>,
    pub(super) queues: HashMap<NodeId, PeerQueue>,
    /// Frames dropped on the way out (see `Replicator::rpc_dropped_frames`).
    pub(super) dropped: Rc<Cell<u64>>,
    /// Times follower acknowledgements (shared with the `Replicator`, which sees them).
    pub(super) acks: Rc<RefCell<crate::replication::ack_timer::AckTimer>>,
    /// Mutual TLS to peers (`rpc_tls_*`).
    pub(super) tls: Option<RpcTls>,
    /// Set, and the replicator woken, whenever a connection to a peer is established
    /// (see `Replicator::announce_all_due`).
    pub(super) connected: Connected,
}

/// The replicator's "a peer connection began" flag and its wake-up.
pub(super) type Connected = (Rc<Cell<bool>>, mpsc::Sender<()>);

impl RpcOut {
    fn queue(&mut self, to: NodeId) -> Option<&PeerQueue> {
        if !self.queues.contains_key(&to) {
            let base = *self.peers.get(&to)?;
            let addr = SocketAddr::new(base.ip(), base.port() + self.shard as u16);
            let (tx, rx) = mpsc::unbounded();
            let queued_bytes = Rc::new(Cell::new(0));
            let hello = Hello {
                from_node: self.me,
                to_node: to,
                to_shard: ShardId(self.shard as u32),
                cluster_tag: self.cluster_tag,
            };
            crate::runtime::task::spawn_local(peer_writer(
                PeerLink {
                    addr,
                    hello,
                    tls: self.tls.clone(),
                },
                rx,
                queued_bytes.clone(),
                self.dropped.clone(),
                self.connected.clone(),
            ));
            self.queues.insert(to, PeerQueue { tx, queued_bytes });
        }
        self.queues.get(&to)
    }
}

impl RpcOut {
    /// Queues a control frame for `to` (dropped like a batch when the queue is full).
    pub(super) fn send_control(&mut self, to: NodeId, body: Bytes) {
        self.enqueue(to, encode(&RpcFrame::Control(body)));
    }

    /// Queues encoded frames for `to`. For an unknown peer, a full queue or a stopped
    /// writer they are dropped: Raft resends what matters.
    fn enqueue(&mut self, to: NodeId, frame: Bytes) {
        let dropped = self.dropped.clone();
        let Some(q) = self.queue(to) else {
            add(&dropped, 1);
            return;
        };
        if q.queued_bytes.get() + frame.len() > PEER_QUEUE_BYTES_MAX {
            add(&dropped, 1);
            return;
        }
        q.queued_bytes.set(q.queued_bytes.get() + frame.len());
        if q.tx.unbounded_send(frame).is_err() {
            add(&dropped, 1);
        }
    }
}

impl Transport for RpcOut {
    fn send(&mut self, batch: MessageBatch) {
        let to = batch.to;
        self.acks
            .borrow_mut()
            .sent(&batch, crate::common::clock::now());
        self.enqueue(to, encode(&RpcFrame::Batch(batch)));
    }
}

/// Where and how one outgoing peer connection goes.
struct PeerLink {
    addr: SocketAddr,
    hello: Hello,
    tls: Option<RpcTls>,
}

impl PeerLink {
    /// A connection to the peer shard, TLS established when configured: `None` when it
    /// cannot be had now.
    async fn connect(&self) -> Option<PeerStream> {
        let conn =
            crate::runtime::task::timeout(PEER_CONNECT_TIMEOUT, TcpStream::connect(self.addr))
                .await?
                .ok()?;
        let _ = conn.set_nodelay(true);
        let Some(tls) = &self.tls else {
            return Some(PeerStream::Plain(conn));
        };
        let connector = futures_rustls::TlsConnector::from(rpc_configs(tls).client);
        let name = rustls::pki_types::ServerName::IpAddress(self.addr.ip().into());
        match crate::runtime::task::timeout(
            PEER_TLS_HANDSHAKE_TIMEOUT,
            connector.connect(name, conn),
        )
        .await
        {
            Some(Ok(s)) => Some(PeerStream::Tls(Box::new(s))),
            Some(Err(e)) => {
                tracing::debug!(addr = %self.addr, error = %e, "TLS to peer failed");
                None
            }
            None => None,
        }
    }
}

/// An outgoing peer connection.
enum PeerStream {
    Plain(TcpStream),
    Tls(Box<futures_rustls::client::TlsStream<TcpStream>>),
}

/// Keeps one connection to a peer shard and writes queued frames to it; frames queued
/// while disconnected are dropped (Raft resends what matters) and counted in `dropped`.
async fn peer_writer(
    link: PeerLink,
    mut rx: mpsc::UnboundedReceiver<Bytes>,
    queued_bytes: Rc<Cell<usize>>,
    dropped: Rc<Cell<u64>>,
    connected: Connected,
) {
    let hello = encode(&RpcFrame::Hello(link.hello));
    loop {
        let Some(stream) = link.connect().await else {
            // Drain what queued meanwhile: stale Raft messages are worse than none. A
            // closed queue is a forgotten peer (removed from the cluster): stop.
            loop {
                match rx.try_recv() {
                    Ok(f) => {
                        queued_bytes.set(queued_bytes.get().saturating_sub(f.len()));
                        add(&dropped, 1);
                    }
                    Err(e) if e.is_closed() => return,
                    Err(_) => break,
                }
            }
            crate::runtime::task::sleep(PEER_RECONNECT).await;
            continue;
        };
        let sent = match stream {
            PeerStream::Plain(s) => {
                write_frames(s, &hello, &mut rx, &queued_bytes, &connected).await
            }
            PeerStream::Tls(s) => {
                write_frames(*s, &hello, &mut rx, &queued_bytes, &connected).await
            }
        };
        match sent {
            Ok(()) => return,
            Err(e) => {
                add(&dropped, 1);
                tracing::debug!(addr = %link.addr, error = %e, "peer connection lost; reconnecting");
            }
        }
    }
}

/// Writes the hello, then queued frames as they come (flushed whenever the queue is
/// empty), until the queue closes (`Ok`) or the connection fails.
async fn write_frames<S: AsyncWrite + Unpin>(
    mut stream: S,
    hello: &[u8],
    rx: &mut mpsc::UnboundedReceiver<Bytes>,
    queued_bytes: &Cell<usize>,
    (connected, wake): &Connected,
) -> std::io::Result<()> {
    stream.write_all(hello).await?;
    stream.flush().await?;
    connected.set(true);
    let _ = wake.clone().try_send(());
    while let Some(mut frame) = rx.next().await {
        loop {
            queued_bytes.set(queued_bytes.get().saturating_sub(frame.len()));
            stream.write_all(&frame).await?;
            match rx.try_recv() {
                Ok(next) => frame = next,
                Err(_) => break,
            }
        }
        stream.flush().await?;
    }
    Ok(())
}

/// A stable tag of the cluster membership, so that nodes configured for another cluster
/// refuse each other.
pub fn cluster_tag(seeds: &[(i32, SocketAddr)]) -> u64 {
    let text: Vec<String> = seeds.iter().map(|(id, _)| id.to_string()).collect();
    u64::from(crc32c::crc32c(text.join(",").as_bytes()))
}

impl Replicator {
    /// Accepts peers' connections on this shard's RPC port and steps their batches.
    pub fn listen(self: &Rc<Self>, addr: SocketAddr) -> anyhow::Result<()> {
        let listener = TcpListener::bind(addr)
            .map_err(|e| anyhow::anyhow!("cannot listen for RPC on {addr}: {e}"))?;
        tracing::info!(shard = self.shard, %addr, tls = self.tls.is_some(), "RPC listening");
        let me = Rc::downgrade(self);
        let refusals = Rc::new(crate::common::logging::RateLimit::new(
            PEER_TLS_REFUSAL_LOG_INTERVAL,
        ));
        crate::runtime::task::spawn_local(async move {
            loop {
                let stream = match listener.accept().await {
                    Ok(s) => s,
                    Err(e) => {
                        tracing::warn!(error = %e, "RPC accept failed");
                        crate::runtime::task::sleep(PEER_RECONNECT).await;
                        continue;
                    }
                };
                let me = me.clone();
                let refusals = refusals.clone();
                crate::runtime::task::spawn_local(async move {
                    if let Err(e) = accepted(me, stream, &refusals).await {
                        tracing::debug!(error = %e, "RPC connection closed");
                    }
                });
            }
        });
        Ok(())
    }
}

/// Serves an accepted peer connection, after its TLS handshake when `rpc_tls_*` is set (a
/// peer without a certificate of the cluster CA is counted, logged rate-limited and
/// closed).
async fn accepted(
    me: Weak<Replicator>,
    stream: TcpStream,
    refusals: &crate::common::logging::RateLimit,
) -> anyhow::Result<()> {
    let _ = stream.set_nodelay(true);
    let Some(tls) = me.upgrade().and_then(|r| r.tls.clone()) else {
        return serve_peer(me, stream).await;
    };
    let peer = stream.peer_addr().ok();
    let acceptor = futures_rustls::TlsAcceptor::from(rpc_configs(&tls).server);
    drop(tls);
    match crate::runtime::task::timeout(PEER_TLS_HANDSHAKE_TIMEOUT, acceptor.accept(stream)).await {
        Some(Ok(s)) => serve_peer(me, s).await,
        refused => {
            let why = match refused {
                Some(Err(e)) => e.to_string(),
                _ => "the handshake timed out".to_string(),
            };
            if let Some(rep) = me.upgrade() {
                add(&rep.rpc_tls_refused, 1);
            }
            if let Some(suppressed) = refusals.allow(crate::common::clock::now()) {
                tracing::warn!(
                    ?peer,
                    suppressed,
                    "node connection refused (TLS between nodes): {why}"
                );
            }
            Ok(())
        }
    }
}

/// Reads frames from one peer connection: a Hello first (checked), then batches.
async fn serve_peer<S: AsyncRead + AsyncWrite + Unpin>(
    me: Weak<Replicator>,
    mut stream: S,
) -> anyhow::Result<()> {
    let mut buf = BytesMut::with_capacity(READ_CHUNK_BYTES);
    let mut chunk = vec![0u8; READ_CHUNK_BYTES];
    let mut peer: Option<NodeId> = None;
    loop {
        while let Some(n) = rpc::frame_len(&buf)? {
            if buf.len() < n {
                buf.reserve(n - buf.len());
                break;
            }
            let frame = buf.split_to(n);
            let Some(rep) = me.upgrade() else {
                return Ok(());
            };
            match rpc::decode(&frame)? {
                RpcFrame::Hello(h) => {
                    if h.to_node != rep.me
                        || h.to_shard.0 as usize != rep.shard
                        || h.cluster_tag != rep.cluster_tag
                    {
                        anyhow::bail!(
                            "peer hello for node {} shard {} tag {:x}: this is node {} shard {} tag {:x}",
                            h.to_node, h.to_shard.0, h.cluster_tag, rep.me, rep.shard, rep.cluster_tag
                        );
                    }
                    peer = Some(h.from_node);
                    rep.peer_connected(h.from_node);
                }
                RpcFrame::Control(body) => match serde_json::from_slice::<ControlMsg>(&body)? {
                    ControlMsg::Leaders(changes) => {
                        if peer.is_none_or(|p| changes.iter().any(|c| c.leader as u64 != p.0)) {
                            anyhow::bail!("leaders announced by {peer:?} for another node");
                        }
                        if let Some(f) = rep.on_remote_leaders.borrow().as_ref() {
                            f(changes);
                        }
                    }
                    ControlMsg::Join(req) => {
                        let handler = rep.on_join.borrow().clone();
                        drop(rep);
                        let Some(handler) = handler else {
                            anyhow::bail!("join request on a shard that admits none");
                        };
                        let reply = handler(req).await;
                        stream.write_all(&encode(&RpcFrame::Control(reply))).await?;
                        stream.flush().await?;
                    }
                },
                RpcFrame::Batch(b) => {
                    if peer != Some(b.from) || b.to != rep.me {
                        anyhow::bail!(
                            "batch from {} to {} on a connection from {peer:?}",
                            b.from,
                            b.to
                        );
                    }
                    rep.step(b);
                }
            }
        }
        let n = stream.read(&mut chunk).await?;
        if n == 0 {
            return Ok(());
        }
        buf.extend_from_slice(&chunk[..n]);
    }
}

/// One frame's bytes (a batch over a frame's limits becomes several frames back to back).
fn encode(frame: &RpcFrame) -> Bytes {
    let mut out = BytesMut::new();
    rpc::encode_into(frame, &mut out);
    out.freeze()
}
