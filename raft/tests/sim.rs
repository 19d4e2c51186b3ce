//! The deterministic simulator over many seeds (raft/src/sim). `STRAND_SIM_SEEDS=<n>` sets
//! how many seeds run (from `STRAND_SIM_SEED_START`, default 0); `STRAND_SIM_SEED=<n>`
//! replays one seed exactly; `STRAND_SIM_LOG=info` prints its logs.

use std::time::Instant;

use strand_raft::sim::{self, MemOptions, SimConfig};
use strand_raft::MemLogStore;

/// Seeds per `cargo test` run: sized so the test stays well under a minute in debug.
const SEEDS_DEFAULT: u64 = 2000;
/// Seeds of the failover measurement.
const FAILOVER_SEEDS: u64 = 200;

fn env_u64(name: &str) -> Option<u64> {
    let v = std::env::var(name).ok().filter(|v| !v.is_empty())?;
    Some(
        v.parse()
            .unwrap_or_else(|_| panic!("{name}={v} is not a u64")),
    )
}

/// `STRAND_SIM_LOG=<filter>` prints the drivers' and raft-rs's logs (one seed at a time).
fn init_log() {
    if let Ok(filter) = std::env::var("STRAND_SIM_LOG") {
        let _ = tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::new(filter))
            .with_test_writer()
            .try_init();
    }
}

fn seeds() -> Vec<u64> {
    init_log();
    if let Some(seed) = env_u64("STRAND_SIM_SEED") {
        return vec![seed];
    }
    let start = env_u64("STRAND_SIM_SEED_START").unwrap_or(0);
    let count = env_u64("STRAND_SIM_SEEDS").unwrap_or(SEEDS_DEFAULT);
    (start..start + count).collect()
}

#[test]
fn invariants_hold_under_faults() {
    let config = SimConfig::default();
    let seeds = seeds();
    let started = Instant::now();
    let (mut acked, mut steps) = (0, 0);
    for &seed in &seeds {
        match sim::run(seed, &config) {
            Ok(report) => {
                acked += report.acked;
                steps += report.steps;
            }
            Err(failure) => panic!("{failure}"),
        }
    }
    let secs = started.elapsed().as_secs_f64();
    eprintln!(
        "sim: {} seeds in {secs:.1} s ({:.0} seeds/s), {steps} steps, {acked} acknowledged writes",
        seeds.len(),
        seeds.len() as f64 / secs
    );
    assert!(
        acked > 0,
        "no write was ever acknowledged: the simulation tests nothing"
    );
}

/// Seeds of the run with partition moves (`SimConfig::moves`): 5 nodes, 3 voters.
const MOVE_SEEDS_DEFAULT: u64 = 500;

/// The same invariants while groups move between 5 nodes (3 voters each), under the same
/// faults: no committed entry lost or changed, moves finish after healing, the members
/// catch up and hold every acknowledged write.
#[test]
fn invariants_hold_while_groups_move() {
    let config = SimConfig {
        nodes: 5,
        voters: 3,
        moves: true,
        ..SimConfig::default()
    };
    let seeds: Vec<u64> = if env_u64("STRAND_SIM_SEED").is_some() {
        seeds()
    } else {
        let start = env_u64("STRAND_SIM_SEED_START").unwrap_or(0);
        let count = env_u64("STRAND_SIM_MOVE_SEEDS")
            .or_else(|| env_u64("STRAND_SIM_SEEDS"))
            .unwrap_or(MOVE_SEEDS_DEFAULT);
        (start..start + count).collect()
    };
    let started = Instant::now();
    let (mut acked, mut steps, mut moves) = (0, 0, 0);
    for &seed in &seeds {
        match sim::run(seed, &config) {
            Ok(report) => {
                acked += report.acked;
                steps += report.steps;
                moves += report.moves;
            }
            Err(failure) => panic!("{failure} (the moves test: cargo test -p strand-raft --test sim invariants_hold_while_groups_move)"),
        }
    }
    eprintln!(
        "sim with moves: {} seeds in {:.1} s, {steps} steps, {acked} acknowledged writes, {moves} moves finished",
        seeds.len(),
        started.elapsed().as_secs_f64()
    );
    assert!(acked > 0, "no write was ever acknowledged");
    assert!(
        moves >= seeds.len(),
        "only {moves} moves finished in {} seeds: the moves are barely tested",
        seeds.len()
    );
}

/// Seeds of the run with pipelined persistence (`MemOptions::pipelined`).
const PIPELINED_SEEDS_DEFAULT: u64 = 500;
/// Seeds of the run with paced persistence (`SimConfig::sync_min_interval`).
const PACED_SEEDS_DEFAULT: u64 = 200;

/// The seeds of a run: `STRAND_SIM_SEED` alone, else `count_env` (or `STRAND_SIM_SEEDS`,
/// else `default`) seeds from `STRAND_SIM_SEED_START`.
fn seeds_of(count_env: &str, default: u64) -> Vec<u64> {
    if env_u64("STRAND_SIM_SEED").is_some() {
        return seeds();
    }
    let start = env_u64("STRAND_SIM_SEED_START").unwrap_or(0);
    let count = env_u64(count_env)
        .or_else(|| env_u64("STRAND_SIM_SEEDS"))
        .unwrap_or(default);
    (start..start + count).collect()
}

/// Runs `seeds` over pipelined stores (`what`: the run's name; `test`: the test to rerun).
fn run_pipelined(config: &SimConfig, seeds: &[u64], what: &str, test: &str) {
    let options = MemOptions {
        sync_behaviour: config.sync_behaviour,
        pipelined: true,
    };
    let started = Instant::now();
    let (mut acked, mut steps) = (0, 0);
    for &seed in seeds {
        match sim::run_with::<MemLogStore>(seed, config, &options) {
            Ok(report) => {
                acked += report.acked;
                steps += report.steps;
            }
            Err(failure) => {
                panic!("{failure} (the {what} test: cargo test -p strand-raft --test sim {test})")
            }
        }
    }
    eprintln!(
        "sim with {what} persistence: {} seeds in {:.1} s, {steps} steps, {acked} acknowledged writes",
        seeds.len(),
        started.elapsed().as_secs_f64()
    );
    assert!(acked > 0, "no write was ever acknowledged");
}

/// The same invariants when the store persists as the broker's does: each turn's writes
/// take 0.1-3 ms of simulated disk time (sometimes 50-400 ms) while the driver keeps
/// stepping and proposing, and a group finishes its `Ready` in the first turn after.
#[test]
fn invariants_hold_with_pipelined_persistence() {
    let seeds = seeds_of("STRAND_SIM_PIPELINED_SEEDS", PIPELINED_SEEDS_DEFAULT);
    run_pipelined(
        &SimConfig::default(),
        &seeds,
        "pipelined",
        "invariants_hold_with_pipelined_persistence",
    );
}

/// The same invariants when every group's writes are paced (group commit pacing, 2 ms of
/// simulated time between write starts) over pipelined persistence, under the faults.
#[test]
fn invariants_hold_with_paced_persistence() {
    let config = SimConfig {
        sync_min_interval: std::time::Duration::from_millis(2),
        ..SimConfig::default()
    };
    let seeds = seeds_of("STRAND_SIM_PACED_SEEDS", PACED_SEEDS_DEFAULT);
    run_pipelined(
        &config,
        &seeds,
        "paced",
        "invariants_hold_with_paced_persistence",
    );
}

#[test]
fn a_seed_replays_exactly() {
    let config = SimConfig::default();
    for seed in [1, 2, 3] {
        let a = sim::run(seed, &config).map_err(|f| f.to_string());
        let b = sim::run(seed, &config).map_err(|f| f.to_string());
        assert_eq!(a, b, "seed {seed} did not replay");
    }
}

/// Leader election time after the leader crashes, with the default ticks (target < 2 s),
/// for a busy group and for one that hibernates (its followers learn of the crash from the
/// leader node's silence instead of missing heartbeats).
#[test]
fn failover_is_bounded() {
    for hibernated in [false, true] {
        let mut ms: Vec<u128> = (0..FAILOVER_SEEDS)
            .map(|seed| {
                sim::failover(seed, hibernated)
                    .unwrap_or_else(|f| panic!("{f}"))
                    .as_millis()
            })
            .collect();
        ms.sort_unstable();
        let p = |q: f64| ms[((ms.len() - 1) as f64 * q).round() as usize];
        eprintln!(
            "failover (hibernated: {hibernated}) over {FAILOVER_SEEDS} seeds: p50 {} ms, p99 {} ms, max {} ms (simulated)",
            p(0.5),
            p(0.99),
            p(1.0)
        );
        assert!(
            p(0.99) < 2000,
            "failover (hibernated: {hibernated}) p99 {} ms is not under 2 s",
            p(0.99)
        );
    }
}
