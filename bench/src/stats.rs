//! Latency histograms, their summaries and the serialisable forms results carry.
//!
//! Invariant: a [`Latency`] holds microseconds in 1 µs ..= 60 s at 3 significant digits;
//! samples outside are clamped (and counted as such by `clamped`), never dropped.

use std::time::Duration;

use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};

/// Largest latency a histogram holds, in microseconds.
const LATENCY_US_MAX: u64 = 60_000_000;

/// A latency histogram in microseconds (1 µs .. 60 s, 3 significant digits).
#[derive(Clone)]
pub struct Latency {
    h: Histogram<u64>,
    clamped: u64,
}

impl Default for Latency {
    fn default() -> Latency {
        Latency::new()
    }
}

/// Percentiles of a histogram, in microseconds.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct Percentiles {
    pub count: u64,
    pub p50_us: u64,
    pub p90_us: u64,
    pub p99_us: u64,
    pub p999_us: u64,
    pub p9999_us: u64,
    pub max_us: u64,
    pub mean_us: f64,
}

impl Percentiles {
    /// The named figure (`p50`, `p90`, `p99`, `p99.9`, `p99.99`, `max`) in microseconds.
    pub fn get(&self, name: &str) -> Option<u64> {
        Some(match name {
            "p50" => self.p50_us,
            "p90" => self.p90_us,
            "p99" => self.p99_us,
            "p99.9" => self.p999_us,
            "p99.99" => self.p9999_us,
            "max" => self.max_us,
            _ => return None,
        })
    }
}

/// The names [`Percentiles::get`] knows, in order.
pub const PERCENTILE_NAMES: [&str; 6] = ["p50", "p90", "p99", "p99.9", "p99.99", "max"];

impl Latency {
    /// An empty histogram.
    pub fn new() -> Latency {
        Latency {
            h: Histogram::new_with_bounds(1, LATENCY_US_MAX, 3).expect("static histogram bounds"),
            clamped: 0,
        }
    }

    /// An empty histogram at 2 significant digits (per-second series: small).
    pub fn coarse() -> Latency {
        Latency {
            h: Histogram::new_with_bounds(1, LATENCY_US_MAX, 2).expect("static histogram bounds"),
            clamped: 0,
        }
    }

    /// Records one sample.
    pub fn record(&mut self, d: Duration) {
        let us = u64::try_from(d.as_micros()).unwrap_or(u64::MAX);
        if us > LATENCY_US_MAX {
            self.clamped += 1;
        }
        self.h.saturating_record(us.clamp(1, LATENCY_US_MAX));
    }

    /// Samples recorded.
    pub fn len(&self) -> u64 {
        self.h.len()
    }

    /// Samples above the histogram's range (recorded as its maximum).
    pub fn clamped(&self) -> u64 {
        self.clamped
    }

    /// Value at quantile `q`, in microseconds.
    pub fn quantile_us(&self, q: f64) -> u64 {
        self.h.value_at_quantile(q)
    }

    /// The standard percentiles.
    pub fn percentiles(&self) -> Percentiles {
        if self.h.is_empty() {
            return Percentiles::default();
        }
        Percentiles {
            count: self.h.len(),
            p50_us: self.h.value_at_quantile(0.5),
            p90_us: self.h.value_at_quantile(0.9),
            p99_us: self.h.value_at_quantile(0.99),
            p999_us: self.h.value_at_quantile(0.999),
            p9999_us: self.h.value_at_quantile(0.9999),
            max_us: self.h.max(),
            mean_us: self.h.mean(),
        }
    }

    /// (percentile in %, µs) at percentiles 0 .. 99.999 spaced evenly on a
    /// `log10(1 / (1 - q))` axis, as HdrHistogram plots them; empty if no samples.
    pub fn curve(&self) -> Vec<(f64, u64)> {
        if self.h.is_empty() {
            return Vec::new();
        }
        let top = (self.h.len() as f64).log10().clamp(1.0, 5.0);
        let steps = 100;
        (0..=steps)
            .map(|i| {
                let x = top * f64::from(i) / f64::from(steps);
                let q = 1.0 - 10f64.powf(-x);
                (q * 100.0, self.h.value_at_quantile(q))
            })
            .collect()
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

    /// Adds another histogram's samples.
    pub fn merge(&mut self, other: &Latency) {
        // Same bounds on both sides: adding cannot fail.
        let _ = self.h.add(&other.h);
        self.clamped += other.clamped;
    }
}
