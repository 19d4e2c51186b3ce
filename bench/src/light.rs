//! `strand-bench light`: issue 30's workload — tail latency at light load. An open-loop
//! producer of 10,000 records/s of 100 bytes, linger 0, one partition, `acks=all` (or
//! `--acks 1`), latency from each record's intended send time; `--runs` runs of
//! `--duration-s` each, every run's p99 and p99.9 over (write+fdatasync p99 + loopback
//! RTT p99) of the physics, and the verdict against the goal: p99 ≤ 1.5×, p99.9 ≤ 2.5×,
//! and no run's p99 or p99.9 over 3×.
//!
//! Each run also reports the CPU time the host took from this machine meanwhile (steal, from
//! `/proc/stat`): on a virtual machine a high I/O rate can make the host stall every vCPU
//! for milliseconds, which is then every thread's tail, the load generator's included
//! (bench/README.md, "The I/O rate and the host").
//!
//! Before the runs it measures the disk's own floor for this load (`--floor-s`): the same
//! open-loop arrivals made durable by one writer, each batch with one 4 KiB O_DSYNC write
//! into written blocks, as a partition's group commit does, with no network and no broker.
//! A device's rare stalls (a write taking milliseconds) delay every record arriving
//! meanwhile, so this floor's p99.9 can be far above the idle write+fdatasync p99 the goal
//! divides by; each run's ratio to the floor is the broker's own share.
//!
//! Invariant: the load is fixed (only the broker, the protocol and acks vary), so runs of
//! different builds and machines compare.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use clap::Args;

use crate::driver::{Acks, Codec, Protocol};
use crate::load::{KeyDist, LoadSpec, Mode, Rate};
use crate::result::RunResult;
use crate::stats::Latency;
use crate::workload::{parse_acks, physics_for, run_one, runtime};

/// The workload's fixed figures.
const RATE_RECORDS_PER_S: f64 = 10_000.0;
const RECORD_BYTES: usize = 100;
/// Goals (issue 30), as ratios to write+fdatasync p99 + RTT p99.
const GOAL_P99: f64 = 1.5;
const GOAL_P999: f64 = 2.5;
const GOAL_WORST: f64 = 3.0;

#[derive(Args, Debug)]
pub struct LightArgs {
    /// Broker to load (HOST:PORT).
    #[arg(long, default_value = "127.0.0.1:9092")]
    pub bootstrap: String,
    /// Wire protocol (`native`: strand-client through the native port).
    #[arg(long, value_enum, default_value = "kafka")]
    pub protocol: Protocol,
    /// Topic (one partition, created when missing).
    #[arg(long, default_value = "strand-bench-light")]
    pub topic: String,
    /// 1 | all.
    #[arg(long, default_value = "all", value_parser = parse_acks)]
    pub acks: Acks,
    /// Runs.
    #[arg(long, default_value_t = 5)]
    pub runs: usize,
    /// Measured seconds per run.
    #[arg(long, default_value_t = 60.0)]
    pub duration_s: f64,
    /// Seconds of each run before measuring.
    #[arg(long, default_value_t = 2.0)]
    pub warmup_s: f64,
    /// Physics to divide by (a `strand-bench physics --out` file).
    #[arg(long)]
    pub physics: Option<PathBuf>,
    /// Without --physics: measure a quick physics in this directory first.
    #[arg(long, default_value = "data/bench-physics")]
    pub physics_dir: PathBuf,
    /// Every run's result as JSON lines.
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Seconds of the disk's group-commit floor for this load, measured in the physics
    /// directory before the runs (0: not measured).
    #[arg(long, default_value_t = 20.0)]
    pub floor_s: f64,
}

impl LightArgs {
    fn spec(&self) -> LoadSpec {
        LoadSpec {
            mode: Mode::Produce,
            topic: self.topic.clone(),
            partitions: 1,
            replication_factor: -1,
            record_bytes: RECORD_BYTES,
            keys: KeyDist::None,
            key_space: 0,
            topic_configs: Vec::new(),
            codec: Codec::None,
            acks: self.acks,
            producers: 1,
            consumers: 1,
            duration_s: self.duration_s,
            warmup_s: self.warmup_s,
            rate: Rate::PerSec(RATE_RECORDS_PER_S),
            linger_ms: 0.0,
            batch_bytes: 64 * 1024,
            max_in_flight: 5,
        }
    }
}

/// `(steal, total)` CPU ticks of the `cpu` line of `/proc/stat` (user, nice, system, idle,
/// iowait, irq, softirq, steal; guest time is inside user).
fn cpu_ticks(stat: &str) -> Option<(u64, u64)> {
    let line = stat.lines().find(|l| l.starts_with("cpu "))?;
    let v: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .take(8)
        .map(str::parse)
        .collect::<Result<_, _>>()
        .ok()?;
    (v.len() == 8).then(|| (v[7], v.iter().sum()))
}

fn read_cpu_ticks() -> Option<(u64, u64)> {
    cpu_ticks(&std::fs::read_to_string("/proc/stat").ok()?)
}

/// Percent of CPU time stolen between two `(steal, total)` readings.
fn steal_percent(before: Option<(u64, u64)>, after: Option<(u64, u64)>) -> Option<f64> {
    let ((s0, t0), (s1, t1)) = (before?, after?);
    let total = t1.checked_sub(t0).filter(|&t| t > 0)?;
    Some(s1.saturating_sub(s0) as f64 * 100.0 / total as f64)
}

/// One run's figures: (p99 µs, p99.9 µs, p99 ratio, p99.9 ratio).
fn figures(r: &RunResult) -> Option<(u64, u64, f64, f64)> {
    let ratio = |q: &str| {
        r.ratios
            .iter()
            .find(|x| x.figure == format!("produce {q}"))
            .map(|x| (x.value_us, x.ratio))
    };
    let (p99, r99) = ratio("p99")?;
    let (p999, r999) = ratio("p99.9")?;
    Some((p99, p999, r99, r999))
}

/// Bytes of each floor write (a partition's partial last page, rewritten by each flush).
const FLOOR_WRITE_BYTES: usize = 4096;
/// The floor's file: zeroed first, so writes land in written blocks (as the broker's do).
const FLOOR_FILE_BYTES: usize = 64 << 20;
/// Writes into one block before the next, as 100 B records fill a 4 KiB page.
const FLOOR_WRITES_PER_BLOCK: usize = 40;

/// The disk's floor for `rate` records/s over `secs`: open-loop arrivals, one writer that
/// makes everything arrived so far durable with one O_DSYNC write (group commit), each
/// record's latency from its intended arrival to its write's return. The writer spins
/// between arrivals (no timer slack).
fn group_commit_floor(dir: &Path, rate: f64, secs: f64) -> anyhow::Result<Latency> {
    use std::io::Write;
    use std::os::unix::fs::{FileExt, OpenOptionsExt};
    std::fs::create_dir_all(dir)?;
    let path = dir.join("light-floor");
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(true)
        .write(true)
        .custom_flags(libc::O_DIRECT | libc::O_DSYNC)
        .open(&path)?;
    // O_DIRECT wants aligned memory: the aligned 1 MiB inside a larger Vec.
    let mut backing = vec![0u8; (1 << 20) + FLOOR_WRITE_BYTES];
    let skip = backing.as_ptr().align_offset(FLOOR_WRITE_BYTES);
    let buf = &mut backing[skip..skip + (1 << 20)];
    let result = (|| {
        for _ in 0..FLOOR_FILE_BYTES / buf.len() {
            file.write_all(buf)?;
        }
        file.sync_all()?;
        buf[..FLOOR_WRITE_BYTES].fill(0x5A);
        let block = &buf[..FLOOR_WRITE_BYTES];
        let gap = Duration::from_secs_f64(1.0 / rate);
        let records = (rate * secs) as u64;
        let mut lat = Latency::new();
        let (mut next, mut writes) = (0u64, 0usize);
        let start = Instant::now() + Duration::from_millis(10);
        while next < records {
            let now = Instant::now();
            let since = now.saturating_duration_since(start);
            let due = (since.as_nanos() / gap.as_nanos().max(1)) as u64 + 1;
            let due = due.min(records);
            if now < start || due <= next {
                std::hint::spin_loop();
                continue;
            }
            let block_index = writes / FLOOR_WRITES_PER_BLOCK;
            let pos = (block_index * FLOOR_WRITE_BYTES) % FLOOR_FILE_BYTES;
            file.write_all_at(block, pos as u64)?;
            writes += 1;
            let done = Instant::now();
            for i in next..due {
                let intended = start + gap * u32::try_from(i).unwrap_or(u32::MAX);
                lat.record(done.saturating_duration_since(intended));
            }
            next = due;
        }
        anyhow::Ok(lat)
    })();
    let _ = std::fs::remove_file(&path);
    result
}

/// The summary table and verdict of the runs (`steal`: percent per run, when known; `floor`:
/// the disk's group-commit floor, when measured).
fn summary(results: &[RunResult], steal: &[Option<f64>], floor: Option<&Latency>) -> String {
    let mut out = String::from(
        "\nrun   p99 ms  p99.9 ms  p99 ×   p99.9 ×  steal %  p99/floor  p99.9/floor\n",
    );
    let mut worst: f64 = 0.0;
    let (mut r99s, mut r999s) = (Vec::new(), Vec::new());
    for (i, r) in results.iter().enumerate() {
        let Some((p99, p999, r99, r999)) = figures(r) else {
            out.push_str(&format!("{:<5} (no ratios: no physics)\n", i + 1));
            continue;
        };
        let stolen = steal
            .get(i)
            .copied()
            .flatten()
            .map_or("-".to_string(), |p| format!("{p:.1}"));
        let over = |v: u64, q: f64| {
            floor.map_or("-".to_string(), |f| {
                format!("{:.2}", v as f64 / f.quantile_us(q).max(1) as f64)
            })
        };
        out.push_str(&format!(
            "{:<5} {:>6.3}  {:>8.3}  {:>5.2}  {:>7.2}  {stolen:>7}  {:>9}  {:>11}\n",
            i + 1,
            p99 as f64 / 1000.0,
            p999 as f64 / 1000.0,
            r99,
            r999,
            over(p99, 0.99),
            over(p999, 0.999),
        ));
        worst = worst.max(r99).max(r999);
        r99s.push(r99);
        r999s.push(r999);
    }
    if r99s.is_empty() {
        return out;
    }
    let median = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let (m99, m999) = (median(&mut r99s), median(&mut r999s));
    let met = m99 <= GOAL_P99 && m999 <= GOAL_P999 && worst <= GOAL_WORST;
    if let Some(ph) = results.first().and_then(|r| r.physics.as_ref()) {
        out.push_str(&format!(
            "bound: write+fdatasync p99 {:.3} ms + rtt p99 {:.3} ms\n",
            ph.small_sync_p99_us() as f64 / 1000.0,
            ph.rtt.p99_us as f64 / 1000.0
        ));
    }
    if let Some(f) = floor {
        out.push_str(&format!(
            "floor: the disk alone at this load (open loop, group commit, O_DSYNC 4 KiB): {}\n",
            f.summary()
        ));
    }
    out.push_str(&format!(
        "median p99 {m99:.2}× (goal ≤ {GOAL_P99}), median p99.9 {m999:.2}× (goal ≤ {GOAL_P999}), \
         worst {worst:.2}× (goal ≤ {GOAL_WORST}): {}\n",
        if met { "goal met" } else { "goal NOT met" }
    ));
    out
}

pub fn run(args: LightArgs) -> anyhow::Result<()> {
    let physics = physics_for(args.physics.as_ref(), &args.physics_dir, false)?;
    let floor = if args.floor_s > 0.0 {
        let f = group_commit_floor(&args.physics_dir, RATE_RECORDS_PER_S, args.floor_s).map_err(
            |e| anyhow::anyhow!("the disk's floor in {}: {e}", args.physics_dir.display()),
        )?;
        println!(
            "floor: the disk alone at this load (open loop, group commit, O_DSYNC 4 KiB): {}",
            f.summary()
        );
        Some(f)
    } else {
        None
    };
    let rt = runtime()?;
    let mut results = Vec::with_capacity(args.runs);
    let mut steal = Vec::with_capacity(args.runs);
    for i in 0..args.runs.max(1) {
        let label = format!("light {}/{}", i + 1, args.runs.max(1));
        let before = read_cpu_ticks();
        let r = rt.block_on(run_one(
            label,
            &args.bootstrap,
            args.protocol,
            args.spec(),
            physics.clone(),
        ))?;
        let stolen = steal_percent(before, read_cpu_ticks());
        print!("{}", r.table());
        if let Some(p) = stolen {
            println!("steal: the host took {p:.1}% of this machine's CPU time during the run");
        }
        results.push(r);
        steal.push(stolen);
    }
    if let Some(out) = &args.out {
        let lines: Vec<String> = results
            .iter()
            .map(serde_json::to_string)
            .collect::<Result<_, _>>()?;
        std::fs::write(out, lines.join("\n") + "\n")?;
    }
    print!("{}", summary(&results, &steal, floor.as_ref()));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_floor_measures_every_record_of_its_load() {
        let dir = std::env::temp_dir().join(format!("strand-light-floor-{}", std::process::id()));
        match group_commit_floor(&dir, 2_000.0, 0.2) {
            Ok(lat) => {
                assert_eq!(lat.len(), 400, "every record of 0.2 s at 2,000/s");
                assert!(lat.quantile_us(0.5) > 0);
            }
            // tmpfs and some filesystems refuse O_DIRECT: nothing to measure there.
            Err(e) => assert!(e.to_string().contains("Invalid argument"), "{e}"),
        }
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn steal_is_read_from_proc_stat() {
        let a = cpu_ticks("cpu  100 5 50 800 40 1 2 2 7 0\ncpu0 1 2 3 4 5 6 7 8\n");
        assert_eq!(a, Some((2, 1000)));
        let b = cpu_ticks("cpu  150 5 60 870 40 1 2 22 9 0\n");
        assert_eq!(b, Some((22, 1150)));
        let p = steal_percent(a, b).expect("a percentage");
        assert!((p - 20.0 / 150.0 * 100.0).abs() < 1e-9, "{p}");
        assert_eq!(cpu_ticks("cpu  1 2 3\n"), None, "too few fields");
        assert_eq!(cpu_ticks("intr 1 2\n"), None);
        assert_eq!(steal_percent(b, a), None, "time went back");
        assert_eq!(steal_percent(None, b), None);
    }
}
