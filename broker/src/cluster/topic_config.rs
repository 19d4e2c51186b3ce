//! The topic configs Strand understands: names, types, defaults, validation, and how they
//! map onto the storage engine's `LogConfig`. Unknown or unimplemented configs are refused
//! with INVALID_CONFIG rather than silently accepted.

use std::collections::BTreeMap;

use strand_storage::LogConfig;

use crate::common::config::Config;

/// Kafka's DescribeConfigs config types.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// INT (3).
    Int,
    /// LONG (5).
    Long,
    /// LIST (7).
    List,
}

impl Kind {
    /// The wire value.
    pub fn code(self) -> i8 {
        match self {
            Kind::Int => 3,
            Kind::Long => 5,
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
        doc: "delete (compaction is not implemented yet)",
    },
    Def {
        name: "max.message.bytes",
        kind: Kind::Int,
        doc: "largest record batch accepted",
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
        ("cleanup.policy", _) => match value.trim() {
            "delete" => Ok(()),
            other => Err(format!("cleanup.policy '{other}' is not supported (only delete; compaction is not implemented)")),
        },
        ("segment.bytes", _) => num(strand_storage::config::SEGMENT_BYTES_MIN as i64, i64::from(i32::MAX)),
        ("max.message.bytes", _) => num(0, strand_wire::BATCH_BYTES_MAX as i64),
        ("segment.ms", _) => num(1, i64::MAX),
        (_, Kind::Long) => num(-1, i64::MAX),
        (_, Kind::Int) => num(0, i64::from(i32::MAX)),
        (_, Kind::List) => Ok(()),
    }
}

/// The storage config and max batch size for a topic with `overrides`.
pub fn log_config(broker: &Config, overrides: &BTreeMap<String, String>) -> (LogConfig, usize) {
    let mut lc = LogConfig {
        segment_bytes: broker.segment_bytes,
        allow_buffered_io: broker.allow_buffered_io,
        ..LogConfig::default()
    };
    let num = |k: &str| overrides.get(k).and_then(|v| v.trim().parse::<i64>().ok());
    if let Some(v) = num("segment.bytes").and_then(|v| u64::try_from(v).ok()) {
        lc.segment_bytes = v;
    }
    if let Some(v) = num("segment.ms") {
        lc.segment_ms = v;
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
