//! The topic configs Strand understands: names, types, defaults, validation, and how they
//! map onto the storage engine's `LogConfig`. Unknown or unimplemented configs are refused
//! with INVALID_CONFIG rather than silently accepted.

use std::collections::BTreeMap;

use strand_storage::LogConfig;

use crate::common::config::Config;
use crate::partition::cleaner::{
    CleanupConfig, DELETE_RETENTION_MS_DEFAULT, MIN_CLEANABLE_DIRTY_RATIO_DEFAULT,
};
use crate::partition::stamp::{BatchPolicy, TopicCompression};

/// Kafka's DescribeConfigs config types.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// STRING (2).
    String,
    /// INT (3).
    Int,
    /// LONG (5).
    Long,
    /// DOUBLE (6).
    Double,
    /// LIST (7).
    List,
}

impl Kind {
    /// The wire value.
    pub fn code(self) -> i8 {
        match self {
            Kind::String => 2,
            Kind::Int => 3,
            Kind::Long => 5,
            Kind::Double => 6,
            Kind::List => 7,
        }
    }
}

/// One topic config.
pub struct Def {
    /// Kafka name.
    pub name: &'static str,
    /// Type.
    pub kind: Kind,
    /// Documentation.
    pub doc: &'static str,
}

/// Every topic config we implement.
pub const TOPIC_CONFIGS: &[Def] = &[
    Def {
        name: "cleanup.policy",
        kind: Kind::List,
        doc: "delete (retention), compact (keep the latest record per key), or compact,delete",
    },
    Def {
        name: "compression.type",
        kind: Kind::String,
        doc: "producer (keep the producer's codec), or uncompressed, gzip, snappy, lz4, zstd (re-compress every batch with it)",
    },
    Def {
        name: "delete.retention.ms",
        kind: Kind::Long,
        doc: "how long a tombstone stays in a compacted topic after the cleaner first saw it",
    },
    Def {
        name: "flush.messages",
        kind: Kind::Long,
        doc: "Kafka's bound on records between fsyncs: Strand makes every batch durable as it writes it (acks=all answers after that), which meets any value",
    },
    Def {
        name: "flush.ms",
        kind: Kind::Long,
        doc: "Kafka's bound on the time between fsyncs: Strand makes every batch durable as it writes it (acks=all answers after that), which meets any value",
    },
    Def {
        name: "max.compaction.lag.ms",
        kind: Kind::Long,
        doc: "uncleaned records older than this make the partition due for compaction",
    },
    Def {
        name: "max.message.bytes",
        kind: Kind::Int,
        doc: "largest record batch accepted",
    },
    Def {
        name: "message.timestamp.type",
        kind: Kind::String,
        doc: "CreateTime (the producer's timestamps) or LogAppendTime (the broker stamps each batch with the time it appended it)",
    },
    Def {
        name: "min.insync.replicas",
        kind: Kind::Int,
        doc: "replicas that must be in sync for an acks=all produce to be taken (else NOT_ENOUGH_REPLICAS); an acknowledged write is on a Raft majority",
    },
    Def {
        name: "min.cleanable.dirty.ratio",
        kind: Kind::Double,
        doc: "share of uncleaned bytes in the log that makes a compaction pass due",
    },
    Def {
        name: "min.compaction.lag.ms",
        kind: Kind::Long,
        doc: "records younger than this are not compacted",
    },
    Def {
        name: "retention.bytes",
        kind: Kind::Long,
        doc: "delete old segments above this size; -1 = no limit",
    },
    Def {
        name: "retention.ms",
        kind: Kind::Long,
        doc: "delete segments older than this; -1 = forever",
    },
    Def {
        name: "segment.bytes",
        kind: Kind::Int,
        doc: "roll the active segment at this size",
    },
    Def {
        name: "segment.ms",
        kind: Kind::Long,
        doc: "roll the active segment at this age",
    },
];

/// The config named `name`.
pub fn def(name: &str) -> Option<&'static Def> {
    TOPIC_CONFIGS.iter().find(|d| d.name == name)
}

/// The default value of a topic config on this broker, and whether it comes from the
/// broker's own configuration (rather than a built-in default).
pub fn default_value(broker: &Config, name: &str) -> (String, bool) {
    let d = LogConfig::default();
    match name {
        "cleanup.policy" => ("delete".into(), false),
        "compression.type" => (
            broker.compression_type.clone(),
            broker.compression_type != crate::common::config::COMPRESSION_TYPE_DEFAULT,
        ),
        "delete.retention.ms" => (DELETE_RETENTION_MS_DEFAULT.to_string(), false),
        "flush.messages" | "flush.ms" => (i64::MAX.to_string(), false),
        "max.compaction.lag.ms" => (i64::MAX.to_string(), false),
        "message.timestamp.type" => (
            broker.log_message_timestamp_type.clone(),
            broker.log_message_timestamp_type
                != crate::common::config::MESSAGE_TIMESTAMP_TYPE_DEFAULT,
        ),
        "min.cleanable.dirty.ratio" => (MIN_CLEANABLE_DIRTY_RATIO_DEFAULT.to_string(), false),
        "min.compaction.lag.ms" => ("0".into(), false),
        "min.insync.replicas" => (
            broker.min_insync_replicas.to_string(),
            broker.min_insync_replicas != 1,
        ),
        "max.message.bytes" => (
            broker.message_max_bytes.to_string(),
            broker.message_max_bytes != crate::common::config::MESSAGE_MAX_BYTES_DEFAULT,
        ),
        "retention.bytes" => (d.retention_bytes.to_string(), false),
        "retention.ms" => (d.retention_ms.to_string(), false),
        "segment.bytes" => (
            broker.segment_bytes.to_string(),
            broker.segment_bytes != d.segment_bytes,
        ),
        "segment.ms" => (d.segment_ms.to_string(), false),
        _ => (String::new(), false),
    }
}

/// Checks a value for a topic config; the error is the message for INVALID_CONFIG.
pub fn validate(name: &str, value: &str) -> Result<(), String> {
    let Some(d) = def(name) else {
        return Err(format!("unknown or unsupported topic config {name}"));
    };
    let num = |lo: i64, hi: i64| match value.trim().parse::<i64>() {
        Ok(v) if (lo..=hi).contains(&v) => Ok(()),
        _ => Err(format!(
            "{name} must be an integer in {lo}..={hi}, got '{value}'"
        )),
    };
    match (d.name, d.kind) {
        ("cleanup.policy", _) => parse_policy(value).map(|_| ()),
        ("compression.type", _) => TopicCompression::parse(value).map(|_| ()).ok_or_else(|| {
            format!(
                "compression.type must be one of {}, got '{value}'",
                crate::common::config::COMPRESSION_TYPES.join(", ")
            )
        }),
        ("message.timestamp.type", _) => {
            let types = crate::common::config::MESSAGE_TIMESTAMP_TYPES;
            if types.contains(&value.trim()) {
                Ok(())
            } else {
                Err(format!(
                    "message.timestamp.type must be one of {}, got '{value}'",
                    types.join(", ")
                ))
            }
        }
        ("min.cleanable.dirty.ratio", _) => match value.trim().parse::<f64>() {
            Ok(v) if (0.0..=1.0).contains(&v) => Ok(()),
            _ => Err(format!("{name} must be a number in 0..=1, got '{value}'")),
        },
        ("segment.bytes", _) => num(
            strand_storage::config::SEGMENT_BYTES_MIN as i64,
            i64::from(i32::MAX),
        ),
        ("max.message.bytes", _) => num(0, strand_wire::BATCH_BYTES_MAX as i64),
        ("min.insync.replicas", _) => num(1, i64::from(i32::MAX)),
        ("segment.ms" | "max.compaction.lag.ms" | "flush.messages", _) => num(1, i64::MAX),
        ("flush.ms", _) => num(0, i64::MAX),
        ("delete.retention.ms" | "min.compaction.lag.ms", _) => num(0, i64::MAX),
        (_, Kind::Long) => num(-1, i64::MAX),
        (_, Kind::Int) => num(0, i64::from(i32::MAX)),
        (_, Kind::List | Kind::String | Kind::Double) => Ok(()),
    }
}

/// Checks what holds between a topic's configs (`all`: every override it would have):
/// `max.compaction.lag.ms` is not below `min.compaction.lag.ms`, as Kafka requires.
pub fn validate_set(all: &BTreeMap<String, String>) -> Result<(), String> {
    let c = cleanup_config(all);
    if c.max_compaction_lag_ms < c.min_compaction_lag_ms {
        return Err(format!(
            "max.compaction.lag.ms {} must not be below min.compaction.lag.ms {}",
            c.max_compaction_lag_ms, c.min_compaction_lag_ms
        ));
    }
    Ok(())
}

/// `cleanup.policy` as (compact, delete): a comma-separated list of `compact` and
/// `delete`, each at most once, not empty.
pub fn parse_policy(value: &str) -> Result<(bool, bool), String> {
    let (mut compact, mut delete) = (false, false);
    for item in value.split(',').map(str::trim) {
        let seen = match item {
            "compact" => std::mem::replace(&mut compact, true),
            "delete" => std::mem::replace(&mut delete, true),
            other => {
                return Err(format!(
                    "cleanup.policy '{other}' is not one of compact, delete"
                ))
            }
        };
        if seen {
            return Err(format!("cleanup.policy lists {item} twice"));
        }
    }
    Ok((compact, delete))
}

/// The cleanup settings of a topic with `overrides` (validated values; a value that
/// does not parse keeps Kafka's default).
pub fn cleanup_config(overrides: &BTreeMap<String, String>) -> CleanupConfig {
    let mut c = CleanupConfig::default();
    if let Some(Ok((compact, delete))) = overrides.get("cleanup.policy").map(|v| parse_policy(v)) {
        c.compact = compact;
        c.delete = delete;
    }
    let num = |k: &str| overrides.get(k).and_then(|v| v.trim().parse::<i64>().ok());
    c.delete_retention_ms = num("delete.retention.ms").unwrap_or(c.delete_retention_ms);
    c.min_compaction_lag_ms = num("min.compaction.lag.ms").unwrap_or(c.min_compaction_lag_ms);
    c.max_compaction_lag_ms = num("max.compaction.lag.ms").unwrap_or(c.max_compaction_lag_ms);
    if let Some(r) = overrides
        .get("min.cleanable.dirty.ratio")
        .and_then(|v| v.trim().parse::<f64>().ok())
    {
        c.min_cleanable_dirty_ratio = r;
    }
    c
}

/// What a topic with `overrides` does to produced batches (`message.timestamp.type`,
/// `compression.type`; the broker's defaults where it sets none).
pub fn batch_policy(broker: &Config, overrides: &BTreeMap<String, String>) -> BatchPolicy {
    let value = |name: &str| {
        overrides
            .get(name)
            .cloned()
            .unwrap_or_else(|| default_value(broker, name).0)
    };
    BatchPolicy {
        log_append_time: value("message.timestamp.type").trim() == "LogAppendTime",
        compression: TopicCompression::parse(&value("compression.type")).unwrap_or_default(),
    }
}

/// `min.insync.replicas` of a topic with `overrides` (the broker's default, 1 unless
/// set, where it sets none).
pub fn min_insync_replicas(broker: &Config, overrides: &BTreeMap<String, String>) -> usize {
    overrides
        .get("min.insync.replicas")
        .and_then(|v| v.trim().parse::<usize>().ok())
        .filter(|n| *n >= 1)
        .unwrap_or(broker.min_insync_replicas)
}

/// The storage config and max batch size for a topic with `overrides`.
pub fn log_config(broker: &Config, overrides: &BTreeMap<String, String>) -> (LogConfig, usize) {
    let mut lc = LogConfig {
        segment_bytes: broker.segment_bytes,
        allow_buffered_io: broker.allow_buffered_io,
        shared_device_flush: broker.shared_device_flush,
        flush_min_interval_us: broker.group_commit_min_interval_us,
        ..LogConfig::default()
    };
    let num = |k: &str| overrides.get(k).and_then(|v| v.trim().parse::<i64>().ok());
    if let Some(v) = num("segment.bytes").and_then(|v| u64::try_from(v).ok()) {
        lc.segment_bytes = v;
    }
    if let Some(v) = num("segment.ms") {
        lc.segment_ms = v;
    }
    // As Kafka: a compacted topic's active segment rolls by `max.compaction.lag.ms` at
    // the latest, so its records become cleanable in time.
    let cleanup = cleanup_config(overrides);
    if cleanup.compact {
        lc.segment_ms = lc.segment_ms.min(cleanup.max_compaction_lag_ms);
    }
    if let Some(v) = num("retention.ms") {
        lc.retention_ms = v;
    }
    if let Some(v) = num("retention.bytes") {
        lc.retention_bytes = v;
    }
    let max = num("max.message.bytes")
        .and_then(|v| usize::try_from(v).ok())
        .unwrap_or(broker.message_max_bytes);
    (lc, max)
}
