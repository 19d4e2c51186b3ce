//! The broker's monotonic clock: the one place that reads `Instant::now` (STYLE.md 1),
//! so a simulation can replace time.

use std::time::Instant;

/// Now, on the monotonic clock.
pub fn now() -> Instant {
    Instant::now()
}
