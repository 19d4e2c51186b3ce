//! Shard-local metrics (STYLE.md 12): latency histograms and counters that one shard
//! updates on its own thread, and the plain snapshots the admin handler gathers from every
//! shard at scrape time (through the ordinary per-shard call, `Op::Stats`).
//!
//! Invariant: nothing here is shared between threads while it is updated: a [`Histogram`]
//! is `Cell`s owned by one shard (no lock, no atomic on the hot path); only its
//! [`HistogramSnapshot`] (plain data) crosses shards. Bucket `k` counts observations in
//! `(BUCKET_BOUNDS_NS[k-1], BUCKET_BOUNDS_NS[k]]`; the last bucket is `+Inf`.
//!
//! Produce latency breakdown (`strand_produce_stage_seconds{stage}`), where each stage is
//! measured:
//! - `queue_wait`: request frame fully read -> its handler starts (the connection's shard
//!   run queue and pipeline).
//! - `append`: on the partition's shard, batch validation + idempotence check + storage
//!   append (in memory, not yet durable).
//! - `flush`: appended -> durable (group commit: write + fdatasync), acks=all only; with
//!   acks=0/1 the producer does not wait for it and nothing is observed.
//! - `network_write`: the response's socket write.
//! - `replication`: absent. There is no replication before Raft lands (ARCHITECTURE.md,
//!   Replication); it will time append -> majority-durable. Nothing is emitted for it
//!   rather than a made-up zero.
//!
//! The stages do not sum to `strand_kafka_request_seconds`: decoding, the cross-shard hop
//! and waiting for earlier responses on the connection (in-order replies) are not stages.

use std::cell::Cell;
use std::time::Duration;

/// Upper bounds of the latency buckets, nanoseconds: 10 µs to 10 s in 1-2.5-5 steps,
/// covering a cached fetch (tens of µs) to a stalled fdatasync (seconds). Slower
/// observations land in the `+Inf` bucket.
pub const BUCKET_BOUNDS_NS: [u64; 19] = [
    10_000,
    25_000,
    50_000,
    100_000,
    250_000,
    500_000,
    1_000_000,
    2_500_000,
    5_000_000,
    10_000_000,
    25_000_000,
    50_000_000,
    100_000_000,
    250_000_000,
    500_000_000,
    1_000_000_000,
    2_500_000_000,
    5_000_000_000,
    10_000_000_000,
];
/// Buckets including `+Inf`.
pub const BUCKETS: usize = BUCKET_BOUNDS_NS.len() + 1;

/// Stages of a produce (see the module doc); `replication` is deliberately absent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProduceStage {
    /// Frame read -> handler start.
    QueueWait = 0,
    /// Validation and storage append.
    Append = 1,
    /// Appended -> durable (acks=all).
    Flush = 2,
    /// Response socket write.
    NetworkWrite = 3,
}

impl ProduceStage {
    /// Every stage, in label order.
    pub const ALL: [ProduceStage; 4] = [
        ProduceStage::QueueWait,
        ProduceStage::Append,
        ProduceStage::Flush,
        ProduceStage::NetworkWrite,
    ];

    /// The `stage` label.
    pub fn label(self) -> &'static str {
        match self {
            ProduceStage::QueueWait => "queue_wait",
            ProduceStage::Append => "append",
            ProduceStage::Flush => "flush",
            ProduceStage::NetworkWrite => "network_write",
        }
    }
}

/// Index of the bucket an observation of `ns` nanoseconds falls in.
pub fn bucket_index(ns: u64) -> usize {
    BUCKET_BOUNDS_NS.partition_point(|&bound| bound < ns)
}

/// A latency histogram owned by one shard (`!Sync`: `Cell`s).
#[derive(Debug)]
pub struct Histogram {
    counts: [Cell<u64>; BUCKETS],
    sum_ns: Cell<u64>,
}

impl Default for Histogram {
    fn default() -> Self {
        Histogram {
            counts: std::array::from_fn(|_| Cell::new(0)),
            sum_ns: Cell::new(0),
        }
    }
}

impl Histogram {
    /// Records one observation.
    pub fn observe(&self, d: Duration) {
        let ns = u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
        let c = &self.counts[bucket_index(ns)];
        c.set(c.get().wrapping_add(1));
        self.sum_ns.set(self.sum_ns.get().saturating_add(ns));
    }

    /// A copy for the scrape.
    pub fn snapshot(&self) -> HistogramSnapshot {
        HistogramSnapshot {
            counts: self.counts.iter().map(Cell::get).collect(),
            sum_ns: self.sum_ns.get(),
        }
    }
}

/// A histogram's values at scrape time: per-bucket (not cumulative) counts.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HistogramSnapshot {
    /// Count per bucket, `BUCKETS` long (empty for a default snapshot).
    pub counts: Vec<u64>,
    /// Sum of all observations, nanoseconds.
    pub sum_ns: u64,
}

impl HistogramSnapshot {
    /// Observations.
    pub fn count(&self) -> u64 {
        self.counts.iter().sum()
    }

    /// Sum in seconds.
    pub fn sum_seconds(&self) -> f64 {
        self.sum_ns as f64 / 1e9
    }

    /// `(upper bound in seconds, count in that bucket)`, `+Inf` last, as
    /// prometheus-client's encoder takes them (it accumulates).
    pub fn buckets(&self) -> Vec<(f64, u64)> {
        let bounds = BUCKET_BOUNDS_NS
            .iter()
            .map(|&ns| ns as f64 / 1e9)
            .chain(std::iter::once(f64::INFINITY));
        bounds
            .zip(self.counts.iter().copied().chain(std::iter::repeat(0)))
            .collect()
    }
}

/// Counters and histograms of one shard.
#[derive(Debug)]
pub struct ShardMetrics {
    /// Per Kafka API, indexed like `kafka::SUPPORTED`: frame read -> response written.
    requests: Vec<Histogram>,
    produce_stages: [Histogram; ProduceStage::ALL.len()],
    storage_append: Histogram,
    storage_flush: Histogram,
    produce_bytes: Cell<u64>,
    produce_records: Cell<u64>,
    fetch_bytes: Cell<u64>,
    fetch_records: Cell<u64>,
    connections_accepted: Cell<u64>,
    connections_refused: Cell<u64>,
    sasl_failures: Cell<u64>,
    tls_failures: Cell<u64>,
    state_replay_bytes: Cell<u64>,
    cleaner: Cell<CleanerCounters>,
    /// Transactions this shard coordinated to their end, first partition added to
    /// Complete*: [committed, aborted].
    transactions: [Histogram; 2],
}

/// The log cleaner's counters on one shard.
#[derive(Clone, Copy, Debug, Default)]
pub struct CleanerCounters {
    /// Compaction passes that ran.
    pub passes: u64,
    /// Segment bytes the passes freed.
    pub bytes_removed: u64,
    /// Records the passes removed.
    pub records_removed: u64,
    /// Transaction markers the passes removed.
    pub markers_removed: u64,
    /// Batches kept whole because they could not be read.
    pub unreadable_batches: u64,
    /// Passes that failed (a storage error; the log is left as it was).
    pub errors: u64,
    /// Bytes the passes read (mapping keys and rewriting segments).
    pub bytes_read: u64,
    /// Bytes the passes wrote (new segment files).
    pub bytes_written: u64,
    /// Wall time in passes, µs (waiting on the disk and yielding to requests included).
    pub pass_us: u64,
    /// Time the passes slept to keep to `log.cleaner.io.max.bytes.per.second`, µs.
    pub throttled_us: u64,
}

/// Adds `n` to a shard-local counter (wrapping, as Prometheus counters may).
pub(crate) fn add(c: &Cell<u64>, n: u64) {
    c.set(c.get().wrapping_add(n));
}

impl ShardMetrics {
    /// Metrics for `apis` Kafka APIs (the length of `kafka::SUPPORTED`).
    pub fn new(apis: usize) -> ShardMetrics {
        ShardMetrics {
            requests: (0..apis).map(|_| Histogram::default()).collect(),
            produce_stages: std::array::from_fn(|_| Histogram::default()),
            storage_append: Histogram::default(),
            storage_flush: Histogram::default(),
            transactions: Default::default(),
            produce_bytes: Cell::new(0),
            produce_records: Cell::new(0),
            fetch_bytes: Cell::new(0),
            fetch_records: Cell::new(0),
            connections_accepted: Cell::new(0),
            connections_refused: Cell::new(0),
            sasl_failures: Cell::new(0),
            tls_failures: Cell::new(0),
            state_replay_bytes: Cell::new(0),
            cleaner: Cell::new(CleanerCounters::default()),
        }
    }

    /// A compaction pass ended: `bytes_removed` freed, `records_removed` records and
    /// `markers_removed` transaction markers gone, `unreadable` batches kept whole.
    pub fn cleaner_pass(
        &self,
        bytes_removed: u64,
        (records_removed, markers_removed): (u64, u64),
        unreadable: u64,
    ) {
        let mut c = self.cleaner.get();
        c.passes = c.passes.wrapping_add(1);
        c.bytes_removed = c.bytes_removed.wrapping_add(bytes_removed);
        c.records_removed = c.records_removed.wrapping_add(records_removed);
        c.markers_removed = c.markers_removed.wrapping_add(markers_removed);
        c.unreadable_batches = c.unreadable_batches.wrapping_add(unreadable);
        self.cleaner.set(c);
    }

    /// Log compaction read `read_bytes` and wrote `written_bytes` (counted as it goes).
    pub fn cleaner_io(&self, read_bytes: u64, written_bytes: u64) {
        let mut c = self.cleaner.get();
        c.bytes_read = c.bytes_read.wrapping_add(read_bytes);
        c.bytes_written = c.bytes_written.wrapping_add(written_bytes);
        self.cleaner.set(c);
    }

    /// A compaction pass took `pass`, of which it waited `throttled` (its I/O rate, and
    /// producers' flushes it let go first).
    pub fn cleaner_work(&self, pass: Duration, throttled: Duration) {
        let mut c = self.cleaner.get();
        let us = |d: Duration| u64::try_from(d.as_micros()).unwrap_or(u64::MAX);
        c.pass_us = c.pass_us.wrapping_add(us(pass));
        c.throttled_us = c.throttled_us.wrapping_add(us(throttled));
        self.cleaner.set(c);
    }

    /// A compaction pass failed.
    pub fn cleaner_error(&self) {
        let mut c = self.cleaner.get();
        c.errors = c.errors.wrapping_add(1);
        self.cleaner.set(c);
    }

    /// A request of the API at `api_index` took `d` (an unknown index is ignored).
    pub fn request(&self, api_index: usize, d: Duration) {
        if let Some(h) = self.requests.get(api_index) {
            h.observe(d);
        }
    }

    /// One produce stage took `d`.
    pub fn produce_stage(&self, stage: ProduceStage, d: Duration) {
        self.produce_stages[stage as usize].observe(d);
    }

    /// One storage append call took `d`.
    pub fn storage_append(&self, d: Duration) {
        self.storage_append.observe(d);
    }

    /// A transaction this shard coordinated ended (committed or aborted) after `d`.
    pub fn transaction_ended(&self, committed: bool, d: Duration) {
        self.transactions[usize::from(!committed)].observe(d);
    }

    /// One flush (write + fdatasync) took `d`.
    pub fn storage_flush(&self, d: Duration) {
        self.storage_flush.observe(d);
    }

    /// A batch was appended for a producer.
    pub fn produced(&self, bytes: usize, records: u64) {
        add(&self.produce_bytes, bytes as u64);
        add(&self.produce_records, records);
    }

    /// Batches were returned to a fetcher.
    pub fn fetched(&self, bytes: usize, records: u64) {
        add(&self.fetch_bytes, bytes as u64);
        add(&self.fetch_records, records);
    }

    /// A connection was accepted.
    pub fn connection_accepted(&self) {
        add(&self.connections_accepted, 1);
    }

    /// A Kafka connection was refused (max_connections, max_connections_per_ip).
    pub fn connection_refused(&self) {
        add(&self.connections_refused, 1);
    }

    /// A SASL authentication failed (unknown user, wrong password or proof).
    pub fn sasl_failure(&self) {
        add(&self.sasl_failures, 1);
    }

    /// A TLS handshake failed (no or a foreign, expired or unmapped client certificate,
    /// a client that does not trust ours, a timeout).
    pub fn tls_failure(&self) {
        add(&self.tls_failures, 1);
    }

    /// `bytes` of log were read to rebuild a partition's state after its checkpoint.
    pub fn state_replayed(&self, bytes: u64) {
        add(&self.state_replay_bytes, bytes);
    }

    /// A copy for the scrape; `api_names` names the request histograms, in order.
    pub fn snapshot(&self, api_names: &[&'static str]) -> MetricsSnapshot {
        MetricsSnapshot {
            requests: api_names
                .iter()
                .zip(&self.requests)
                .map(|(n, h)| (*n, h.snapshot()))
                .collect(),
            produce_stages: ProduceStage::ALL
                .iter()
                .map(|s| (s.label(), self.produce_stages[*s as usize].snapshot()))
                .collect(),
            storage_append: self.storage_append.snapshot(),
            storage_flush: self.storage_flush.snapshot(),
            produce_bytes: self.produce_bytes.get(),
            produce_records: self.produce_records.get(),
            fetch_bytes: self.fetch_bytes.get(),
            fetch_records: self.fetch_records.get(),
            connections_accepted: self.connections_accepted.get(),
            connections_refused: self.connections_refused.get(),
            sasl_failures: self.sasl_failures.get(),
            tls_failures: self.tls_failures.get(),
            state_replay_bytes: self.state_replay_bytes.get(),
            cleaner: self.cleaner.get(),
            transactions: [
                ("commit", self.transactions[0].snapshot()),
                ("abort", self.transactions[1].snapshot()),
            ],
        }
    }
}

/// One shard's metrics at scrape time.
#[derive(Clone, Debug, Default)]
pub struct MetricsSnapshot {
    /// Request latency per API name.
    pub requests: Vec<(&'static str, HistogramSnapshot)>,
    /// Produce latency per stage label.
    pub produce_stages: Vec<(&'static str, HistogramSnapshot)>,
    /// Storage append call latency.
    pub storage_append: HistogramSnapshot,
    /// Flush (write + fdatasync) latency.
    pub storage_flush: HistogramSnapshot,
    /// Batch bytes appended for producers.
    pub produce_bytes: u64,
    /// Records appended for producers.
    pub produce_records: u64,
    /// Batch bytes returned to fetchers.
    pub fetch_bytes: u64,
    /// Records returned to fetchers (whole batches).
    pub fetch_records: u64,
    /// Kafka connections accepted.
    pub connections_accepted: u64,
    /// Kafka connections refused (max_connections, max_connections_per_ip).
    pub connections_refused: u64,
    /// SASL authentications that failed.
    pub sasl_failures: u64,
    /// TLS handshakes that failed.
    pub tls_failures: u64,
    /// Log bytes read to rebuild partition state after its checkpoint.
    pub state_replay_bytes: u64,
    /// The log cleaner's counters.
    pub cleaner: CleanerCounters,
    /// Durations of the transactions this shard coordinated, by outcome.
    pub transactions: [(&'static str, HistogramSnapshot); 2],
}

/// One hosted partition at scrape time.
#[derive(Clone, Debug, Default)]
pub struct PartitionSnapshot {
    /// Topic.
    pub topic: String,
    /// Partition index.
    pub partition: i32,
    /// High watermark (Kafka offset).
    pub high_watermark: i64,
    /// Log end offset (Kafka offset).
    pub log_end_offset: i64,
    /// Bytes of its segments on disk.
    pub size_bytes: u64,
    /// Its log refuses I/O after an fdatasync failure (ARCHITECTURE.md, Bad input).
    pub fenced: bool,
    /// This replica serves the partition to clients (without a cluster: always; on a
    /// cluster: as the Raft leader with its term's high watermark).
    pub serving: bool,
    /// A compacted topic's partition: its cleanable bytes not compacted yet and their share
    /// of the cleanable bytes; `None` for other topics.
    pub dirty: Option<(u64, f64)>,
    /// When the last compaction pass of this process ended (ms since the epoch; -1: none).
    pub last_clean_ms: i64,
    /// Last stable offset: read_committed consumers read below it (the high watermark
    /// unless a transaction is open).
    pub last_stable_offset: i64,
    /// Transactions open in this partition (their markers not written yet).
    pub open_transactions: u64,
}

/// One committed offset of a group coordinated on a shard.
#[derive(Clone, Debug, Default)]
pub struct CommittedSnapshot {
    /// Group id.
    pub group: String,
    /// Topic.
    pub topic: String,
    /// Partition.
    pub partition: i32,
    /// Committed offset (the next record the group will read).
    pub offset: i64,
}

/// One share partition (KIP-932) of a partition led on a shard.
#[derive(Clone, Debug, Default)]
pub struct ShareSnapshot {
    /// Share group.
    pub group: String,
    /// Topic.
    pub topic: String,
    /// Partition.
    pub partition: i32,
    /// The share-partition start offset: every record below it is finished.
    pub start: i64,
    /// Records delivered before and available again.
    pub available: u64,
    /// Records held by a member now.
    pub acquired: u64,
    /// Records archived since the share partition was loaded.
    pub archived: u64,
}

/// What a shard knows about the health of its share of the cluster at scrape time.
#[derive(Clone, Debug, Default)]
pub struct ShardDetail {
    /// Request and answer bytes held in memory now (bounded by `in_flight_bytes_per_shard`).
    pub in_flight_bytes: u64,
    /// Partitions hosted here.
    pub partitions: Vec<PartitionSnapshot>,
    /// Committed offsets of the groups coordinated here.
    pub committed: Vec<CommittedSnapshot>,
    /// Share partitions of the partitions led here.
    pub share_partitions: Vec<ShareSnapshot>,
    /// Partitions the metadata places on this shard that have no serving leader: not
    /// open here, or their log is fenced (cluster: hosted here with no known leader).
    pub leaderless_partitions: u64,
    /// Partitions led here with fewer in-sync replicas than replicas. Without a cluster
    /// every partition has one replica (this node), in sync with itself; in a cluster, a
    /// voter behind the commit index or silent for an election timeout is out of sync.
    pub under_replicated_partitions: u64,
    /// Shard 0 only: whether this node's metadata (controller) log accepts writes.
    pub metadata_log_writable: Option<bool>,
    /// Cluster mode: replication RPC frames this shard dropped instead of sending.
    pub rpc_dropped_frames: u64,
    /// Peer connections refused in their TLS handshake (`Replicator::rpc_tls_refused`).
    pub rpc_tls_refused: u64,
    /// Cluster mode: follower acknowledgement times of appends this shard led.
    pub raft_append_acks: HistogramSnapshot,
    /// Cluster mode: Raft groups fenced on this shard (see `Replicator::fenced_groups`).
    pub fenced_groups: u64,
    /// Transactional ids this shard coordinates, by state name.
    pub transactions_by_state: Vec<(&'static str, u64)>,
    /// Age of the oldest open transaction this shard coordinates (ms; 0: none).
    pub oldest_transaction_ms: u64,
}

/// Counters of one shard at scrape time.
#[derive(Clone, Debug, Default)]
pub struct ShardSnapshot {
    /// Shard index.
    pub shard: usize,
    /// Messages sent to other shards.
    pub cross_shard_messages: u64,
    /// Times a connection stopped reading for the in-flight byte bound.
    pub backpressure_events: u64,
    /// Requests whose reading waited for room in their connection's pipeline.
    pub pipeline_full_events: u64,
    /// Open Kafka connections.
    pub connections: u64,
    /// Native protocol requests served.
    pub native_requests: u64,
    /// Native partitions answered "moved".
    pub native_moved: u64,
    /// Cross-shard calls made for native requests.
    pub native_cross_shard_hops: u64,
    /// Waits found done by a timed poll, their wake lost.
    pub wakes_recovered: u64,
    /// Reactor wake-ups lost and recovered by the bounded sleep, for the whole process:
    /// shard 0's snapshot carries it, the others 0 (so the sum over shards is right).
    pub reactor_wakes_recovered: u64,
    /// Open native connections.
    pub native_connections: u64,
    /// Requests per API name.
    pub requests: Vec<(&'static str, u64)>,
    /// Partitions hosted.
    pub partitions: u64,
    /// Groups coordinated.
    pub groups: u64,
    /// Summed storage counters of the shard's partitions.
    pub storage: strand_storage::LogStats,
    /// Bytes in all logs.
    pub log_bytes: u64,
    /// Batch cache counters.
    pub cache: strand_storage::CacheStats,
    /// Latency histograms and traffic counters.
    pub metrics: MetricsSnapshot,
    /// Partitions, committed offsets and health (`metrics::detail`).
    pub detail: ShardDetail,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(observations_us: &[u64], expected_nonzero: &[(usize, u64)]) {
        let h = Histogram::default();
        for us in observations_us {
            h.observe(Duration::from_micros(*us));
        }
        let s = h.snapshot();
        assert_eq!(s.counts.len(), BUCKETS);
        let nonzero: Vec<(usize, u64)> = s
            .counts
            .iter()
            .copied()
            .enumerate()
            .filter(|(_, c)| *c > 0)
            .collect();
        assert_eq!(nonzero, expected_nonzero, "{observations_us:?}");
        assert_eq!(s.count(), observations_us.len() as u64);
        assert_eq!(s.sum_ns, observations_us.iter().sum::<u64>() * 1000);
    }

    #[test]
    fn bucket_bounds_are_inclusive_upper_bounds() {
        check(&[], &[]);
        check(&[0], &[(0, 1)]);
        check(&[10], &[(0, 1)]); // exactly the first bound
        check(&[11], &[(1, 1)]);
        check(&[1_000, 1_000, 1_001], &[(6, 2), (7, 1)]);
        check(&[10_000_000], &[(18, 1)]); // 10 s: the last finite bound
        check(&[10_000_001, 60_000_000], &[(19, 2)]); // +Inf
    }

    #[test]
    fn bounds_increase_and_render_with_inf_last() {
        assert!(BUCKET_BOUNDS_NS.windows(2).all(|w| w[0] < w[1]));
        let h = Histogram::default();
        h.observe(Duration::from_millis(3));
        let b = h.snapshot().buckets();
        assert_eq!(b.len(), BUCKETS);
        assert_eq!(b.last().map(|x| x.0), Some(f64::INFINITY));
        assert_eq!(b[8], (0.005, 1));
        assert_eq!(b.iter().map(|x| x.1).sum::<u64>(), 1);
    }

    #[test]
    fn huge_durations_saturate_instead_of_wrapping() {
        let h = Histogram::default();
        h.observe(Duration::from_secs(u64::MAX));
        h.observe(Duration::from_secs(1));
        let s = h.snapshot();
        assert_eq!(s.sum_ns, u64::MAX);
        assert_eq!(s.counts[BUCKETS - 1], 1);
    }

    #[test]
    fn produce_stage_labels_exclude_replication() {
        let m = ShardMetrics::new(2);
        m.produce_stage(ProduceStage::Flush, Duration::from_millis(1));
        m.request(1, Duration::from_micros(20));
        m.request(7, Duration::from_micros(20)); // unknown api index: ignored
        let s = m.snapshot(&["produce", "fetch"]);
        let labels: Vec<&str> = s.produce_stages.iter().map(|x| x.0).collect();
        assert_eq!(labels, ["queue_wait", "append", "flush", "network_write"]);
        assert_eq!(s.produce_stages[2].1.count(), 1);
        assert_eq!(s.requests[1].1.count(), 1);
        assert_eq!(s.requests[0].1.count(), 0);
    }
}
