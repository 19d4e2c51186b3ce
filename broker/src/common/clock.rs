//! The broker's monotonic clock: the one place that reads `Instant::now` (STYLE.md 1),
//! so a simulation can replace time.

use std::time::Instant;

/// Now, on the monotonic clock.
pub fn now() -> Instant {
    Instant::now()
}

/// Milliseconds since the Unix epoch (record timestamps).
pub fn wall_ms() -> i64 {
    strand_storage::Clock::now_ms(&strand_storage::SystemClock)
}
