//! The shard runtime: one pinned glommio executor per CPU in the affinity mask, each
//! owning its partitions, its batch cache and its share of the Kafka connections (all
//! shards accept on the listener with SO_REUSEPORT). Shards talk only through bounded
//! channels of [`Envelope`]s (ARCHITECTURE.md, The shard runtime). One of the two homes of
//! glommio names in the broker (STYLE.md 1).
//!
//! Invariant: a shard's state (`Shard`) never leaves its thread; `RefCell` borrows are
//! never held across an `.await`; every cross-shard message is counted.

pub mod ops;

use std::cell::{Cell, RefCell};
use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context};
use futures::channel::{mpsc, oneshot};
use futures::{SinkExt, StreamExt};
use glommio::{LocalExecutorBuilder, Placement};
use strand_storage::{BatchCache, Log, LogConfig, SystemClock};

use crate::cluster::metadata::Metadata;
use crate::cluster::metastore::MetaStore;
use crate::common::config::Config;
use crate::partition::Partition;
use crate::shard::ops::{Envelope, Op, Reply};

/// Messages queued per shard before senders wait (backpressure between shards).
pub const SHARD_QUEUE_DEPTH: usize = 1024;
/// Shard batch cache size.
pub const BATCH_CACHE_BYTES: usize = 64 * 1024 * 1024;
/// Longest a group request waits for its offsets partition to load after a restart.
pub const GROUP_LOAD_WAIT: Duration = Duration::from_secs(30);
/// How often a cross-shard call checks that its peer still runs.
pub const PEER_CHECK: Duration = Duration::from_millis(250);
/// How long shutdown waits for in-flight requests.
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);

/// Counters of one shard.
#[derive(Clone, Copy, Debug, Default)]
pub struct ShardStats {
    /// Messages sent to other shards.
    pub cross_shard_messages: u64,
    /// Times a connection stopped reading because the shard's in-flight bytes were full.
    pub backpressure_events: u64,
    /// Native protocol requests served.
    pub native_requests: u64,
    /// Native partitions answered "moved" (owned by another shard).
    pub native_moved: u64,
    /// Cross-shard calls made for native requests (group coordinator only; data never).
    pub native_cross_shard_hops: u64,
}

/// Everything one shard owns.
pub struct Shard {
    /// This shard's index.
    pub id: usize,
    /// Number of shards.
    pub count: usize,
    /// Configuration.
    pub config: Arc<Config>,
    peers: Vec<mpsc::Sender<Envelope>>,
    /// Whether each shard still runs (set false when its loop ends); a call to a stopped
    /// shard returns instead of waiting for a reply that will never come.
    alive: Arc<Vec<std::sync::atomic::AtomicBool>>,
    meta: RefCell<Arc<Metadata>>,
    pub(crate) partitions: RefCell<HashMap<(String, i32), Rc<Partition>>>,
    /// A metadata snapshot is being applied (partitions opening); group state may be
    /// partial until it is done.
    pub(crate) applying_metadata: Cell<bool>,
    /// Requests received, indexed like `kafka::SUPPORTED`.
    requests: RefCell<Vec<u64>>,
    /// Open Kafka connections.
    connections: Cell<u64>,
    /// Open native connections.
    native_connections: Cell<u64>,
    /// Each shard's bound native port (0 until bound). Written once per shard at start-up,
    /// read by handshakes and "moved" answers: not on the data path.
    native_ports: Arc<Vec<std::sync::atomic::AtomicU16>>,
    /// Groups coordinated by this shard.
    pub(crate) groups: RefCell<HashMap<String, crate::group::state::Group>>,
    /// Cluster mode: offsets partitions whose groups are being replayed after this node
    /// became their leader (their coordinator answers COORDINATOR_LOAD_IN_PROGRESS).
    pub(crate) groups_loading: RefCell<std::collections::BTreeSet<i32>>,
    cache: Rc<BatchCache>,
    metastore: RefCell<Option<MetaStore>>,
    stats: Cell<ShardStats>,
    stopping: Cell<bool>,
    in_flight: Cell<usize>,
    stop_tx: RefCell<Option<oneshot::Sender<()>>>,
    in_flight_bytes: Rc<glommio::sync::Semaphore>,
    metadata_serial: Rc<glommio::sync::Semaphore>,
    /// Next producer id to hand out (shard 0).
    pub(crate) next_producer_id: Cell<i64>,
    /// Ids below this may have been handed out before the last restart (shard 0).
    pub(crate) producer_id_floor: Cell<i64>,
    /// Cluster mode: the block of producer ids this node reserved, (next, end) (shard 0).
    pub(crate) producer_id_block: Cell<(i64, i64)>,
    /// Latency histograms and traffic counters (`metrics.rs`).
    pub(crate) metrics: Rc<crate::common::metrics::ShardMetrics>,
    /// Cluster mode: replicator, leader table, controller state (`cluster.rs`).
    pub(crate) cluster: crate::cluster::ClusterState,
}

/// Spawns a task on the current shard.
pub fn spawn_local(fut: impl Future<Output = ()> + 'static) {
    glommio::spawn_local(fut).detach();
}

/// Sleeps on the shard's timer.
pub async fn sleep(d: Duration) {
    glommio::timer::sleep(d).await;
}

/// Runs `fut` for at most `d`.
pub async fn timeout<T>(d: Duration, fut: impl Future<Output = T>) -> Option<T> {
    let fut = std::pin::pin!(fut);
    let timer = std::pin::pin!(glommio::timer::sleep(d));
    match futures::future::select(fut, timer).await {
        futures::future::Either::Left((v, _)) => Some(v),
        futures::future::Either::Right(_) => None,
    }
}

impl Shard {
    /// Runs `op` on shard `target`: locally, or through that shard's queue.
    pub async fn call(self: &Rc<Self>, target: usize, op: Op) -> Reply {
        if target == self.id {
            return Box::pin(self.execute(op)).await;
        }
        self.bump(|s| s.cross_shard_messages += 1);
        let (tx, rx) = oneshot::channel();
        let mut peer = self.peers[target].clone();
        if !self.peer_alive(target) || peer.send(Envelope { op, reply: tx }).await.is_err() {
            return Reply::Done;
        }
        let mut rx = rx;
        loop {
            match timeout(PEER_CHECK, &mut rx).await {
                Some(r) => return r.unwrap_or(Reply::Done),
                None if !self.peer_alive(target) => return Reply::Done,
                None => {}
            }
        }
    }

    fn peer_alive(&self, target: usize) -> bool {
        self.alive
            .get(target)
            .is_some_and(|a| a.load(std::sync::atomic::Ordering::Acquire))
    }

    /// Updates this shard's counters.
    fn bump(&self, f: impl FnOnce(&mut ShardStats)) {
        let mut s = self.stats.get();
        f(&mut s);
        self.stats.set(s);
    }

    /// Counts a native request.
    pub fn count_native_request(&self) {
        self.bump(|s| s.native_requests += 1);
    }

    /// Counts a native partition answered "moved".
    pub fn count_native_moved(&self) {
        self.bump(|s| s.native_moved += 1);
    }

    /// Counts a cross-shard call made for a native request.
    pub fn count_native_hop(&self) {
        self.bump(|s| s.native_cross_shard_hops += 1);
    }

    /// Counts a native connection opened or closed.
    pub fn count_native_connection(&self, opened: bool) {
        let n = self.native_connections.get();
        self.native_connections
            .set(if opened { n + 1 } else { n.saturating_sub(1) });
    }

    /// Every shard's native port (0 = not bound yet).
    pub fn native_ports(&self) -> Vec<u16> {
        self.native_ports
            .iter()
            .map(|p| p.load(std::sync::atomic::Ordering::Acquire))
            .collect()
    }

    /// Publishes this shard's bound native port.
    pub(crate) fn set_native_port(&self, port: u16) {
        if let Some(p) = self.native_ports.get(self.id) {
            p.store(port, std::sync::atomic::Ordering::Release);
        }
    }

    /// Counters.
    pub fn stats(&self) -> ShardStats {
        self.stats.get()
    }

    /// The current metadata snapshot.
    pub fn metadata(&self) -> Arc<Metadata> {
        self.meta.borrow().clone()
    }

    pub(crate) fn set_metadata(&self, m: Arc<Metadata>) {
        *self.meta.borrow_mut() = m;
    }

    pub(crate) fn take_metastore(&self) -> Option<MetaStore> {
        self.metastore.borrow_mut().take()
    }

    pub(crate) fn put_metastore(&self, m: MetaStore) {
        *self.metastore.borrow_mut() = Some(m);
    }

    pub(crate) fn partition_keys(&self) -> Vec<(String, i32)> {
        self.partitions.borrow().keys().cloned().collect()
    }

    pub(crate) fn remove_partition(&self, topic: &str, p: i32) -> Option<Rc<Partition>> {
        self.partitions.borrow_mut().remove(&(topic.to_string(), p))
    }

    pub(crate) async fn open_partition(
        &self,
        topic: &str,
        p: i32,
        configs: &BTreeMap<String, String>,
    ) -> anyhow::Result<()> {
        let (lc, max_message) = crate::cluster::topic_config::log_config(&self.config, configs);
        let dir = self.config.data_dir.join(format!("{topic}-{p}"));
        let log = Log::open(&dir, lc, Rc::new(SystemClock), self.cache.clone()).await?;
        let part = Rc::new(Partition::new(
            topic.to_string(),
            p,
            log,
            max_message,
            self.metrics.clone(),
        ));
        part.load_producer_state(self.clustered()).await?;
        if topic == crate::group::OFFSETS_TOPIC {
            self.load_groups(&part).await?;
        }
        self.partitions
            .borrow_mut()
            .insert((topic.to_string(), p), part);
        Ok(())
    }

    /// Cluster mode, on becoming the coordinator of an offsets partition: forgets what this
    /// node knew of its groups (it followed without applying) and replays the log. The
    /// caller marked the partition loading (`groups_loading`) when leadership came; it is
    /// unmarked here once the groups are replayed.
    pub(crate) async fn reload_groups(&self, part: &Partition) {
        self.replay_after_leader_gain(part).await;
        self.groups_loading.borrow_mut().remove(&part.index);
    }

    /// Whether this shard coordinates `group` now. Without replication it always does; in
    /// a cluster only while this node leads the group's `__consumer_offsets` partition
    /// (NOT_COORDINATOR otherwise: a follower's groups are stale, and one that lost the
    /// leadership must not keep answering heartbeats beside the new coordinator) and has
    /// replayed its records (COORDINATOR_LOAD_IN_PROGRESS meanwhile). Clients look the
    /// coordinator up again on either.
    pub fn coordinator_check(&self, group: &str) -> Result<(), i16> {
        use crate::group::coordinator::code;
        if !self.clustered() {
            return Ok(());
        }
        let meta = self.metadata();
        let Some(t) = meta.topics.get(crate::group::OFFSETS_TOPIC) else {
            return Err(code::COORDINATOR_NOT_AVAILABLE);
        };
        let p = crate::group::partition_for(group, t.shards.len());
        let key = (crate::group::OFFSETS_TOPIC.to_string(), p);
        match self.partitions.borrow().get(&key) {
            Some(part) if part.serving() => {
                if self.groups_loading.borrow().contains(&p) {
                    Err(code::COORDINATOR_LOAD_IN_PROGRESS)
                } else {
                    Ok(())
                }
            }
            _ => Err(code::NOT_COORDINATOR),
        }
    }

    async fn replay_after_leader_gain(&self, part: &Partition) {
        let partitions = self
            .metadata()
            .topics
            .get(crate::group::OFFSETS_TOPIC)
            .map_or(1, |t| t.shards.len());
        self.groups
            .borrow_mut()
            .retain(|g, _| crate::group::partition_for(g, partitions) != part.index);
        if let Err(e) = self.replay_groups(part, part.log().log_end_offset()).await {
            tracing::error!(partition = part.index, error = %format!("{e:#}"),
                "reloading consumer groups after a coordinator change failed");
        }
    }

    /// Rebuilds the groups of an offsets partition from its records.
    async fn load_groups(&self, part: &Partition) -> anyhow::Result<()> {
        self.replay_groups(part, part.high_watermark()).await
    }

    async fn replay_groups(
        &self,
        part: &Partition,
        end: strand_storage::KafkaOffset,
    ) -> anyhow::Result<()> {
        // The checkpoint's compacted records, then the log after it.
        let (from, records) = part.group_checkpoint();
        let from = match records {
            Some(records) => {
                records.replay_into(&mut self.groups.borrow_mut());
                from
            }
            None => part.log().log_start_offset(),
        };
        let (_, bytes) = crate::partition::checkpoint::replay_batches(part.log(), from, end, |b| {
            crate::group::coordinator::replay_batch(&mut self.groups.borrow_mut(), b)
        })
        .await?;
        part.metrics().state_replayed(bytes);
        Ok(())
    }

    /// Waits (bounded) until the `__consumer_offsets` partition of `group` is open and
    /// replayed on this shard, so a coordinator never answers from unloaded state after a
    /// restart (Kafka answers COORDINATOR_LOAD_IN_PROGRESS; waiting is invisible to clients).
    pub async fn wait_group_loaded(&self, group: &str) {
        let deadline = crate::common::clock::now() + GROUP_LOAD_WAIT;
        while crate::common::clock::now() < deadline && !self.stopping() {
            let meta = self.metadata();
            let settled = meta.version > 0 && !self.applying_metadata.get();
            if let Some(t) = meta
                .topics
                .get(crate::group::OFFSETS_TOPIC)
                .filter(|_| settled)
            {
                let p = crate::group::partition_for(group, t.shards.len());
                let key = (crate::group::OFFSETS_TOPIC.to_string(), p);
                if self.partitions.borrow().contains_key(&key) {
                    return;
                }
            }
            sleep(Duration::from_millis(10)).await;
        }
    }

    /// Waits (bounded) until every `__consumer_offsets` partition this shard owns is loaded.
    pub async fn wait_all_groups_loaded(&self) {
        let deadline = crate::common::clock::now() + GROUP_LOAD_WAIT;
        while crate::common::clock::now() < deadline && !self.stopping() {
            let meta = self.metadata();
            if meta.version == 0 || self.applying_metadata.get() {
                sleep(Duration::from_millis(10)).await;
                continue;
            }
            let Some(t) = meta.topics.get(crate::group::OFFSETS_TOPIC) else {
                return;
            };
            let loaded = {
                let parts = self.partitions.borrow();
                t.shards.iter().enumerate().all(|(p, &s)| {
                    s as usize != self.id
                        || parts.contains_key(&(crate::group::OFFSETS_TOPIC.to_string(), p as i32))
                })
            };
            if loaded {
                return;
            }
            sleep(Duration::from_millis(10)).await;
        }
    }

    /// Whether the shard is shutting down (connections stop reading new requests).
    pub fn stopping(&self) -> bool {
        self.stopping.get()
    }

    /// Whether this node is part of a replicated cluster (`--seeds` given).
    pub fn clustered(&self) -> bool {
        !self.config.seeds.is_empty()
    }

    /// Reserves `n` bytes of the shard's in-flight request budget, waiting (and counting
    /// a backpressure event) while it is exhausted. `None` when the shard is stopping.
    pub async fn reserve_request_bytes(&self, n: usize) -> Option<glommio::sync::StaticPermit> {
        let units = n as u64;
        if let Ok(p) = self.in_flight_bytes.try_acquire_static_permit(units) {
            return Some(p);
        }
        self.bump(|s| s.backpressure_events += 1);
        self.in_flight_bytes.acquire_static_permit(units).await.ok()
    }

    /// Serializes metadata commits and publishes on shard 0 (in commit order).
    pub async fn lock_metadata(&self) -> Option<glommio::sync::StaticPermit> {
        self.metadata_serial.acquire_static_permit(1).await.ok()
    }

    /// Counts a request of the API at `index` in `kafka::SUPPORTED`.
    pub fn count_request(&self, index: usize) {
        if let Some(n) = self.requests.borrow_mut().get_mut(index) {
            *n += 1;
        }
    }

    /// Counts a connection opening (+1) or closing (-1).
    pub fn count_connection(&self, opened: bool) {
        let n = self.connections.get();
        self.connections
            .set(if opened { n + 1 } else { n.saturating_sub(1) });
    }

    /// Request bytes held in memory now.
    pub(crate) fn in_flight_bytes_used(&self) -> u64 {
        (crate::gateway::kafka::net::IN_FLIGHT_BYTES_MAX as u64)
            .saturating_sub(self.in_flight_bytes.available())
    }

    /// Shard 0: whether the metadata log accepts writes (a commit in progress has it
    /// checked out, and counts as writable). `None` on other shards.
    pub(crate) fn metadata_log_writable(&self) -> Option<bool> {
        if self.clustered() {
            // Cluster mode: the controller log accepts writes through its leader only.
            let leads = self.replicator().map(|r| r.health().controller_leader);
            return (self.id == 0).then(|| leads.unwrap_or(false));
        }
        (self.id == 0).then(|| {
            self.metastore
                .borrow()
                .as_ref()
                .is_none_or(|m| m.writable())
        })
    }

    /// This shard's counters.
    pub fn snapshot(&self) -> crate::admin::ShardSnapshot {
        let stats = self.stats.get();
        let mut storage = strand_storage::LogStats::default();
        let mut log_bytes = 0;
        let parts = self.partitions.borrow();
        for p in parts.values() {
            let s = p.log().stats();
            storage.bytes_appended += s.bytes_appended;
            storage.bytes_written += s.bytes_written;
            storage.fdatasyncs += s.fdatasyncs;
            storage.rolls += s.rolls;
            storage.frames_appended += s.frames_appended;
            storage.writes += s.writes;
            log_bytes += p.log().size_bytes();
        }
        let requests = crate::gateway::kafka::SUPPORTED
            .iter()
            .zip(self.requests.borrow().iter())
            .map(|((k, _, _), n)| (crate::gateway::kafka::api_name(*k), *n))
            .collect();
        crate::admin::ShardSnapshot {
            shard: self.id,
            cross_shard_messages: stats.cross_shard_messages,
            backpressure_events: stats.backpressure_events,
            native_requests: stats.native_requests,
            native_moved: stats.native_moved,
            native_cross_shard_hops: stats.native_cross_shard_hops,
            native_connections: self.native_connections.get(),
            connections: self.connections.get(),
            requests,
            partitions: parts.len() as u64,
            groups: self.groups.borrow().len() as u64,
            storage,
            log_bytes,
            cache: self.cache.stats(),
            metrics: self.metrics.snapshot(&api_names()),
            detail: crate::common::metrics::detail(self),
        }
    }

    /// Tracks a request in flight (for graceful shutdown).
    pub fn request_started(&self) {
        self.in_flight.set(self.in_flight.get() + 1);
    }

    /// See [`Shard::request_started`].
    pub fn request_finished(&self) {
        self.in_flight.set(self.in_flight.get().saturating_sub(1));
    }

    pub(crate) async fn shutdown(self: &Rc<Self>) {
        self.stopping.set(true);
        if let Some(tx) = self.stop_tx.borrow_mut().take() {
            let _ = tx.send(());
        }
        let deadline = crate::common::clock::now() + SHUTDOWN_GRACE;
        while self.in_flight.get() > 0 && crate::common::clock::now() < deadline {
            sleep(Duration::from_millis(5)).await;
        }
        let parts: Vec<Rc<Partition>> = self.partitions.borrow().values().cloned().collect();
        if let Some(rep) = self.replicator() {
            rep.stop();
        }
        for p in parts {
            if let Err(e) = p.flush().await {
                tracing::error!(topic = %p.topic, partition = p.index, error = %e, "flush at shutdown failed");
            }
        }
    }
}

/// Starts every shard and blocks until they exit (after SIGTERM/SIGINT).
pub fn run(mut config: Config) -> anyhow::Result<()> {
    let cpus = affinity_cpus()?;
    let count = config.smp.unwrap_or(cpus.len()).min(cpus.len()).max(1);
    if let Some(n) = config.smp.filter(|&n| n > cpus.len()) {
        bail!(
            "--smp {n} but only {} CPUs are in this process's affinity mask",
            cpus.len()
        );
    }
    if crate::cluster::join::is_joiner(&config) {
        config.node_id = crate::cluster::join::node_id(&config, count)?;
    }
    let config = Arc::new(config);
    let plan = strand_storage::io_runtime::plan_io_memory(count)?;
    crate::runtime::preflight::check(&config)?;
    crate::runtime::preflight::native_shard_ports_free(&config, count)?;
    let mask = crate::runtime::signals::block_termination_signals()?;
    let mut senders = Vec::with_capacity(count);
    let mut receivers = Vec::with_capacity(count);
    for _ in 0..count {
        let (tx, rx) = mpsc::channel::<Envelope>(SHARD_QUEUE_DEPTH);
        senders.push(tx);
        receivers.push(rx);
    }
    let native_ports: Arc<Vec<std::sync::atomic::AtomicU16>> = Arc::new(
        (0..count)
            .map(|_| std::sync::atomic::AtomicU16::new(0))
            .collect(),
    );
    let alive: Arc<Vec<std::sync::atomic::AtomicBool>> = Arc::new(
        (0..count)
            .map(|_| std::sync::atomic::AtomicBool::new(true))
            .collect(),
    );
    // Woken by a termination signal (None) or by a shard that exited (Some(id)): a shard
    // that fails, even at start-up, takes the whole process down.
    let (exit_tx, exit_rx) = std::sync::mpsc::channel::<Option<usize>>();
    let mut handles = Vec::with_capacity(count);
    for (id, rx) in receivers.into_iter().enumerate() {
        let (config, peers, alive) = (config.clone(), senders.clone(), alive.clone());
        let native_ports = native_ports.clone();
        let exited = exit_tx.clone();
        let h = LocalExecutorBuilder::new(Placement::Fixed(cpus[id]))
            .name(&format!("shard-{id}"))
            .io_memory(plan.io_memory_bytes)
            .spawn(move || async move {
                let flags = alive.clone();
                let r = shard_main(id, count, config, peers, alive, native_ports, rx).await;
                if let Some(a) = flags.get(id) {
                    a.store(false, std::sync::atomic::Ordering::Release);
                }
                let _ = exited.send(Some(id));
                r
            })
            .map_err(|e| {
                anyhow::anyhow!(
                    "cannot start shard {id} (io_uring executor): {e}; check that io_uring is \
                     enabled (sysctl kernel.io_uring_disabled=0) and not blocked by seccomp"
                )
            })?;
        handles.push(h);
    }
    tracing::info!(shards = count, addr = %config.kafka_addr, data_dir = %config.data_dir.display(), "strand starting");
    let signal_tx = exit_tx.clone();
    std::thread::Builder::new()
        .name("signals".into())
        .spawn(move || {
            let signal = crate::runtime::signals::wait(&mask);
            tracing::info!(signal, "shutting down");
            let _ = signal_tx.send(None);
        })
        .context("starting the signal thread")?;
    if let Ok(Some(id)) = exit_rx.recv() {
        tracing::error!(
            shard = id,
            "a shard stopped on its own: shutting the others down"
        );
    }
    for tx in &senders {
        let (reply, _rx) = oneshot::channel();
        let _ = tx.clone().try_send(Envelope {
            op: Op::Shutdown,
            reply,
        });
    }
    let mut failed = false;
    for h in handles {
        match h.join() {
            Ok(Ok(())) => {}
            Ok(Err(e)) => {
                tracing::error!(error = %format!("{e:#}"), "shard failed");
                failed = true;
            }
            Err(e) => {
                tracing::error!(error = %e, "shard panicked");
                failed = true;
            }
        }
    }
    if failed {
        bail!("a shard failed; see the log above");
    }
    Ok(())
}

async fn shard_main(
    id: usize,
    count: usize,
    config: Arc<Config>,
    peers: Vec<mpsc::Sender<Envelope>>,
    alive: Arc<Vec<std::sync::atomic::AtomicBool>>,
    native_ports: Arc<Vec<std::sync::atomic::AtomicU16>>,
    mut rx: mpsc::Receiver<Envelope>,
) -> anyhow::Result<()> {
    strand_storage::io::prime_device_probe(&config.data_dir).await?;
    let (stop_tx, stop_rx) = oneshot::channel();
    let shard = Rc::new(Shard {
        id,
        count,
        config: config.clone(),
        peers,
        alive,
        meta: RefCell::new(Arc::new(Metadata::default())),
        partitions: RefCell::new(HashMap::new()),
        groups: RefCell::new(HashMap::new()),
        groups_loading: RefCell::new(std::collections::BTreeSet::new()),
        requests: RefCell::new(vec![0; crate::gateway::kafka::SUPPORTED.len()]),
        applying_metadata: Cell::new(false),
        connections: Cell::new(0),
        native_connections: Cell::new(0),
        native_ports,
        cache: Rc::new(BatchCache::new(BATCH_CACHE_BYTES)),
        metastore: RefCell::new(None),
        stats: Cell::new(ShardStats::default()),
        stopping: Cell::new(false),
        in_flight: Cell::new(0),
        stop_tx: RefCell::new(Some(stop_tx)),
        metadata_serial: Rc::new(glommio::sync::Semaphore::new(1)),
        next_producer_id: Cell::new(0),
        producer_id_floor: Cell::new(0),
        producer_id_block: Cell::new((0, 0)),
        metrics: Rc::new(crate::common::metrics::ShardMetrics::new(
            crate::gateway::kafka::SUPPORTED.len(),
        )),
        in_flight_bytes: Rc::new(glommio::sync::Semaphore::new(
            crate::gateway::kafka::net::IN_FLIGHT_BYTES_MAX as u64,
        )),
        cluster: crate::cluster::ClusterState::default(),
    });
    let (done_tx, done_rx) = oneshot::channel::<()>();
    {
        let shard = shard.clone();
        spawn_local(async move {
            let mut done_tx = Some(done_tx);
            while let Some(env) = rx.next().await {
                let is_shutdown = matches!(env.op, Op::Shutdown);
                let shard = shard.clone();
                if is_shutdown {
                    shard.execute(env.op).await;
                    let _ = env.reply.send(Reply::Done);
                    if let Some(tx) = done_tx.take() {
                        let _ = tx.send(());
                    }
                    // Dropping the receiver answers every queued or later call at once.
                    break;
                }
                spawn_local(async move {
                    let r = shard.execute(env.op).await;
                    let _ = env.reply.send(r);
                });
            }
        });
    }
    if shard.clustered() {
        crate::cluster::start(&shard)
            .await
            .context("starting replication")?;
        if id == 0 {
            let s = shard.clone();
            spawn_local(async move {
                // An upgraded single-node data directory: its topics first (before
                // registration names the cluster and __consumer_offsets is created).
                while let Err(e) = crate::cluster::adopt_single_node_data(&s).await {
                    tracing::error!(error = %format!("{e:#}"), "upgrade of a single-node data directory failed; retrying");
                    if s.stopping() {
                        return;
                    }
                    sleep(Duration::from_secs(1)).await;
                }
                crate::cluster::register(&s).await;
                ensure_offsets_topic(&s).await;
            });
        }
    } else if id == 0 {
        let lc = LogConfig {
            allow_buffered_io: config.allow_buffered_io,
            ..LogConfig::default()
        };
        let store = MetaStore::open(&config.data_dir, lc)
            .await
            .context("opening the metadata log")?;
        let snapshot = Arc::new(store.state().clone());
        shard
            .producer_id_floor
            .set(snapshot.producer_ids_reserved_to);
        shard.put_metastore(store);
        shard.publish(snapshot).await;
        ensure_offsets_topic(&shard).await;
    }
    // The admin API answers from here on, before metadata arrives: a node that cannot get
    // it (no controller quorum, or a fenced controller group) still shows why in /metrics,
    // /v1/status and the log level, and /v1/health/ready says it is not ready.
    if id == 0 {
        let admin = shard.clone();
        spawn_local(async move {
            if let Err(e) = crate::admin::net::serve(admin).await {
                tracing::error!(error = %format!("{e:#}"), "admin HTTP stopped");
            }
        });
    }
    // Serve Kafka only once the first metadata snapshot arrived, so no request sees an
    // empty cluster (and auto-creates a topic that exists).
    while shard.metadata().version == 0 && !shard.stopping() {
        sleep(Duration::from_millis(1)).await;
    }
    spawn_local(retention_loop(shard.clone()));
    spawn_local(session_sweeper(shard.clone()));
    crate::gateway::native::net::listen(&shard)?;
    crate::gateway::kafka::net::serve(shard.clone(), stop_rx).await?;
    let _ = done_rx.await;
    tracing::info!(
        shard = id,
        cross_shard_messages = shard.stats().cross_shard_messages,
        "shard stopped"
    );
    Ok(())
}

/// Metric label of each API in `kafka::SUPPORTED`, in order.
fn api_names() -> Vec<&'static str> {
    crate::gateway::kafka::SUPPORTED
        .iter()
        .map(|(k, _, _)| crate::gateway::kafka::api_name(*k))
        .collect()
}

/// Creates `__consumer_offsets` at first start.
async fn ensure_offsets_topic(shard: &Rc<Shard>) {
    use crate::group::OFFSETS_TOPIC;
    if shard.metadata().topics.contains_key(OFFSETS_TOPIC) {
        return;
    }
    let n = shard.config.offsets_topic_num_partitions;
    let cmd =
        crate::gateway::kafka::topics::create_command(shard, OFFSETS_TOPIC, n, BTreeMap::new(), -1);
    match crate::gateway::kafka::topics::commit(shard, vec![cmd])
        .await
        .pop()
    {
        // Another node created it, or this node's metadata was not applied yet at start.
        Some(Err(crate::cluster::metadata::MetaError::TopicExists(_))) | Some(Ok(())) | None => {}
        Some(Err(e)) => tracing::error!(error = %e, "cannot create {OFFSETS_TOPIC}"),
    }
}

/// Expires group member sessions.
async fn session_sweeper(shard: Rc<Shard>) {
    while !shard.stopping() {
        sleep(crate::group::coordinator::SESSION_SWEEP).await;
        shard.expire_sessions();
    }
}

/// Applies retention to this shard's partitions every `retention_check_interval_ms`.
async fn retention_loop(shard: Rc<Shard>) {
    let every = Duration::from_millis(shard.config.retention_check_interval_ms);
    while !shard.stopping() {
        sleep(every).await;
        let parts: Vec<Rc<Partition>> = shard.partitions.borrow().values().cloned().collect();
        for p in parts {
            match p.apply_retention().await {
                Ok(r) if r.segments_deleted > 0 => {
                    tracing::info!(topic = %p.topic, partition = p.index, segments = r.segments_deleted,
                        bytes = r.bytes_deleted, "retention deleted segments");
                }
                Ok(_) => {}
                Err(e) => {
                    tracing::warn!(topic = %p.topic, partition = p.index, error = %e, "retention failed")
                }
            }
        }
    }
}

/// CPUs in this process's affinity mask (never all online CPUs).
pub(crate) fn affinity_cpus() -> anyhow::Result<Vec<usize>> {
    // SAFETY: cpu_set_t is plain data; sched_getaffinity fills it for this process.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: `set` is a valid, correctly sized cpu_set_t.
    let rc =
        unsafe { libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) };
    if rc != 0 {
        bail!(
            "sched_getaffinity failed: {}",
            std::io::Error::last_os_error()
        );
    }
    // SAFETY: CPU_ISSET reads the set initialised above.
    let cpus: Vec<usize> = (0..libc::CPU_SETSIZE as usize)
        .filter(|&c| unsafe { libc::CPU_ISSET(c, &set) })
        .collect();
    if cpus.is_empty() {
        bail!("empty CPU affinity mask");
    }
    Ok(cpus)
}
