//! Time for the harness: deadlines for waiting on a broker, run timings for the report,
//! and the base timestamp of the records the corpus produces. The only file that reads
//! a clock (the tidy test allows clocks in `*clock*` files).
//!
//! Record timestamps are recent on purpose: Kafka's time-based retention (7 days by
//! default, checked from 30 s after start) deletes whole logs of old-stamped records,
//! which made fixed 2023 timestamps vanish from Kafka halfway through a full run.

use std::sync::OnceLock;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// A point in time to give up waiting at.
pub struct Deadline(Instant);

impl Deadline {
    /// `d` from now.
    pub fn after(d: Duration) -> Deadline {
        Deadline(Instant::now() + d)
    }
    /// Whether it has passed.
    pub fn passed(&self) -> bool {
        Instant::now() >= self.0
    }
}

/// Measures a phase of the run.
pub struct Stopwatch(Instant);

impl Stopwatch {
    /// Starts now.
    pub fn start() -> Stopwatch {
        Stopwatch(Instant::now())
    }
    /// Seconds since the start.
    pub fn seconds(&self) -> f64 {
        self.0.elapsed().as_secs_f64()
    }
}

/// The first record timestamp (CreateTime) of this run, in ms since the epoch: the
/// start of the run rounded down to a second, the same for both brokers.
pub fn first_timestamp_ms() -> i64 {
    static FIRST: OnceLock<i64> = OnceLock::new();
    *FIRST.get_or_init(|| {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default();
        i64::try_from(now.as_secs()).unwrap_or(0) * 1000
    })
}
