//! The replication RPC between nodes: one outgoing connection per (peer node, shard) fed by
//! a bounded queue (`RpcOut`, the driver's `Transport`), the listener on this shard's RPC
//! port, and the reading side of a peer connection (a checked `Hello`, then batches and
//! control frames). A home of glommio names (STYLE.md 1).
//!
//! Invariant: at most `PEER_QUEUE_BYTES_MAX` bytes wait for one peer (then batches are
//! dropped and counted: Raft retries); a frame is checked against `strand_raft::rpc`'s
//! limits before anything is allocated for it; a connection whose `Hello` names another
//! node, shard or cluster is closed.

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::net::SocketAddr;
use std::rc::{Rc, Weak};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use futures::channel::mpsc;
use futures::io::{AsyncReadExt, AsyncWriteExt};
use futures::StreamExt;
use glommio::net::{TcpListener, TcpStream};
use strand_raft::rpc::{self, Hello, RpcFrame};
use strand_raft::types::ShardId;
use strand_raft::{MessageBatch, NodeId, Transport};

use super::{ControlMsg, Replicator};
use crate::common::metrics::add;

/// Bytes queued for one peer connection before batches are dropped.
pub const PEER_QUEUE_BYTES_MAX: usize = 64 * 1024 * 1024;
/// Wait between attempts to connect to a peer.
pub const PEER_RECONNECT: Duration = Duration::from_millis(100);
/// Longest a connect attempt waits.
pub const PEER_CONNECT_TIMEOUT: Duration = Duration::from_secs(1);
/// Bytes read from a peer socket per call.
const READ_CHUNK_BYTES: usize = 256 * 1024;

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
}

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
                addr,
                hello,
                rx,
                queued_bytes.clone(),
                self.dropped.clone(),
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

/// Keeps one connection to a peer shard and writes queued frames to it; frames queued
/// while disconnected are dropped (Raft resends what matters) and counted in `dropped`.
async fn peer_writer(
    addr: SocketAddr,
    hello: Hello,
    mut rx: mpsc::UnboundedReceiver<Bytes>,
    queued_bytes: Rc<Cell<usize>>,
    dropped: Rc<Cell<u64>>,
) {
    let hello = encode(&RpcFrame::Hello(hello));
    loop {
        let conn =
            crate::runtime::task::timeout(PEER_CONNECT_TIMEOUT, TcpStream::connect(addr)).await;
        let mut stream = match conn {
            Some(Ok(s)) => s,
            _ => {
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
            }
        };
        let _ = stream.set_nodelay(true);
        if stream.write_all(&hello).await.is_err() {
            continue;
        }
        loop {
            let Some(frame) = rx.next().await else {
                return;
            };
            queued_bytes.set(queued_bytes.get().saturating_sub(frame.len()));
            if stream.write_all(&frame).await.is_err() {
                add(&dropped, 1);
                tracing::debug!(%addr, "peer connection lost; reconnecting");
                break;
            }
        }
    }
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
        tracing::info!(shard = self.shard, %addr, "RPC listening");
        let me = Rc::downgrade(self);
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
                crate::runtime::task::spawn_local(async move {
                    if let Err(e) = serve_peer(me, stream).await {
                        tracing::debug!(error = %e, "RPC connection closed");
                    }
                });
            }
        });
        Ok(())
    }
}

/// Reads frames from one peer connection: a Hello first (checked), then batches.
async fn serve_peer(me: Weak<Replicator>, mut stream: TcpStream) -> anyhow::Result<()> {
    let _ = stream.set_nodelay(true);
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
                    rep.driver.borrow_mut().peer_reconnected(h.from_node);
                    rep.wake();
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
