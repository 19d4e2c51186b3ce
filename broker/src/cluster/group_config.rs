//! Group configs (Kafka's `GroupConfig`, set with IncrementalAlterConfigs on a GROUP
//! resource): the share-group ones of KIP-932. Each overrides the broker's `group.share.*`
//! default for one group; kept in the controller's metadata (`Metadata::group_configs`).
//!
//! Invariant: a stored value passed [`validate`]: a known key, a value of its type within
//! Kafka's bounds.

use std::collections::BTreeMap;

use crate::common::config::Config;

/// Where a share group starts reading a partition it never read (Kafka's default latest).
pub const SHARE_AUTO_OFFSET_RESET: &str = "share.auto.offset.reset";
/// How long a member holds records it was given.
pub const SHARE_RECORD_LOCK_DURATION_MS: &str = "share.record.lock.duration.ms";
/// Session timeout of the group's members.
pub const SHARE_SESSION_TIMEOUT_MS: &str = "share.session.timeout.ms";
/// Heartbeat interval told to the group's members.
pub const SHARE_HEARTBEAT_INTERVAL_MS: &str = "share.heartbeat.interval.ms";
/// Which records the group reads (Strand serves read_uncommitted only so far).
pub const SHARE_ISOLATION_LEVEL: &str = "share.isolation.level";

/// Every group config this broker knows: name, and (min, max) for the numeric ones.
const NUMERIC: &[(&str, u64, u64)] = &[
    (SHARE_RECORD_LOCK_DURATION_MS, 1_000, 3_600_000),
    (SHARE_SESSION_TIMEOUT_MS, 1, 3_600_000),
    (SHARE_HEARTBEAT_INTERVAL_MS, 1, 3_600_000),
];

/// Checks values to set; the error is INVALID_CONFIG's message.
pub fn validate(set: &BTreeMap<String, String>) -> Result<(), String> {
    for (k, v) in set {
        if let Some(&(_, min, max)) = NUMERIC.iter().find(|(n, ..)| n == k) {
            let n: u64 = v
                .parse()
                .map_err(|_| format!("{k} must be a number, not {v:?}"))?;
            if !(min..=max).contains(&n) {
                return Err(format!("{k} must be in {min}..={max}"));
            }
            continue;
        }
        match (k.as_str(), v.as_str()) {
            (SHARE_AUTO_OFFSET_RESET, "earliest" | "latest") => {}
            (SHARE_AUTO_OFFSET_RESET, _) => {
                return Err(format!(
                    "{k} must be earliest or latest (by_duration is not supported)"
                ))
            }
            (SHARE_ISOLATION_LEVEL, "read_uncommitted") => {}
            (SHARE_ISOLATION_LEVEL, _) => {
                return Err(format!("{k}: only read_uncommitted is supported"))
            }
            _ => return Err(format!("unknown group config {k}")),
        }
    }
    Ok(())
}

/// The group configs of one group, with their defaults from the broker config, as
/// DescribeConfigs shows them: `(name, value, is_default)`.
pub fn effective(
    config: &Config,
    set: Option<&BTreeMap<String, String>>,
) -> Vec<(&'static str, String, bool)> {
    let defaults: [(&'static str, String); 5] = [
        (SHARE_AUTO_OFFSET_RESET, "latest".to_string()),
        (SHARE_ISOLATION_LEVEL, "read_uncommitted".to_string()),
        (
            SHARE_RECORD_LOCK_DURATION_MS,
            config.group_share_record_lock_duration_ms.to_string(),
        ),
        (
            SHARE_SESSION_TIMEOUT_MS,
            config.group_share_session_timeout_ms.to_string(),
        ),
        (
            SHARE_HEARTBEAT_INTERVAL_MS,
            config.group_share_heartbeat_interval_ms.to_string(),
        ),
    ];
    defaults
        .into_iter()
        .map(|(k, default)| match set.and_then(|s| s.get(k)) {
            Some(v) => (k, v.clone(), false),
            None => (k, default, true),
        })
        .collect()
}

/// The numeric config `key` of a group, or `default`.
pub fn number(set: Option<&BTreeMap<String, String>>, key: &str, default: u64) -> u64 {
    set.and_then(|s| s.get(key))
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Whether a group reads a partition it never read from its start (`earliest`).
pub fn from_earliest(set: Option<&BTreeMap<String, String>>) -> bool {
    set.and_then(|s| s.get(SHARE_AUTO_OFFSET_RESET))
        .is_some_and(|v| v == "earliest")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn one(k: &str, v: &str) -> BTreeMap<String, String> {
        BTreeMap::from([(k.to_string(), v.to_string())])
    }

    #[test]
    fn only_known_keys_with_values_in_bounds_are_accepted() {
        assert!(validate(&one(SHARE_AUTO_OFFSET_RESET, "earliest")).is_ok());
        assert!(validate(&one(SHARE_AUTO_OFFSET_RESET, "sometime")).is_err());
        assert!(validate(&one(SHARE_RECORD_LOCK_DURATION_MS, "2000")).is_ok());
        assert!(validate(&one(SHARE_RECORD_LOCK_DURATION_MS, "999")).is_err());
        assert!(validate(&one(SHARE_RECORD_LOCK_DURATION_MS, "soon")).is_err());
        assert!(validate(&one(SHARE_ISOLATION_LEVEL, "read_committed")).is_err());
        assert!(validate(&one("consumer.session.timeout.ms", "45000")).is_err());
    }

    #[test]
    fn a_set_value_overrides_the_broker_default() {
        let set = one(SHARE_RECORD_LOCK_DURATION_MS, "2000");
        assert_eq!(
            number(Some(&set), SHARE_RECORD_LOCK_DURATION_MS, 30_000),
            2000
        );
        assert_eq!(number(None, SHARE_RECORD_LOCK_DURATION_MS, 30_000), 30_000);
        assert!(from_earliest(Some(&one(
            SHARE_AUTO_OFFSET_RESET,
            "earliest"
        ))));
        assert!(!from_earliest(None));
    }
}
