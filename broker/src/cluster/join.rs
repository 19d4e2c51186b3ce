//! Joining a cluster (issue 5, node membership). A node whose id is not among `--seeds`
//! (the controller voters) asks a seed for one before it starts: it dials the seed's shard-0
//! RPC port, says `Hello` (from node 0) and sends a control frame with a `JoinRequest`;
//! the seed commits `Command::AdmitNode` to the controller and answers with the id the
//! controller log gave it. The id is kept in `<data_dir>/node-id`, so a restart keeps it
//! without asking again. The joined node then follows the controller group as a Raft
//! learner (added by the controller's leader, `cluster::admit_learners`) and hosts the
//! partitions placed on it like any node.
//!
//! Invariant: a node outside the seeds serves only under an id the controller log assigned
//! it (a configured `--node-id` is a request, honoured when free).

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::time::Duration;

use anyhow::{bail, Context};
use bytes::{Bytes, BytesMut};
use serde::{Deserialize, Serialize};
use strand_raft::rpc::{self, Hello, RpcFrame};
use strand_raft::{NodeId, ShardId};

use crate::cluster::metadata::NodeInfo;
use crate::common::config::Config;
use crate::replication::ControlMsg;

/// The file under the data directory holding the id a joined node was given.
pub const NODE_ID_FILE: &str = "node-id";
/// How long a node keeps asking the seeds for an id before it gives up.
const JOIN_DEADLINE: Duration = Duration::from_secs(120);
/// Connect timeout to one seed.
const SEED_CONNECT_TIMEOUT: Duration = Duration::from_secs(3);
/// How long one seed may take to answer (it commits to the controller first).
const SEED_ANSWER_TIMEOUT: Duration = Duration::from_secs(20);
/// Pause between two rounds over the seeds.
const JOIN_RETRY: Duration = Duration::from_secs(1);

/// What a joining node sends a seed.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct JoinRequest {
    /// Random per attempt of this process: a retried request gets the same id.
    pub token: String,
    /// Its listeners; `id` 0 asks for any id.
    pub info: NodeInfo,
}

/// A seed's answer.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct JoinReply {
    /// The id the controller gave the node.
    pub node_id: Option<i32>,
    /// Why the seed could not admit it.
    pub error: Option<String>,
}

/// Whether this node joins through the seeds instead of being one of them.
pub fn is_joiner(config: &Config) -> bool {
    !config.seeds.is_empty() && !config.seeds.iter().any(|&(id, _)| id == config.node_id)
}

/// The listeners this node registers (`id` as configured).
pub fn node_info(config: &Config, shards: usize) -> NodeInfo {
    NodeInfo {
        id: config.node_id,
        host: config.advertised_host.clone(),
        kafka_port: config.listeners[config.inter_broker_listener].advertised_port,
        native_port: config.native_addr.port(),
        shards: u32::try_from(shards).unwrap_or(u32::MAX),
        rpc_port: config.rpc_addr.port(),
        admin_port: config.admin_addr.port(),
        incarnation: config.incarnation,
        listeners: config
            .listeners
            .iter()
            .map(|l| crate::cluster::metadata::Endpoint {
                name: l.name.clone(),
                host: l.advertised_host.clone(),
                port: l.advertised_port,
            })
            .collect(),
    }
}

/// The id this joining node serves under: the one kept in its data directory, else one a
/// seed obtains from the controller (blocking; before the shards start).
pub fn node_id(config: &Config, shards: usize) -> anyhow::Result<i32> {
    let path = config.data_dir.join(NODE_ID_FILE);
    if let Some(id) = read_node_id(&path)? {
        if config.node_id >= 1 && config.node_id != id {
            bail!(
                "{} says this node is {id}, but --node-id is {}: remove one of them",
                path.display(),
                config.node_id
            );
        }
        return Ok(id);
    }
    std::fs::create_dir_all(&config.data_dir)
        .with_context(|| format!("creating {}", config.data_dir.display()))?;
    let request = JoinRequest {
        token: token(),
        info: node_info(config, shards),
    };
    let body = serde_json::to_vec(&ControlMsg::Join(serde_json::to_value(&request)?))?;
    let tag = crate::replication::net::cluster_tag(&config.seeds);
    let tls = match &config.rpc_tls {
        Some(ssl) => Some(
            crate::security::tls::client_config(ssl).context("TLS between nodes (rpc_tls_*)")?,
        ),
        None => None,
    };
    let deadline = crate::common::clock::now() + JOIN_DEADLINE;
    loop {
        for &(seed, addr) in &config.seeds {
            match ask((seed, addr), tag, &body, tls.as_ref()) {
                Ok(id) => {
                    write_node_id(&path, id)?;
                    tracing::info!(node = id, seed, "joined the cluster");
                    return Ok(id);
                }
                Err(e) => {
                    tracing::warn!(seed, %addr, error = %format!("{e:#}"), "join through seed failed")
                }
            }
        }
        if crate::common::clock::now() >= deadline {
            bail!(
                "no seed admitted this node within {} s (are the seeds up and is --seeds the same list they run with?)",
                JOIN_DEADLINE.as_secs()
            );
        }
        std::thread::sleep(JOIN_RETRY);
    }
}

/// One join request to one seed's shard 0 (over mutual TLS with `tls`).
fn ask(
    (seed, addr): (i32, SocketAddr),
    tag: u64,
    body: &[u8],
    tls: Option<&std::sync::Arc<rustls::ClientConfig>>,
) -> anyhow::Result<i32> {
    let stream = TcpStream::connect_timeout(&addr, SEED_CONNECT_TIMEOUT)?;
    stream.set_read_timeout(Some(SEED_ANSWER_TIMEOUT))?;
    stream.set_write_timeout(Some(SEED_ANSWER_TIMEOUT))?;
    let mut out = BytesMut::new();
    let hello = Hello {
        from_node: NodeId(0),
        to_node: NodeId(u64::try_from(seed).unwrap_or(0)),
        to_shard: ShardId(0),
        cluster_tag: tag,
    };
    rpc::encode_into(&RpcFrame::Hello(hello), &mut out);
    rpc::encode_into(&RpcFrame::Control(Bytes::copy_from_slice(body)), &mut out);
    let reply = match tls {
        None => exchange(stream, &out)?,
        Some(config) => {
            let name = rustls::pki_types::ServerName::IpAddress(addr.ip().into());
            let conn =
                rustls::ClientConnection::new(config.clone(), name).context("TLS to the seed")?;
            exchange(rustls::StreamOwned::new(conn, stream), &out).context(
                "TLS to the seed (is its certificate of the cluster CA, and this node's?)",
            )?
        }
    };
    let reply: JoinReply = serde_json::from_slice(&reply).context("malformed join reply")?;
    match (reply.node_id, reply.error) {
        (Some(id), _) if id >= 1 => Ok(id),
        (_, Some(e)) => bail!("seed {seed} refused: {e}"),
        _ => bail!("seed {seed} answered without an id"),
    }
}

/// Sends `out` and reads the answer's control frame.
fn exchange<S: Read + Write>(mut stream: S, out: &[u8]) -> anyhow::Result<Bytes> {
    stream.write_all(out)?;
    stream.flush()?;
    read_control(&mut stream)
}

/// Reads frames until a control frame arrives; returns its body.
fn read_control<S: Read>(stream: &mut S) -> anyhow::Result<Bytes> {
    let mut buf = BytesMut::new();
    let mut chunk = [0u8; 4096];
    loop {
        if let Some(n) = rpc::frame_len(&buf)? {
            if buf.len() >= n {
                let frame = buf.split_to(n);
                match rpc::decode(&frame)? {
                    RpcFrame::Control(body) => return Ok(body),
                    _ => continue,
                }
            }
        }
        let n = stream.read(&mut chunk)?;
        if n == 0 {
            bail!("the seed closed the connection without answering");
        }
        buf.extend_from_slice(&chunk[..n]);
    }
}

fn read_node_id(path: &Path) -> anyhow::Result<Option<i32>> {
    match std::fs::read_to_string(path) {
        Ok(s) => {
            let id: i32 = s
                .trim()
                .parse()
                .with_context(|| format!("{}: not a node id", path.display()))?;
            if id < 1 {
                bail!("{}: node id {id} is not >= 1", path.display());
            }
            Ok(Some(id))
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e).with_context(|| format!("reading {}", path.display())),
    }
}

fn write_node_id(path: &Path, id: i32) -> anyhow::Result<()> {
    strand_storage::io::write_small_file_atomic_blocking(path, format!("{id}\n").as_bytes())
        .with_context(|| format!("writing {}", path.display()))
}

/// A random token (a v4 UUID, 32 hex digits).
fn token() -> String {
    uuid::Uuid::new_v4().simple().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_node_id_file_round_trips_and_refuses_garbage() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join(NODE_ID_FILE);
        assert_eq!(read_node_id(&path).expect("missing is fine"), None);
        write_node_id(&path, 4).expect("write");
        assert_eq!(read_node_id(&path).expect("read"), Some(4));
        std::fs::write(&path, "zero\n").expect("write");
        assert!(read_node_id(&path).is_err());
        std::fs::write(&path, "0\n").expect("write");
        assert!(read_node_id(&path).is_err());
    }

    #[test]
    fn tokens_differ() {
        let (a, b) = (token(), token());
        assert_eq!(a.len(), 32);
        assert_ne!(a, b);
    }
}
