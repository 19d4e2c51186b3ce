//! Dynamic broker configs (`kafka-configs.sh --entity-type brokers`: IncrementalAlterConfigs
//! and AlterConfigs on a BROKER resource): set for one node (resource name: its id) or as
//! the cluster default (resource name ""), kept in the controller's metadata
//! (`Metadata::broker_configs`), so every node sees them and a restart keeps them.
//!
//! A node's value of a config: its own dynamic value, else the cluster default's, else its
//! static setting (flags, file), else Kafka's default. Most dynamic configs are Kafka's
//! synonyms of topic configs (`log.retention.ms` for `retention.ms`, ...): a topic that
//! does not set one runs with the node's dynamic value ([`topic_overrides`]), as on Kafka.
//! The Kerberos login settings are kept and described for Kafka's tools and change
//! nothing: Strand offers no GSSAPI mechanism (a Kafka broker without GSSAPI takes them too).
//!
//! Invariant: a stored value passed [`validate`]: a dynamic config's name and a value its
//! topic synonym (or its own type) accepts.

use std::collections::BTreeMap;

use crate::cluster::topic_config::{self, Kind};

/// The resource name of the cluster-wide default (`--entity-default`).
pub const CLUSTER_DEFAULT: &str = "";

/// ConfigSource of a value set for this node (`DYNAMIC_BROKER_CONFIG`).
pub const SOURCE_DYNAMIC_BROKER: i8 = 2;
/// ConfigSource of a value set as the cluster default (`DYNAMIC_DEFAULT_BROKER_CONFIG`).
pub const SOURCE_DYNAMIC_DEFAULT: i8 = 3;

/// One config that can be set on a running broker.
pub struct Def {
    /// Kafka's broker config name.
    pub name: &'static str,
    /// The topic config it is the default of, if it is a log default.
    pub topic: Option<&'static str>,
    /// Type (of a log default: its topic config's).
    pub kind: Kind,
    /// Kafka's default (a log default's comes from its topic config).
    pub default: &'static str,
}

const fn log_default(name: &'static str, topic: &'static str, kind: Kind) -> Def {
    Def {
        name,
        topic: Some(topic),
        kind,
        default: "",
    }
}

const fn kerberos(name: &'static str, kind: Kind, default: &'static str) -> Def {
    Def {
        name,
        topic: None,
        kind,
        default,
    }
}

/// Every broker config Strand takes while it runs.
pub const DYNAMIC_CONFIGS: &[Def] = &[
    log_default("log.cleanup.policy", "cleanup.policy", Kind::List),
    log_default("compression.type", "compression.type", Kind::String),
    log_default(
        "log.cleaner.delete.retention.ms",
        "delete.retention.ms",
        Kind::Long,
    ),
    log_default("log.flush.interval.messages", "flush.messages", Kind::Long),
    log_default("log.flush.interval.ms", "flush.ms", Kind::Long),
    log_default(
        "log.cleaner.max.compaction.lag.ms",
        "max.compaction.lag.ms",
        Kind::Long,
    ),
    log_default("message.max.bytes", "max.message.bytes", Kind::Int),
    log_default(
        "log.message.timestamp.type",
        "message.timestamp.type",
        Kind::String,
    ),
    log_default(
        "log.cleaner.min.cleanable.ratio",
        "min.cleanable.dirty.ratio",
        Kind::Double,
    ),
    log_default(
        "log.cleaner.min.compaction.lag.ms",
        "min.compaction.lag.ms",
        Kind::Long,
    ),
    log_default("min.insync.replicas", "min.insync.replicas", Kind::Int),
    log_default("log.retention.bytes", "retention.bytes", Kind::Long),
    log_default("log.retention.ms", "retention.ms", Kind::Long),
    log_default("log.segment.bytes", "segment.bytes", Kind::Int),
    log_default("log.roll.ms", "segment.ms", Kind::Long),
    kerberos("sasl.kerberos.kinit.cmd", Kind::String, "/usr/bin/kinit"),
    kerberos("sasl.kerberos.min.time.before.relogin", Kind::Long, "60000"),
    kerberos("sasl.kerberos.ticket.renew.jitter", Kind::Double, "0.05"),
    kerberos(
        "sasl.kerberos.ticket.renew.window.factor",
        Kind::Double,
        "0.8",
    ),
];

/// The dynamic config named `name`.
pub fn def(name: &str) -> Option<&'static Def> {
    DYNAMIC_CONFIGS.iter().find(|d| d.name == name)
}

/// The broker config whose value a topic that does not set `topic_name` runs with.
pub fn synonym_of(topic_name: &str) -> Option<&'static str> {
    DYNAMIC_CONFIGS
        .iter()
        .find(|d| d.topic == Some(topic_name))
        .map(|d| d.name)
}

/// Why a change of a broker config is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// INVALID_REQUEST (42), as Kafka answers for a config it cannot change while running.
    #[error("{0} cannot be updated dynamically (dynamic broker configs: log defaults such as log.retention.ms, and the sasl.kerberos login settings)")]
    NotDynamic(String),
    /// INVALID_CONFIG (40).
    #[error("{0}")]
    InvalidValue(String),
    /// INVALID_REQUEST (42): the resource name is neither a node id nor "".
    #[error("a broker resource's name is a node id, or empty for the cluster default; got '{0}'")]
    InvalidResource(String),
}

impl Refusal {
    /// The Kafka error code.
    pub fn kafka_code(&self) -> i16 {
        match self {
            Refusal::NotDynamic(_) | Refusal::InvalidResource(_) => 42,
            Refusal::InvalidValue(_) => 40,
        }
    }
}

/// Checks a broker resource's name: a node id or the cluster default.
pub fn validate_resource(name: &str) -> Result<(), Refusal> {
    if name == CLUSTER_DEFAULT || name.parse::<i32>().is_ok_and(|id| id >= 0) {
        Ok(())
    } else {
        Err(Refusal::InvalidResource(name.to_string()))
    }
}

/// Checks a value for a dynamic broker config.
pub fn validate(name: &str, value: &str) -> Result<(), Refusal> {
    let Some(d) = def(name) else {
        return Err(Refusal::NotDynamic(name.to_string()));
    };
    if let Some(topic) = d.topic {
        return topic_config::validate(topic, value)
            .map_err(|m| Refusal::InvalidValue(format!("{name} (the default of {topic}): {m}")));
    }
    let ok = match d.kind {
        Kind::Long | Kind::Int => value.trim().parse::<i64>().is_ok_and(|v| v >= 0),
        Kind::Double => value
            .trim()
            .parse::<f64>()
            .is_ok_and(|v| v.is_finite() && v >= 0.0),
        Kind::String | Kind::List => true,
    };
    if ok {
        Ok(())
    } else {
        Err(Refusal::InvalidValue(format!(
            "{name} must be a non-negative number, got '{value}'"
        )))
    }
}

/// The dynamic values node `node` runs with, by broker config name: its own (source
/// [`SOURCE_DYNAMIC_BROKER`]), else the cluster default's ([`SOURCE_DYNAMIC_DEFAULT`]).
pub fn dynamic_values(
    all: &BTreeMap<String, BTreeMap<String, String>>,
    node: i32,
) -> BTreeMap<&str, (&str, i8)> {
    let mut out = BTreeMap::new();
    let layers = [
        (all.get(CLUSTER_DEFAULT), SOURCE_DYNAMIC_DEFAULT),
        (all.get(&node.to_string()), SOURCE_DYNAMIC_BROKER),
    ];
    for (values, source) in layers {
        for (k, v) in values.into_iter().flatten() {
            out.insert(k.as_str(), (v.as_str(), source));
        }
    }
    out
}

/// The overrides a topic's partitions run with on node `node`: the topic's own, and for
/// every log default set dynamically that the topic does not set, the node's value.
pub fn topic_overrides(
    all: &BTreeMap<String, BTreeMap<String, String>>,
    node: i32,
    topic: &BTreeMap<String, String>,
) -> BTreeMap<String, String> {
    let mut out = topic.clone();
    for (name, (value, _)) in dynamic_values(all, node) {
        if let Some(t) = def(name).and_then(|d| d.topic) {
            out.entry(t.to_string())
                .or_insert_with(|| value.to_string());
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn configs(entries: &[(&str, &str, &str)]) -> BTreeMap<String, BTreeMap<String, String>> {
        let mut all: BTreeMap<String, BTreeMap<String, String>> = BTreeMap::new();
        for (res, k, v) in entries {
            all.entry((*res).to_string())
                .or_default()
                .insert((*k).to_string(), (*v).to_string());
        }
        all
    }

    #[test]
    fn a_nodes_own_value_wins_over_the_cluster_default_and_the_topics_over_both() {
        let all = configs(&[
            ("", "log.retention.ms", "1000"),
            ("", "log.segment.bytes", "2097152"),
            ("2", "log.retention.ms", "2000"),
            ("3", "sasl.kerberos.min.time.before.relogin", "58000"),
        ]);
        let none = BTreeMap::new();
        let on1 = topic_overrides(&all, 1, &none);
        assert_eq!(on1.get("retention.ms").map(String::as_str), Some("1000"));
        assert_eq!(
            on1.get("segment.bytes").map(String::as_str),
            Some("2097152")
        );
        let on2 = topic_overrides(&all, 2, &none);
        assert_eq!(on2.get("retention.ms").map(String::as_str), Some("2000"));
        // Not a log default: never a topic override.
        assert_eq!(topic_overrides(&all, 3, &none).len(), 2);
        let own: BTreeMap<String, String> = [("retention.ms".to_string(), "5".to_string())].into();
        assert_eq!(
            topic_overrides(&all, 2, &own)
                .get("retention.ms")
                .map(String::as_str),
            Some("5")
        );
        let values = dynamic_values(&all, 2);
        assert_eq!(
            values.get("log.retention.ms"),
            Some(&("2000", SOURCE_DYNAMIC_BROKER))
        );
        assert_eq!(
            values.get("log.segment.bytes"),
            Some(&("2097152", SOURCE_DYNAMIC_DEFAULT))
        );
    }

    #[test]
    fn values_are_checked_as_their_topic_synonyms_are() {
        assert_eq!(validate("log.retention.ms", "60000"), Ok(()));
        assert_eq!(validate("log.cleanup.policy", "compact,delete"), Ok(()));
        assert_eq!(
            validate("sasl.kerberos.min.time.before.relogin", "58000"),
            Ok(())
        );
        assert!(matches!(
            validate("log.cleanup.policy", "shred"),
            Err(Refusal::InvalidValue(_))
        ));
        assert!(matches!(
            validate("log.segment.bytes", "12"),
            Err(Refusal::InvalidValue(_))
        ));
        assert!(matches!(
            validate("sasl.kerberos.ticket.renew.jitter", "-1"),
            Err(Refusal::InvalidValue(_))
        ));
        let refused = validate("broker.id", "7").unwrap_err();
        assert_eq!(refused.kafka_code(), 42);
        assert!(validate("background.threads", "9").is_err());
        assert_eq!(validate_resource(""), Ok(()));
        assert_eq!(validate_resource("3"), Ok(()));
        assert!(validate_resource("broker-3").is_err());
    }

    #[test]
    fn every_log_default_names_a_topic_config() {
        for d in DYNAMIC_CONFIGS {
            if let Some(t) = d.topic {
                let topic =
                    topic_config::def(t).unwrap_or_else(|| panic!("{t} is no topic config"));
                assert_eq!(topic.kind, d.kind, "{}", d.name);
                assert_eq!(synonym_of(t), Some(d.name));
            }
        }
    }
}
