//! SIGKILL a process that appends and flushes a log, again and again on one directory, and
//! check after each kill that recovery keeps every acknowledged entry, intact and in place
//! (ARCHITECTURE.md, Storage: Recovery). Each restart recovers a log that an earlier
//! recovery produced, so recovery-after-recovery is exercised too.
//!
//! `STRAND_SOAK_ITERATIONS` sets the number of kills (default 20); `STRAND_SEED` replays.

use std::io::{BufRead, BufReader, Read};
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::time::Duration;

use strand_storage::{KafkaOffset, RaftIndex};
use strand_tests::clock::{Deadline, Stopwatch};
use strand_tests::crash_workload::{self, Offsets};
use strand_tests::harness;
use strand_tests::seed::{self, mix, OnPanic, Rng};

const ITERATIONS_DEFAULT: u64 = 20;
/// A time-planned kill lands within this many milliseconds of the spawn (0 kills the child
/// while it is still opening or recovering the log).
const KILL_AFTER_MS_MAX: u64 = 300;
/// A count-planned kill waits for at most this many acknowledged flushes.
const KILL_AFTER_FLUSHES_MAX: u64 = 60;
/// How long a count-planned kill waits for its flushes before calling the child stuck.
const CHILD_PROGRESS_TIMEOUT: Duration = Duration::from_secs(10);
/// Lines buffered between the stdout reader thread and the test (bounded: a full queue
/// blocks the reader, and with it the child's stdout).
const LINE_QUEUE_MAX: usize = 1024;
/// SIGKILL's number on Linux; std's `Child::kill` sends it.
const SIGKILL: i32 = 9;
/// A log larger than this is deleted after its check and the next kill starts a new one:
/// bounds a soak's disk use and check time (a fast disk acknowledges ~1 MiB per kill).
const GENERATION_BYTES_MAX: u64 = 64 * 1024 * 1024;
/// Separates the kill-plan stream from the workload stream of the same seed.
const KILL_SALT: u64 = 0x6b69_6c6c;

/// When to kill the child.
#[derive(Clone, Copy, Debug)]
enum KillPlan {
    AfterMs(u64),
    AfterFlushes(u64),
}

impl KillPlan {
    fn draw(rng: &mut Rng) -> KillPlan {
        if rng.one_in(2) {
            KillPlan::AfterMs(rng.below(KILL_AFTER_MS_MAX + 1))
        } else {
            KillPlan::AfterFlushes(rng.below(KILL_AFTER_FLUSHES_MAX + 1))
        }
    }
}

/// An acknowledgement: what a child reported durable.
#[derive(Clone, Copy, Debug, Default)]
struct Acked {
    last_index: RaftIndex,
    next_offset: KafkaOffset,
}

#[test]
fn sigkill_never_loses_an_acknowledged_entry() {
    let seed = seed::test_seed("crash_kill9");
    let iterations = seed::env_u64("STRAND_SOAK_ITERATIONS", ITERATIONS_DEFAULT);
    let root = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).expect("temp dir");
    let dir = root.path().join("log");
    let mut rng = Rng::new(mix(seed.value, KILL_SALT));
    let mut offsets = Offsets::new(seed.value);
    let mut generation = Generation::default();
    let (watch, mut flushes, mut generations) = (Stopwatch::start(), 0, 1);
    for iteration in 0..iterations {
        let plan = KillPlan::draw(&mut rng);
        let _context = OnPanic(format!("iteration {iteration} ({plan:?})"));
        let lines = run_child_until(&dir, seed.value, plan);
        flushes += lines.len();
        for line in &lines {
            generation.acked = check_ack(line, generation.acked, &mut offsets);
        }
        // The whole log now and then (more rarely as it grows), the new part otherwise.
        generation.kills += 1;
        let whole = iteration + 1 == iterations || generation.kills.is_power_of_two();
        let scope = if whole {
            Scope::Whole
        } else {
            Scope::Since(generation.checked_to)
        };
        let check = check_log(&dir, seed.value, &mut offsets, generation.acked, scope);
        let (last, size_bytes) = harness::run("crash-check", check);
        generation.checked_to = last;
        if size_bytes > GENERATION_BYTES_MAX && iteration + 1 < iterations {
            std::fs::remove_dir_all(&dir).expect("remove full log");
            (generation, generations) = (Generation::default(), generations + 1);
        }
    }
    eprintln!(
        "{iterations} kills, {flushes} acknowledged flushes, {generations} logs, {:?}",
        watch.elapsed()
    );
}

/// One log's life: from an empty directory until it outgrows `GENERATION_BYTES_MAX`.
#[derive(Clone, Copy, Debug, Default)]
struct Generation {
    /// The highest acknowledgement seen, over all children.
    acked: Acked,
    /// Where the previous check ended.
    checked_to: RaftIndex,
    /// Kills so far.
    kills: u64,
}

/// Parses `flushed <last_index> <next_offset>` and checks it against the workload and the
/// previous acknowledgement (durability never goes back, even across restarts).
fn check_ack(line: &str, prev: Acked, offsets: &mut Offsets) -> Acked {
    let fields: Vec<&str> = line.split(' ').collect();
    let [tag, index, offset] = fields[..] else {
        panic!("bad child line {line:?}")
    };
    assert_eq!(tag, "flushed", "bad child line {line:?}");
    let index = RaftIndex(index.parse().expect("index"));
    let next_offset = KafkaOffset(offset.parse().expect("offset"));
    assert!(
        index >= prev.last_index,
        "durable index went back: {line:?} after {prev:?}"
    );
    assert_eq!(
        next_offset,
        offsets.next_after(index),
        "offset of {index:?} in {line:?}"
    );
    Acked {
        last_index: index,
        next_offset,
    }
}

/// Starts the child on `dir`, kills it with SIGKILL as `plan` says, and returns every line
/// it printed (including those printed between the decision and the kill).
fn run_child_until(dir: &Path, seed: u64, plan: KillPlan) -> Vec<String> {
    let mut child = Command::new(env!("CARGO_BIN_EXE_storage-crash-child"))
        .arg(dir)
        .arg(seed.to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn storage-crash-child");
    let stdout = child.stdout.take().expect("stdout is piped");
    let (tx, rx) = mpsc::sync_channel::<String>(LINE_QUEUE_MAX);
    let reader = std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let (deadline, want) = match plan {
        KillPlan::AfterMs(ms) => (Deadline::after(Duration::from_millis(ms)), None),
        KillPlan::AfterFlushes(n) => (Deadline::after(CHILD_PROGRESS_TIMEOUT), Some(n)),
    };
    let mut lines = Vec::new();
    while want.is_none_or(|n| (lines.len() as u64) < n) {
        let Some(left) = deadline.remaining() else {
            assert!(
                want.is_none(),
                "child made {} of {want:?} flushes in time",
                lines.len()
            );
            break;
        };
        match rx.recv_timeout(left) {
            Ok(line) => lines.push(line),
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => break,
        }
    }
    kill_and_reap(&mut child);
    // Drain before joining: the reader may be blocked on a full queue. The stream ends when
    // the reader sees EOF (the child is dead) and drops its sender.
    lines.extend(rx.iter());
    reader.join().expect("stdout reader thread");
    lines
}

/// SIGKILLs the child and checks that SIGKILL is what ended it (not an error of its own).
fn kill_and_reap(child: &mut Child) {
    child.kill().expect("SIGKILL the child");
    let status = child.wait().expect("reap the child");
    if status.signal() != Some(SIGKILL) {
        let mut err = String::new();
        if let Some(mut e) = child.stderr.take() {
            let _ = e.read_to_string(&mut err);
        }
        panic!("child ended by {status} before the kill; stderr:\n{err}");
    }
}

/// What the check after a kill reads in full.
#[derive(Clone, Copy, Debug)]
enum Scope {
    /// Every entry.
    Whole,
    /// Entries after the given index (where the previous check ended) and those of the last
    /// two segments, the ones recovery and finalization rewrite. Keeps a long soak linear.
    Since(RaftIndex),
}

/// Reopens the log the child left and checks it against the workload (the whole log's shape
/// always, entries as `scope` says); returns its last index and size.
async fn check_log(
    dir: &Path,
    seed: u64,
    offsets: &mut Offsets,
    acked: Acked,
    scope: Scope,
) -> (RaftIndex, u64) {
    let log = harness::open_log(dir, crash_workload::log_config(), 0)
        .await
        .expect("recovery opens the log");
    let last = log.last_index();
    assert!(
        last >= acked.last_index,
        "acknowledged {acked:?} lost: log ends at {last:?}"
    );
    assert!(
        log.log_end_offset() >= acked.next_offset,
        "acknowledged {acked:?} lost offsets"
    );
    assert_eq!(
        log.durable().last_index,
        last,
        "everything recovered is durable"
    );
    let from = match scope {
        Scope::Whole => RaftIndex(1),
        Scope::Since(checked_to) => {
            let names = log.segment_names();
            let tail = names
                .iter()
                .rev()
                .nth(1)
                .or(names.first())
                .map(|n| n.raft_base_index);
            tail.map_or(RaftIndex(1), |t| t.min(checked_to.next()))
        }
    };
    crash_workload::check_entries(&log, seed, offsets, from).await;
    (last, log.size_bytes())
}
