//! Admin HTTP beyond `/metrics`: the request line and body of a request, `/v1/status`
//! (node, shards, partitions per shard and their leader, disk usage, effective config,
//! health) and `PUT /v1/log-level`.
//!
//! Invariant: pure over snapshots and the config, except [`log_level`], which changes the
//! process-wide log filter through `logging`. No I/O.

use serde_json::{json, Value};

use crate::admin::{Response, ShardSnapshot};
use crate::common::config::Config;

/// Largest request body read (a log filter; nothing else takes a body).
pub const ADMIN_BODY_BYTES_MAX: usize = crate::common::logging::LOG_FILTER_BYTES_MAX;

/// What the bytes read so far of an admin request make of it.
#[derive(Debug, PartialEq, Eq)]
pub enum HeadScan {
    /// No blank line yet, and fewer than `head_bytes_max` bytes: read on.
    Incomplete,
    /// The head ends at `end` (after its blank line); its body has `body_bytes` bytes
    /// (at most `ADMIN_BODY_BYTES_MAX`).
    Complete {
        /// Bytes of the head, blank line included.
        end: usize,
        /// The `Content-Length`.
        body_bytes: usize,
    },
    /// Refused with this status line and body: the head is longer than
    /// `head_bytes_max`, or its `Content-Length` is malformed or too large.
    Refused(&'static str, &'static str),
}

const TOO_LARGE: (&str, &str) = ("431 Request Header Fields Too Large", "too large\n");

/// Scans the bytes read so far of a request (`buf`) for the end of its head and its body
/// length. Pure, so that it is fuzzed as served (`crate::fuzz::admin_http`).
pub fn scan_head(buf: &[u8], head_bytes_max: usize) -> HeadScan {
    // A head, blank line included, is at most `head_bytes_max` bytes: without its end
    // in that many, it is refused whatever the next read brings (the same answer however
    // the bytes were split into reads).
    let Some(k) = buf.windows(4).position(|w| w == b"\r\n\r\n") else {
        return if buf.len() >= head_bytes_max {
            HeadScan::Refused(TOO_LARGE.0, TOO_LARGE.1)
        } else {
            HeadScan::Incomplete
        };
    };
    let end = k + 4;
    if end > head_bytes_max {
        return HeadScan::Refused(TOO_LARGE.0, TOO_LARGE.1);
    }
    match content_length(&String::from_utf8_lossy(&buf[..end])) {
        Some(n) if n <= ADMIN_BODY_BYTES_MAX => HeadScan::Complete { end, body_bytes: n },
        Some(_) => HeadScan::Refused("413 Payload Too Large", "body too large\n"),
        None => HeadScan::Refused("400 Bad Request", "bad content-length\n"),
    }
}

/// Method, path and query string ("" when none) of a request head.
pub fn request_line(head: &str) -> Option<(&str, &str, &str)> {
    let mut parts = head.lines().next()?.split_whitespace();
    let method = parts.next()?;
    let target = parts.next()?;
    let (path, query) = target.split_once('?').unwrap_or((target, ""));
    Some((method, path, query))
}

/// The `Content-Length` of a request head (0 when absent); `None` when malformed.
pub fn content_length(head: &str) -> Option<usize> {
    for line in head.lines().skip(1) {
        if let Some((k, v)) = line.split_once(':') {
            if k.trim().eq_ignore_ascii_case("content-length") {
                return v.trim().parse().ok();
            }
        }
    }
    Some(0)
}

fn json_response(status: &'static str, v: &Value) -> Response {
    Response {
        status,
        content_type: "application/json",
        body: v.to_string() + "\n",
    }
}

/// `PUT /v1/log-level` with a body such as `debug` or `strand_broker=debug,info`.
pub fn log_level(body: &[u8]) -> Response {
    let Ok(filter) = std::str::from_utf8(body) else {
        return json_response("400 Bad Request", &json!({"error": "body is not UTF-8"}));
    };
    match crate::common::logging::set_level(filter) {
        Ok(now) => json_response("200 OK", &json!({ "log_level": now })),
        Err(e) => json_response("400 Bad Request", &json!({"error": e.to_string()})),
    }
}

/// `GET /v1/log-level`.
pub fn current_log_level() -> Response {
    json_response(
        "200 OK",
        &json!({ "log_level": crate::common::logging::current_level() }),
    )
}

/// Everything `/v1/status` reports besides the shard snapshots.
pub struct StatusInput<'a> {
    /// Effective configuration.
    pub config: &'a Config,
    /// Cluster id.
    pub cluster_id: &'a str,
    /// Metadata is loaded and the node is not stopping.
    pub ready: bool,
    /// Space of the data directory's filesystem, or why it is unknown.
    pub space: Result<strand_storage::io::FilesystemSpace, String>,
}

/// One partition of `/v1/status`; `compaction` only for a compacted topic's.
fn partition_row(p: &crate::common::metrics::PartitionSnapshot, leader: Option<i32>) -> Value {
    let mut row = json!({
        "topic": p.topic,
        "partition": p.partition,
        "leader": leader,
        "high_watermark": p.high_watermark,
        "log_end_offset": p.log_end_offset,
        "size_bytes": p.size_bytes,
        "fenced": p.fenced,
    });
    if let Some((dirty_bytes, ratio)) = p.dirty {
        row["compaction"] = json!({"dirty_bytes": dirty_bytes,
            "dirty_ratio": ratio, "last_clean_ms": p.last_clean_ms});
    }
    row
}

/// Renders `/v1/nodes` as JSON: every registered node's id, advertised host and admin port
/// (0: not registered by this version), so that a tool reaches each node's `/metrics`. A
/// single node that never registered lists none.
pub fn render_nodes(meta: &crate::cluster::metadata::Metadata) -> String {
    let nodes: Vec<Value> = meta
        .nodes
        .values()
        .map(|n| json!({"id": n.id, "host": n.host, "admin_port": n.admin_port}))
        .collect();
    json!({ "nodes": nodes }).to_string()
}

/// Renders `/v1/status` as JSON.
pub fn render_status(input: &StatusInput, shards: &[ShardSnapshot]) -> String {
    let node_id = input.config.node_id;
    let mut partitions_bytes_total: u64 = 0;
    let mut leaders = Vec::new();
    let shard_rows: Vec<Value> = shards
        .iter()
        .map(|s| {
            let mut parts: Vec<&crate::common::metrics::PartitionSnapshot> =
                s.detail.partitions.iter().collect();
            parts.sort_by(|a, b| (&a.topic, a.partition).cmp(&(&b.topic, b.partition)));
            let rows: Vec<Value> = parts
                .iter()
                .map(|p| {
                    partitions_bytes_total += p.size_bytes;
                    // This node, when it serves the partition (a single node: every one
                    // whose log is not fenced; a cluster: those it leads); null otherwise.
                    let leader = (p.serving && !p.fenced).then_some(node_id);
                    leaders.push(json!({"topic": p.topic, "partition": p.partition,
                        "leader": leader, "shard": s.shard}));
                    partition_row(p, leader)
                })
                .collect();
            json!({
                "shard": s.shard,
                "partition_count": s.detail.partitions.len(),
                "partitions": rows,
                "groups": s.groups,
                "connections": s.connections,
                "log_bytes": s.log_bytes,
                "in_flight_bytes": s.detail.in_flight_bytes,
            })
        })
        .collect();
    let (urp, leaderless, controllers) = crate::admin::render::health(shards);
    let space = match &input.space {
        Ok(sp) => json!({"available_bytes": sp.available_bytes, "total_bytes": sp.total_bytes}),
        Err(e) => json!({"error": e}),
    };
    let v = json!({
        "node_id": node_id,
        "cluster_id": input.cluster_id,
        "shard_count": shards.len(),
        "shards": shard_rows,
        "leaders": leaders,
        "disk": {
            "data_dir": input.config.data_dir,
            "partitions_bytes_total": partitions_bytes_total,
            "filesystem": space,
        },
        "health": {
            "live": true,
            "ready": input.ready,
            "under_replicated_partitions": urp,
            "leaderless_partitions": leaderless,
            "fenced_raft_groups": shards.iter().map(|s| s.detail.fenced_groups).sum::<u64>(),
            "active_controller_count": controllers,
        },
        "log_level": crate::common::logging::current_level(),
        "config": input.config,
    });
    v.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nodes_list_each_registered_nodes_admin_address() {
        use crate::cluster::metadata::{Metadata, NodeInfo};
        let mut meta = Metadata::default();
        assert_eq!(render_nodes(&meta), r#"{"nodes":[]}"#);
        let node = |id: i32, admin_port: u16| NodeInfo {
            id,
            host: format!("h{id}"),
            kafka_port: 9092,
            native_port: 9093,
            shards: 1,
            rpc_port: 33145,
            listeners: Vec::new(),
            admin_port,
            incarnation: 0,
        };
        meta.nodes.insert(1, node(1, 9644));
        meta.nodes.insert(2, node(2, 0));
        let v: Value = serde_json::from_str(&render_nodes(&meta)).expect("json");
        assert_eq!(
            v["nodes"][0],
            json!({"id": 1, "host": "h1", "admin_port": 9644})
        );
        assert_eq!(
            v["nodes"][1]["admin_port"], 0,
            "registered by an older version"
        );
    }

    #[test]
    fn request_lines_and_lengths() {
        let head = "PUT /v1/log-level?x=1 HTTP/1.1\r\nHost: a\r\ncontent-length: 5\r\n\r\n";
        assert_eq!(request_line(head), Some(("PUT", "/v1/log-level", "x=1")));
        assert_eq!(content_length(head), Some(5));
        assert_eq!(content_length("GET / HTTP/1.1\r\n\r\n"), Some(0));
        assert_eq!(
            content_length("GET / HTTP/1.1\r\nContent-Length: x\r\n"),
            None
        );
        assert_eq!(request_line(""), None);
    }

    #[test]
    fn status_lists_partitions_leaders_and_disk() {
        let flags = crate::common::config::Flags {
            node_id: Some(3),
            ..Default::default()
        };
        let config = Config::load(flags).expect("defaults are valid");
        let mut s = ShardSnapshot::default();
        s.detail
            .partitions
            .push(crate::common::metrics::PartitionSnapshot {
                topic: "t".into(),
                partition: 0,
                size_bytes: 100,
                serving: true,
                ..Default::default()
            });
        // A follower's replica (a cluster): hosted here, led elsewhere.
        s.detail
            .partitions
            .push(crate::common::metrics::PartitionSnapshot {
                topic: "t".into(),
                partition: 1,
                serving: false,
                ..Default::default()
            });
        let input = StatusInput {
            config: &config,
            cluster_id: "c",
            ready: true,
            space: Ok(strand_storage::io::FilesystemSpace {
                available_bytes: 7,
                total_bytes: 9,
            }),
        };
        let v: Value = serde_json::from_str(&render_status(&input, &[s])).expect("json");
        assert_eq!(v["node_id"], 3);
        assert_eq!(v["shards"][0]["partition_count"], 2);
        assert_eq!(v["leaders"][0]["leader"], 3);
        assert_eq!(v["leaders"][1]["leader"], Value::Null);
        assert_eq!(v["disk"]["partitions_bytes_total"], 100);
        assert_eq!(v["disk"]["filesystem"]["available_bytes"], 7);
        assert_eq!(v["config"]["node_id"], 3);
        assert_eq!(v["health"]["active_controller_count"], 0);
    }
}
