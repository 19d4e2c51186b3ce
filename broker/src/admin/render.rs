//! Renders the shard snapshots' histograms, traffic counters, cluster health gauges and
//! consumer group lag through prometheus-client (a custom [`Collector`]: the shards keep
//! their own plain buckets, so there is no prometheus-client metric object to update).
//!
//! Invariant: pure; runs at scrape time on the admin shard over plain snapshots. Lag is
//! one series per (group, topic, partition), never summed here (the sum is a query).

use std::collections::BTreeMap;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, NoLabelSet};
use prometheus_client::metrics::MetricType;

use crate::admin::ShardSnapshot;
use crate::common::metrics::HistogramSnapshot;

/// One scrape's snapshots, rendered on `encode`.
#[derive(Debug)]
pub struct Scrape {
    shards: Vec<ShardSnapshot>,
}

type Labels = Vec<(&'static str, String)>;

/// A per-shard counter read from a shard's snapshot.
type ShardField = fn(&ShardSnapshot) -> u64;
impl Scrape {
    /// Wraps copies of the shard snapshots.
    pub fn new(shards: &[ShardSnapshot]) -> Scrape {
        Scrape {
            shards: shards.to_vec(),
        }
    }

    fn shard_label(s: &ShardSnapshot) -> Labels {
        vec![("shard", s.shard.to_string())]
    }
}

fn histograms(
    enc: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    series: &[(Labels, &HistogramSnapshot)],
) -> std::fmt::Result {
    let mut m = enc.encode_descriptor(name, help, None, MetricType::Histogram)?;
    for (labels, h) in series {
        let buckets = h.buckets();
        m.encode_family(labels)?.encode_histogram::<NoLabelSet>(
            h.sum_seconds(),
            h.count(),
            &buckets,
            None,
        )?;
    }
    Ok(())
}

fn counters<V: prometheus_client::encoding::EncodeCounterValue>(
    enc: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    series: &[(Labels, V)],
) -> std::fmt::Result {
    let mut m = enc.encode_descriptor(name, help, None, MetricType::Counter)?;
    for (labels, v) in series {
        m.encode_family(labels)?
            .encode_counter::<NoLabelSet, V, u64>(v, None)?;
    }
    Ok(())
}

fn gauges<V: prometheus_client::encoding::EncodeGaugeValue>(
    enc: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    series: &[(Labels, V)],
) -> std::fmt::Result {
    let mut m = enc.encode_descriptor(name, help, None, MetricType::Gauge)?;
    for (labels, v) in series {
        m.encode_family(labels)?.encode_gauge(v)?;
    }
    Ok(())
}

/// Cluster health as this node sees it: (under-replicated, leaderless, active controllers).
pub fn health(shards: &[ShardSnapshot]) -> (u64, u64, u64) {
    let urp = shards
        .iter()
        .map(|s| s.detail.under_replicated_partitions)
        .sum();
    let leaderless = shards.iter().map(|s| s.detail.leaderless_partitions).sum();
    let controllers = shards
        .iter()
        .filter(|s| s.detail.metadata_log_writable == Some(true))
        .count() as u64;
    (urp, leaderless, controllers)
}

/// Consumer lag per (group, topic, partition): high watermark − committed offset, for
/// committed offsets of partitions hosted on this node. A committed offset past the high
/// watermark (records deleted and the topic recreated) reads as 0, not as negative lag.
pub fn group_lag(shards: &[ShardSnapshot]) -> BTreeMap<(String, String, i32), i64> {
    let hw: BTreeMap<(&str, i32), i64> = shards
        .iter()
        .flat_map(|s| &s.detail.partitions)
        .map(|p| ((p.topic.as_str(), p.partition), p.high_watermark))
        .collect();
    let mut out = BTreeMap::new();
    for c in shards.iter().flat_map(|s| &s.detail.committed) {
        if c.offset < 0 {
            continue;
        }
        if let Some(&h) = hw.get(&(c.topic.as_str(), c.partition)) {
            let key = (c.group.clone(), c.topic.clone(), c.partition);
            out.insert(key, (h - c.offset).max(0));
        }
    }
    out
}

/// One share partition as /metrics shows it.
pub struct ShareLag {
    /// High watermark − share-partition start offset (records not finished yet, those in
    /// flight included).
    pub lag: i64,
    /// Records delivered before and available again.
    pub available: u64,
    /// Records held by a member now.
    pub acquired: u64,
    /// Records archived since the share partition was loaded.
    pub archived: u64,
}

/// Each share partition of this node's partitions, by (group, topic, partition).
pub fn share_lag(shards: &[ShardSnapshot]) -> BTreeMap<(String, String, i32), ShareLag> {
    let hw: BTreeMap<(&str, i32), i64> = shards
        .iter()
        .flat_map(|s| &s.detail.partitions)
        .map(|p| ((p.topic.as_str(), p.partition), p.high_watermark))
        .collect();
    shards
        .iter()
        .flat_map(|s| &s.detail.share_partitions)
        .filter_map(|sp| {
            let h = hw.get(&(sp.topic.as_str(), sp.partition))?;
            let key = (sp.group.clone(), sp.topic.clone(), sp.partition);
            Some((
                key,
                ShareLag {
                    lag: (h - sp.start).max(0),
                    available: sp.available,
                    acquired: sp.acquired,
                    archived: sp.archived,
                },
            ))
        })
        .collect()
}

impl Scrape {
    fn latency(&self, enc: &mut DescriptorEncoder) -> std::fmt::Result {
        let mut req = Vec::new();
        let mut stages = Vec::new();
        let mut append = Vec::new();
        let mut flush = Vec::new();
        let mut acks = Vec::new();
        let mut txns = Vec::new();
        for s in &self.shards {
            for (api, h) in s.metrics.requests.iter().filter(|(_, h)| h.count() > 0) {
                req.push((
                    vec![("shard", s.shard.to_string()), ("api", api.to_string())],
                    h,
                ));
            }
            for (stage, h) in &s.metrics.produce_stages {
                let labels = vec![("shard", s.shard.to_string()), ("stage", stage.to_string())];
                stages.push((labels, h));
            }
            append.push((Self::shard_label(s), &s.metrics.storage_append));
            flush.push((Self::shard_label(s), &s.metrics.storage_flush));
            acks.push((Self::shard_label(s), &s.detail.raft_append_acks));
            for (outcome, h) in s.metrics.transactions.iter().filter(|(_, h)| h.count() > 0) {
                let labels = vec![
                    ("shard", s.shard.to_string()),
                    ("outcome", outcome.to_string()),
                ];
                txns.push((labels, h));
            }
        }
        histograms(
            enc,
            "strand_kafka_request_seconds",
            "Kafka request latency by API: frame read to response written.",
            &req,
        )?;
        histograms(
            enc,
            "strand_produce_stage_seconds",
            "Produce latency by stage (queue_wait, append, flush, network_write; \
             replication appears with Raft).",
            &stages,
        )?;
        histograms(
            enc,
            "strand_storage_append_seconds",
            "Partition log append call latency (in memory).",
            &append,
        )?;
        histograms(
            enc,
            "strand_storage_flush_seconds",
            "Partition log flush latency: write and fdatasync.",
            &flush,
        )?;
        histograms(
            enc,
            "strand_transaction_duration_seconds",
            "Transactions this node coordinated, by outcome: first partition added to the \
             outcome complete (every marker written).",
            &txns,
        )?;
        histograms(
            enc,
            "strand_raft_append_ack_seconds",
            "Cluster mode, on the leader: an append with entries sent to a follower until the \
             follower accepted it (network both ways, its queue and its durable write).",
            &acks,
        )
    }

    /// One counter series per shard for each (name, help, field) row.
    fn shard_counters(
        &self,
        enc: &mut DescriptorEncoder,
        rows: &[(&str, &str, ShardField)],
    ) -> std::fmt::Result {
        for (name, help, f) in rows {
            let series: Vec<(Labels, u64)> = self
                .shards
                .iter()
                .map(|s| (Self::shard_label(s), f(s)))
                .collect();
            counters(enc, name, help, &series)?;
        }
        Ok(())
    }

    /// The cleaner's time counters, in seconds: bytes over pass seconds is its throughput.
    fn cleaner_seconds(&self, enc: &mut DescriptorEncoder) -> std::fmt::Result {
        let rows: [(&str, &str, ShardField); 2] = [
            (
                "strand_cleaner_pass_seconds",
                "Wall time in log compaction passes (waiting on the disk and yielding to \
                 requests included).",
                |s| s.metrics.cleaner.pass_us,
            ),
            (
                "strand_cleaner_throttled_seconds",
                "Time log compaction waited: to keep to log.cleaner.io.max.bytes.per.second, \
                 and for producers' flushes to finish before its next read or write.",
                |s| s.metrics.cleaner.throttled_us,
            ),
        ];
        for (name, help, f) in rows {
            let series: Vec<(Labels, f64)> = self
                .shards
                .iter()
                .map(|s| (Self::shard_label(s), f(s) as f64 / 1e6))
                .collect();
            counters(enc, name, help, &series)?;
        }
        Ok(())
    }

    fn cleaner(&self, enc: &mut DescriptorEncoder) -> std::fmt::Result {
        let rows: [(&str, &str, ShardField); 8] = [
            (
                "strand_cleaner_passes",
                "Log compaction passes over compacted partitions (cleanup.policy compact).",
                |s| s.metrics.cleaner.passes,
            ),
            (
                "strand_cleaner_bytes_removed",
                "Segment bytes freed by log compaction.",
                |s| s.metrics.cleaner.bytes_removed,
            ),
            (
                "strand_cleaner_records_removed",
                "Records removed by log compaction (older values of a key, expired tombstones).",
                |s| s.metrics.cleaner.records_removed,
            ),
            (
                "strand_cleaner_markers_removed",
                "Transaction markers removed by log compaction (their transactions had no records left and delete.retention.ms passed).",
                |s| s.metrics.cleaner.markers_removed,
            ),
            (
                "strand_cleaner_unreadable_batches",
                "Batches log compaction kept whole because it could not read them.",
                |s| s.metrics.cleaner.unreadable_batches,
            ),
            (
                "strand_cleaner_errors",
                "Log compaction passes that failed (the log is left as it was; see the log).",
                |s| s.metrics.cleaner.errors,
            ),
            (
                "strand_cleaner_bytes_read",
                "Bytes log compaction read (mapping keys, rewriting segments).",
                |s| s.metrics.cleaner.bytes_read,
            ),
            (
                "strand_cleaner_bytes_written",
                "Bytes log compaction wrote (new segment files; a segment with nothing to \
                 remove is only read).",
                |s| s.metrics.cleaner.bytes_written,
            ),
        ];
        self.shard_counters(enc, &rows)?;
        self.cleaner_seconds(enc)?;
        self.cleaner_partitions(enc)
    }

    /// Transactions: ids by state and the oldest open one (coordinator side), and per
    /// partition the open transactions and how far the last stable offset is behind the
    /// high watermark (what read_committed consumers wait for).
    fn transactions(&self, enc: &mut DescriptorEncoder) -> std::fmt::Result {
        let mut by_state: BTreeMap<&str, u64> = BTreeMap::new();
        for s in &self.shards {
            for (state, n) in &s.detail.transactions_by_state {
                *by_state.entry(state).or_default() += n;
            }
        }
        let states: Vec<(Labels, u64)> = by_state
            .into_iter()
            .map(|(st, n)| (vec![("state", st.to_string())], n))
            .collect();
        gauges(
            enc,
            "strand_transactions",
            "Transactional ids this node coordinates, by state (Kafka's state names).",
            &states,
        )?;
        let oldest = self
            .shards
            .iter()
            .map(|s| s.detail.oldest_transaction_ms)
            .max()
            .unwrap_or(0);
        gauges(
            enc,
            "strand_transaction_oldest_open_seconds",
            "Age of the oldest open (Ongoing) transaction this node coordinates; 0: none.",
            &[(Vec::new(), oldest as f64 / 1000.0)],
        )?;
        let parts: Vec<&crate::common::metrics::PartitionSnapshot> = self
            .shards
            .iter()
            .flat_map(|s| &s.detail.partitions)
            .filter(|p| p.open_transactions > 0 || p.last_stable_offset < p.high_watermark)
            .collect();
        let labels = |p: &crate::common::metrics::PartitionSnapshot| -> Labels {
            vec![
                ("topic", p.topic.clone()),
                ("partition", p.partition.to_string()),
            ]
        };
        let open: Vec<(Labels, u64)> = parts
            .iter()
            .map(|p| (labels(p), p.open_transactions))
            .collect();
        gauges(
            enc,
            "strand_partition_open_transactions",
            "Transactions open in a partition (listed only while one is, or the last stable \
             offset is behind).",
            &open,
        )?;
        let lag: Vec<(Labels, i64)> = parts
            .iter()
            .map(|p| (labels(p), p.high_watermark - p.last_stable_offset))
            .collect();
        gauges(
            enc,
            "strand_partition_lso_lag_records",
            "High watermark minus last stable offset: records read_committed consumers wait \
             for until open transactions end.",
            &lag,
        )
    }

    /// Per-partition dirty ratio and last clean time, and the node-wide backlog.
    fn cleaner_partitions(&self, enc: &mut DescriptorEncoder) -> std::fmt::Result {
        let compacted: Vec<_> = self
            .shards
            .iter()
            .flat_map(|s| &s.detail.partitions)
            .filter_map(|p| p.dirty.map(|d| (p, d)))
            .collect();
        let labels = |p: &crate::common::metrics::PartitionSnapshot| -> Labels {
            vec![
                ("topic", p.topic.clone()),
                ("partition", p.partition.to_string()),
            ]
        };
        let ratio: Vec<(Labels, f64)> = compacted.iter().map(|(p, d)| (labels(p), d.1)).collect();
        gauges(
            enc,
            "strand_partition_dirty_ratio",
            "Compacted partitions: share of the cleanable bytes (closed, committed, past \
             min.compaction.lag.ms) not compacted yet.",
            &ratio,
        )?;
        let last: Vec<(Labels, f64)> = compacted
            .iter()
            .filter(|(p, _)| p.last_clean_ms >= 0)
            .map(|(p, _)| (labels(p), p.last_clean_ms as f64 / 1000.0))
            .collect();
        gauges(
            enc,
            "strand_partition_last_clean_timestamp_seconds",
            "Compacted partitions: when the last compaction pass of this process ended.",
            &last,
        )?;
        let backlog = compacted.iter().map(|(_, d)| d.0).sum::<u64>();
        gauges(
            enc,
            "strand_cleaner_backlog_bytes",
            "Cleanable bytes of compacted partitions not compacted yet (node-wide).",
            &[(Vec::new(), i64::try_from(backlog).unwrap_or(i64::MAX))],
        )
    }

    /// Refused authentications and TLS handshakes.
    fn security(&self, enc: &mut DescriptorEncoder) -> std::fmt::Result {
        let rows: [(&str, &str, ShardField); 3] = [
            (
                "strand_kafka_sasl_authentication_failures",
                "SASL authentications that failed (unknown user, wrong password or proof); each connection is closed.",
                |s| s.metrics.sasl_failures,
            ),
            (
                "strand_kafka_tls_handshake_failures",
                "TLS handshakes on SSL and SASL_SSL listeners (and the native ones with native_tls) that failed (client certificate missing, foreign, expired or matching no ssl_principal_mapping_rules; the client refused ours; timeout); each connection is closed.",
                |s| s.metrics.tls_failures,
            ),
            (
                "strand_raft_rpc_tls_refused",
                "Connections from other nodes refused in their TLS handshake (rpc_tls_*: no certificate, one not of the cluster CA, expired; timeout); each is closed.",
                |s| s.detail.rpc_tls_refused,
            ),
        ];
        self.shard_counters(enc, &rows)
    }

    fn traffic(&self, enc: &mut DescriptorEncoder) -> std::fmt::Result {
        let rows: [(&str, &str, ShardField); 8] = [
            (
                "strand_kafka_produce_bytes",
                "Record batch bytes appended for producers.",
                |s| s.metrics.produce_bytes,
            ),
            (
                "strand_kafka_produce_records",
                "Records appended for producers.",
                |s| s.metrics.produce_records,
            ),
            (
                "strand_kafka_fetch_bytes",
                "Record batch bytes returned to fetchers.",
                |s| s.metrics.fetch_bytes,
            ),
            (
                "strand_kafka_fetch_records",
                "Records returned to fetchers (whole batches).",
                |s| s.metrics.fetch_records,
            ),
            (
                "strand_kafka_connections_accepted",
                "Kafka connections accepted.",
                |s| s.metrics.connections_accepted,
            ),
            (
                "strand_kafka_connections_refused",
                "Kafka connections closed at accept: over max_connections or max_connections_per_ip.",
                |s| s.metrics.connections_refused,
            ),
            (
                "strand_raft_rpc_dropped_frames",
                "Replication RPC frames dropped instead of sent (peer unknown or unreachable, queue full); Raft resends.",
                |s| s.detail.rpc_dropped_frames,
            ),
            (
                "strand_partition_state_replay_bytes",
                "Log bytes read to rebuild partition state (idempotent producers, an offsets partition's groups) after its checkpoint, at open and on gaining leadership.",
                |s| s.metrics.state_replay_bytes,
            ),
        ];
        self.shard_counters(enc, &rows)?;
        let in_flight: Vec<(Labels, i64)> = self
            .shards
            .iter()
            .map(|s| {
                let v = i64::try_from(s.detail.in_flight_bytes).unwrap_or(i64::MAX);
                (Self::shard_label(s), v)
            })
            .collect();
        gauges(
            enc,
            "strand_shard_in_flight_bytes",
            "Request bytes held in memory (backpressure starts at the bound).",
            &in_flight,
        )
    }

    fn cluster(&self, enc: &mut DescriptorEncoder) -> std::fmt::Result {
        let (urp, leaderless, controllers) = health(&self.shards);
        let one = |v: u64| vec![(Vec::new(), i64::try_from(v).unwrap_or(i64::MAX))];
        gauges(
            enc,
            "strand_under_replicated_partitions",
            "Partitions led here with fewer in-sync replicas than replicas.",
            &one(urp),
        )?;
        gauges(
            enc,
            "strand_leaderless_partitions",
            "Partitions placed on this node with no serving leader (not open, or log fenced).",
            &one(leaderless),
        )?;
        self.transactions(enc)?;
        let fenced = self.shards.iter().map(|s| s.detail.fenced_groups).sum();
        gauges(
            enc,
            "strand_raft_fenced_groups",
            "Raft groups fenced on this node (a failed log write, or a log that lost entries \
             it had acknowledged; see the error log): they vote and acknowledge nothing here.",
            &one(fenced),
        )?;
        gauges(
            enc,
            "strand_active_controller_count",
            "1 when this node's metadata log accepts writes (the cluster sum must be 1).",
            &one(controllers),
        )?;
        let lag: Vec<(Labels, i64)> = group_lag(&self.shards)
            .into_iter()
            .map(|((g, t, p), v)| {
                let labels = vec![("group", g), ("topic", t), ("partition", p.to_string())];
                (labels, v)
            })
            .collect();
        gauges(
            enc,
            "strand_consumer_group_lag",
            "High watermark minus committed offset, per group and partition.",
            &lag,
        )?;
        self.share_groups(enc)
    }

    /// Share groups (KIP-932): lag, records in flight and archived per share partition.
    fn share_groups(&self, enc: &mut DescriptorEncoder) -> std::fmt::Result {
        let mut lag = Vec::new();
        let mut in_flight = Vec::new();
        let mut archived = Vec::new();
        for ((g, t, p), s) in share_lag(&self.shards) {
            let labels = vec![("group", g), ("topic", t), ("partition", p.to_string())];
            for (state, n) in [("available", s.available), ("acquired", s.acquired)] {
                let mut l = labels.clone();
                l.push(("state", state.to_string()));
                in_flight.push((l, i64::try_from(n).unwrap_or(i64::MAX)));
            }
            archived.push((labels.clone(), s.archived));
            lag.push((labels, s.lag));
        }
        gauges(
            enc,
            "strand_share_group_lag",
            "High watermark minus the share-partition start offset (records not yet \
             acknowledged or archived), per share group and partition.",
            &lag,
        )?;
        gauges(
            enc,
            "strand_share_group_records_in_flight",
            "Records of a share partition delivered and not finished: available again, or \
             acquired by a member now.",
            &in_flight,
        )?;
        // A counter family is shown only with samples (every counter shows `<name>_total`).
        if archived.is_empty() {
            return Ok(());
        }
        counters(
            enc,
            "strand_share_group_records_archived",
            "Records of a share partition archived (rejected, a gap, or released or timed out \
             at the delivery-count limit) since it was loaded on this node.",
            &archived,
        )
    }
}

/// How the previous run of this data directory ended, as a gauge: 1 with the fatal signal
/// its crash report names ("unknown": no report, e.g. kill -9 or power loss), 0 after an
/// orderly exit.
fn previous_exit(
    enc: &mut DescriptorEncoder,
    previous: &crate::runtime::crash::PreviousExit,
) -> std::fmt::Result {
    let signal = previous.signal_label().to_string();
    gauges(
        enc,
        "strand_previous_exit_unclean",
        "1 when the previous run of this data directory did not exit cleanly (signal: the \
         fatal signal in its crash report, or unknown); see crash-report.prev.txt.",
        &[(vec![("signal", signal)], i64::from(previous.unclean))],
    )
}

impl Collector for Scrape {
    fn encode(&self, mut enc: DescriptorEncoder) -> std::fmt::Result {
        self.latency(&mut enc)?;
        self.traffic(&mut enc)?;
        self.security(&mut enc)?;
        self.cleaner(&mut enc)?;
        self.cluster(&mut enc)?;
        previous_exit(&mut enc, &crate::runtime::crash::previous_exit())
    }
}
