//! Group configs (Kafka's `GroupConfig`, set with IncrementalAlterConfigs on a GROUP
//! resource): the consumer-group ones of KIP-848 and the share-group ones of KIP-932. Each
//! overrides the broker's `group.consumer.*` or `group.share.*` default for one group; kept in the controller's metadata (`Metadata::group_configs`).
//!
//! Invariant: a stored value passed [`validate`]: a known key, a value of its type within
//! Kafka's bounds.

use std::collections::BTreeMap;

use crate::common::config::Config;

/// Session timeout of a consumer-protocol group's members (KIP-848: the broker decides it).
pub const CONSUMER_SESSION_TIMEOUT_MS: &str = "consumer.session.timeout.ms";
/// Heartbeat interval told to a consumer-protocol group's members.
pub const CONSUMER_HEARTBEAT_INTERVAL_MS: &str = "consumer.heartbeat.interval.ms";
/// Where a share group starts reading a partition it never read (Kafka's default latest).
pub const SHARE_AUTO_OFFSET_RESET: &str = "share.auto.offset.reset";
/// How long a member holds records it was given.
pub const SHARE_RECORD_LOCK_DURATION_MS: &str = "share.record.lock.duration.ms";
/// Session timeout of the group's members.
pub const SHARE_SESSION_TIMEOUT_MS: &str = "share.session.timeout.ms";
/// Heartbeat interval told to the group's members.
pub const SHARE_HEARTBEAT_INTERVAL_MS: &str = "share.heartbeat.interval.ms";
/// Which records the group reads: `read_uncommitted` (Kafka's default) or
/// `read_committed` (up to the last stable offset; aborted transactions' records are never
/// delivered).
pub const SHARE_ISOLATION_LEVEL: &str = "share.isolation.level";

/// Every group config this broker knows: name, and (min, max) for the numeric ones.
/// The consumer ones are within Kafka's default `group.consumer.{min,max}.session.timeout.ms`
/// and `group.consumer.{min,max}.heartbeat.interval.ms`.
const NUMERIC: &[(&str, u64, u64)] = &[
    (CONSUMER_SESSION_TIMEOUT_MS, 45_000, 60_000),
    (CONSUMER_HEARTBEAT_INTERVAL_MS, 5_000, 15_000),
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
            (SHARE_AUTO_OFFSET_RESET, v) if by_duration_ms(v).is_some() => {}
            (SHARE_AUTO_OFFSET_RESET, _) => {
                return Err(format!(
                    "{k} must be earliest, latest or by_duration:<ISO-8601 duration>, e.g. \
                     by_duration:PT1H, not {v:?}"
                ))
            }
            (SHARE_ISOLATION_LEVEL, "read_uncommitted" | "read_committed") => {}
            (SHARE_ISOLATION_LEVEL, _) => {
                return Err(format!("{k} must be read_uncommitted or read_committed"))
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
    let defaults: [(&'static str, String); 7] = [
        (
            CONSUMER_SESSION_TIMEOUT_MS,
            config.group_consumer_session_timeout_ms.to_string(),
        ),
        (
            CONSUMER_HEARTBEAT_INTERVAL_MS,
            config.group_consumer_heartbeat_interval_ms.to_string(),
        ),
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

/// Where a share group starts reading a partition it never read
/// (`share.auto.offset.reset`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StartAt {
    /// The log start.
    Earliest,
    /// The log end (Kafka's default).
    Latest,
    /// The first record at or after this long ago (`by_duration:<ISO-8601 duration>`), else
    /// the log end.
    Ago { duration_ms: u64 },
}

/// `share.auto.offset.reset` of a group.
pub fn start_at(set: Option<&BTreeMap<String, String>>) -> StartAt {
    match set
        .and_then(|s| s.get(SHARE_AUTO_OFFSET_RESET))
        .map(String::as_str)
    {
        Some("earliest") => StartAt::Earliest,
        Some(v) => {
            by_duration_ms(v).map_or(StartAt::Latest, |duration_ms| StartAt::Ago { duration_ms })
        }
        None => StartAt::Latest,
    }
}

/// The milliseconds of `by_duration:<duration>`, the duration as Java's `Duration.parse`
/// reads it (`PnDTnHnMn.nS`, each part optional but one, case-insensitive; not negative,
/// as Kafka requires).
pub fn by_duration_ms(value: &str) -> Option<u64> {
    let d = value.strip_prefix("by_duration:")?.to_ascii_uppercase();
    let d = d.strip_prefix('P')?;
    let (days, time) = match d.split_once('T') {
        Some((days, time)) if !time.is_empty() => (days, Some(time)),
        Some(_) => return None,
        None => (d, None),
    };
    let mut ms: u64 = 0;
    let mut any = false;
    if !days.is_empty() {
        let n: u64 = days.strip_suffix('D')?.parse().ok()?;
        ms = ms.checked_add(n.checked_mul(86_400_000)?)?;
        any = true;
    }
    let mut rest = time.unwrap_or("");
    for (unit, unit_ms) in [('H', 3_600_000u64), ('M', 60_000)] {
        if let Some((n, after)) = rest.split_once(unit) {
            let n: u64 = n.parse().ok()?;
            ms = ms.checked_add(n.checked_mul(unit_ms)?)?;
            rest = after;
            any = true;
        }
    }
    if let Some(seconds) = rest.strip_suffix('S') {
        let (whole, fraction) = seconds.split_once('.').unwrap_or((seconds, ""));
        let whole: u64 = whole.parse().ok()?;
        let fraction_ms: u64 = match fraction.len() {
            0 => 0,
            1..=9 if fraction.bytes().all(|b| b.is_ascii_digit()) => {
                format!("{fraction:0<3}")[..3].parse().ok()?
            }
            _ => return None,
        };
        ms = ms.checked_add(whole.checked_mul(1_000)?.checked_add(fraction_ms)?)?;
        any = true;
    } else if !rest.is_empty() {
        return None;
    }
    any.then_some(ms)
}

/// Whether a group reads only committed records (`share.isolation.level=read_committed`).
pub fn read_committed(set: Option<&BTreeMap<String, String>>) -> bool {
    set.and_then(|s| s.get(SHARE_ISOLATION_LEVEL))
        .is_some_and(|v| v == "read_committed")
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
        assert!(validate(&one(SHARE_ISOLATION_LEVEL, "read_committed")).is_ok());
        assert!(validate(&one(SHARE_ISOLATION_LEVEL, "serializable")).is_err());
        assert!(read_committed(Some(&one(
            SHARE_ISOLATION_LEVEL,
            "read_committed"
        ))));
        assert!(!read_committed(None));
        assert!(validate(&one(CONSUMER_SESSION_TIMEOUT_MS, "50000")).is_ok());
        assert!(validate(&one(CONSUMER_SESSION_TIMEOUT_MS, "6000")).is_err());
        assert!(validate(&one(CONSUMER_HEARTBEAT_INTERVAL_MS, "7000")).is_ok());
        assert!(validate(&one(CONSUMER_HEARTBEAT_INTERVAL_MS, "16000")).is_err());
        assert!(validate(&one("consumer.assignor", "range")).is_err());
    }

    #[test]
    fn a_set_value_overrides_the_broker_default() {
        let set = one(SHARE_RECORD_LOCK_DURATION_MS, "2000");
        assert_eq!(
            number(Some(&set), SHARE_RECORD_LOCK_DURATION_MS, 30_000),
            2000
        );
        assert_eq!(number(None, SHARE_RECORD_LOCK_DURATION_MS, 30_000), 30_000);
        assert_eq!(
            start_at(Some(&one(SHARE_AUTO_OFFSET_RESET, "earliest"))),
            StartAt::Earliest
        );
        assert_eq!(start_at(None), StartAt::Latest);
        assert_eq!(
            start_at(Some(&one(SHARE_AUTO_OFFSET_RESET, "by_duration:PT1M"))),
            StartAt::Ago {
                duration_ms: 60_000
            }
        );
    }

    #[test]
    fn durations_read_as_java_reads_them() {
        let ms = |d: &str| by_duration_ms(&format!("by_duration:{d}"));
        assert_eq!(ms("PT1H"), Some(3_600_000));
        assert_eq!(ms("P1D"), Some(86_400_000));
        assert_eq!(ms("P1DT2H3M4.5S"), Some(93_784_500));
        assert_eq!(ms("pt0.25s"), Some(250));
        assert_eq!(ms("PT0S"), Some(0));
        assert_eq!(ms("PT1.S"), Some(1_000), "Java takes an empty fraction");
        for bad in [
            "",
            "P",
            "PT",
            "1H",
            "PT-1H",
            "-PT1H",
            "PT1X",
            "P1H",
            "PTS",
            "PT1.0000000001S",
        ] {
            assert_eq!(ms(bad), None, "{bad:?}");
        }
        assert_eq!(by_duration_ms("PT1H"), None, "without the prefix");
        assert!(validate(&one(SHARE_AUTO_OFFSET_RESET, "by_duration:PT30M")).is_ok());
        assert!(validate(&one(SHARE_AUTO_OFFSET_RESET, "by_duration:soon")).is_err());
    }
}
