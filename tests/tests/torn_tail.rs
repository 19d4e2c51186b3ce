//! Damage the tail of a flushed segment the ways a crash or a failing disk can (torn
//! truncation, flipped bits, a zeroed page, garbage after the end) and check that recovery
//! keeps exactly the frames before the first damaged byte, nothing after, and leaves a log
//! that takes appends (ARCHITECTURE.md, Storage: Recovery).
//!
//! `STRAND_TORN_CASES` sets the number of cases (default 200), `STRAND_SEED` replays a run
//! and `STRAND_CASE=<n>` runs only case `n` of it.

use std::path::{Path, PathBuf};

use bytes::Bytes;
use strand_storage::frame::FRAME_HEADER_BYTES;
use strand_storage::{
    AppendEntry, FrameHeader, FrameKind, KafkaOffset, Log, LogConfig, RaftIndex, RaftTerm,
};
use strand_tests::harness;
use strand_tests::seed::{self, mix, OnPanic, Rng};
use strand_wire::{BatchBuilder, RecordBatch};

const CASES_DEFAULT: u64 = 200;
/// Frames written per case are drawn from `1..=FRAMES_MAX`.
const FRAMES_MAX: u64 = 40;
/// Flushes the frames are written in (each rewrites the partially filled last page).
const FLUSHES_MAX: u64 = 3;
/// Value bytes per record: up to two pages, so frames cross 4 KiB page boundaries.
const VALUE_BYTES_MAX: u64 = 8192;
/// Large enough that every case stays in one segment.
const SEGMENT_BYTES: u64 = 64 * 1024 * 1024;
/// Bit flips and zeroed pages land in the last this-many frames.
const DAMAGED_FRAMES_TAIL: usize = 3;
const PAGE_BYTES: u64 = 4096;
/// Garbage written after the data is at most this long, starting at most this far after it.
const GARBAGE_BYTES_MAX: u64 = 8192;

fn config() -> LogConfig {
    LogConfig {
        segment_bytes: SEGMENT_BYTES,
        preallocate_bytes: 1024 * 1024,
        ..LogConfig::default()
    }
}

/// One frame as written: where it lies in the segment file, and what it holds.
#[derive(Clone, Debug)]
struct Written {
    start: u64,
    end: u64,
    header: FrameHeader,
    body: Bytes,
}

/// How the segment file is damaged.
#[derive(Clone, Debug)]
enum Damage {
    /// The file ends at this byte.
    Truncate(u64),
    /// These bits (byte position, bit) are flipped.
    FlipBits(Vec<(u64, u8)>),
    /// The 4 KiB page starting here is zeroed.
    ZeroPage(u64),
    /// Random bytes are written at this position (at or after the end of the data).
    Garbage { at: u64, len: u64 },
}

#[test]
fn recovery_keeps_exactly_the_undamaged_prefix() {
    let seed = seed::test_seed("torn_tail");
    let cases = seed::env_u64("STRAND_TORN_CASES", CASES_DEFAULT);
    let only = std::env::var("STRAND_CASE")
        .ok()
        .map(|c| c.parse::<u64>().expect("STRAND_CASE"));
    let root = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).expect("temp dir");
    let mut kinds = [0u64; 4];
    harness::run("torn-tail", async {
        for case in (0..cases).filter(|c| only.is_none_or(|o| o == *c)) {
            let case_seed = mix(seed.value, case);
            let _context = OnPanic(format!("case {case} (STRAND_CASE={case})"));
            let dir = root.path().join(format!("case-{case}"));
            let kind = run_case(&dir, case_seed).await;
            kinds[kind] += 1;
            std::fs::remove_dir_all(&dir).expect("remove case dir");
        }
    });
    eprintln!("cases by damage (truncate, flip, zero page, garbage): {kinds:?}");
}

/// One case; returns which kind of damage it applied.
async fn run_case(dir: &Path, case_seed: u64) -> usize {
    let mut rng = Rng::new(case_seed);
    let written = write_frames(dir, &mut rng).await;
    let path = only_segment_file(dir);
    let file_len = std::fs::metadata(&path).expect("stat segment").len();
    let damage = draw_damage(&mut rng, &written, file_len);
    let _context = OnPanic(format!("{damage:?} of {} frames", written.len()));
    let first_bad = apply(&path, &damage, &mut rng, data_end(&written));
    let survivors = written.iter().take_while(|w| w.end <= first_bad).count();
    let log = harness::open_log(dir, config(), 0)
        .await
        .expect("recovery opens the log");
    check_log(&log, &written[..survivors]).await;
    // Recovery leaves an appendable log: one more entry, flushed, survives a reopen.
    let extra = entry_at(&mut rng, survivors);
    log.append_one(&extra).expect("append after recovery");
    log.flush().await.expect("flush after recovery");
    let last = log
        .read_entries(log.last_index(), log.last_index().next(), usize::MAX)
        .await;
    let last = last
        .expect("read the new entry")
        .pop()
        .expect("new entry present");
    let mut expected = written[..survivors].to_vec();
    let start = data_end(&expected);
    let end = start + u64::from(last.header.frame_len_bytes);
    expected.push(Written {
        start,
        end,
        header: last.header,
        body: last.body,
    });
    drop(log);
    let log = harness::open_log(dir, config(), 0)
        .await
        .expect("reopen after append");
    check_log(&log, &expected).await;
    match damage {
        Damage::Truncate(_) => 0,
        Damage::FlipBits(_) => 1,
        Damage::ZeroPage(_) => 2,
        Damage::Garbage { .. } => 3,
    }
}

/// Entry `k` (0-based) of a case: mostly data batches of random size, some no-ops.
fn entry_at(rng: &mut Rng, k: usize) -> AppendEntry {
    let term = RaftTerm(1 + k as u64 / 10);
    if rng.one_in(5) {
        let mut body = vec![0u8; usize::try_from(rng.below(200)).expect("small")];
        rng.fill(&mut body);
        return AppendEntry {
            term,
            kind: FrameKind::NoOp,
            body: Bytes::from(body),
        };
    }
    let mut b = BatchBuilder::new(1_000 + k as i64);
    for r in 0..rng.range(1, 4) {
        let mut value = format!("entry={k} record={r};").into_bytes();
        let label = value.len();
        value.resize(
            label + usize::try_from(rng.below(VALUE_BYTES_MAX)).expect("small"),
            0,
        );
        rng.fill(&mut value[label..]);
        b.push(1_000 + k as i64, None, Some(&value), &[]);
    }
    AppendEntry {
        term,
        kind: FrameKind::Data,
        body: b.build(),
    }
}

/// Writes a case's frames in up to `FLUSHES_MAX` flushes and returns them as stored.
async fn write_frames(dir: &Path, rng: &mut Rng) -> Vec<Written> {
    let log = harness::open_log(dir, config(), 0)
        .await
        .expect("open new log");
    let frames = usize::try_from(rng.range(1, FRAMES_MAX)).expect("small");
    let entries: Vec<AppendEntry> = (0..frames).map(|k| entry_at(rng, k)).collect();
    let mut rest = &entries[..];
    for flush in 1..=FLUSHES_MAX {
        let n = if flush == FLUSHES_MAX {
            rest.len()
        } else {
            rng.below(rest.len() as u64 + 1) as usize
        };
        let (now, later) = rest.split_at(n);
        log.append(now).expect("append");
        log.flush().await.expect("flush");
        rest = later;
    }
    let stored = log
        .read_entries(RaftIndex(1), log.last_index().next(), usize::MAX)
        .await;
    let mut written = Vec::with_capacity(frames);
    let mut pos = 0;
    for f in stored.expect("read back") {
        let end = pos + u64::from(f.header.frame_len_bytes);
        assert_eq!(
            f.body.len() + FRAME_HEADER_BYTES,
            f.header.frame_len_bytes as usize
        );
        written.push(Written {
            start: pos,
            end,
            header: f.header,
            body: f.body,
        });
        pos = end;
    }
    assert_eq!(written.len(), frames, "every frame reads back");
    assert_eq!(log.size_bytes(), pos, "frames are back to back");
    written
}

fn data_end(written: &[Written]) -> u64 {
    written.last().map_or(0, |w| w.end)
}

fn only_segment_file(dir: &Path) -> PathBuf {
    let logs: Vec<PathBuf> = std::fs::read_dir(dir)
        .expect("list case dir")
        .map(|e| e.expect("dir entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "log"))
        .collect();
    assert_eq!(logs.len(), 1, "one segment: {logs:?}");
    logs.into_iter().next().expect("one segment")
}

fn draw_damage(rng: &mut Rng, written: &[Written], file_len: u64) -> Damage {
    let end = data_end(written);
    let tail_start = written[written.len().saturating_sub(DAMAGED_FRAMES_TAIL)].start;
    let in_tail = |rng: &mut Rng| rng.range(tail_start, end - 1);
    match rng.below(4) {
        0 if rng.one_in(2) => Damage::Truncate(rng.below(end)),
        0 => Damage::Truncate(in_tail(rng)),
        1 => {
            let flips = rng.range(1, 3);
            Damage::FlipBits(
                (0..flips)
                    .map(|_| (in_tail(rng), rng.below(8) as u8))
                    .collect(),
            )
        }
        2 => Damage::ZeroPage(in_tail(rng) / PAGE_BYTES * PAGE_BYTES),
        _ => {
            // Right after the data, a little later (in preallocated zeros), or past the end
            // of the (preallocated) file.
            let at = match rng.below(3) {
                0 => end,
                1 => end + rng.below(GARBAGE_BYTES_MAX),
                _ => file_len + rng.below(GARBAGE_BYTES_MAX),
            };
            Damage::Garbage {
                at,
                len: rng.range(1, GARBAGE_BYTES_MAX),
            }
        }
    }
}

/// Damages the file and returns the first logical byte (below `end`) that changed, or `end`.
fn apply(path: &Path, damage: &Damage, rng: &mut Rng, end: u64) -> u64 {
    let original = std::fs::read(path).expect("read segment");
    assert!(original.len() as u64 >= end, "file shorter than its data");
    let mut bytes = original.clone();
    match damage {
        Damage::Truncate(at) => bytes.truncate(*at as usize),
        Damage::FlipBits(flips) => {
            for &(at, bit) in flips {
                bytes[at as usize] ^= 1 << bit;
            }
        }
        Damage::ZeroPage(page) => {
            let to = (page + PAGE_BYTES).min(bytes.len() as u64);
            bytes[*page as usize..to as usize].fill(0);
        }
        Damage::Garbage { at, len } => {
            let to = (at + len) as usize;
            if bytes.len() < to {
                bytes.resize(to, 0);
            }
            rng.fill(&mut bytes[*at as usize..to]);
        }
    }
    std::fs::write(path, &bytes).expect("write damaged segment");
    let end = end as usize;
    let changed = (0..end.min(bytes.len())).find(|&i| bytes[i] != original[i]);
    changed.unwrap_or(end).min(bytes.len()) as u64
}

/// The log holds exactly `expected`, by Raft index and by Kafka offset, with nothing after.
async fn check_log(log: &Log, expected: &[Written]) {
    let n = expected.len() as u64;
    assert_eq!(log.last_index(), RaftIndex(n), "frames kept");
    assert_eq!(log.first_index(), RaftIndex(1), "first index");
    assert_eq!(log.size_bytes(), data_end(expected), "logical size");
    let end_offset = expected
        .last()
        .map_or(KafkaOffset(0), |w| w.header.next_offset());
    assert_eq!(log.log_end_offset(), end_offset, "log end offset");
    let frames = log
        .read_entries(RaftIndex(1), RaftIndex(n + 1), usize::MAX)
        .await;
    let frames = frames.expect("read kept frames");
    assert_eq!(frames.len(), expected.len(), "frames read");
    for (f, w) in frames.iter().zip(expected) {
        assert_eq!(f.header, w.header, "header at {:?}", w.header.index);
        assert!(f.body == w.body, "body at {:?} differs", w.header.index);
        if f.header.kind == FrameKind::Data {
            RecordBatch::parse(f.body.clone())
                .expect("parses")
                .validate()
                .expect("valid");
        }
    }
    let batches = log
        .read(KafkaOffset(0), end_offset, usize::MAX, true)
        .await
        .expect("read");
    let data: Vec<&Written> = expected
        .iter()
        .filter(|w| w.header.kind == FrameKind::Data)
        .collect();
    assert_eq!(batches.batches.len(), data.len(), "batches by offset");
    assert!(
        batches.batches.iter().zip(&data).all(|(b, w)| *b == w.body),
        "batch bytes"
    );
}
