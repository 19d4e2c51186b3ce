//! The client: the handshake, the cluster's shard map, and one connection per shard.
//!
//! Invariant: a partition's traffic goes to the connection of the shard the latest
//! handshake, metadata answer or "moved" error named for it; a connection that failed is
//! replaced on next use. Control requests (metadata, offsets, producer ids) use the
//! bootstrap connection.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use strand_wire::native::generated::*;
use strand_wire::native::PROTOCOL_VERSION;

use crate::connection::Connection;
use crate::error::{Error, Result};

/// How the client connects.
#[derive(Debug, Clone)]
pub struct ClientConfig {
    /// A broker's native handshake address (`host:port`, port 9093 by default).
    pub bootstrap: String,
    /// Sent in the handshake, for the broker's logs.
    pub client_id: String,
    /// Requests in flight per connection before callers wait.
    pub max_in_flight_per_connection: usize,
    /// How long one request may take before it fails with `Error::Timeout`.
    pub request_timeout: Duration,
    /// How long connecting may take.
    pub connect_timeout: Duration,
    /// Ask the broker to create topics that do not exist (if it allows auto-creation).
    pub allow_auto_create_topics: bool,
    /// TLS to every broker port (the broker's `native_tls`); `None`: plain TCP.
    pub tls: Option<Arc<rustls::ClientConfig>>,
    /// The name the broker's certificate must carry; default: the bootstrap host.
    pub tls_server_name: Option<String>,
}

impl ClientConfig {
    /// Defaults for `bootstrap`.
    pub fn new(bootstrap: impl Into<String>) -> ClientConfig {
        ClientConfig {
            bootstrap: bootstrap.into(),
            client_id: "strand-client".into(),
            max_in_flight_per_connection: 64,
            request_timeout: Duration::from_secs(30),
            connect_timeout: Duration::from_secs(10),
            allow_auto_create_topics: true,
            tls: None,
            tls_server_name: None,
        }
    }

    /// The name a broker's certificate is checked against: `tls_server_name`, else the
    /// host of `bootstrap`.
    pub(crate) fn server_name(&self) -> &str {
        if let Some(n) = &self.tls_server_name {
            return n;
        }
        let host = self
            .bootstrap
            .rsplit_once(':')
            .map_or(self.bootstrap.as_str(), |(h, _)| h);
        host.trim_start_matches('[').trim_end_matches(']')
    }
}

#[derive(Debug, Default)]
struct ClusterMap {
    cluster_id: String,
    node_id: i32,
    shard_ports: Vec<u16>,
    topics: HashMap<String, Vec<u32>>,
    batch_bytes_max: usize,
    kafka_bootstrap: Option<String>,
}

pub(crate) struct Inner {
    pub(crate) config: ClientConfig,
    host: IpAddr,
    bootstrap: Mutex<Arc<Connection>>,
    map: Mutex<ClusterMap>,
    conns: tokio::sync::Mutex<HashMap<u16, Arc<Connection>>>,
}

/// One pre-built Kafka RecordBatch v2 for a partition ([`Client::produce_batches`]).
#[derive(Debug, Clone)]
pub struct TopicBatch<'a> {
    /// Topic.
    pub topic: &'a str,
    /// Partition.
    pub partition: i32,
    /// The batch.
    pub batch: bytes::Bytes,
}

/// A handle to a Strand node; cheap to clone and share across tasks.
#[derive(Clone)]
pub struct Client {
    pub(crate) inner: Arc<Inner>,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("bootstrap", &self.inner.config.bootstrap)
            .finish_non_exhaustive()
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

fn placement_error(t: &TopicPlacementT) -> Option<Error> {
    t.error.as_deref().map(Error::from_wire)
}

async fn resolve(bootstrap: &str) -> Result<SocketAddr> {
    let mut addrs = tokio::net::lookup_host(bootstrap)
        .await
        .map_err(|e| Error::Connect {
            addr: bootstrap.to_string(),
            reason: e.to_string(),
        })?;
    addrs.next().ok_or_else(|| Error::Connect {
        addr: bootstrap.to_string(),
        reason: "no address".into(),
    })
}

impl Client {
    /// Connects to the bootstrap address and handshakes.
    pub async fn connect(config: ClientConfig) -> Result<Client> {
        let addr = resolve(&config.bootstrap).await?;
        let conn = Connection::open(addr, &config).await?;
        let hello = BodyT::HandshakeRequest(Box::new(HandshakeRequestT {
            client_version: PROTOCOL_VERSION,
            features: 0,
            client_id: Some(config.client_id.clone()),
            topics: None,
            allow_auto_create: false,
        }));
        let BodyT::HandshakeResponse(h) = conn.request(hello, config.request_timeout).await? else {
            return Err(Error::Protocol(
                "handshake answered with another message".into(),
            ));
        };
        if h.protocol_version != PROTOCOL_VERSION {
            return Err(Error::UnsupportedVersion(format!(
                "broker speaks {}, we speak {PROTOCOL_VERSION}",
                h.protocol_version
            )));
        }
        let map = ClusterMap {
            cluster_id: h.cluster_id.unwrap_or_default(),
            node_id: h.node_id,
            shard_ports: h.shard_ports.unwrap_or_default(),
            topics: HashMap::new(),
            batch_bytes_max: usize::try_from(h.batch_bytes_max).unwrap_or(usize::MAX),
            kafka_bootstrap: match (h.kafka_host, u16::try_from(h.kafka_port)) {
                (Some(host), Ok(port)) if !host.is_empty() => Some(format!("{host}:{port}")),
                _ => None,
            },
        };
        Ok(Client {
            inner: Arc::new(Inner {
                config,
                host: addr.ip(),
                bootstrap: Mutex::new(conn),
                map: Mutex::new(map),
                conns: tokio::sync::Mutex::new(HashMap::new()),
            }),
        })
    }

    /// The cluster id the broker reported.
    pub fn cluster_id(&self) -> String {
        lock(&self.inner.map).cluster_id.clone()
    }

    /// The broker's node id.
    pub fn node_id(&self) -> i32 {
        lock(&self.inner.map).node_id
    }

    /// The node's Kafka listener (`host:port`) as it advertises it, if it has one: for
    /// Kafka-only operations such as creating topics.
    pub fn kafka_bootstrap(&self) -> Option<String> {
        lock(&self.inner.map).kafka_bootstrap.clone()
    }

    /// Sends one pre-built Kafka RecordBatch v2 to the shard owning `topic`-`partition`
    /// and returns its base offset (-1 with `Acks::None`). No batching, no retry: the
    /// building block of [`crate::Producer`], and of load generators that build their own
    /// batches. A "moved" answer updates the shard map before the error is returned.
    pub async fn produce_batch(
        &self,
        topic: &str,
        partition: i32,
        acks: crate::Acks,
        batch: bytes::Bytes,
        timeout: Duration,
    ) -> Result<i64> {
        let batches = [TopicBatch {
            topic,
            partition,
            batch,
        }];
        let mut results = self.produce_batches(acks, &batches, timeout).await;
        results
            .pop()
            .unwrap_or_else(|| Err(Error::Protocol("produce answered nothing".into())))
    }

    /// Sends pre-built batches of many partitions: one request to each shard that owns
    /// some of them (its partitions answered together, as a Kafka broker answers one
    /// Produce of many partitions), every shard at once. Returns each batch's base offset
    /// (-1 with `Acks::None`) or error, in the order given. No retry; a "moved" answer
    /// updates the shard map before its error is returned.
    pub async fn produce_batches(
        &self,
        acks: crate::Acks,
        batches: &[TopicBatch<'_>],
        timeout: Duration,
    ) -> Vec<Result<i64>> {
        self.send_produce(acks, batches, timeout)
            .await
            .answers(timeout)
            .await
    }

    /// The sending half of [`Client::produce_batches`] (`timeout` is the broker's, for
    /// the acknowledgement): returns once every request is
    /// queued on its connection, so batches of one partition sent by calls awaited one
    /// after another reach its shard in that order (a pipelining idempotent producer).
    pub(crate) async fn send_produce(
        &self,
        acks: crate::Acks,
        batches: &[TopicBatch<'_>],
        timeout: Duration,
    ) -> ProduceSent {
        let mut sent = ProduceSent {
            client: self.clone(),
            batches: batches
                .iter()
                .map(|b| (b.topic.to_string(), b.partition))
                .collect(),
            results: vec![Ok(-1); batches.len()],
            requests: Vec::new(),
        };
        // (connection, indexes of its batches), in the order shards are first met.
        let mut groups: Vec<(Arc<Connection>, Vec<usize>)> = Vec::new();
        for (i, b) in batches.iter().enumerate() {
            match self.shard_connection(b.topic, b.partition).await {
                Ok(conn) => match groups.iter_mut().find(|(c, _)| Arc::ptr_eq(c, &conn)) {
                    Some((_, members)) => members.push(i),
                    None => groups.push((conn, vec![i])),
                },
                Err(e) => sent.results[i] = Err(e),
            }
        }
        for (conn, members) in groups {
            let req = BodyT::ProduceRequest(Box::new(ProduceRequestT {
                acks: acks.wire(),
                timeout_ms: i32::try_from(timeout.as_millis()).unwrap_or(i32::MAX),
                partitions: Some(
                    members
                        .iter()
                        .map(|&i| ProducePartitionT {
                            topic: Some(batches[i].topic.to_string()),
                            partition: batches[i].partition,
                            records: Some(batches[i].batch.to_vec()),
                        })
                        .collect(),
                ),
            }));
            let request = if acks == crate::Acks::None {
                conn.send_only(req).await.map(|()| None)
            } else {
                conn.send_request(req).await.map(Some)
            };
            match request {
                Ok(Some(request)) => sent.requests.push((members, request)),
                Ok(None) => {}
                Err(e) => {
                    for i in members {
                        sent.results[i] = Err(e.clone());
                    }
                }
            }
        }
        sent
    }

    /// A produce answer's outcome for one partition; a "moved" error updates the map.
    fn partition_result(&self, topic: &str, p: &ProducePartitionResultT) -> Result<i64> {
        match &p.error {
            Some(e) => {
                if e.moved_to_shard >= 0 {
                    self.moved(topic, p.partition, e.moved_to_shard, e.moved_to_port);
                }
                Err(Error::from_wire(e))
            }
            None => Ok(p.base_offset),
        }
    }

    /// Each shard's native port, as last reported.
    pub fn shard_ports(&self) -> Vec<u16> {
        lock(&self.inner.map).shard_ports.clone()
    }

    /// Largest record batch the broker accepts.
    pub(crate) fn batch_bytes_max(&self) -> usize {
        lock(&self.inner.map).batch_bytes_max
    }

    pub(crate) fn request_timeout(&self) -> Duration {
        self.inner.config.request_timeout
    }

    /// The bootstrap connection, reopened if it failed.
    pub(crate) async fn control(&self) -> Result<Arc<Connection>> {
        let current = lock(&self.inner.bootstrap).clone();
        if !current.is_closed() {
            return Ok(current);
        }
        let c = &self.inner.config;
        let conn = Connection::open(resolve(&c.bootstrap).await?, c).await?;
        *lock(&self.inner.bootstrap) = conn.clone();
        Ok(conn)
    }

    /// Asks the broker for the placement of `topics` (creating them if configured and
    /// allowed) and updates the shard map.
    pub async fn refresh_metadata(&self, topics: &[&str]) -> Result<()> {
        let req = BodyT::MetadataRequest(Box::new(MetadataRequestT {
            topics: Some(topics.iter().map(|t| t.to_string()).collect()),
            allow_auto_create: self.inner.config.allow_auto_create_topics,
        }));
        let conn = self.control().await?;
        let BodyT::MetadataResponse(m) = conn.request(req, self.request_timeout()).await? else {
            return Err(Error::Protocol(
                "metadata answered with another message".into(),
            ));
        };
        let mut map = lock(&self.inner.map);
        if let Some(ports) = m.shard_ports {
            map.shard_ports = ports;
        }
        for t in m.topics.unwrap_or_default() {
            let name = t.name.clone().unwrap_or_default();
            match (placement_error(&t), t.partition_shards) {
                (None, Some(shards)) => {
                    map.topics.insert(name, shards);
                }
                _ => {
                    map.topics.remove(&name);
                }
            }
        }
        Ok(())
    }

    /// Number of partitions of `topic`, asking the broker if not known.
    pub async fn partition_count(&self, topic: &str) -> Result<u32> {
        if let Some(n) = lock(&self.inner.map).topics.get(topic).map(Vec::len) {
            return u32::try_from(n).map_err(|_| Error::Protocol("partition count".into()));
        }
        self.refresh_metadata(&[topic]).await?;
        let n = lock(&self.inner.map)
            .topics
            .get(topic)
            .map(Vec::len)
            .ok_or_else(|| Error::UnknownTopic(topic.to_string()))?;
        u32::try_from(n).map_err(|_| Error::Protocol("partition count".into()))
    }

    /// The shard owning `topic`-`partition`, as the client believes.
    pub fn shard_of(&self, topic: &str, partition: i32) -> Option<u32> {
        let map = lock(&self.inner.map);
        let p = usize::try_from(partition).ok()?;
        map.topics.get(topic)?.get(p).copied()
    }

    /// Records that the broker said `topic`-`partition` lives on `shard` (a "moved"
    /// answer), and the shard's port if it sent one.
    pub(crate) fn moved(&self, topic: &str, partition: i32, shard: i32, port: i32) {
        let mut map = lock(&self.inner.map);
        let (Ok(s), Ok(p)) = (u32::try_from(shard), usize::try_from(partition)) else {
            return;
        };
        if let (Ok(port), Ok(si)) = (u16::try_from(port), usize::try_from(s)) {
            if let Some(slot) = map.shard_ports.get_mut(si) {
                *slot = port;
            }
        }
        if let Some(slot) = map.topics.get_mut(topic).and_then(|v| v.get_mut(p)) {
            *slot = s;
        }
    }

    /// Overrides the shard the client believes owns a partition. For tests of the "moved"
    /// path: the next request goes to the wrong shard, which answers with the right one.
    #[doc(hidden)]
    pub fn debug_set_shard(&self, topic: &str, partition: i32, shard: u32) {
        let mut map = lock(&self.inner.map);
        if let Some(slot) = usize::try_from(partition)
            .ok()
            .and_then(|p| map.topics.get_mut(topic)?.get_mut(p))
        {
            *slot = shard;
        }
    }

    /// The connection to the shard owning `topic`-`partition`.
    pub(crate) async fn shard_connection(
        &self,
        topic: &str,
        partition: i32,
    ) -> Result<Arc<Connection>> {
        if self.shard_of(topic, partition).is_none() {
            self.refresh_metadata(&[topic]).await?;
        }
        let port = {
            let map = lock(&self.inner.map);
            let shards = map
                .topics
                .get(topic)
                .ok_or_else(|| Error::UnknownTopic(topic.to_string()))?;
            let shard = usize::try_from(partition)
                .ok()
                .and_then(|p| shards.get(p))
                .ok_or_else(|| Error::UnknownPartition {
                    topic: topic.to_string(),
                    partition,
                })?;
            usize::try_from(*shard)
                .ok()
                .and_then(|s| map.shard_ports.get(s).copied())
                .filter(|&p| p != 0)
                .ok_or_else(|| Error::Protocol(format!("no port known for shard {shard}")))?
        };
        let mut conns = self.inner.conns.lock().await;
        if let Some(c) = conns.get(&port).filter(|c| !c.is_closed()) {
            return Ok(c.clone());
        }
        let c = &self.inner.config;
        let conn = Connection::open(SocketAddr::new(self.inner.host, port), c).await?;
        conns.insert(port, conn.clone());
        Ok(conn)
    }

    /// A producer with `config` (fetches a producer id when idempotent).
    pub async fn producer(&self, config: crate::ProducerConfig) -> Result<crate::Producer> {
        crate::Producer::start(self.clone(), config).await
    }

    /// A consumer with `config`.
    pub fn consumer(&self, config: crate::ConsumerConfig) -> crate::Consumer {
        crate::Consumer::new(self.clone(), config)
    }

    /// Connections open to shard ports (for tests and diagnostics).
    pub async fn shard_connection_count(&self) -> usize {
        self.inner
            .conns
            .lock()
            .await
            .values()
            .filter(|c| !c.is_closed())
            .count()
    }

    /// The addresses of the open shard connections.
    pub async fn shard_connection_addrs(&self) -> Vec<SocketAddr> {
        self.inner
            .conns
            .lock()
            .await
            .values()
            .filter(|c| !c.is_closed())
            .map(|c| c.addr())
            .collect()
    }
}

/// Produce requests queued on their connections ([`Client::send_produce`]), their answers
/// to come.
pub(crate) struct ProduceSent {
    client: Client,
    /// Each batch's topic and partition, in the order given.
    batches: Vec<(String, i32)>,
    /// Each batch's outcome so far (failed to send, or -1 until answered).
    results: Vec<Result<i64>>,
    /// Each request: the indexes of its batches, and the request.
    requests: Vec<(Vec<usize>, crate::connection::Sent)>,
}

impl ProduceSent {
    /// Each batch's base offset (-1 with `Acks::None`) or error, in the order given; a
    /// request unanswered after `timeout` fails its batches with `Error::Timeout`.
    pub(crate) async fn answers(self, timeout: Duration) -> Vec<Result<i64>> {
        let ProduceSent {
            client,
            batches,
            mut results,
            requests,
        } = self;
        let answers = requests
            .into_iter()
            .map(|(members, request)| async move { (members, request.answer(timeout).await) });
        for (members, answer) in futures::future::join_all(answers).await {
            let answered = match answer {
                Ok((BodyT::ProduceResponse(r), _)) => Ok(r.partitions.unwrap_or_default()),
                Ok(_) => Err(Error::Protocol(
                    "produce answered with another message".into(),
                )),
                Err(e) => Err(e),
            };
            // A failed request fails each of its batches.
            let answered = match answered {
                Ok(a) => a,
                Err(e) => {
                    for i in members {
                        results[i] = Err(e.clone());
                    }
                    continue;
                }
            };
            for (n, i) in members.into_iter().enumerate() {
                let (topic, partition) = &batches[i];
                // The broker answers the partitions in the order asked.
                results[i] = match answered.get(n) {
                    Some(p) if p.partition == *partition && p.topic.as_deref() == Some(topic) => {
                        client.partition_result(topic, p)
                    }
                    _ => Err(Error::Protocol(format!(
                        "produce response without {topic}-{partition}"
                    ))),
                };
            }
        }
        results
    }
}
