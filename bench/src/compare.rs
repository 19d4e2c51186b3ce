//! `strand-bench compare A.json B.json`: two results side by side, each figure with the
//! ratio B / A.
//!
//! Invariant: only figures present in both results are divided; a figure missing on one
//! side is shown as `-`, never as zero.

use std::path::PathBuf;

use anyhow::Context;

use crate::result::RunResult;
use crate::stats::{Percentiles, PERCENTILE_NAMES};

/// Options of `strand-bench compare`.
#[derive(clap::Args, Debug)]
pub struct CompareArgs {
    /// The baseline result (`--out` of produce, consume or e2e).
    a: PathBuf,
    /// The result compared with it.
    b: PathBuf,
}

fn load(path: &PathBuf) -> anyhow::Result<RunResult> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    serde_json::from_str(&text).with_context(|| format!("parsing {}", path.display()))
}

/// Runs `strand-bench compare`.
pub fn run(args: CompareArgs) -> anyhow::Result<()> {
    let a = load(&args.a)?;
    let b = load(&args.b)?;
    print!("{}", table(&a, &b));
    Ok(())
}

fn cell(v: Option<f64>) -> String {
    v.map_or_else(|| "-".to_string(), |v| format!("{v:.3}"))
}

fn row(name: &str, a: Option<f64>, b: Option<f64>) -> String {
    let ratio = match (a, b) {
        (Some(a), Some(b)) if a > 0.0 => format!("{:.2}x", b / a),
        _ => "-".to_string(),
    };
    format!("{name:<28} {:>14} {:>14} {ratio:>9}\n", cell(a), cell(b))
}

/// The side-by-side table.
pub fn table(a: &RunResult, b: &RunResult) -> String {
    let mut t = format!("A: {} ({}, {:?})\n", a.label, a.bootstrap, a.spec.mode);
    t += &format!("B: {} ({}, {:?})\n", b.label, b.bootstrap, b.spec.mode);
    if a.spec.mode != b.spec.mode || a.spec.acks != b.spec.acks || a.spec.rate != b.spec.rate {
        t += "note: the runs differ in mode, acks or rate; ratios compare unlike loads\n";
    }
    t += &format!("{:<28} {:>14} {:>14} {:>9}\n", "figure", "A", "B", "B/A");
    let nonzero = |x: f64| (x > 0.0).then_some(x);
    t += &row(
        "produced rec/s",
        nonzero(a.produced_records_per_s),
        nonzero(b.produced_records_per_s),
    );
    t += &row(
        "produced MiB/s",
        nonzero(a.produced_mib_per_s),
        nonzero(b.produced_mib_per_s),
    );
    t += &row(
        "consumed rec/s",
        nonzero(a.consumed_records_per_s),
        nonzero(b.consumed_records_per_s),
    );
    let lat = |name: &str, pa: &Option<Percentiles>, pb: &Option<Percentiles>| {
        let mut s = String::new();
        if pa.is_none() && pb.is_none() {
            return s;
        }
        for q in PERCENTILE_NAMES {
            let get = |p: &Option<Percentiles>| {
                p.as_ref()
                    .and_then(|p| p.get(q))
                    .map(|us| us as f64 / 1000.0)
            };
            s += &row(&format!("{name} {q} (ms)"), get(pa), get(pb));
        }
        s
    };
    t += &lat("produce", &a.produce_latency, &b.produce_latency);
    t += &lat("e2e", &a.e2e_latency, &b.e2e_latency);
    t += &lat("fetch", &a.fetch_latency, &b.fetch_latency);
    let errors = |r: &RunResult| r.errors.values().sum::<u64>() as f64;
    t += &format!("{:<28} {:>14} {:>14}\n", "errors", errors(a), errors(b));
    t
}
