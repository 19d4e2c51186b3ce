//! The I/O budget of a background task (log compaction): the bytes it reads and writes,
//! a cap on their rate (Kafka's `log.cleaner.io.max.bytes.per.second`), and the points at
//! which it gives the CPU back to the shard.
//!
//! Invariants:
//! - After each charge the task's bytes since the window started, over the time since
//!   then, are at most the rate: it sleeps the difference first. The window restarts
//!   every `WINDOW`, so an idle stretch earns no burst larger than one window's bytes.
//! - Every charge is a `yield_if_needed` point: the task leaves the CPU when the shard's
//!   task quota has run out.
//! - On the simulated disk nothing sleeps or yields (simulated time has no timer); the
//!   byte counts still hold.

use std::time::{Duration, Instant};

use crate::clock::monotonic_now;
use crate::io_runtime;
use crate::io_sim::SimDisk;

/// Length of a rate window.
const WINDOW: Duration = Duration::from_secs(1);

/// See the module doc.
#[derive(Debug)]
pub struct IoBudget {
    max_bytes_per_s: Option<u64>,
    window_start: Instant,
    window_bytes: u64,
    read_bytes: u64,
    written_bytes: u64,
    throttled: Duration,
}

impl IoBudget {
    /// A budget of at most `max_bytes_per_s` read plus written (`None` or 0: no cap).
    pub fn new(max_bytes_per_s: Option<u64>) -> IoBudget {
        IoBudget {
            max_bytes_per_s: max_bytes_per_s.filter(|r| *r > 0),
            window_start: monotonic_now(),
            window_bytes: 0,
            read_bytes: 0,
            written_bytes: 0,
            throttled: Duration::ZERO,
        }
    }

    /// No cap on the rate (still yields).
    pub fn unlimited() -> IoBudget {
        IoBudget::new(None)
    }

    /// The task read `bytes`.
    pub async fn read(&mut self, bytes: u64) {
        self.read_bytes = self.read_bytes.saturating_add(bytes);
        self.charge(bytes).await;
    }

    /// The task wrote `bytes`.
    pub async fn wrote(&mut self, bytes: u64) {
        self.written_bytes = self.written_bytes.saturating_add(bytes);
        self.charge(bytes).await;
    }

    /// Bytes read so far.
    pub fn read_bytes(&self) -> u64 {
        self.read_bytes
    }

    /// Bytes written so far.
    pub fn written_bytes(&self) -> u64 {
        self.written_bytes
    }

    /// Time slept to keep to the rate so far.
    pub fn throttled(&self) -> Duration {
        self.throttled
    }

    /// How long to wait after `window_bytes` bytes `elapsed` into the window at `rate`.
    fn wait_for(window_bytes: u64, elapsed: Duration, rate: u64) -> Duration {
        let due = Duration::from_secs_f64(window_bytes as f64 / rate as f64);
        due.saturating_sub(elapsed)
    }

    async fn charge(&mut self, bytes: u64) {
        if SimDisk::current().is_some() {
            return;
        }
        self.window_bytes = self.window_bytes.saturating_add(bytes);
        if let Some(rate) = self.max_bytes_per_s {
            let wait = Self::wait_for(self.window_bytes, self.window_start.elapsed(), rate);
            if !wait.is_zero() {
                io_runtime::sleep(wait).await;
                self.throttled += wait;
            }
        }
        if self.window_start.elapsed() >= WINDOW {
            self.window_start = monotonic_now();
            self.window_bytes = 0;
        }
        io_runtime::yield_now().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waits_only_when_ahead_of_the_rate() {
        let mb = 1_000_000;
        // 1 MB at 10 MB/s is due at 100 ms.
        assert_eq!(
            IoBudget::wait_for(mb, Duration::from_millis(40), 10 * mb),
            Duration::from_millis(60)
        );
        assert_eq!(
            IoBudget::wait_for(mb, Duration::from_millis(150), 10 * mb),
            Duration::ZERO
        );
    }

    #[test]
    fn a_rate_of_zero_is_no_cap() {
        assert_eq!(IoBudget::new(Some(0)).max_bytes_per_s, None);
        assert_eq!(IoBudget::new(Some(5)).max_bytes_per_s, Some(5));
    }

    #[test]
    fn keeps_to_the_rate_on_a_real_executor() {
        let took = io_runtime::block_on("budget-test", 1, async {
            let mut b = IoBudget::new(Some(1_000_000));
            let start = monotonic_now();
            for _ in 0..4 {
                b.read(50_000).await;
                b.wrote(50_000).await;
            }
            assert_eq!((b.read_bytes(), b.written_bytes()), (200_000, 200_000));
            (start.elapsed(), b.throttled())
        })
        .expect("executor");
        // 400 kB at 1 MB/s: 400 ms of sleep (not a timing assertion: sleeping less would
        // be the bug, sleeping more is the machine).
        assert!(took.0 >= Duration::from_millis(390), "{took:?}");
        assert!(took.1 >= Duration::from_millis(390), "{took:?}");
    }
}
