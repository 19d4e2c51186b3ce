//! The tests' wall clock: deadlines for waiting on child processes (STYLE.md 9: wait for a
//! condition with a deadline, never `sleep`). The only module of this crate that reads
//! `Instant::now`; nothing here decides what a test checks, only how long it waits.

use std::time::{Duration, Instant};

/// A point in time after which a wait gives up.
#[derive(Clone, Copy, Debug)]
pub struct Deadline {
    at: Instant,
}

impl Deadline {
    /// `d` from now.
    pub fn after(d: Duration) -> Deadline {
        Deadline {
            at: Instant::now() + d,
        }
    }

    /// Time left, `None` once passed.
    pub fn remaining(&self) -> Option<Duration> {
        self.at
            .checked_duration_since(Instant::now())
            .filter(|d| !d.is_zero())
    }
}

/// Measures how long a test took, for its summary line.
#[derive(Clone, Copy, Debug)]
pub struct Stopwatch {
    start: Instant,
}

impl Stopwatch {
    /// Starts now.
    pub fn start() -> Stopwatch {
        Stopwatch {
            start: Instant::now(),
        }
    }

    /// Time since start.
    pub fn elapsed(&self) -> Duration {
        self.start.elapsed()
    }
}
