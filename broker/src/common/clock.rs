//! The broker's monotonic clock: the one place that reads `Instant::now` (STYLE.md 1),
//! so a simulation can replace time.

use std::time::Instant;

/// Now, on the monotonic clock.
pub fn now() -> Instant {
    Instant::now()
}

/// Milliseconds on the monotonic clock since this process first asked: for timers kept
/// as plain numbers (share groups' sessions and record locks).
pub fn mono_ms() -> u64 {
    static START: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
    let start = *START.get_or_init(now);
    u64::try_from(now().saturating_duration_since(start).as_millis()).unwrap_or(u64::MAX)
}

/// Milliseconds since the Unix epoch (record timestamps).
pub fn wall_ms() -> i64 {
    strand_storage::Clock::now_ms(&strand_storage::SystemClock)
}
