//! Crash consistency of the partition log on the simulated disk (`io_sim`), without Raft:
//! random appends, flushes, suffix truncations, snapshot resets and segment deletions,
//! with crashes (power loss) between operations and inside them, then recovery.
//!
//! Invariant checked after every recovery: each entry a flush reported durable (and not
//! truncated since) is present with its term, kind, Kafka offset and body; the log is
//! continuous from its first to its last index. A planted bug that drops O_DSYNC from
//! segment files must break it.
//!
//! Replay one seed: `STRAND_SIM_SEED=n cargo test -p strand-storage --test crash_sim`.

use std::cell::Cell;
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::rc::Rc;

use bytes::Bytes;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use strand_storage::io_sim::{block_on, DiskOptions, SimDisk};
use strand_storage::{
    AppendEntry, BatchCache, Clock, FrameKind, KafkaOffset, Log, LogConfig, RaftIndex, RaftTerm,
};
use strand_wire::BatchBuilder;

/// Seeds per run unless `STRAND_SIM_SEEDS` says otherwise.
const SEEDS_DEFAULT: u64 = 1000;
/// Operations per seed.
const OPS_PER_SEED: usize = 120;
const DIR: &str = "/data/t-0";

struct SimClock(Cell<i64>);
impl Clock for SimClock {
    fn now_ms(&self) -> i64 {
        self.0.get()
    }
}

fn config() -> LogConfig {
    LogConfig {
        segment_bytes: 8192,
        retention_ms: -1,
        retention_bytes: -1,
        preallocate_bytes: 64 * 1024,
        allow_buffered_io: true,
        ..LogConfig::default()
    }
}

/// What an acknowledged entry must read back as.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Expected {
    term: u64,
    kind: FrameKind,
    offset: i64,
    /// Data bodies without their base offset and leader epoch (the log stamps them).
    body: Vec<u8>,
}

fn canonical(kind: FrameKind, body: &[u8]) -> Vec<u8> {
    let mut b = body.to_vec();
    if kind == FrameKind::Data && b.len() >= 16 {
        b[..8].fill(0);
        b[12..16].fill(0);
    }
    b
}

/// The test's memory of the log, across crashes.
#[derive(Default)]
struct Model {
    /// Entries a flush reported durable, by Raft index.
    acked: BTreeMap<u64, Expected>,
    /// Entries appended and not yet known durable.
    unacked: BTreeMap<u64, Expected>,
    /// The compaction point (last index, Kafka offset after it): entries at or below it
    /// may be gone (deleted segments, a snapshot reset). The log's owner keeps it durably
    /// and resets a log that a restart left ending before it (as `RaftLogStore::open`).
    point: Option<(u64, i64)>,
    term: u64,
}

impl Model {
    /// Entries below this index may be gone.
    fn floor(&self) -> u64 {
        self.point.map_or(0, |(i, _)| i + 1)
    }
}

async fn open(dir: &str, config: LogConfig, clock: &Rc<SimClock>) -> Result<Log, String> {
    let cache = Rc::new(BatchCache::new(1 << 20));
    Log::open(Path::new(dir), config, clock.clone(), cache)
        .await
        .map_err(|e| format!("open {dir}: {e}"))
}

/// Recovery as the log's owner does it, then the invariant.
async fn recover(m: &mut Model, clock: &Rc<SimClock>) -> Result<Log, String> {
    recover_in(DIR, config(), m, clock).await
}

/// [`recover`] of the log in `dir`.
async fn recover_in(
    dir: &str,
    config: LogConfig,
    m: &mut Model,
    clock: &Rc<SimClock>,
) -> Result<Log, String> {
    let log = open(dir, config, clock).await?;
    if let Some((index, kafka_end)) = m.point {
        if log.last_index().0 < index {
            log.reset(RaftIndex(index + 1), KafkaOffset(kafka_end))
                .await
                .map_err(|e| format!("repeating the reset: {e}"))?;
        }
    }
    check(m, &log).await?;
    m.unacked.clear();
    m.term = m.term.max(log.last_term().0);
    Ok(log)
}

async fn check(m: &Model, log: &Log) -> Result<(), String> {
    let (first, last) = (log.first_index().0, log.last_index().0);
    if let Some((&i, _)) = m.acked.range(m.floor()..).next_back() {
        if i > last {
            return Err(format!(
                "lost write: index {i} was acknowledged durable but the log ends at {last}"
            ));
        }
    }
    if first > m.floor().max(1) && m.acked.range(m.floor()..first).next().is_some() {
        return Err(format!(
            "lost write: the log starts at {first}, above acknowledged entries from {}",
            m.floor()
        ));
    }
    if first > last {
        return Ok(());
    }
    let frames = log
        .read_entries(RaftIndex(first), RaftIndex(last + 1), usize::MAX)
        .await
        .map_err(|e| format!("read {first}..={last}: {e}"))?;
    let got: Vec<u64> = frames.iter().map(|f| f.header.index.0).collect();
    let want: Vec<u64> = (first..=last).collect();
    if got != want {
        return Err(format!("log not continuous: {got:?}"));
    }
    for f in &frames {
        let Some(e) = m.acked.get(&f.header.index.0) else {
            continue;
        };
        let read = Expected {
            term: f.header.term.0,
            kind: f.header.kind,
            offset: f.header.kafka_base_offset.0,
            body: canonical(f.header.kind, &f.body),
        };
        if &read != e {
            return Err(format!(
                "changed: index {} acknowledged as {e:?}, reads {read:?}",
                f.header.index.0
            ));
        }
    }
    Ok(())
}

fn entry(rng: &mut StdRng, term: u64) -> AppendEntry {
    if rng.gen_ratio(1, 6) {
        return AppendEntry {
            term: RaftTerm(term),
            kind: FrameKind::NoOp,
            body: Bytes::from_static(b"noop"),
        };
    }
    let mut b = BatchBuilder::new(1_000);
    let values = rng.gen_range(1..4);
    let len = rng.gen_range(10..1500);
    for i in 0..values {
        let v: Vec<u8> = (0..len).map(|_| rng.gen()).collect();
        b.push(1_000 + i, Some(b"k"), Some(&v), &[]);
    }
    AppendEntry {
        term: RaftTerm(term),
        kind: FrameKind::Data,
        body: b.build(),
    }
}

fn trace(op: u32, m: &Model, log: &Log) {
    if std::env::var("STRAND_SIM_TRACE").is_ok() {
        eprintln!(
            "op {op} log {}..={} durable {:?} floor {} point {:?}",
            log.first_index().0,
            log.last_index().0,
            log.durable(),
            m.floor(),
            m.point
        );
    }
}

/// One operation on a live log; `Err` when the disk failed under it (a crash point).
/// `STRAND_SIM_TRACE=1` prints each.
async fn step(rng: &mut StdRng, m: &mut Model, log: &Log) -> Result<(), String> {
    let op = rng.gen_range(0..100);
    trace(op, m, log);
    match op {
        0..=54 => append(rng, m, log),
        55..=79 => flush(m, log).await,
        80..=87 => truncate(rng, m, log).await,
        88..=94 => delete(rng, m, log).await,
        _ => reset(rng, m, log).await,
    }
}

fn append(rng: &mut StdRng, m: &mut Model, log: &Log) -> Result<(), String> {
    let e = entry(rng, m.term.max(1));
    let a = log.append_one(&e).map_err(|e| e.to_string())?;
    let expected = Expected {
        term: e.term.0,
        kind: e.kind,
        offset: a.kafka_base_offset.0,
        body: canonical(e.kind, &e.body),
    };
    m.unacked.insert(a.index.0, expected);
    Ok(())
}

async fn flush(m: &mut Model, log: &Log) -> Result<(), String> {
    let d = log.flush().await.map_err(|e| e.to_string())?;
    let done: Vec<u64> = m
        .unacked
        .range(..=d.last_index.0)
        .map(|(&i, _)| i)
        .collect();
    for i in done {
        if let Some(e) = m.unacked.remove(&i) {
            m.acked.insert(i, e);
        }
    }
    Ok(())
}

/// A new leader's log replaces the suffix (after a flush: none may be in flight).
async fn truncate(rng: &mut StdRng, m: &mut Model, log: &Log) -> Result<(), String> {
    log.flush().await.map_err(|e| e.to_string())?;
    let (first, last) = (log.first_index().0, log.last_index().0);
    let lo = first.max(m.floor()).max(1);
    if lo > last + 1 {
        return Err(format!(
            "log {first}..={last} is below the floor {}",
            m.floor()
        ));
    }
    if last < first {
        return Ok(());
    }
    // The model forgets first: a crash inside may have removed any of them.
    let from = rng.gen_range(lo..=last + 1);
    m.acked.retain(|&i, _| i < from);
    m.unacked.retain(|&i, _| i < from);
    m.term += 1;
    log.truncate_suffix(RaftIndex(from))
        .await
        .map_err(|e| e.to_string())
}

/// Retention after a Raft compaction: the owner records the point before deleting.
async fn delete(rng: &mut StdRng, m: &mut Model, log: &Log) -> Result<(), String> {
    let durable = log.durable().last_index.0;
    let first = log.first_index().0.max(m.floor());
    if durable < first {
        return Ok(());
    }
    let through = rng.gen_range(first..=durable);
    let at = log
        .read_entries(RaftIndex(through), RaftIndex(through + 1), 0)
        .await
        .map_err(|e| e.to_string())?;
    let h = at.first().ok_or("no entry at the compaction point")?.header;
    m.point = Some((through, h.kafka_base_offset.0 + i64::from(h.offset_count)));
    log.delete_segments_through(RaftIndex(through))
        .await
        .map(drop)
        .map_err(|e| e.to_string())
}

/// A snapshot installed: the log replaced by an empty one after the snapshot's point.
async fn reset(rng: &mut StdRng, m: &mut Model, log: &Log) -> Result<(), String> {
    log.flush().await.map_err(|e| e.to_string())?;
    let (point_index, point_offset) = m.point.unwrap_or((0, 0));
    // A snapshot the log does not hold: its point lies past the log's end (a point inside
    // the log would carry the log's own offsets, by Raft's log matching).
    let next_index = log.last_index().0.max(point_index) + 2 + rng.gen_range(0..5);
    let next_offset = log.log_end_offset().0.max(point_offset) + rng.gen_range(0..20);
    m.point = Some((next_index - 1, next_offset));
    m.acked.clear();
    m.unacked.clear();
    log.reset(RaftIndex(next_index), KafkaOffset(next_offset))
        .await
        .map_err(|e| e.to_string())
}

/// Recovers until a recovery is not itself cut short by an armed crash point.
async fn restart(disk: &SimDisk, m: &mut Model, clock: &Rc<SimClock>) -> Result<Log, String> {
    loop {
        match recover(m, clock).await {
            Ok(log) => return Ok(log),
            Err(_) if disk.crashed() => disk.crash(),
            Err(e) => return Err(e),
        }
    }
}

fn run_seed(seed: u64, opts: DiskOptions) -> Result<(), String> {
    let disk = SimDisk::new(seed, opts);
    let _entered = disk.enter();
    let mut rng = StdRng::seed_from_u64(seed);
    let clock = Rc::new(SimClock(Cell::new(1_000_000)));
    let mut m = Model::default();
    block_on(async {
        let mut log = restart(&disk, &mut m, &clock).await?;
        for _ in 0..OPS_PER_SEED {
            clock.0.set(clock.0.get() + 7);
            if rng.gen_ratio(1, 12) {
                if rng.gen_bool(0.5) {
                    disk.crash_after_ops(rng.gen_range(1..8));
                } else {
                    disk.crash();
                    drop(log);
                    log = restart(&disk, &mut m, &clock).await?;
                }
            }
            let r = step(&mut rng, &mut m, &log).await;
            if disk.crashed() {
                disk.crash();
                drop(log);
                log = restart(&disk, &mut m, &clock).await?;
            } else if let Err(e) = r {
                return Err(format!("operation failed without a fault: {e}"));
            }
        }
        disk.crash();
        drop(log);
        restart(&disk, &mut m, &clock).await.map(drop)
    })
    .map_err(|e| format!("seed {seed}: {e}"))
}

fn seeds() -> Vec<u64> {
    if let Some(s) = std::env::var("STRAND_SIM_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
    {
        return vec![s];
    }
    let n = std::env::var("STRAND_SIM_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(SEEDS_DEFAULT);
    (0..n).collect()
}

#[test]
fn acknowledged_entries_survive_every_crash() {
    let started = std::time::Instant::now();
    let seeds = seeds();
    for &seed in &seeds {
        if let Err(e) = run_seed(seed, DiskOptions::default()) {
            panic!(
                "{e}\nreplay: STRAND_SIM_SEED={seed} cargo test -p strand-storage --test crash_sim"
            );
        }
    }
    let secs = started.elapsed().as_secs_f64();
    eprintln!(
        "{} seeds in {secs:.1} s ({:.0} seeds/s)",
        seeds.len(),
        seeds.len() as f64 / secs
    );
}

/// Runs 40 seeds with `bug` planted and asserts some seed reports lost or changed data.
fn catches(bug: &'static str) {
    catches_in(bug, run_seed);
}

/// [`catches`] with `run` as the seed's scenario.
fn catches_in<T>(bug: &'static str, run: impl Fn(u64, DiskOptions) -> Result<T, String>) {
    let opts = DiskOptions {
        planted: BTreeSet::from([bug]),
        ..DiskOptions::default()
    };
    let failures: Vec<String> = (0..40).filter_map(|s| run(s, opts.clone()).err()).collect();
    eprintln!(
        "{bug}: {} of 40 seeds failed; first: {:?}",
        failures.len(),
        failures.first()
    );
    assert!(
        failures
            .iter()
            .any(|f| f.contains("lost write") || f.contains("changed")),
        "the planted bug {bug} went unnoticed in 40 seeds: {failures:?}"
    );
}

/// A flush that skips its file's fdatasync (or a file that forgets O_DSYNC).
#[test]
fn a_flush_without_its_sync_is_caught() {
    catches("drop-dsync");
}

#[test]
fn a_new_segment_whose_directory_is_not_fsynced_is_caught() {
    catches("no-dir-fsync");
}

// --- Logs of one shard sharing device flushes ---------------------------------------------

/// Logs written and flushed together in [`shared_flush_seed`].
const SHARED_LOGS: usize = 3;

/// Segments large enough for zeros to go ahead (`ZERO_AHEAD_MIN_SEGMENT_BYTES`), so small
/// flushes land in written blocks and join the shard's shared device flush.
fn shared_config() -> LogConfig {
    LogConfig {
        segment_bytes: 512 * 1024,
        retention_ms: -1,
        retention_bytes: -1,
        preallocate_bytes: 1 << 20,
        allow_buffered_io: true,
        ..LogConfig::default()
    }
}

/// Several logs on one disk: each round appends to every log, then flushes them all at
/// once (fdatasyncs yield, so flushes overlap and share device flushes); crashes fall
/// between rounds and inside them. Every entry a flush acknowledged must survive. Returns
/// how many writes another file's fdatasync made durable.
fn shared_flush_seed(seed: u64, opts: DiskOptions) -> Result<u64, String> {
    let disk = SimDisk::new(
        seed,
        DiskOptions {
            slow_syncs: true,
            ..opts
        },
    );
    let _entered = disk.enter();
    let mut rng = StdRng::seed_from_u64(seed);
    let clock = Rc::new(SimClock(Cell::new(1_000_000)));
    let dirs: Vec<String> = (0..SHARED_LOGS).map(|i| format!("/data/s-{i}")).collect();
    let mut models: Vec<Model> = (0..SHARED_LOGS).map(|_| Model::default()).collect();
    let covered_before = strand_storage::device_flush::covered();
    block_on(async {
        let mut logs = restart_all(&disk, &dirs, &mut models, &clock).await?;
        for _ in 0..OPS_PER_SEED {
            clock.0.set(clock.0.get() + 7);
            if rng.gen_ratio(1, 10) {
                disk.crash_after_ops(rng.gen_range(1..12));
            }
            let mut failed = None;
            for (m, log) in models.iter_mut().zip(&logs) {
                for _ in 0..rng.gen_range(1..3) {
                    if let Err(e) = append(&mut rng, m, log) {
                        failed = Some(e);
                    }
                }
            }
            let flushes = logs.iter().map(|l| l.flush());
            let results = futures::future::join_all(flushes).await;
            for (m, r) in models.iter_mut().zip(results) {
                match r {
                    Ok(d) => acknowledge(m, d.last_index.0),
                    Err(e) => failed = Some(e.to_string()),
                }
            }
            if disk.crashed() {
                disk.crash();
                drop(logs);
                logs = restart_all(&disk, &dirs, &mut models, &clock).await?;
            } else if let Some(e) = failed {
                return Err(format!("operation failed without a fault: {e}"));
            }
        }
        disk.crash();
        drop(logs);
        restart_all(&disk, &dirs, &mut models, &clock)
            .await
            .map(drop)
    })
    .map_err(|e| format!("seed {seed}: {e}"))?;
    Ok(strand_storage::device_flush::covered() - covered_before)
}

fn acknowledge(m: &mut Model, durable: u64) {
    let done: Vec<u64> = m.unacked.range(..=durable).map(|(&i, _)| i).collect();
    for i in done {
        if let Some(e) = m.unacked.remove(&i) {
            m.acked.insert(i, e);
        }
    }
}

/// Recovers every log until a recovery is not cut short by an armed crash point.
async fn restart_all(
    disk: &SimDisk,
    dirs: &[String],
    models: &mut [Model],
    clock: &Rc<SimClock>,
) -> Result<Vec<Log>, String> {
    'again: loop {
        let mut logs = Vec::new();
        for (dir, m) in dirs.iter().zip(models.iter_mut()) {
            match recover_in(dir, shared_config(), m, clock).await {
                Ok(log) => logs.push(log),
                Err(_) if disk.crashed() => {
                    disk.crash();
                    continue 'again;
                }
                Err(e) => return Err(format!("{dir}: {e}")),
            }
        }
        return Ok(logs);
    }
}

#[test]
fn entries_of_logs_sharing_device_flushes_survive_every_crash() {
    let seeds: Vec<u64> = (0..200).collect();
    let mut covered = 0;
    for &seed in &seeds {
        match shared_flush_seed(seed, DiskOptions::default()) {
            Ok(n) => covered += n,
            Err(e) => panic!("{e}"),
        }
    }
    // The path under test ran: writes made durable by another log's fdatasync.
    assert!(
        covered > 0,
        "no write was made durable by another file's sync in {} seeds",
        seeds.len()
    );
    eprintln!(
        "{} seeds, {covered} writes made durable by another file's sync",
        seeds.len()
    );
}

/// The shared flush used for writes outside durably written blocks loses them.
#[test]
fn a_shared_device_flush_of_unwritten_blocks_is_caught() {
    catches_in("shared-flush-anywhere", shared_flush_seed);
}

/// Zeros written ahead counted durable before any sync of their file: a later write there
/// joins the shared flush and is lost with the extents' conversion.
#[test]
fn zeros_counted_durable_before_their_sync_is_caught() {
    catches_in("zeros-durable-unsynced", shared_flush_seed);
}
