//! The deterministic simulator over the real storage path: the broker's `RaftLogStore`
//! on `strand_storage::Log` on a simulated disk (`io_sim`), driven pipelined as the
//! shard's replication loop drives it, with crashes (power loss: unsynced writes lost or
//! torn), network faults, fdatasync failures and, on odd seeds, partition moves over five
//! nodes. Every acknowledged write must be durable on a majority (read from the disks'
//! durable images) and readable everywhere afterwards.
//!
//! Replay one seed: `STRAND_SIM_SEED=n cargo test -p strand-broker --test sim_storage`;
//! `STRAND_SIM_SEEDS=n` runs seeds 0..n (`STRAND_SIM_SEED_START` shifts them).

use std::collections::BTreeSet;
use std::time::Duration;

use strand_broker::replication::sim::BrokerSimOptions;
use strand_broker::replication::store::RaftLogStore;
use strand_raft::sim::{run_with, SimConfig, SimFailure, SimReport};

/// Seeds per `make test` run.
const SEEDS_DEFAULT: u64 = 2000;

/// Even seeds: three nodes, fixed voters. Odd seeds: five nodes, three voters, moves. Both
/// with disk faults and retention compacting the logs (snapshots).
fn config(seed: u64) -> SimConfig {
    let moving = seed % 2 == 1;
    SimConfig {
        nodes: if moving { 5 } else { 3 },
        voters: 3,
        moves: moving,
        groups: 2,
        fault_phase: Duration::from_secs(4),
        liveness_deadline: Duration::from_secs(20),
        // `STRAND_SIM_DISK_FAULTS=0` replays a schedule found before disk faults were added.
        disk_faults: env("STRAND_SIM_DISK_FAULTS") != Some(0),
        compaction: true,
        ..SimConfig::default()
    }
}

fn run(seed: u64, planted: &[&'static str], check_durable: bool) -> Result<SimReport, SimFailure> {
    let options = BrokerSimOptions {
        seed,
        planted: planted.iter().copied().collect::<BTreeSet<_>>(),
    };
    let config = SimConfig {
        check_durable,
        ..config(seed)
    };
    run_with::<RaftLogStore>(seed, &config, &options)
}

/// `STRAND_SIM_LOG=<filter>` prints the broker's and storage's logs (one seed at a time).
fn init_log() {
    if let Ok(filter) = std::env::var("STRAND_SIM_LOG") {
        let _ = tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::new(filter))
            .with_test_writer()
            .try_init();
    }
}

fn env(name: &str) -> Option<u64> {
    std::env::var(name).ok().and_then(|s| s.parse().ok())
}

fn seeds() -> Vec<u64> {
    if let Some(s) = env("STRAND_SIM_SEED") {
        return vec![s];
    }
    let start = env("STRAND_SIM_SEED_START").unwrap_or(0);
    (start..start + env("STRAND_SIM_SEEDS").unwrap_or(SEEDS_DEFAULT)).collect()
}

/// Runs `seeds` on up to two threads (each thread has its own entered disk).
fn run_all(seeds: &[u64]) -> Vec<Result<SimReport, SimFailure>> {
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get().min(2));
    let chunks: Vec<Vec<u64>> = (0..threads)
        .map(|t| seeds.iter().copied().skip(t).step_by(threads).collect())
        .collect();
    std::thread::scope(|s| {
        let handles: Vec<_> = chunks
            .iter()
            .map(|c| {
                s.spawn(move || {
                    c.iter()
                        .map(|&seed| run(seed, &[], true))
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().unwrap_or_default())
            .collect()
    })
}

#[test]
fn invariants_hold_over_the_real_storage_path() {
    init_log();
    let started = std::time::Instant::now();
    let seeds = seeds();
    let results = run_all(&seeds);
    assert_eq!(results.len(), seeds.len(), "a simulation thread panicked");
    let mut acked = 0usize;
    let mut moves = 0usize;
    for r in results {
        match r {
            Ok(report) => {
                acked += report.acked;
                moves += report.moves;
            }
            Err(failure) => panic!("{failure}"),
        }
    }
    let secs = started.elapsed().as_secs_f64();
    eprintln!(
        "{} seeds in {secs:.1} s ({:.1} seeds/s), {acked} writes acknowledged, {moves} moves",
        seeds.len(),
        seeds.len() as f64 / secs
    );
    assert!(acked > 0, "the client got no acknowledgement at all");
}

#[test]
fn a_seed_replays_exactly() {
    for seed in [3, 8] {
        let a = run(seed, &[], true).map(|r| r.digest);
        let b = run(seed, &[], true).map(|r| r.digest);
        assert_eq!(a, b, "seed {seed} is not deterministic");
    }
}

/// Runs 20 seeds with `bug` planted: some seed must report a lost write.
fn catches(bug: &'static str) {
    let failures: Vec<String> = (0..20)
        .filter_map(|s| run(s, &[bug], true).err())
        .map(|f| f.to_string())
        .collect();
    eprintln!(
        "{bug}: {} of 20 seeds failed; first: {:?}",
        failures.len(),
        failures.first()
    );
    assert!(
        failures.iter().any(|f| f.contains("lost write")),
        "the planted bug {bug} went unnoticed in 20 seeds: {failures:?}"
    );
}

/// A store that acknowledges data that never reached the disk durably must be caught.
#[test]
fn a_flush_without_its_sync_is_caught() {
    catches("drop-dsync");
}

/// A new segment whose directory entry is not made durable is lost with its data.
#[test]
fn a_segment_created_without_a_directory_fsync_is_caught() {
    catches("no-dir-fsync");
}
