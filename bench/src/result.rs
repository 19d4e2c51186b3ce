//! A run's result: what was asked, what was measured, and each latency figure's ratio to
//! the physics that bounds it; as JSON (`--out`) and as a readable table.
//!
//! Invariant: figures are copied from the histograms and counters, never adjusted; a
//! ratio is present only when the physics it divides by was measured (else `None`).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::driver::{Acks, Protocol};
use crate::load::{LoadSpec, Mode, RunStats};
use crate::physics::PhysicsReport;
use crate::stats::{Percentiles, PERCENTILE_NAMES};

/// One second of the run (after warm-up).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct SecondRow {
    pub t_s: u64,
    pub acked_records: u64,
    pub consumed_records: u64,
    pub p50_us: u64,
    pub p99_us: u64,
    pub max_us: u64,
}

/// A latency figure over its physics bound.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Ratio {
    pub figure: String,
    pub value_us: u64,
    pub bound: String,
    pub bound_us: u64,
    pub ratio: f64,
}

/// Everything one `produce | consume | e2e` run reports.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct RunResult {
    pub label: String,
    pub bootstrap: String,
    pub protocol: Protocol,
    pub spec: LoadSpec,
    pub partitions: i32,
    pub measured_s: f64,
    pub produced_records: u64,
    pub produced_records_per_s: f64,
    pub produced_mib_per_s: f64,
    pub failed_records: u64,
    pub warmup_records: u64,
    pub consumed_records: u64,
    pub consumed_records_per_s: f64,
    pub consumed_mib_per_s: f64,
    /// Consume mode: seconds after which the topic was read to its end, when sooner than
    /// the run (the rates above count the whole run; `drained_*` count these seconds).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub drained_s: Option<f64>,
    pub foreign_records: u64,
    /// Latency from each record's intended send time (coordinated omission corrected).
    pub produce_latency: Option<Percentiles>,
    /// From the moment its request was written: what a closed-loop tool would show.
    pub produce_latency_uncorrected: Option<Percentiles>,
    /// Write time minus intended time: the harness's own lateness.
    pub send_lag: Option<Percentiles>,
    pub e2e_latency: Option<Percentiles>,
    pub fetch_latency: Option<Percentiles>,
    /// (percentile %, µs) curves by name, for plots.
    pub curves: BTreeMap<String, Vec<(f64, u64)>>,
    pub timeline: Vec<SecondRow>,
    /// Errors by kind, with counts (records for produce, requests for fetch).
    pub errors: BTreeMap<String, u64>,
    pub physics: Option<PhysicsReport>,
    pub ratios: Vec<Ratio>,
}

const MIB: f64 = 1024.0 * 1024.0;

impl RunResult {
    /// Builds the result of a run.
    #[expect(
        clippy::too_many_lines,
        reason = "longer than 70 lines when the lint came in (issue 27): split it when it next changes"
    )]
    pub fn new(
        label: String,
        bootstrap: String,
        protocol: Protocol,
        spec: LoadSpec,
        stats: RunStats,
        physics: Option<PhysicsReport>,
    ) -> RunResult {
        let secs = stats.measured_s.max(1e-9);
        let p = &stats.produce;
        let c = &stats.consume;
        let some = |l: &crate::stats::Latency| (l.len() > 0).then(|| l.percentiles());
        let mut curves = BTreeMap::new();
        for (name, l) in [
            ("produce", &p.corrected),
            ("produce (uncorrected)", &p.uncorrected),
            ("e2e", &c.e2e),
            ("fetch", &c.fetch),
        ] {
            if l.len() > 0 {
                curves.insert(name.to_string(), l.curve());
            }
        }
        // Whole seconds of the measured window only: acks that arrive while draining
        // after the end are counted in the totals, but a partial second would plot as
        // a collapse of throughput that never happened.
        let n = p
            .seconds
            .len()
            .max(c.seconds.len())
            .min(stats.measured_s.ceil() as usize);
        let timeline = (0..n)
            .map(|i| {
                let ps = p.seconds.get(i);
                let cs = c.seconds.get(i);
                let lat = if spec.mode == Mode::E2e {
                    cs.and_then(|s| s.latency.as_ref())
                } else {
                    ps.and_then(|s| s.latency.as_ref())
                };
                SecondRow {
                    t_s: i as u64,
                    acked_records: ps.map_or(0, |s| s.acked_records),
                    consumed_records: cs.map_or(0, |s| s.consumed_records),
                    p50_us: lat.map_or(0, |l| l.quantile_us(0.5)),
                    p99_us: lat.map_or(0, |l| l.quantile_us(0.99)),
                    max_us: lat.map_or(0, |l| l.quantile_us(1.0)),
                }
            })
            .collect();
        let mut errors = p.errors.clone();
        for (k, v) in &c.errors {
            *errors.entry(format!("consume: {k}")).or_default() += v;
        }
        let clamped = p.corrected.clamped() + c.e2e.clamped();
        if clamped > 0 {
            errors.insert("latency above 60 s (recorded as 60 s)".to_string(), clamped);
        }
        let mut r = RunResult {
            label,
            bootstrap,
            protocol,
            partitions: stats.partitions,
            measured_s: stats.measured_s,
            produced_records: p.acked_records,
            produced_records_per_s: p.acked_records as f64 / secs,
            produced_mib_per_s: p.acked_bytes as f64 / MIB / secs,
            failed_records: p.failed_records,
            warmup_records: p.warmup_records,
            consumed_records: c.records,
            consumed_records_per_s: c.records as f64 / secs,
            consumed_mib_per_s: c.bytes as f64 / MIB / secs,
            drained_s: stats.drained_s,
            foreign_records: c.foreign_records,
            produce_latency: some(&p.corrected),
            produce_latency_uncorrected: some(&p.uncorrected),
            send_lag: some(&p.send_lag),
            e2e_latency: some(&c.e2e),
            fetch_latency: some(&c.fetch),
            curves,
            timeline,
            errors,
            physics,
            ratios: Vec::new(),
            spec,
        };
        r.ratios = r.compute_ratios();
        r
    }

    /// p50/p99/p99.9 of each latency over the physics that bounds it: produce with
    /// acks ≥ 1 over (small write+fdatasync p99 + rtt p99), acks=0 over rtt p99, e2e over
    /// (fdatasync p99 + 2 rtt p99: produce, then fetch).
    fn compute_ratios(&self) -> Vec<Ratio> {
        let Some(ph) = &self.physics else {
            return Vec::new();
        };
        let rtt = ph.rtt.p99_us;
        let sync = ph.small_sync_p99_us();
        let mut out = Vec::new();
        let mut add = |name: &str, p: &Option<Percentiles>, bound: String, bound_us: u64| {
            let Some(p) = p else { return };
            for q in ["p50", "p99", "p99.9"] {
                let v = p.get(q).unwrap_or(0);
                out.push(Ratio {
                    figure: format!("{name} {q}"),
                    value_us: v,
                    bound: bound.clone(),
                    bound_us,
                    ratio: v as f64 / bound_us.max(1) as f64,
                });
            }
        };
        // A replicated acks=all produce waits for a follower's fsync too: one more round
        // trip (leader -> follower -> leader) on top of the client's (issue 5).
        let (bound, bound_us) = if self.spec.acks == Acks::None {
            ("rtt p99".to_string(), rtt)
        } else if self.spec.replication_factor > 1 {
            ("fdatasync p99 + 2 rtt p99".to_string(), sync + 2 * rtt)
        } else {
            ("fdatasync p99 + rtt p99".to_string(), sync + rtt)
        };
        add("produce", &self.produce_latency, bound, bound_us);
        add(
            "e2e",
            &self.e2e_latency,
            "fdatasync p99 + 2 rtt p99".to_string(),
            sync + 2 * rtt,
        );
        out
    }

    /// The readable table.
    #[expect(
        clippy::too_many_lines,
        reason = "longer than 70 lines when the lint came in (issue 27): split it when it next changes"
    )]
    pub fn table(&self) -> String {
        let ms = |us: u64| us as f64 / 1000.0;
        let s = &self.spec;
        let mut t = format!(
            "# {} — {:?} {} ({:?}), topic {} ({} partitions), {} B records, acks {:?}, {:?}, \
             rate {}, {} producer(s) {} consumer(s), {:.1} s (+{:.1} s warm-up)\n",
            self.label,
            s.mode,
            self.bootstrap,
            self.protocol,
            s.topic,
            self.partitions,
            s.record_bytes,
            s.acks,
            s.codec,
            rate_text(s.rate),
            s.producers,
            s.consumers,
            self.measured_s,
            s.warmup_s
        );
        if s.mode != Mode::Consume {
            t += &format!(
                "produced {:>12.0} rec/s {:>9.2} MiB/s   ({} records, {} failed, {} warm-up)\n",
                self.produced_records_per_s,
                self.produced_mib_per_s,
                self.produced_records,
                self.failed_records,
                self.warmup_records
            );
        }
        if s.mode != Mode::Produce {
            t += &format!(
                "consumed {:>12.0} rec/s {:>9.2} MiB/s fetched   ({} records, {} foreign)\n",
                self.consumed_records_per_s,
                self.consumed_mib_per_s,
                self.consumed_records,
                self.foreign_records
            );
            if let Some(d) = self.drained_s.filter(|d| *d > 0.0) {
                let bytes = self.consumed_mib_per_s * self.measured_s;
                t += &format!(
                    "drained  {:>12.0} rec/s {:>9.2} MiB/s over {d:.3} s: the topic's end, \
                     read before the run's {:.0} s ended (the line above counts all of them)\n",
                    self.consumed_records as f64 / d,
                    bytes / d,
                    self.measured_s
                );
            }
        }
        t += &format!("{:<24}", "latency (ms)");
        for n in PERCENTILE_NAMES {
            t += &format!(" {n:>9}");
        }
        t += &format!(" {:>9}\n", "n");
        for (name, p) in [
            ("produce", &self.produce_latency),
            ("produce uncorrected", &self.produce_latency_uncorrected),
            ("harness send lag", &self.send_lag),
            ("e2e", &self.e2e_latency),
            ("fetch", &self.fetch_latency),
        ] {
            let Some(p) = p else { continue };
            t += &format!("{name:<24}");
            for n in PERCENTILE_NAMES {
                t += &format!(" {:>9.3}", ms(p.get(n).unwrap_or(0)));
            }
            t += &format!(" {:>9}\n", p.count);
        }
        if self.ratios.is_empty() {
            t += "ratios to physics: none (no physics measured; pass --physics FILE or --physics-dir DIR)\n";
        } else {
            if let Some(ph) = &self.physics {
                t += &format!(
                    "physics: write {:.0} MiB/s, fdatasync 4 KiB p99 {:.3} ms, rtt p99 {:.3} ms ({})\n",
                    ph.write_mib_s,
                    ms(ph.small_sync_p99_us()),
                    ms(ph.rtt.p99_us),
                    if ph.direct_io { "O_DIRECT" } else { "buffered!" }
                );
            }
            for r in &self.ratios {
                t += &format!(
                    "  {:<18} {:>9.3} ms / {:<26} {:>8.3} ms = {:>7.2}x\n",
                    r.figure,
                    ms(r.value_us),
                    r.bound,
                    ms(r.bound_us),
                    r.ratio
                );
            }
        }
        if self.errors.is_empty() {
            t += "errors: none\n";
        } else {
            t += "errors:\n";
            for (k, v) in &self.errors {
                t += &format!("  {v:>10}  {k}\n");
            }
        }
        t
    }
}

/// `max` or `N/s`.
pub fn rate_text(r: crate::load::Rate) -> String {
    match r {
        crate::load::Rate::Max => "max".to_string(),
        crate::load::Rate::PerSec(x) => format!("{x:.0}/s"),
    }
}
