//! `strand-bench produce | consume | e2e`: the command line of one run, its progress
//! bar, and its outputs (table on stdout, `--out` JSON, `--plots` SVGs).
//!
//! Invariant: the physics a result is divided by is measured on this machine in this
//! invocation (or read from `--physics`), and the result says which; with neither, the
//! result carries no ratios rather than made-up ones.

use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use crate::driver::{Acks, Codec, Protocol};
use crate::load::{KeyDist, LoadSpec, Mode, Progress, Rate};
use crate::physics::{PhysicsArgs, PhysicsReport};
use crate::result::RunResult;

/// Options shared by `produce`, `consume` and `e2e`.
#[derive(clap::Args, Debug, Clone)]
pub struct WorkloadArgs {
    /// Broker to load (HOST:PORT).
    #[arg(long, default_value = "127.0.0.1:9092")]
    pub bootstrap: String,
    /// Wire protocol.
    #[arg(long, value_enum, default_value = "kafka")]
    pub protocol: Protocol,
    /// Topic (created when missing).
    #[arg(long, default_value = "strand-bench")]
    pub topic: String,
    #[arg(long, default_value_t = 1)]
    pub partitions: i32,
    /// Replication factor of a created topic (-1: the broker's default).
    #[arg(long, default_value_t = -1)]
    pub replication_factor: i16,
    /// Bytes of each record's value.
    #[arg(long, default_value_t = 1024)]
    pub record_bytes: usize,
    #[arg(long, value_enum, default_value = "none")]
    pub keys: KeyDist,
    /// With `--keys random`: the number of distinct keys (0: every key new), e.g. to load
    /// a compacted topic whose cleaner has work.
    #[arg(long, default_value_t = 0)]
    pub key_space: u64,
    /// A config of the topic when the run creates it, `NAME=VALUE` (repeatable), e.g.
    /// `--topic-config cleanup.policy=compact`.
    #[arg(long = "topic-config", value_parser = parse_topic_config)]
    pub topic_configs: Vec<(String, String)>,
    /// none | zstd | lz4.
    #[arg(long, default_value = "none", value_parser = parse_codec)]
    pub compression: Codec,
    /// 0 | 1 | all.
    #[arg(long, default_value = "all", value_parser = parse_acks)]
    pub acks: Acks,
    #[arg(long, default_value_t = 1)]
    pub producers: usize,
    #[arg(long, default_value_t = 1)]
    pub consumers: usize,
    /// Measured seconds (after warm-up).
    #[arg(long, default_value_t = 10.0)]
    pub duration_s: f64,
    /// Seconds run before measuring (excluded from histograms and throughput).
    #[arg(long, default_value_t = 2.0)]
    pub warmup_s: f64,
    /// Records per second over all producers (open loop), or `max` (closed loop).
    #[arg(long, default_value = "max", value_parser = parse_rate)]
    pub rate: Rate,
    /// How long a batch waits for more records.
    #[arg(long, default_value_t = 1.0)]
    pub linger_ms: f64,
    /// A batch is sent when it holds this many bytes.
    #[arg(long, default_value_t = 64 * 1024)]
    pub batch_bytes: usize,
    /// Requests in flight per connection.
    #[arg(long, default_value_t = 5)]
    pub max_in_flight: usize,
    /// Physics to divide by (a `strand-bench physics --out` file).
    #[arg(long)]
    pub physics: Option<PathBuf>,
    /// Without --physics: measure a quick physics in this directory first.
    #[arg(long, default_value = "data/bench-physics")]
    pub physics_dir: PathBuf,
    /// Skip physics (the result then has no ratios).
    #[arg(long)]
    pub no_physics: bool,
    /// Write the result here as JSON.
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Write SVG plots next to this stem (`STEM.percentiles.svg`, `STEM.timeline.svg`).
    #[arg(long)]
    pub plots: Option<PathBuf>,
    /// A name for the run in tables and plots.
    #[arg(long)]
    pub label: Option<String>,
}

fn parse_codec(s: &str) -> Result<Codec, String> {
    match s {
        "none" => Ok(Codec::None),
        "zstd" => Ok(Codec::Zstd),
        "lz4" => Ok(Codec::Lz4),
        _ => Err(format!("{s}: expected none, zstd or lz4")),
    }
}

fn parse_topic_config(s: &str) -> Result<(String, String), String> {
    match s.split_once('=') {
        Some((k, v)) if !k.is_empty() => Ok((k.to_string(), v.to_string())),
        _ => Err(format!("{s}: expected NAME=VALUE")),
    }
}

pub fn parse_acks(s: &str) -> Result<Acks, String> {
    match s {
        "0" => Ok(Acks::None),
        "1" => Ok(Acks::Leader),
        "all" | "-1" => Ok(Acks::All),
        _ => Err(format!("{s}: expected 0, 1 or all")),
    }
}

/// `max` or a positive number of records per second.
pub fn parse_rate(s: &str) -> Result<Rate, String> {
    if s == "max" {
        return Ok(Rate::Max);
    }
    match s.parse::<f64>() {
        Ok(r) if r > 0.0 && r.is_finite() => Ok(Rate::PerSec(r)),
        _ => Err(format!("{s}: expected `max` or records per second > 0")),
    }
}

impl WorkloadArgs {
    /// The load of this command line in `mode`.
    pub fn spec(&self, mode: Mode) -> LoadSpec {
        LoadSpec {
            mode,
            topic: self.topic.clone(),
            partitions: self.partitions,
            replication_factor: self.replication_factor,
            record_bytes: self.record_bytes,
            keys: self.keys,
            key_space: self.key_space,
            topic_configs: self.topic_configs.clone(),
            codec: self.compression,
            acks: self.acks,
            producers: self.producers.max(1),
            consumers: self.consumers.max(1),
            duration_s: self.duration_s,
            warmup_s: self.warmup_s,
            rate: self.rate,
            linger_ms: self.linger_ms,
            batch_bytes: self.batch_bytes.max(1),
            max_in_flight: self.max_in_flight.max(1),
        }
    }
}

/// The physics for ratios: `--physics`, else a quick measurement, else none (said why).
pub fn physics_for(
    file: Option<&PathBuf>,
    dir: &Path,
    skip: bool,
) -> anyhow::Result<Option<PhysicsReport>> {
    if let Some(f) = file {
        return PhysicsReport::load(f).map(Some);
    }
    if skip {
        return Ok(None);
    }
    eprintln!(
        "measuring a quick physics in {} (--physics FILE to reuse one)",
        dir.display()
    );
    match crate::physics::measure(&PhysicsArgs::quick(dir.to_path_buf())) {
        Ok(p) => Ok(Some(p)),
        Err(e) => {
            eprintln!("warning: no physics, so no ratios: {e:#}");
            Ok(None)
        }
    }
}

/// A tokio runtime for the load client (two workers: the machine may be small).
pub fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("starting the tokio runtime")
}

/// Runs one load against `bootstrap` with a progress bar; returns its result.
pub async fn run_one(
    label: String,
    bootstrap: &str,
    protocol: Protocol,
    spec: LoadSpec,
    physics: Option<PhysicsReport>,
) -> anyhow::Result<RunResult> {
    let driver = crate::driver::connect(protocol, bootstrap)
        .await
        .with_context(|| format!("connecting to {bootstrap}"))?;
    let progress = Arc::new(Progress::default());
    let total_s = spec.warmup_s + spec.duration_s;
    let bar = progress_bar(&label, total_s);
    let ticker = {
        let (bar, progress) = (bar.clone(), progress.clone());
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_millis(250));
            loop {
                tick.tick().await;
                bar.set_position((bar.elapsed().as_secs_f64() * 10.0) as u64);
                bar.set_message(format!(
                    "acked {} consumed {} errors {}",
                    progress.acked.load(Ordering::Relaxed),
                    progress.consumed.load(Ordering::Relaxed),
                    progress.errors.load(Ordering::Relaxed)
                ));
            }
        })
    };
    let stats = crate::load::run(driver, spec.clone(), progress).await;
    ticker.abort();
    bar.finish_and_clear();
    let stats = stats.with_context(|| format!("{label} against {bootstrap}"))?;
    Ok(RunResult::new(
        label,
        bootstrap.to_string(),
        protocol,
        spec,
        stats,
        physics,
    ))
}

fn progress_bar(label: &str, total_s: f64) -> ProgressBar {
    let bar = ProgressBar::new((total_s * 10.0) as u64);
    if std::io::stderr().is_terminal() {
        bar.set_draw_target(ProgressDrawTarget::stderr());
        let style = ProgressStyle::with_template("{prefix} [{bar:30}] {elapsed}/{duration} {msg}")
            .unwrap_or_else(|_| ProgressStyle::default_bar());
        bar.set_style(style);
        bar.set_prefix(label.to_string());
    } else {
        bar.set_draw_target(ProgressDrawTarget::hidden());
    }
    bar
}

/// Runs `strand-bench produce | consume | e2e`.
pub fn run(args: WorkloadArgs, mode: Mode) -> anyhow::Result<()> {
    let physics = physics_for(args.physics.as_ref(), &args.physics_dir, args.no_physics)?;
    let label = args
        .label
        .clone()
        .unwrap_or_else(|| format!("{mode:?}").to_lowercase());
    let spec = args.spec(mode);
    let rt = runtime()?;
    let result = rt.block_on(run_one(
        label,
        &args.bootstrap,
        args.protocol,
        spec,
        physics,
    ))?;
    print!("{}", result.table());
    if let Some(out) = &args.out {
        std::fs::write(out, serde_json::to_string_pretty(&result)?)
            .with_context(|| format!("writing {}", out.display()))?;
        eprintln!("result written to {}", out.display());
    }
    if let Some(stem) = &args.plots {
        for p in crate::plot::write_all(stem, &result)? {
            eprintln!("plot written to {}", p.display());
        }
    }
    Ok(())
}
