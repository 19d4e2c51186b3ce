//! `strand-bench suite`: the standard matrix against a broker, and optionally a peer in
//! the same invocation: 1 KiB records; 1 and 16 partitions; acks=1 and acks=all; per
//! cell a closed-loop `--rate max` run to find saturation, then open-loop runs at 50% and
//! 90% of it. Writes every result (JSON, SVG) and `report.md` into the output directory.
//!
//! Invariant: both brokers get the same loads from the same client in one process; the
//! open-loop rates of each broker come from its own saturation run. A run that fails is
//! reported as failed in the table, not left out.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use anyhow::Context;

use crate::driver::{Acks, Protocol};
use crate::load::{LoadSpec, Mode, Rate};
use crate::physics::PhysicsReport;
use crate::result::RunResult;
use crate::workload::{physics_for, run_one, runtime, WorkloadArgs};

/// Options of `strand-bench suite`.
#[derive(clap::Args, Debug)]
pub struct SuiteArgs {
    /// Where reports go (created).
    #[arg(long, default_value = "bench-report")]
    out_dir: PathBuf,
    /// The broker under test's name in the report.
    #[arg(long, default_value = "strand")]
    name: String,
    /// A peer broker (e.g. Tansu) to run the same matrix against.
    #[arg(long)]
    peer_bootstrap: Option<String>,
    /// The peer's name in the report.
    #[arg(long, default_value = "peer")]
    peer_name: String,
    /// More peers, `NAME=HOST:PORT[;topic.config=value...]` (repeatable), each run after the
    /// broker under test with the same matrix; the topic configs go to the topics created
    /// on it, so one broker can be two peers (e.g. Apache Kafka as it ships and with
    /// `flush.messages=1`, the durability Strand gives).
    #[arg(long = "peer", value_parser = parse_peer)]
    peers: Vec<Target>,
    /// Partition counts of the matrix.
    #[arg(long, value_delimiter = ',', default_value = "1,16")]
    partition_counts: Vec<i32>,
    /// Load levels after saturation, as fractions of it.
    #[arg(long, value_delimiter = ',', default_value = "0.5,0.9")]
    levels: Vec<f64>,
    /// Also run every peer at the broker under test's absolute rate of each level (rows
    /// `NAME@50%`): a peer's own 50% may be far from the load the broker under test carried.
    #[arg(long)]
    peers_at_subject_rate: bool,
    #[command(flatten)]
    load: WorkloadArgs,
}

/// A broker of the matrix: name, bootstrap, and configs of the topics made on it.
#[derive(Clone, Debug)]
pub struct Target {
    name: String,
    bootstrap: String,
    topic_configs: Vec<(String, String)>,
}

fn parse_peer(s: &str) -> Result<Target, String> {
    let mut parts = s.split(';');
    let head = parts.next().unwrap_or_default();
    let (name, bootstrap) = head
        .split_once('=')
        .filter(|(n, b)| !n.is_empty() && !b.is_empty())
        .ok_or_else(|| format!("--peer {s}: want NAME=HOST:PORT[;config=value...]"))?;
    let topic_configs = parts
        .map(|kv| {
            kv.split_once('=')
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .ok_or_else(|| format!("--peer {s}: topic config {kv} is not key=value"))
        })
        .collect::<Result<_, _>>()?;
    Ok(Target {
        name: name.to_string(),
        bootstrap: bootstrap.to_string(),
        topic_configs,
    })
}

/// One run of the matrix.
struct Cell {
    target: String,
    partitions: i32,
    acks: Acks,
    level: String,
    result: Result<RunResult, String>,
    plots: Vec<PathBuf>,
}

/// Runs `strand-bench suite`.
pub fn run(args: SuiteArgs) -> anyhow::Result<()> {
    std::fs::create_dir_all(&args.out_dir)
        .with_context(|| format!("creating {}", args.out_dir.display()))?;
    let physics = physics_for(
        args.load.physics.as_ref(),
        &args.load.physics_dir,
        args.load.no_physics,
    )?;
    if let Some(p) = &physics {
        std::fs::write(
            args.out_dir.join("physics.json"),
            serde_json::to_string_pretty(p)?,
        )?;
        eprint!("{}", crate::physics::table(p));
    }
    let targets = targets(&args);
    let run_tag = format!("{:08x}", rand::random::<u32>());
    let rt = runtime()?;
    let mut cells = Vec::new();
    for Target {
        name,
        bootstrap,
        topic_configs,
    } in &targets
    {
        for &partitions in &args.partition_counts {
            for acks in [Acks::Leader, Acks::All] {
                // The target's name too: two targets may be one broker.
                let topic = format!("bench-{run_tag}-{name}-p{partitions}-{}", acks_text(acks));
                let mut spec = args.load.spec(Mode::Produce);
                spec.topic = topic;
                spec.partitions = partitions;
                spec.acks = acks;
                spec.topic_configs = topic_configs.clone();
                let ctx = CellCtx {
                    out_dir: &args.out_dir,
                    name,
                    bootstrap,
                    protocol: args.load.protocol,
                    physics: &physics,
                };
                let topic = spec.topic.clone();
                let subject = &targets[0].name;
                let fixed = if args.peers_at_subject_rate && name != subject {
                    subject_rates(&cells, subject, partitions, acks, &args.levels)
                } else {
                    Vec::new()
                };
                cells.extend(rt.block_on(run_cell(&ctx, spec, &args.levels, &fixed)));
                // A cell can write gigabytes; the broker keeps them until the topic goes.
                if let Err(e) = rt.block_on(delete_topic(bootstrap, args.load.protocol, &topic)) {
                    eprintln!(
                        "warning: topic {topic} stays on {name} ({e:#}): delete it to free its disk"
                    );
                }
            }
        }
    }
    let report = report(&args, &targets, &cells, physics.as_ref())?;
    let path = args.out_dir.join("report.md");
    std::fs::write(&path, &report).with_context(|| format!("writing {}", path.display()))?;
    print!("{report}");
    eprintln!("report written to {}", path.display());
    Ok(())
}

/// The broker under test, then its peers, in the order they run.
fn targets(args: &SuiteArgs) -> Vec<Target> {
    let mut targets = vec![Target {
        name: args.name.clone(),
        bootstrap: args.load.bootstrap.clone(),
        topic_configs: args.load.topic_configs.clone(),
    }];
    if let Some(peer) = &args.peer_bootstrap {
        targets.push(Target {
            name: args.peer_name.clone(),
            bootstrap: peer.clone(),
            topic_configs: args.load.topic_configs.clone(),
        });
    }
    targets.extend(args.peers.iter().cloned());
    targets
}

async fn delete_topic(bootstrap: &str, protocol: Protocol, topic: &str) -> anyhow::Result<()> {
    let driver = crate::driver::connect(protocol, bootstrap).await?;
    driver.delete_topic(topic).await?;
    Ok(())
}

struct CellCtx<'a> {
    out_dir: &'a Path,
    name: &'a str,
    bootstrap: &'a str,
    protocol: Protocol,
    physics: &'a Option<PhysicsReport>,
}

fn acks_text(a: Acks) -> &'static str {
    match a {
        Acks::None => "acks0",
        Acks::Leader => "acks1",
        Acks::All => "acksall",
    }
}

/// The rates the broker under test (`subject`) was loaded with at each level of
/// (partitions, acks), named `SUBJECT@LEVEL`: its saturation times the level.
fn subject_rates(
    cells: &[Cell],
    subject: &str,
    partitions: i32,
    acks: Acks,
    levels: &[f64],
) -> Vec<(String, f64)> {
    let Some(Ok(max)) = find(cells, subject, partitions, acks, "max").map(|c| &c.result) else {
        return Vec::new();
    };
    levels
        .iter()
        .map(|&level| {
            (
                format!("{subject}@{:.0}%", level * 100.0),
                max.produced_records_per_s * level,
            )
        })
        .filter(|&(_, rate)| rate > 0.0)
        .collect()
}

/// Saturation, then each level of it, then each `(name, records/s)` of `fixed`, for one
/// (target, partitions, acks).
async fn run_cell(
    ctx: &CellCtx<'_>,
    spec: LoadSpec,
    levels: &[f64],
    fixed: &[(String, f64)],
) -> Vec<Cell> {
    let mut out = Vec::new();
    let mut max = spec.clone();
    max.rate = Rate::Max;
    let saturation = one(ctx, max, "max".to_string()).await;
    let rate = saturation
        .result
        .as_ref()
        .ok()
        .map(|r| r.produced_records_per_s)
        .filter(|&r| r > 0.0);
    out.push(saturation);
    for &level in levels {
        let name = format!("{:.0}%", level * 100.0);
        match rate {
            Some(r) => {
                let mut s = spec.clone();
                s.rate = Rate::PerSec(r * level);
                out.push(one(ctx, s, name).await);
            }
            None => out.push(Cell {
                target: ctx.name.to_string(),
                partitions: spec.partitions,
                acks: spec.acks,
                level: name,
                result: Err("no saturation figure (the max run failed)".to_string()),
                plots: Vec::new(),
            }),
        }
    }
    for (name, rate) in fixed {
        let mut s = spec.clone();
        s.rate = Rate::PerSec(*rate);
        out.push(one(ctx, s, name.clone()).await);
    }
    out
}

async fn one(ctx: &CellCtx<'_>, spec: LoadSpec, level: String) -> Cell {
    let stem = format!(
        "{}-p{}-{}-{}",
        ctx.name,
        spec.partitions,
        acks_text(spec.acks),
        level.trim_end_matches('%')
    );
    let label = format!(
        "{} p{} {} {}",
        ctx.name,
        spec.partitions,
        acks_text(spec.acks),
        level
    );
    let (partitions, acks) = (spec.partitions, spec.acks);
    let result = run_one(
        label,
        ctx.bootstrap,
        ctx.protocol,
        spec,
        ctx.physics.clone(),
    )
    .await;
    let mut plots = Vec::new();
    let result = match result {
        Ok(r) => {
            let json = ctx.out_dir.join(format!("{stem}.json"));
            let written = serde_json::to_string_pretty(&r)
                .map_err(anyhow::Error::from)
                .and_then(|s| std::fs::write(&json, s).map_err(anyhow::Error::from))
                .and_then(|()| crate::plot::write_all(&ctx.out_dir.join(&stem), &r));
            match written {
                Ok(p) => plots = p,
                Err(e) => eprintln!("warning: writing {stem}: {e:#}"),
            }
            eprint!("{}", r.table());
            Ok(r)
        }
        Err(e) => {
            eprintln!("{stem} failed: {e:#}");
            Err(format!("{e:#}"))
        }
    };
    Cell {
        target: ctx.name.to_string(),
        partitions,
        acks,
        level,
        result,
        plots,
    }
}

fn ms(us: u64) -> String {
    format!("{:.3}", us as f64 / 1000.0)
}

/// The figures of one cell for the report table.
fn cell_columns(c: Option<&Cell>) -> String {
    let Some(c) = c else {
        return " - | - | - | - | - | - |".to_string();
    };
    match &c.result {
        Err(_) => " failed | - | - | - | - | see below |".to_string(),
        Ok(r) => {
            let p = r.produce_latency.clone().unwrap_or_default();
            let ratio = r
                .ratios
                .iter()
                .find(|x| x.figure == "produce p99")
                .map_or_else(|| "-".to_string(), |x| format!("{:.2}x", x.ratio));
            let errors: u64 = r.errors.values().sum();
            format!(
                " {:.0} | {} | {} | {} | {} | {} |",
                r.produced_records_per_s,
                ms(p.p50_us),
                ms(p.p99_us),
                ms(p.p999_us),
                ratio,
                errors
            )
        }
    }
}

#[expect(
    clippy::too_many_lines,
    reason = "longer than 70 lines when the lint came in (issue 27): split it when it next changes"
)]
fn report(
    args: &SuiteArgs,
    targets: &[Target],
    cells: &[Cell],
    physics: Option<&PhysicsReport>,
) -> anyhow::Result<String> {
    let mut md = String::new();
    let l = &args.load;
    writeln!(md, "# strand-bench suite\n")?;
    writeln!(
        md,
        "Produce, {} B records, {} producer(s), linger {} ms, batch {} B, {} requests in \
         flight per connection, {:?} compression, {} s measured after {} s warm-up per run. \
         `max` is closed loop (saturation; its latency is what a bounded in-flight window \
         sees); the percentages are open-loop runs at that share of the same broker's \
         saturation, latency measured from each record's intended send time; `NAME@50%` \
         rows run the peers at the rate NAME carried at its 50%.\n",
        l.record_bytes,
        l.producers,
        l.linger_ms,
        l.batch_bytes,
        l.max_in_flight,
        l.compression,
        l.duration_s,
        l.warmup_s
    )?;
    for t in targets {
        let configs: Vec<String> = t
            .topic_configs
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        let configs = if configs.is_empty() {
            String::new()
        } else {
            format!(", topics with {}", configs.join(", "))
        };
        writeln!(
            md,
            "- {}: `{}` ({:?} protocol{configs})",
            t.name, t.bootstrap, l.protocol
        )?;
    }
    writeln!(md, "\n## Physics\n")?;
    match physics {
        Some(p) => writeln!(md, "```text\n{}```\n", crate::physics::table(p))?,
        None => writeln!(md, "Not measured: no ratios.\n")?,
    }
    writeln!(
        md,
        "`p99 / phys` divides produce p99 by write+fdatasync 4 KiB p99 + TCP round trip p99.\n"
    )?;
    writeln!(md, "## Results\n")?;
    let mut head = "| partitions | acks | load |".to_string();
    let mut rule = "|---|---|---|".to_string();
    for Target { name, .. } in targets {
        write!(
            head,
            " {name} rec/s | p50 ms | p99 ms | p99.9 ms | p99 / phys | errors |"
        )?;
        rule += "---|---|---|---|---|---|";
    }
    writeln!(md, "{head}\n{rule}")?;
    let rows = rows(cells);
    for (partitions, acks, level) in &rows {
        let mut line = format!("| {partitions} | {} | {level} |", acks_text(*acks));
        for Target { name, .. } in targets {
            let c = find(cells, name, *partitions, *acks, level);
            line += &cell_columns(c);
        }
        writeln!(md, "{line}")?;
    }
    writeln!(md, "\n## Plots\n")?;
    for (partitions, acks, level) in &rows {
        let mut links = Vec::new();
        let mut series = Vec::new();
        for Target { name, .. } in targets {
            if let Some(c) = find(cells, name, *partitions, *acks, level) {
                for p in &c.plots {
                    let file = p.file_name().map(|f| f.to_string_lossy().into_owned());
                    if let Some(f) = file {
                        links.push(format!("[{f}]({f})"));
                    }
                }
                if let Ok(r) = &c.result {
                    if let Some(curve) = r.curves.get("produce") {
                        series.push((name.clone(), curve.as_slice()));
                    }
                }
            }
        }
        if series.len() > 1 {
            let f = format!(
                "compare-p{partitions}-{}-{}.percentiles.svg",
                acks_text(*acks),
                level.trim_end_matches('%')
            );
            let title = format!(
                "p{partitions} {} {level}: produce latency",
                acks_text(*acks)
            );
            crate::plot::percentiles(&args.out_dir.join(&f), &title, &series)?;
            links.insert(0, format!("[{f}]({f})"));
        }
        writeln!(
            md,
            "- p{partitions} {} {level}: {}",
            acks_text(*acks),
            links.join(" ")
        )?;
    }
    writeln!(md, "\n## Errors\n")?;
    let mut any = false;
    for c in cells {
        let errs: Vec<String> = match &c.result {
            Err(e) => vec![format!("run failed: {e}")],
            Ok(r) => r.errors.iter().map(|(k, v)| format!("{v} × {k}")).collect(),
        };
        if !errs.is_empty() {
            any = true;
            writeln!(
                md,
                "- {} p{} {} {}: {}",
                c.target,
                c.partitions,
                acks_text(c.acks),
                c.level,
                errs.join("; ")
            )?;
        }
    }
    if !any {
        writeln!(md, "None.")?;
    }
    Ok(md)
}

/// (partitions, acks, level) in the order they ran, each once.
fn rows(cells: &[Cell]) -> Vec<(i32, Acks, String)> {
    let mut out: Vec<(i32, Acks, String)> = Vec::new();
    for c in cells {
        let key = (c.partitions, c.acks, c.level.clone());
        if !out.contains(&key) {
            out.push(key);
        }
    }
    out
}

fn find<'a>(
    cells: &'a [Cell],
    target: &str,
    partitions: i32,
    acks: Acks,
    level: &str,
) -> Option<&'a Cell> {
    cells.iter().find(|c| {
        c.target == target && c.partitions == partitions && c.acks == acks && c.level == level
    })
}
