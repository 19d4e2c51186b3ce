//! `strandctl config validate FILE`: checks a strand TOML config file without starting
//! the broker — unknown keys, wrong types and out-of-range values, each named by key.
//!
//! The key list and the rules replicate `broker/src/common/config.rs` (`FileConfig` and
//! `Config::validate`): tools must not depend on the broker crate (ARCHITECTURE.md,
//! Layout), so a unit test reads that file's source and fails when a key there is
//! unknown here. Invariant: every finding names its key; a file with no findings is one
//! the broker's loader accepts, as far as these rules go.

use std::net::SocketAddr;

/// Kafka's `num.partitions` ceiling (`broker/src/common/config.rs` PARTITIONS_PER_TOPIC_MAX).
const PARTITIONS_PER_TOPIC_MAX: i64 = 10_000;
/// Smallest `segment_bytes` (`storage/src/config.rs` SEGMENT_BYTES_MIN).
const SEGMENT_BYTES_MIN: i64 = 4096;
/// Ceiling of `offsets_topic_num_partitions` (broker/src/common/config.rs validate).
const OFFSETS_TOPIC_PARTITIONS_MAX: i64 = 1000;
/// The broker's `REQUEST_BYTES_MAX`, the bound of `fetch_max_bytes`.
const REQUEST_BYTES_MAX: i64 = 100 * 1024 * 1024;
/// Ceiling of `group_initial_rebalance_delay_ms` (broker/src/common/config.rs validate).
const REBALANCE_DELAY_MS_MAX: i64 = 300_000;

/// The type and range of one key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    /// A string (a path or a host name), non-empty.
    Text,
    /// `IP:PORT`.
    SocketAddr,
    /// `true`/`false`.
    Bool,
    /// An integer in `min..=max`.
    Int { min: i64, max: i64 },
    /// One of these strings.
    OneOf(&'static [&'static str]),
}

/// Every key of `FileConfig` in broker/src/common/config.rs, with its rule.
const KEYS: &[(&str, Kind)] = &[
    ("data_dir", Kind::Text),
    ("kafka_addr", Kind::SocketAddr),
    // NAME://host:port,... (and NAME:PROTOCOL,...); the broker parses them at start.
    ("listeners", Kind::Text),
    ("advertised_listeners", Kind::Text),
    ("listener_security_protocol_map", Kind::Text),
    ("inter_broker_listener_name", Kind::Text),
    ("ssl_certificate_location", Kind::Text),
    ("ssl_key_location", Kind::Text),
    ("ssl_ca_location", Kind::Text),
    (
        "ssl_client_auth",
        Kind::OneOf(&["none", "requested", "required"]),
    ),
    ("ssl_principal_mapping_rules", Kind::Text),
    ("rpc_tls_certificate_location", Kind::Text),
    ("rpc_tls_key_location", Kind::Text),
    ("rpc_tls_ca_location", Kind::Text),
    ("sasl_oauthbearer_jwks_endpoint_url", Kind::Text),
    ("sasl_oauthbearer_expected_audience", Kind::Text),
    ("sasl_oauthbearer_expected_issuer", Kind::Text),
    ("sasl_oauthbearer_sub_claim_name", Kind::Text),
    ("sasl_oauthbearer_scope_claim_name", Kind::Text),
    (
        "sasl_oauthbearer_clock_skew_seconds",
        Kind::Int { min: 0, max: 3600 },
    ),
    ("authorizer_enabled", Kind::Bool),
    ("admin_tls", Kind::Bool),
    ("native_tls", Kind::Bool),
    // User:a;User:b ; the broker checks the form at start.
    ("super_users", Kind::Text),
    ("allow_everyone_if_no_acl_found", Kind::Bool),
    ("quota_window_num", Kind::Int { min: 2, max: 100 }),
    (
        "connections_max_reauth_ms",
        Kind::Int {
            min: 0,
            max: i64::MAX,
        },
    ),
    ("quota_window_size_seconds", Kind::Int { min: 1, max: 3600 }),
    ("admin_addr", Kind::SocketAddr),
    ("admin_token_file", Kind::Text),
    ("native_addr", Kind::SocketAddr),
    // A tracing filter (e.g. "info,strand_storage=debug"); the broker parses it at start.
    ("log_level", Kind::Text),
    ("log_format", Kind::OneOf(&["text", "json"])),
    (
        "native_shard_base_port",
        Kind::Int {
            min: 0,
            max: u16::MAX as i64,
        },
    ),
    ("advertised_host", Kind::Text),
    ("rpc_addr", Kind::SocketAddr),
    // id@host:port,... ; the broker checks ids and addresses at start.
    ("seeds", Kind::Text),
    ("default_replication_factor", Kind::Int { min: 1, max: 5 }),
    ("smp", Kind::Int { min: 1, max: 4096 }),
    (
        "node_id",
        Kind::Int {
            min: 0,
            max: i32::MAX as i64,
        },
    ),
    ("auto_create_topics", Kind::Bool),
    (
        "num_partitions",
        Kind::Int {
            min: 1,
            max: PARTITIONS_PER_TOPIC_MAX,
        },
    ),
    ("allow_buffered_io", Kind::Bool),
    ("shared_device_flush", Kind::Bool),
    (
        "segment_bytes",
        Kind::Int {
            min: SEGMENT_BYTES_MIN,
            max: i64::MAX,
        },
    ),
    (
        "group_commit_min_interval_us",
        Kind::Int {
            min: 0,
            max: 100_000,
        },
    ),
    (
        "produce_slow_log_ms",
        Kind::Int {
            min: 0,
            max: i64::MAX,
        },
    ),
    (
        "message_max_bytes",
        Kind::Int {
            min: 1,
            max: strand_wire::BATCH_BYTES_MAX as i64,
        },
    ),
    (
        "compression_type",
        Kind::OneOf(&["uncompressed", "zstd", "lz4", "snappy", "gzip", "producer"]),
    ),
    (
        "log_message_timestamp_type",
        Kind::OneOf(&["CreateTime", "LogAppendTime"]),
    ),
    (
        "min_insync_replicas",
        Kind::Int {
            min: 1,
            max: i32::MAX as i64,
        },
    ),
    (
        "fetch_max_bytes",
        Kind::Int {
            min: 1,
            max: REQUEST_BYTES_MAX,
        },
    ),
    (
        "group_max_size",
        Kind::Int {
            min: 1,
            max: i64::MAX,
        },
    ),
    (
        "group_consumer_session_timeout_ms",
        Kind::Int {
            min: 1,
            max: i64::MAX,
        },
    ),
    (
        "group_consumer_heartbeat_interval_ms",
        Kind::Int {
            min: 1,
            max: i64::MAX,
        },
    ),
    ("group_share_enable", Kind::Bool),
    (
        "group_share_session_timeout_ms",
        Kind::Int {
            min: 1,
            max: i64::MAX,
        },
    ),
    (
        "group_share_heartbeat_interval_ms",
        Kind::Int {
            min: 1,
            max: i64::MAX,
        },
    ),
    (
        "group_share_record_lock_duration_ms",
        Kind::Int {
            min: 1_000,
            max: 3_600_000,
        },
    ),
    (
        "group_share_delivery_count_limit",
        Kind::Int { min: 2, max: 10 },
    ),
    (
        "group_share_max_size",
        Kind::Int {
            min: 1,
            max: i64::MAX,
        },
    ),
    (
        "group_share_partition_max_record_locks",
        Kind::Int {
            min: 100,
            max: 10_000,
        },
    ),
    (
        "groups_per_shard",
        Kind::Int {
            min: 1,
            max: i64::MAX,
        },
    ),
    (
        "in_flight_bytes_per_shard",
        Kind::Int {
            min: 1024 * 1024,
            max: i64::MAX,
        },
    ),
    (
        "max_connections",
        Kind::Int {
            min: 1,
            max: i64::MAX,
        },
    ),
    (
        "max_connections_per_ip",
        Kind::Int {
            min: 1,
            max: i64::MAX,
        },
    ),
    (
        "topic_partitions_per_shard",
        Kind::Int {
            min: 1,
            max: i64::MAX,
        },
    ),
    (
        "retention_check_interval_ms",
        Kind::Int {
            min: 1,
            max: i64::MAX,
        },
    ),
    (
        "log_cleaner_backoff_ms",
        Kind::Int {
            min: 1,
            max: i64::MAX,
        },
    ),
    (
        "log_cleaner_io_max_bytes_per_second",
        Kind::Int {
            min: 1,
            max: i64::MAX,
        },
    ),
    (
        "log_cleaner_io_busy_max_bytes_per_second",
        Kind::Int {
            min: 0,
            max: i64::MAX,
        },
    ),
    (
        "stall_report_ms",
        Kind::Int {
            min: 1,
            max: i64::MAX,
        },
    ),
    (
        "offsets_retention_minutes",
        Kind::Int {
            min: 1,
            max: i64::MAX,
        },
    ),
    (
        "offsets_retention_ms",
        Kind::Int {
            min: 1,
            max: i64::MAX,
        },
    ),
    (
        "offsets_retention_check_interval_ms",
        Kind::Int {
            min: 1,
            max: i64::MAX,
        },
    ),
    (
        "transaction_state_num_partitions",
        Kind::Int {
            min: 1,
            max: OFFSETS_TOPIC_PARTITIONS_MAX,
        },
    ),
    (
        "transaction_max_timeout_ms",
        Kind::Int {
            min: 1,
            max: i32::MAX as i64,
        },
    ),
    (
        "transaction_abort_check_interval_ms",
        Kind::Int {
            min: 1,
            max: i64::MAX,
        },
    ),
    (
        "transactional_id_expiration_ms",
        Kind::Int {
            min: 1,
            max: i64::MAX,
        },
    ),
    (
        "transaction_expiry_check_interval_ms",
        Kind::Int {
            min: 1,
            max: i64::MAX,
        },
    ),
    (
        "offsets_topic_num_partitions",
        Kind::Int {
            min: 1,
            max: OFFSETS_TOPIC_PARTITIONS_MAX,
        },
    ),
    (
        "group_initial_rebalance_delay_ms",
        Kind::Int {
            min: 0,
            max: REBALANCE_DELAY_MS_MAX,
        },
    ),
];

/// One problem, naming its key (empty key: the file as a whole).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Finding {
    /// The key.
    pub key: String,
    /// What is wrong.
    pub problem: String,
}

/// Checks config text (pure).
pub fn validate(text: &str) -> Vec<Finding> {
    let table: toml::Table = match text.parse() {
        Ok(t) => t,
        Err(e) => {
            return vec![Finding {
                key: String::new(),
                problem: format!("not valid TOML: {}", e.to_string().trim()),
            }]
        }
    };
    let mut out = Vec::new();
    let mut leaves = Vec::new();
    flatten("", &table, &mut leaves);
    for (key, value) in leaves {
        let key = &key;
        let Some((_, kind)) = KEYS.iter().find(|(k, _)| k == key) else {
            let hint = suggestion(key)
                .map(|s| format!(" (did you mean {s}?)"))
                .unwrap_or_default();
            out.push(Finding {
                key: key.clone(),
                problem: format!("unknown key{hint}"),
            });
            continue;
        };
        if let Some(problem) = check_value(*kind, value) {
            out.push(Finding {
                key: key.clone(),
                problem,
            });
        }
    }
    out
}

/// Every key with its value; a table that is not a known key is unfolded into dotted
/// names (`num.partitions = 3` is the table `num`), so findings name what the user wrote.
fn flatten<'a>(prefix: &str, table: &'a toml::Table, out: &mut Vec<(String, &'a toml::Value)>) {
    for (k, v) in table {
        let name = if prefix.is_empty() {
            k.clone()
        } else {
            format!("{prefix}.{k}")
        };
        match v {
            toml::Value::Table(t) if !KEYS.iter().any(|(known, _)| *known == name) => {
                flatten(&name, t, out)
            }
            _ => out.push((name, v)),
        }
    }
}

fn check_value(kind: Kind, value: &toml::Value) -> Option<String> {
    match (kind, value) {
        (Kind::Text, toml::Value::String(s)) if s.is_empty() => Some("must not be empty".into()),
        (Kind::Text, toml::Value::String(_)) => None,
        (Kind::SocketAddr, toml::Value::String(s)) => s
            .parse::<SocketAddr>()
            .err()
            .map(|_| format!("{s:?} is not IP:PORT (e.g. \"0.0.0.0:9092\")")),
        (Kind::Bool, toml::Value::Boolean(_)) => None,
        (Kind::OneOf(allowed), toml::Value::String(s)) if allowed.contains(&s.as_str()) => None,
        (Kind::OneOf(allowed), toml::Value::String(s)) => {
            Some(format!("{s:?} is not one of {}", allowed.join(", ")))
        }
        (Kind::Int { min, max }, toml::Value::Integer(n)) if (min..=max).contains(n) => None,
        (Kind::Int { min, max }, toml::Value::Integer(n)) => Some(if max == i64::MAX {
            format!("{n} is below the minimum {min}")
        } else {
            format!("{n} is outside {min}..={max}")
        }),
        (kind, other) => Some(format!(
            "expected {}, got {} {other}",
            kind_name(kind),
            other.type_str()
        )),
    }
}

fn kind_name(kind: Kind) -> &'static str {
    match kind {
        Kind::Text => "a string",
        Kind::SocketAddr => "a string IP:PORT",
        Kind::Bool => "true or false",
        Kind::Int { .. } => "an integer",
        Kind::OneOf(_) => "one of the listed strings",
    }
}

/// A known key close to `key` (dots or dashes for underscores, or one typo away).
fn suggestion(key: &str) -> Option<&'static str> {
    let norm = key.replace(['.', '-'], "_");
    KEYS.iter()
        .map(|(k, _)| *k)
        .find(|k| *k == norm || edit_distance(k, &norm) <= 2)
}

fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut cur = vec![i + 1];
        for (j, cb) in b.iter().enumerate() {
            let sub = prev[j] + usize::from(ca != *cb);
            cur.push(sub.min(prev[j + 1] + 1).min(cur[j] + 1));
        }
        prev = cur;
    }
    prev[b.len()]
}

/// Findings as text lines `KEY: problem`.
pub fn render(path: &str, findings: &[Finding]) -> String {
    if findings.is_empty() {
        return format!("{path}: ok\n");
    }
    let mut out = String::new();
    for f in findings {
        if f.key.is_empty() {
            out.push_str(&format!("{path}: {}\n", f.problem));
        } else {
            out.push_str(&format!("{path}: {}: {}\n", f.key, f.problem));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(text: &str, expected: &[(&str, &str)]) {
        let got = validate(text);
        assert_eq!(got.len(), expected.len(), "{text}: {got:?}");
        for (f, (key, fragment)) in got.iter().zip(expected) {
            assert_eq!(f.key, *key, "{text}: {got:?}");
            assert!(
                f.problem.contains(fragment),
                "{text}: {f:?} lacks {fragment:?}"
            );
        }
    }

    #[test]
    fn findings_name_their_keys() {
        check("num_partitions = 3\nkafka_addr = \"0.0.0.0:9092\"\n", &[]);
        check("nonsense = 1\n", &[("nonsense", "unknown key")]);
        check(
            "num.partitions = 3\n",
            &[("num.partitions", "did you mean num_partitions")],
        );
        check(
            "num_partitions = 0\n",
            &[("num_partitions", "outside 1..=10000")],
        );
        check(
            "smp = \"4\"\n",
            &[("smp", "expected an integer, got string")],
        );
        check(
            "kafka_addr = \"localhost\"\n",
            &[("kafka_addr", "not IP:PORT")],
        );
        check(
            "segment_bytes = 10\n",
            &[("segment_bytes", "below the minimum 4096")],
        );
        check(
            "auto_create_topics = 1\n",
            &[("auto_create_topics", "true or false")],
        );
        check("x = \n", &[("", "not valid TOML")]);
    }

    /// The broker's `FileConfig` fields, read from its source text.
    fn broker_file_config_keys() -> Vec<String> {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../broker/src/common/config.rs"
        );
        let text =
            std::fs::read_to_string(path).expect("broker/src/common/config.rs is in the workspace");
        let body = text
            .split_once("struct FileConfig {")
            .and_then(|(_, rest)| rest.split_once("\n}"))
            .map(|(body, _)| body)
            .expect("broker/src/common/config.rs defines struct FileConfig { ... }");
        body.lines()
            .map(str::trim)
            .filter(|l| !l.starts_with("//") && !l.starts_with('#'))
            .filter_map(|l| l.split_once(':').map(|(k, _)| k.trim()))
            .map(|k| k.trim_start_matches("pub ").to_string())
            .filter(|k| !k.is_empty())
            .collect()
    }

    #[test]
    fn every_broker_config_key_is_known() {
        let keys = broker_file_config_keys();
        assert!(keys.len() >= 10, "parsed too few keys: {keys:?}");
        for k in &keys {
            assert!(
                KEYS.iter().any(|(known, _)| known == k),
                "broker/src/common/config.rs FileConfig has key {k:?} that config validate does not \
                 know: add it to tools/src/config_validate.rs KEYS"
            );
        }
        for (known, _) in KEYS {
            assert!(
                keys.iter().any(|k| k == known),
                "config validate knows {known:?}, which broker/src/common/config.rs no longer has"
            );
        }
    }
}
