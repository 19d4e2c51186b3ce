//! Admin HTTP (ARCHITECTURE.md: port 9644): `/v1/health`, `/v1/status` and `/metrics`
//! (Prometheus text, `strand_` names, STYLE.md 12). Shards keep plain counters; a scrape
//! collects one snapshot per shard and sums them here. Pure: no I/O.
//!
//! The subsystem: the HTTP listener (`net`), `/v1/status` and the log level (`status`),
//! the Prometheus rendering (`render`), the network self-test (`netcheck`) and the bearer
//! token of the mutating endpoints (`token`).
//!
//! May use: every subsystem below `gateway`'s layer; never `gateway`.

pub mod net;
pub mod netcheck;
pub mod render;
pub mod status;
pub mod token;

use std::fmt::Write as _;

use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

pub use crate::common::metrics::ShardSnapshot;

/// Renders `/metrics`.
#[expect(
    clippy::too_many_lines,
    reason = "longer than 70 lines when the lint came in (issue 27): split it when it next changes"
)]
pub fn render_metrics(shards: &[ShardSnapshot]) -> String {
    let mut reg = Registry::default();
    let requests = Family::<Vec<(String, String)>, Counter>::default();
    let per_shard = |name: &str,
                     help: &str,
                     reg: &mut Registry,
                     f: &dyn Fn(&ShardSnapshot) -> u64,
                     counter: bool| {
        if counter {
            let fam = Family::<Vec<(String, String)>, Counter>::default();
            for s in shards {
                fam.get_or_create(&vec![("shard".into(), s.shard.to_string())])
                    .inc_by(f(s));
            }
            reg.register(name, help, fam);
        } else {
            let fam = Family::<Vec<(String, String)>, Gauge>::default();
            for s in shards {
                fam.get_or_create(&vec![("shard".into(), s.shard.to_string())])
                    .set(i64::try_from(f(s)).unwrap_or(i64::MAX));
            }
            reg.register(name, help, fam);
        }
    };
    for s in shards {
        for (api, n) in &s.requests {
            requests
                .get_or_create(&vec![
                    ("shard".into(), s.shard.to_string()),
                    ("api".into(), api.to_string()),
                ])
                .inc_by(*n);
        }
    }
    reg.register(
        "strand_kafka_requests",
        "Kafka requests received, by API",
        requests,
    );
    per_shard(
        "strand_shard_cross_shard_messages",
        "Messages sent to another shard",
        &mut reg,
        &|s| s.cross_shard_messages,
        true,
    );
    per_shard(
        "strand_shard_wakes_recovered",
        "Waits (cross-shard calls, connection reads, writes, answers) a timed poll found done: their wake was lost",
        &mut reg,
        &|s| s.wakes_recovered,
        true,
    );
    per_shard(
        "strand_runtime_reactor_wakes_recovered",
        "Reactor sleeps (whole process, on shard 0) that ran out their 10 ms bound and found work ready: wake-ups lost and recovered",
        &mut reg,
        &|s| s.reactor_wakes_recovered,
        true,
    );
    per_shard(
        "strand_shard_backpressure_events",
        "Times reading stopped at the in-flight byte bound",
        &mut reg,
        &|s| s.backpressure_events,
        true,
    );
    per_shard(
        "strand_kafka_pipeline_full_events",
        "Requests whose reading waited for room in their connection's pipeline (a client sending faster than it is answered)",
        &mut reg,
        &|s| s.pipeline_full_events,
        true,
    );
    per_shard(
        "strand_kafka_connections",
        "Open Kafka connections",
        &mut reg,
        &|s| s.connections,
        false,
    );
    per_shard(
        "strand_native_requests",
        "Native protocol requests served",
        &mut reg,
        &|s| s.native_requests,
        true,
    );
    per_shard(
        "strand_native_moved_partitions",
        "Native partition requests answered with the owning shard (stale shard map)",
        &mut reg,
        &|s| s.native_moved,
        true,
    );
    per_shard(
        "strand_native_cross_shard_hops",
        "Cross-shard calls made to serve native requests (group coordinator only)",
        &mut reg,
        &|s| s.native_cross_shard_hops,
        true,
    );
    per_shard(
        "strand_native_connections",
        "Open native protocol connections",
        &mut reg,
        &|s| s.native_connections,
        false,
    );
    per_shard(
        "strand_partitions",
        "Partitions hosted",
        &mut reg,
        &|s| s.partitions,
        false,
    );
    per_shard(
        "strand_consumer_groups",
        "Consumer groups coordinated",
        &mut reg,
        &|s| s.groups,
        false,
    );
    per_shard(
        "strand_storage_appended_bytes",
        "Bytes appended to partition logs",
        &mut reg,
        &|s| s.storage.bytes_appended,
        true,
    );
    per_shard(
        "strand_storage_written_bytes",
        "Bytes written to disk (aligned, rewrites included)",
        &mut reg,
        &|s| s.storage.bytes_written,
        true,
    );
    per_shard(
        "strand_storage_fdatasync",
        "fdatasync calls",
        &mut reg,
        &|s| s.storage.fdatasyncs,
        true,
    );
    per_shard(
        "strand_storage_device_flushes",
        "fdatasync calls that made several partitions durable at once (one device cache flush; counted in strand_storage_fdatasync too)",
        &mut reg,
        &|s| s.storage.device_flushes,
        true,
    );
    per_shard(
        "strand_storage_device_flush_writes",
        "Partition flushes made durable by a shared device flush",
        &mut reg,
        &|s| s.storage.device_flush_writes,
        true,
    );
    per_shard(
        "strand_storage_segment_rolls",
        "Segments rolled",
        &mut reg,
        &|s| s.storage.rolls,
        true,
    );
    per_shard(
        "strand_storage_log_bytes",
        "Bytes in partition logs",
        &mut reg,
        &|s| s.log_bytes,
        false,
    );
    per_shard(
        "strand_batch_cache_hits",
        "Reads served from the batch cache",
        &mut reg,
        &|s| s.cache.hits,
        true,
    );
    per_shard(
        "strand_batch_cache_misses",
        "Reads that went to disk",
        &mut reg,
        &|s| s.cache.misses,
        true,
    );
    per_shard(
        "strand_storage_disk_reads",
        "Reads from disk by partition logs (read-aheads included)",
        &mut reg,
        &|s| s.storage.disk_reads,
        true,
    );
    per_shard(
        "strand_storage_disk_read_bytes",
        "Bytes partition logs asked of the disk (read-aheads included)",
        &mut reg,
        &|s| s.storage.disk_read_bytes,
        true,
    );
    per_shard(
        "strand_read_aheads",
        "Windows read ahead for sequential readers from disk",
        &mut reg,
        &|s| s.cache.read_aheads,
        true,
    );
    per_shard(
        "strand_read_aheads_used",
        "Windows read ahead that served the read they were begun for",
        &mut reg,
        &|s| s.cache.read_aheads_used,
        true,
    );
    per_shard(
        "strand_read_ahead_bytes",
        "Memory held by read-aheads: reads under way and leftover frames, by buffer size class",
        &mut reg,
        &|s| s.cache.read_ahead_bytes as u64,
        false,
    );
    per_shard(
        "strand_batch_cache_bytes",
        "Heap bytes held by the batch cache (frames and their bookkeeping)",
        &mut reg,
        &|s| s.cache.used_bytes as u64,
        false,
    );
    reg.register_collector(Box::new(crate::admin::render::Scrape::new(shards)));
    let mut out = String::new();
    if encode(&mut out, &reg).is_err() {
        out.clear();
    }
    out
}

/// An HTTP response: status line text, content type, body.
pub struct Response {
    /// e.g. "200 OK".
    pub status: &'static str,
    /// Content type.
    pub content_type: &'static str,
    /// Body.
    pub body: String,
}

impl Response {
    /// Encodes it as HTTP/1.1 with `Connection: close`.
    pub fn encode(&self) -> Vec<u8> {
        let mut head = String::new();
        let _ = write!(
            head,
            "HTTP/1.1 {}\r\nContent-Type: {}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
            self.status,
            self.content_type,
            self.body.len()
        );
        let mut out = head.into_bytes();
        out.extend_from_slice(self.body.as_bytes());
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metrics_follow_naming_rules() {
        let metrics = crate::common::metrics::ShardMetrics::new(1);
        metrics.request(0, std::time::Duration::from_millis(1));
        let s = ShardSnapshot {
            requests: vec![("produce", 3)],
            metrics: metrics.snapshot(&["produce"]),
            ..ShardSnapshot::default()
        };
        let text = render_metrics(&[s]);
        assert!(
            text.contains("strand_kafka_requests_total{shard=\"0\",api=\"produce\"} 3"),
            "{text}"
        );
        for line in text
            .lines()
            .filter(|l| !l.starts_with('#') && !l.is_empty())
        {
            let name = line.split(['{', ' ']).next().unwrap_or_default();
            assert!(name.starts_with("strand_"), "{name}");
        }
        let mut families = 0;
        for line in text.lines().filter(|l| l.starts_with("# TYPE ")) {
            let mut parts = line.split(' ').skip(2);
            let (name, kind) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
            families += 1;
            assert!(
                text.contains(&format!("# HELP {name} ")),
                "{name} has no help"
            );
            match kind {
                "counter" => assert!(
                    text.contains(&format!("\n{name}_total")),
                    "counter {name} is exported as {name}_total"
                ),
                "histogram" => assert!(
                    name.ends_with("_seconds") || name.ends_with("_bytes"),
                    "histogram {name} has a base unit"
                ),
                "gauge" => assert!(!name.ends_with("_total"), "gauge {name} ends in _total"),
                other => panic!("{name}: unexpected type {other}"),
            }
        }
        assert!(families >= 25, "{families} families");
        // Cumulative: the 1 ms observation is in the 0.001 bucket and every later one.
        for le in ["0.0005", "0.001", "0.0025", "+Inf"] {
            let n = if le == "0.0005" { 0 } else { 1 };
            let line = format!(
                "strand_kafka_request_seconds_bucket{{le=\"{le}\",shard=\"0\",api=\"produce\"}} {n}"
            );
            assert!(text.contains(&line), "{line}\n{text}");
        }
    }
}
