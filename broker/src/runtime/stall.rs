//! Reports of a shard that kept its CPU too long: glommio's stall detector, wired to our
//! log. When one task queue runs longer than its quota plus the threshold without giving
//! the CPU back, the detector's timer thread signals the shard thread, which records its
//! backtrace, and the report names the queue, the overrun and where the shard was.
//!
//! Invariant: off unless configured (`--stall-report-ms`); when on, it costs a timer
//! re-arm per task-queue run and nothing else on the shard.

use std::time::Duration;

use glommio::{StallDetection, StallDetectionHandler, TaskQueueHandle};

/// Logs a warning with the backtrace of each stall longer than `threshold`.
#[derive(Debug)]
pub struct StallReporter {
    /// Overrun past the task quota that counts as a stall.
    pub threshold: Duration,
}

impl StallDetectionHandler for StallReporter {
    fn threshold(&self, _queue: TaskQueueHandle, _quota: Duration) -> Option<Duration> {
        Some(self.threshold)
    }

    fn stall(&self, detection: StallDetection<'_>) {
        tracing::warn!("shard stalled: {detection}");
    }
}

/// Reactor sleeps, on every shard of the process, that ran out their bound (10 ms, the
/// patched glommio's `MAX_SLEEP`) and then found work ready: wake-ups the reactor lost
/// (a blocking-pool result, a foreign wake or a timer) that the bound recovered. Without
/// the bound such a loss left a shard asleep for good (seen at start-up, issue 21 note).
pub fn reactor_wakes_recovered() -> u64 {
    glommio::recovered_wakeups()
}

/// The handler for an executor: a reporter of overruns longer than `threshold_ms`, or none.
pub fn reporter(threshold_ms: Option<u64>) -> Option<Box<dyn StallDetectionHandler>> {
    threshold_ms.map(|ms| {
        Box::new(StallReporter {
            threshold: Duration::from_millis(ms),
        }) as Box<dyn StallDetectionHandler>
    })
}
