//! Latency histograms and their one-line summaries.

use std::time::Duration;

use hdrhistogram::Histogram;

/// A latency histogram in microseconds (1 µs .. 60 s, 3 significant digits).
pub struct Latency {
    h: Histogram<u64>,
}

impl Latency {
    /// An empty histogram.
    pub fn new() -> Latency {
        Latency {
            h: Histogram::new_with_bounds(1, 60_000_000, 3).expect("static histogram bounds"),
        }
    }

    /// Records one sample.
    pub fn record(&mut self, d: Duration) {
        let us = u64::try_from(d.as_micros())
            .unwrap_or(u64::MAX)
            .clamp(1, 60_000_000);
        self.h.saturating_record(us);
    }

    /// Value at quantile `q`, in microseconds.
    pub fn quantile_us(&self, q: f64) -> u64 {
        self.h.value_at_quantile(q)
    }

    /// `p50 / p99 / p99.9 / max` in milliseconds.
    pub fn summary(&self) -> String {
        let ms = |us: u64| us as f64 / 1000.0;
        format!(
            "p50 {:.3} ms  p99 {:.3} ms  p99.9 {:.3} ms  max {:.3} ms  (n={})",
            ms(self.h.value_at_quantile(0.5)),
            ms(self.h.value_at_quantile(0.99)),
            ms(self.h.value_at_quantile(0.999)),
            ms(self.h.max()),
            self.h.len()
        )
    }
}

impl Latency {
    /// Adds another histogram's samples.
    pub fn merge(&mut self, other: &Latency) {
        let _ = self.h.add(&other.h);
    }
}
