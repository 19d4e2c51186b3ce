//! The client's only reads of time (STYLE.md 1): monotonic instants for linger and
//! deadlines, wall-clock milliseconds for record timestamps.

/// Now, on tokio's monotonic clock (paused time in tests applies).
pub(crate) fn now() -> tokio::time::Instant {
    tokio::time::Instant::now()
}

/// Milliseconds since the Unix epoch (Kafka record timestamps).
pub(crate) fn unix_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}
