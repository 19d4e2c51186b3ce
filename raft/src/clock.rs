//! `Clock`: where the driver reads time. The broker passes a monotonic clock; the
//! simulator passes simulated time. Nothing else in this crate reads time.

use std::time::Duration;

/// Monotonic time since an arbitrary, fixed origin.
pub trait Clock {
    /// Now. Never decreases.
    fn now(&self) -> Duration;
}
