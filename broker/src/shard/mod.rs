//! The shard: everything one core owns (its partitions, the groups it coordinates, its
//! batch cache, its metadata snapshot, its counters) in one `!Send` [`Shard`], and the
//! calls between shards: bounded channels of [`Envelope`]s carrying an [`ops::Op`] each,
//! executed by `exec` on the owning shard (ARCHITECTURE.md, The shard runtime). A published
//! metadata snapshot is applied by `placement`; a shard's groups are loaded by `groups`.
//!
//! Invariant: a shard's state (`Shard`) never leaves its thread; `RefCell` borrows are
//! never held across an `.await`; every cross-shard message is counted.
//!
//! May use: `common`, `runtime`, `partition`, `replication`, `cluster`, `group`. The
//! gateway's part (request counters' names, the group request handler) is handed in at
//! start-up as [`GatewayHooks`]. A home of glommio names (its channels and semaphores).

pub mod admission;
pub mod budget;
pub mod coordinated;
pub mod detail;
pub mod exec;
pub mod groups;
pub mod ops;
pub mod placement;
pub mod queue;
pub mod share;

pub use crate::share::records::ShareKey;
pub mod txns;

use std::cell::{Cell, RefCell};
use std::collections::{BTreeMap, HashMap};
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures::channel::{mpsc, oneshot};
use futures::future::LocalBoxFuture;
use strand_storage::{BatchCache, Log, SystemClock};

use crate::cluster::metadata::Metadata;
use crate::cluster::metastore::MetaStore;
use crate::cluster::ClusterHost;
use crate::common::config::Config;
use crate::partition::compacted::KeyScope;
use crate::partition::Partition;
use crate::runtime::task::{repoll, sleep};
use crate::shard::ops::{Envelope, GroupRequest, Op, Reply};

/// Messages queued per shard before senders wait (backpressure between shards).
pub const SHARD_QUEUE_DEPTH: usize = 1024;
/// Shard batch cache size.
pub const BATCH_CACHE_BYTES: usize = 64 * 1024 * 1024;
/// Longest a group request waits for its offsets partition to load after a restart.
pub const GROUP_LOAD_WAIT: Duration = Duration::from_secs(30);
/// How often a cross-shard call checks that its peer still runs, and polls its waits again
/// in case a wake was lost.
pub const PEER_CHECK: Duration = Duration::from_millis(250);
/// At most one "wake recovered" warning per shard per this interval (all are counted).
pub const WAKE_LOG_INTERVAL: Duration = Duration::from_secs(10);
/// A connection that waited this long for in-flight request bytes is logged (the wait
/// itself is counted in `backpressure_events` from its first microsecond).
pub const BACKPRESSURE_WAIT_WARN: Duration = Duration::from_secs(1);
/// How long shutdown waits for in-flight requests.
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);

/// Counters of one shard.
#[derive(Clone, Copy, Debug, Default)]
pub struct ShardStats {
    /// Messages sent to other shards.
    pub cross_shard_messages: u64,
    /// Times a connection stopped reading because the shard's in-flight bytes were full.
    pub backpressure_events: u64,
    /// Requests whose reading waited for room in their connection's pipeline (`PIPELINE_DEPTH`
    /// requests of it unanswered): a client sending faster than its answers come back, whose
    /// further requests wait in the kernel's socket buffers, where no broker timer sees them.
    pub pipeline_full_events: u64,
    /// Native protocol requests served.
    pub native_requests: u64,
    /// Native partitions answered "moved" (owned by another shard).
    pub native_moved: u64,
    /// Cross-shard calls made for native requests (group coordinator only; data never).
    pub native_cross_shard_hops: u64,
    /// Waits (a cross-shard queue's room, reply or next message; a connection's read, write
    /// or answer) that a timed poll found done with no wake having reached the waiting task
    /// (`runtime::task::repoll`).
    pub wakes_recovered: u64,
}

/// Everything one shard owns.
pub struct Shard {
    /// This shard's index.
    pub id: usize,
    /// Number of shards.
    pub count: usize,
    /// Configuration.
    pub config: Arc<Config>,
    peers: Vec<queue::PeerQueue<Envelope>>,
    /// Whether each shard still runs (set false when its loop ends); a call to a stopped
    /// shard returns instead of waiting for a reply that will never come.
    alive: Arc<Vec<std::sync::atomic::AtomicBool>>,
    meta: RefCell<Arc<Metadata>>,
    pub(crate) partitions: RefCell<HashMap<(String, i32), Rc<Partition>>>,
    /// A metadata snapshot is being applied (partitions opening); group state may be
    /// partial until it is done.
    pub(crate) applying_metadata: Cell<bool>,
    /// Every shard has applied its first metadata snapshot (`every_shard_has_metadata`
    /// found it once; it stays so).
    pub(crate) every_shard_had_metadata: Cell<bool>,
    /// Requests received, indexed like `api_names` (the gateway's supported APIs).
    requests: RefCell<Vec<u64>>,
    /// Metric label of each API the gateway serves, in its order.
    api_names: Vec<&'static str>,
    /// The in-flight request byte budget `in_flight_bytes` started with.
    in_flight_bytes_max: usize,
    /// The gateway's handler of single-group requests (`Op::Group`).
    group_request: GroupRequestFn,
    /// Open Kafka connections.
    connections: Cell<u64>,
    /// Shard 0: the node's Kafka connections by peer address, against `max_connections`
    /// and `max_connections_per_ip` (unused on other shards).
    pub(crate) admission: RefCell<crate::shard::admission::Admission>,
    /// Open native connections.
    native_connections: Cell<u64>,
    /// Each shard's bound native port (0 until bound). Written once per shard at start-up,
    /// read by handshakes and "moved" answers: not on the data path.
    native_ports: Arc<Vec<std::sync::atomic::AtomicU16>>,
    /// Groups coordinated by this shard.
    pub(crate) groups: RefCell<HashMap<String, crate::group::state::Group>>,
    /// Share groups coordinated by this shard (KIP-932; in memory only so far: after a
    /// restart their members join again).
    pub(crate) share_groups: RefCell<HashMap<String, crate::share::group::ShareGroup>>,
    /// Delivery state of the share partitions of the partitions this shard leads, by
    /// (group, topic, partition) (KIP-932; loaded from `__share_group_state` when first
    /// used, forgotten when this node becomes a partition's leader again).
    pub(crate) share_partitions:
        RefCell<HashMap<ShareKey, crate::share::partition::SharePartition>>,
    /// The persisted delivery state of the share partitions whose `__share_group_state`
    /// partition this shard holds (replayed when it opens and when this node becomes its
    /// leader).
    pub(crate) share_states: RefCell<HashMap<ShareKey, crate::share::partition::ShareState>>,
    /// Cluster mode: `__share_group_state` partitions being replayed after this node became
    /// their leader (their states are answered COORDINATOR_LOAD_IN_PROGRESS).
    pub(crate) share_states_loading: RefCell<std::collections::BTreeSet<i32>>,
    /// Share sessions of the members whose connections this shard serves.
    pub(crate) share_sessions: RefCell<crate::share::session::Sessions>,
    /// Cluster mode: offsets partitions whose groups are being replayed after this node
    /// became their leader (their coordinator answers COORDINATOR_LOAD_IN_PROGRESS).
    pub(crate) groups_loading: RefCell<std::collections::BTreeSet<i32>>,
    /// Transactional ids coordinated by this shard.
    pub(crate) txns: RefCell<HashMap<String, crate::txn::metadata::TxnMetadata>>,
    /// Transactional ids with a change in progress (`txn::coordinator::Busy`).
    pub(crate) txns_busy: crate::txn::coordinator::BusyIds,
    /// Cluster mode: `__transaction_state` partitions being replayed after this node
    /// became their leader.
    pub(crate) txns_loading: RefCell<std::collections::BTreeSet<i32>>,
    /// Transactional ids were loaded: the sweeper completes their Prepare* transactions.
    pub(crate) txns_resume: Cell<bool>,
    cache: Rc<BatchCache>,
    metastore: RefCell<Option<MetaStore>>,
    stats: Cell<ShardStats>,
    /// Rate limit of the "wake recovered" warning.
    wake_log: crate::common::logging::RateLimit,
    stopping: Cell<bool>,
    /// Controlled shutdown began: the shard hands its leaderships away and still serves,
    /// but the node is no longer ready for new clients (`/v1/health/ready`).
    draining: Cell<bool>,
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
    /// Cluster mode: replicator, leader table, controller state (`cluster`).
    pub(crate) cluster: crate::cluster::ClusterState,
}

/// How a shard is wired to the others, from start-up.
pub struct ShardWiring {
    /// This shard's index.
    pub id: usize,
    /// Number of shards.
    pub count: usize,
    /// Configuration.
    pub config: Arc<Config>,
    /// This shard's sending end of every shard's queue, its own included (made once:
    /// `queue`'s bound counts them).
    pub peers: Vec<mpsc::Sender<Envelope>>,
    /// Whether each shard still runs.
    pub alive: Arc<Vec<std::sync::atomic::AtomicBool>>,
    /// Each shard's bound native port (0 until bound).
    pub native_ports: Arc<Vec<std::sync::atomic::AtomicU16>>,
}

/// The handler of a single-group request on its coordinator shard.
pub type GroupRequestFn =
    for<'a> fn(&'a Rc<Shard>, GroupRequest) -> LocalBoxFuture<'a, Result<Bytes, String>>;

/// What the protocol gateway gives every shard at start-up: the shard runs requests for
/// it without depending on it (the gateway uses the shard, never the reverse).
pub struct GatewayHooks {
    /// Metric label of each API the gateway serves, in its order (the request counters).
    pub api_names: Vec<&'static str>,
    /// Bound on the request bytes the shard's connections hold in memory at once.
    pub in_flight_bytes_max: usize,
    /// Runs a single-group request that reached its coordinator shard.
    pub group_request: GroupRequestFn,
}

impl Shard {
    /// A shard with no partitions, groups or metadata yet; `stop_tx` fires when it starts
    /// shutting down (its listeners stop accepting).
    pub fn new(w: ShardWiring, gateway: GatewayHooks, stop_tx: oneshot::Sender<()>) -> Shard {
        let GatewayHooks {
            api_names,
            in_flight_bytes_max,
            group_request,
        } = gateway;
        let admission = RefCell::new(crate::shard::admission::Admission::new(
            w.config.max_connections,
            w.config.max_connections_per_ip,
        ));
        Shard {
            id: w.id,
            count: w.count,
            config: w.config,
            peers: w.peers.into_iter().map(queue::PeerQueue::new).collect(),
            alive: w.alive,
            meta: RefCell::new(Arc::new(Metadata::default())),
            partitions: RefCell::new(HashMap::new()),
            groups: RefCell::new(HashMap::new()),
            share_groups: RefCell::new(HashMap::new()),
            share_partitions: RefCell::new(HashMap::new()),
            share_sessions: RefCell::new(Default::default()),
            share_states: RefCell::new(HashMap::new()),
            share_states_loading: RefCell::new(std::collections::BTreeSet::new()),
            groups_loading: RefCell::new(std::collections::BTreeSet::new()),
            txns: RefCell::new(HashMap::new()),
            txns_busy: RefCell::new(HashMap::new()),
            txns_loading: RefCell::new(std::collections::BTreeSet::new()),
            txns_resume: Cell::new(false),
            requests: RefCell::new(vec![0; api_names.len()]),
            applying_metadata: Cell::new(false),
            every_shard_had_metadata: Cell::new(false),
            connections: Cell::new(0),
            admission,
            native_connections: Cell::new(0),
            native_ports: w.native_ports,
            cache: Rc::new(BatchCache::new(BATCH_CACHE_BYTES)),
            metastore: RefCell::new(None),
            stats: Cell::new(ShardStats::default()),
            wake_log: crate::common::logging::RateLimit::new(WAKE_LOG_INTERVAL),
            stopping: Cell::new(false),
            draining: Cell::new(false),
            in_flight: Cell::new(0),
            stop_tx: RefCell::new(Some(stop_tx)),
            metadata_serial: Rc::new(glommio::sync::Semaphore::new(1)),
            next_producer_id: Cell::new(0),
            producer_id_floor: Cell::new(0),
            producer_id_block: Cell::new((0, 0)),
            metrics: Rc::new(crate::common::metrics::ShardMetrics::new(api_names.len())),
            in_flight_bytes: Rc::new(glommio::sync::Semaphore::new(in_flight_bytes_max as u64)),
            in_flight_bytes_max,
            api_names,
            group_request,
            cluster: crate::cluster::ClusterState::default(),
        }
    }

    /// Runs `op` on shard `target`: locally, or through that shard's queue. Both waits (for
    /// room in the queue, for the reply) are polled again every `PEER_CHECK` even without a
    /// wake, and end when the peer stops: a wake lost between the shards' threads delays the
    /// call instead of leaving it (and its connection's pipeline) waiting forever.
    pub async fn call(self: &Rc<Self>, target: usize, op: Op) -> Reply {
        if target == self.id {
            return Box::pin(self.execute(op)).await;
        }
        self.bump(|s| s.cross_shard_messages += 1);
        let (tx, rx) = oneshot::channel();
        let Some(peer) = self.peers.get(target) else {
            return Reply::Done;
        };
        if !self.peer_alive(target) {
            return Reply::Done;
        }
        let gone = || !self.peer_alive(target);
        match repoll(PEER_CHECK, peer.send(Envelope { op, reply: tx }), gone).await {
            Some((Ok(()), late)) => self.note_wake(late, "room in a shard's queue", target),
            Some((Err(_), _)) | None => return Reply::Done,
        }
        match repoll(PEER_CHECK, rx, gone).await {
            Some((r, late)) => {
                self.note_wake(late, "a cross-shard reply", target);
                r.unwrap_or(Reply::Done)
            }
            None => Reply::Done,
        }
    }

    /// Counts and logs (at most once per `WAKE_LOG_INTERVAL` per shard) a wait (a
    /// cross-shard call, a connection's read, write or answer) that a timed poll found done
    /// without its wake: `late` from `runtime::task::repoll`; `peer` is the shard waited on.
    pub(crate) fn note_wake(&self, late: bool, waited_for: &str, peer: usize) {
        if !late {
            return;
        }
        self.bump(|s| s.wakes_recovered += 1);
        if let Some(suppressed) = self.wake_log.allow(crate::common::clock::now()) {
            tracing::warn!(
                shard = self.id,
                peer,
                waited_for,
                suppressed,
                "a wait was found done by a timed poll, not by its wake: a wake was lost \
                 (recovered after at most PEER_CHECK)"
            );
        }
    }

    fn peer_alive(&self, target: usize) -> bool {
        self.alive
            .get(target)
            .is_some_and(|a| a.load(std::sync::atomic::Ordering::Acquire))
    }

    /// Updates this shard's counters.
    /// A connection's reader found its pipeline full (see `ShardStats::pipeline_full_events`).
    pub fn note_pipeline_full(&self) {
        self.bump(|s| s.pipeline_full_events += 1);
    }

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

    /// Applies the topic configs a partition reads as it runs: cleanup, what a produce
    /// does to a batch, `min.insync.replicas` (the broker's defaults where `configs` sets
    /// none).
    pub(crate) fn apply_running_configs(
        &self,
        part: &Partition,
        configs: &BTreeMap<String, String>,
    ) {
        use crate::cluster::topic_config as tc;
        part.set_cleanup(tc::cleanup_config(configs));
        part.set_batch_policy(tc::batch_policy(&self.config, configs));
        part.set_min_insync_replicas(tc::min_insync_replicas(&self.config, configs));
    }

    /// Opens partition `p` of `topic` as `meta` (the snapshot being applied) places it.
    pub(crate) async fn open_partition(
        &self,
        meta: &Metadata,
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
        self.apply_running_configs(&part, configs);
        let offsets = topic == crate::group::OFFSETS_TOPIC;
        let txn_state = topic == crate::txn::coordinator::TXN_STATE_TOPIC;
        let share_state = topic == crate::common::config::SHARE_STATE_TOPIC;
        let keyed = if offsets {
            Some(crate::group::records::scope_of as KeyScope)
        } else if txn_state {
            Some(crate::txn::records::scope_of as KeyScope)
        } else if share_state {
            Some(crate::share::records::scope_of as KeyScope)
        } else {
            None
        };
        part.load_producer_state(self.clustered(), keyed).await?;
        if offsets {
            let partitions = meta.topics.get(topic).map_or(1, |t| t.shards.len());
            self.load_groups(&part, partitions).await?;
        }
        if txn_state {
            self.load_txns(&part).await?;
        }
        if share_state {
            self.load_share_states(&part, part.high_watermark()).await?;
        }
        self.partitions
            .borrow_mut()
            .insert((topic.to_string(), p), part);
        Ok(())
    }

    /// Whether the shard is shutting down (connections stop reading new requests).
    pub fn stopping(&self) -> bool {
        self.stopping.get()
    }

    /// Whether a controlled shutdown began ([`Shard::drain_leadership`]); stays true.
    pub fn draining(&self) -> bool {
        self.draining.get()
    }

    /// Whether this node is part of a replicated cluster (`--seeds` given).
    pub fn clustered(&self) -> bool {
        !self.config.seeds.is_empty()
    }

    /// Reserves `n` bytes of the shard's in-flight budget (`budget`) for a request and
    /// then its answer, waiting (and counting a backpressure event) while it is exhausted.
    /// `None` when the shard is stopping.
    pub async fn reserve_request_bytes(&self, n: usize) -> Option<budget::Held> {
        // A request larger than the whole budget takes all of it.
        let n = n.min(self.in_flight_bytes_max);
        if let Some(held) = budget::Held::try_take(&self.in_flight_bytes, n) {
            return Some(held);
        }
        self.bump(|s| s.backpressure_events += 1);
        let waiting = crate::common::clock::now();
        let permit = budget::Held::take(&self.in_flight_bytes, n).await;
        let waited = crate::common::clock::now().saturating_duration_since(waiting);
        if waited >= BACKPRESSURE_WAIT_WARN {
            tracing::warn!(
                shard = self.id,
                waited_ms = waited.as_millis() as u64,
                request_bytes = n,
                in_flight_bytes_max = self.in_flight_bytes_max,
                "a connection stopped reading this long: the shard's in-flight request bytes \
                 were used up"
            );
        }
        permit
    }

    /// Serializes metadata commits and publishes on shard 0 (in commit order).
    pub async fn lock_metadata(&self) -> Option<glommio::sync::StaticPermit> {
        self.metadata_serial.acquire_static_permit(1).await.ok()
    }

    /// Counts a request of the API at `index` in the gateway's supported APIs.
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
        (self.in_flight_bytes_max as u64).saturating_sub(self.in_flight_bytes.available())
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
    pub fn snapshot(&self) -> crate::common::metrics::ShardSnapshot {
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
            storage.disk_reads += s.disk_reads;
            storage.disk_read_bytes += s.disk_read_bytes;
            log_bytes += p.log().size_bytes();
        }
        // The device flushes this shard's logs shared (one fdatasync for many partitions).
        storage.device_flushes = strand_storage::device_flush::rounds();
        storage.fdatasyncs += storage.device_flushes;
        storage.device_flush_writes = strand_storage::device_flush::joined();
        let requests = self
            .api_names
            .iter()
            .zip(self.requests.borrow().iter())
            .map(|(name, n)| (*name, *n))
            .collect();
        crate::common::metrics::ShardSnapshot {
            shard: self.id,
            cross_shard_messages: stats.cross_shard_messages,
            backpressure_events: stats.backpressure_events,
            pipeline_full_events: stats.pipeline_full_events,
            native_requests: stats.native_requests,
            native_moved: stats.native_moved,
            native_cross_shard_hops: stats.native_cross_shard_hops,
            wakes_recovered: stats.wakes_recovered,
            reactor_wakes_recovered: if self.id == 0 {
                crate::runtime::stall::reactor_wakes_recovered()
            } else {
                0
            },
            native_connections: self.native_connections.get(),
            connections: self.connections.get(),
            requests,
            partitions: parts.len() as u64,
            groups: self.groups.borrow().len() as u64,
            storage,
            log_bytes,
            cache: self.cache.stats(),
            metrics: self.metrics.snapshot(&self.api_names),
            detail: detail::detail(self),
        }
    }

    /// Runs a single-group request on this (its coordinator) shard.
    pub(crate) async fn run_group_request(
        self: &Rc<Self>,
        req: GroupRequest,
    ) -> Result<Bytes, String> {
        (self.group_request)(self, req).await
    }

    /// Tracks a request in flight (for graceful shutdown).
    pub fn request_started(&self) {
        self.in_flight.set(self.in_flight.get() + 1);
    }

    /// See [`Shard::request_started`].
    pub fn request_finished(&self) {
        self.in_flight.set(self.in_flight.get().saturating_sub(1));
    }

    /// Controlled shutdown, before `shutdown`: this shard's leaderships move to in-sync
    /// replicas while the node still answers clients (`replication::balance`).
    pub(crate) async fn drain_leadership(self: &Rc<Self>) {
        self.draining.set(true);
        if let Some(rep) = self.replicator() {
            rep.drain_leadership().await;
        }
    }

    /// Stops serving: the listeners close, requests in flight finish (at most
    /// `SHUTDOWN_GRACE`), replication stops and every partition is flushed.
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

/// The cluster layer (`cluster`) runs over the shard it is on.
impl crate::cluster::ClusterHost for Shard {
    fn shard_id(&self) -> usize {
        self.id
    }

    fn shard_count(&self) -> usize {
        self.count
    }

    fn config(&self) -> &Config {
        &self.config
    }

    fn cluster(&self) -> &crate::cluster::ClusterState {
        &self.cluster
    }

    fn metadata(&self) -> Arc<Metadata> {
        Shard::metadata(self)
    }

    fn metrics(&self) -> Rc<crate::common::metrics::ShardMetrics> {
        self.metrics.clone()
    }

    fn stopping(&self) -> bool {
        Shard::stopping(self)
    }

    fn clustered(&self) -> bool {
        Shard::clustered(self)
    }

    fn publish(self: &Rc<Self>, snapshot: Arc<Metadata>) -> LocalBoxFuture<'_, ()> {
        Box::pin(Shard::publish(self, snapshot))
    }

    fn leader_changes_to_every_shard(
        self: &Rc<Self>,
        remote: bool,
    ) -> crate::replication::OnLeaderChanges {
        let op: fn(Vec<crate::replication::LeaderChange>) -> Op = if remote {
            Op::RemoteLeaders
        } else {
            Op::Leaders
        };
        let weak = Rc::downgrade(self);
        Box::new(move |changes| {
            if let Some(s) = weak.upgrade() {
                crate::runtime::task::spawn_local(async move {
                    let calls = (0..s.count).map(|t| s.call(t, op(changes.clone())));
                    futures::future::join_all(calls).await;
                });
            }
        })
    }

    fn on_leader_gain(self: &Rc<Self>, part: &Rc<Partition>) -> Option<Box<dyn Fn()>> {
        // A hook that marks the partition loading in `$loading` (from this moment nothing
        // is answered from what this node held as a follower) and spawns `$reload` of it.
        macro_rules! reload_on_gain {
            ($loading:ident, $reload:ident) => {{
                let (weak, p) = (Rc::downgrade(self), part.clone());
                Some(Box::new(move || {
                    if let Some(s) = weak.upgrade() {
                        s.$loading.borrow_mut().insert(p.index);
                        let p = p.clone();
                        crate::runtime::task::spawn_local(async move { s.$reload(&p).await });
                    }
                }))
            }};
        }
        if part.topic == crate::txn::coordinator::TXN_STATE_TOPIC {
            return reload_on_gain!(txns_loading, reload_txns);
        }
        if part.topic == crate::common::config::SHARE_STATE_TOPIC {
            return reload_on_gain!(share_states_loading, reload_share_states);
        }
        if part.topic == crate::group::OFFSETS_TOPIC {
            return reload_on_gain!(groups_loading, reload_groups);
        }
        // Share partitions of it held from an earlier term may be stale: reloaded from
        // their persisted state when next used.
        let (weak, topic, index) = (Rc::downgrade(self), part.topic.clone(), part.index);
        Some(Box::new(move || {
            if let Some(s) = weak.upgrade() {
                s.forget_share_partitions(&topic, index);
            }
        }))
    }
}
