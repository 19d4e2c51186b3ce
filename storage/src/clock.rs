//! The storage engine's monotonic clock: the one place in this crate that reads
//! `Instant::now` (STYLE.md 1). Only pacing uses it (the I/O budget's rate windows);
//! record and segment times come from the injected wall [`crate::Clock`].

use std::time::Instant;

/// Now, on the monotonic clock.
pub fn monotonic_now() -> Instant {
    Instant::now()
}
