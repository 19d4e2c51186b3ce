//! Behaviour of the partition log against a real O_DIRECT directory.

use std::cell::Cell;
use std::path::Path;
use std::rc::Rc;

use bytes::Bytes;
use strand_storage::io_runtime::block_on;
use strand_storage::{
    AppendEntry, BatchCache, Clock, FrameKind, IoBudget, KafkaOffset, Log, LogConfig, RaftIndex,
    RaftTerm, StorageError,
};
use strand_wire::{BatchBuilder, RecordBatch};

struct FakeClock(Cell<i64>);
impl Clock for FakeClock {
    fn now_ms(&self) -> i64 {
        self.0.get()
    }
}

fn batch(records: i64, ts: i64, value_len: usize) -> Bytes {
    let mut b = BatchBuilder::new(ts);
    for i in 0..records {
        b.push(
            ts + i,
            Some(format!("k{i}").as_bytes()),
            Some(&vec![i as u8; value_len]),
            &[],
        );
    }
    b.build()
}

fn data(term: u64, body: Bytes) -> AppendEntry {
    AppendEntry {
        term: RaftTerm(term),
        kind: FrameKind::Data,
        body,
    }
}

fn noop(term: u64) -> AppendEntry {
    AppendEntry {
        term: RaftTerm(term),
        kind: FrameKind::NoOp,
        body: Bytes::from_static(b"noop"),
    }
}

fn config(segment_bytes: u64) -> LogConfig {
    LogConfig {
        segment_bytes,
        preallocate_bytes: 1 << 20,
        ..LogConfig::default()
    }
}

async fn open(dir: &Path, cfg: LogConfig, cache_bytes: usize) -> Result<Log, StorageError> {
    let clock = Rc::new(FakeClock(Cell::new(1_000_000)));
    Log::open(dir, cfg, clock, Rc::new(BatchCache::new(cache_bytes))).await
}

fn run<T>(f: impl std::future::Future<Output = T>) -> T {
    block_on("storage-test", 2, f).expect("executor starts")
}

/// Every batch read from `from` to the log end, parsed.
async fn read_all(log: &Log, from: i64) -> Vec<RecordBatch> {
    let r = log
        .read(KafkaOffset(from), log.log_end_offset(), usize::MAX, true)
        .await
        .expect("read");
    r.batches
        .into_iter()
        .map(|b| RecordBatch::parse(b).expect("batch parses"))
        .collect()
}

/// Base offsets of every batch read from `from`, and checks each batch is valid.
async fn offsets(log: &Log, from: i64) -> Vec<i64> {
    let batches = read_all(log, from).await;
    batches
        .iter()
        .map(|b| {
            b.validate().expect("batch valid");
            b.base_offset()
        })
        .collect()
}

#[test]
fn append_flush_read_reopen() {
    let dir = tempfile::tempdir_in(".").expect("tempdir");
    run(async {
        let log = open(dir.path(), config(1 << 20), 1 << 20)
            .await
            .expect("open");
        for i in 0..10 {
            let a = log
                .append_one(&data(1, batch(3, 100 + i, 10)))
                .expect("append");
            assert_eq!(a.kafka_base_offset, KafkaOffset(i * 3));
            assert_eq!(a.index, RaftIndex(i as u64 + 1));
            assert_eq!(a.pending_bytes, log.pending_bytes());
        }
        log.append_one(&noop(2)).expect("noop");
        log.append_one(&data(2, batch(2, 500, 10))).expect("append");
        assert_eq!(log.log_end_offset(), KafkaOffset(32));
        let d = log.flush().await.expect("flush");
        assert_eq!(d.last_index, RaftIndex(12));
        assert_eq!(d.next_offset, KafkaOffset(32));
        let s = log.stats();
        assert_eq!(
            (s.writes, s.fdatasyncs),
            (1, 1),
            "group commit: one write, one sync"
        );
        assert_eq!(
            offsets(&log, 0).await,
            (0..10).map(|i| i * 3).chain([30]).collect::<Vec<_>>()
        );
        assert_eq!(
            offsets(&log, 4).await[0],
            3,
            "offset inside a batch returns that batch"
        );
        assert_eq!(log.term_at(RaftIndex(11)), Some(RaftTerm(2)));
        assert_eq!(log.term_at(RaftIndex(10)), Some(RaftTerm(1)));
        drop(log);
        let log = open(dir.path(), config(1 << 20), 0).await.expect("reopen");
        assert_eq!(log.log_end_offset(), KafkaOffset(32));
        assert_eq!(log.last_index(), RaftIndex(12));
        assert_eq!(
            offsets(&log, 0).await.len(),
            11,
            "read from disk after reopen"
        );
        let a = log
            .append_one(&data(2, batch(1, 600, 10)))
            .expect("append after reopen");
        assert_eq!(a.kafka_base_offset, KafkaOffset(32));
        log.flush().await.expect("flush");
        assert_eq!(offsets(&log, 31).await, vec![30, 32]);
    });
}

#[test]
fn segments_roll_and_indexes_rebuild() {
    let dir = tempfile::tempdir_in(".").expect("tempdir");
    run(async {
        let log = open(dir.path(), config(8192), 0).await.expect("open");
        for i in 0..40 {
            log.append_one(&data(1, batch(2, i, 500))).expect("append");
            if i % 7 == 0 {
                log.flush().await.expect("flush");
            }
        }
        log.flush().await.expect("flush");
        // A flush after the last roll finalizes the closed segments.
        log.flush().await.expect("flush");
        let n = log.segment_count();
        assert!(n >= 4, "expected several segments, got {n}");
        let all: Vec<i64> = (0..40).map(|i| i * 2).collect();
        assert_eq!(offsets(&log, 0).await, all);
        for (from, want) in [(0, 0), (17, 16), (79, 78)] {
            assert_eq!(offsets(&log, from).await[0], want);
        }
        let e = log
            .read_entries(RaftIndex(5), RaftIndex(9), usize::MAX)
            .await
            .expect("entries");
        assert_eq!(
            e.iter().map(|f| f.header.index.0).collect::<Vec<_>>(),
            vec![5, 6, 7, 8]
        );
        drop(log);
        let indexes: Vec<_> = std::fs::read_dir(dir.path())
            .expect("ls")
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "index"))
            .collect();
        assert_eq!(indexes.len(), n - 1, "closed segments have index files");
        std::fs::remove_file(&indexes[0]).expect("rm index");
        std::fs::write(&indexes[1], b"garbage").expect("corrupt index");
        let log = open(dir.path(), config(8192), 0)
            .await
            .expect("reopen rebuilds indexes");
        assert_eq!(offsets(&log, 0).await, all);
        assert_eq!(log.segment_count(), n);
    });
}

#[test]
fn truncate_suffix_then_append() {
    let dir = tempfile::tempdir_in(".").expect("tempdir");
    run(async {
        let log = open(dir.path(), config(8192), 0).await.expect("open");
        for i in 0..30 {
            log.append_one(&data(1, batch(1, i, 700))).expect("append");
        }
        log.flush().await.expect("flush");
        log.flush().await.expect("finalize");
        // Cut inside an earlier (closed) segment: later segments go, the cut one reopens.
        log.truncate_suffix(RaftIndex(8)).await.expect("truncate");
        assert_eq!(log.last_index(), RaftIndex(7));
        assert_eq!(log.log_end_offset(), KafkaOffset(7));
        assert_eq!(log.term_at(RaftIndex(8)), None);
        let a = log.append_one(&data(2, batch(2, 100, 10))).expect("append");
        assert_eq!(
            (a.index, a.kafka_base_offset),
            (RaftIndex(8), KafkaOffset(7))
        );
        log.flush().await.expect("flush");
        assert_eq!(offsets(&log, 0).await, vec![0, 1, 2, 3, 4, 5, 6, 7]);
        // Cut in the unflushed tail.
        log.append_one(&data(2, batch(1, 101, 10))).expect("append");
        log.truncate_suffix(RaftIndex(9))
            .await
            .expect("truncate unflushed");
        log.append_one(&data(3, batch(1, 102, 10))).expect("append");
        log.flush().await.expect("flush");
        drop(log);
        let log = open(dir.path(), config(8192), 0).await.expect("reopen");
        assert_eq!(log.last_index(), RaftIndex(9));
        assert_eq!(log.term_at(RaftIndex(9)), Some(RaftTerm(3)));
        assert_eq!(offsets(&log, 0).await, vec![0, 1, 2, 3, 4, 5, 6, 7, 9]);
    });
}

#[test]
fn prefix_truncation_and_retention() {
    let dir = tempfile::tempdir_in(".").expect("tempdir");
    run(async {
        let clock = Rc::new(FakeClock(Cell::new(10_000)));
        let cfg = LogConfig {
            retention_bytes: 20_000,
            ..config(8192)
        };
        let cache = Rc::new(BatchCache::new(0));
        let log = Log::open(dir.path(), cfg.clone(), clock.clone(), cache.clone())
            .await
            .expect("open");
        for i in 0..60 {
            log.append_one(&data(1, batch(1, 1_000 + i, 700)))
                .expect("append");
        }
        log.flush().await.expect("flush");
        log.flush().await.expect("finalize");
        let before = log.size_bytes();
        let out = log.apply_retention().await.expect("retention");
        assert!(out.segments_deleted > 0);
        assert!(log.size_bytes() < before && log.size_bytes() >= 20_000 - 8192);
        let start = log.log_start_offset();
        assert!(start > KafkaOffset(0));
        assert!(matches!(
            log.read(KafkaOffset(0), log.log_end_offset(), 100, true)
                .await,
            Err(StorageError::OffsetOutOfRange { .. })
        ));
        assert_eq!(offsets(&log, start.0).await[0], start.0);
        // DeleteRecords in the middle of a segment.
        let new_start = log
            .truncate_prefix(KafkaOffset(50))
            .await
            .expect("delete records");
        assert_eq!(new_start, KafkaOffset(50));
        drop(log);
        let log = Log::open(dir.path(), cfg, clock.clone(), cache)
            .await
            .expect("reopen");
        assert_eq!(
            log.log_start_offset(),
            KafkaOffset(50),
            "log start offset persisted"
        );
        assert_eq!(offsets(&log, 50).await[0], 50);
        // Time retention: everything closed is older than retention.ms after a week.
        clock.0.set(1_000 + 8 * 24 * 3600 * 1000);
        log.apply_retention().await.expect("retention by time");
        assert_eq!(log.segment_count(), 1, "only the active segment is kept");
    });
}

/// The replicated path: retention names the Raft index to compact through (never past the
/// applied index), the caller deletes through it; a snapshot install empties the log at a
/// new start, which the first append after it keeps across a restart.
#[test]
#[expect(
    clippy::too_many_lines,
    reason = "longer than 70 lines when the lint came in (issue 27): split it when it next changes"
)]
fn retention_point_and_reset() {
    let dir = tempfile::tempdir_in(".").expect("tempdir");
    run(async {
        let clock = Rc::new(FakeClock(Cell::new(10_000)));
        let cfg = LogConfig {
            retention_bytes: 20_000,
            ..config(8192)
        };
        let cache = Rc::new(BatchCache::new(1 << 20));
        let log = Log::open(dir.path(), cfg.clone(), clock.clone(), cache.clone())
            .await
            .expect("open");
        for i in 0..60 {
            log.append_one(&data(1, batch(1, 1_000 + i, 700)))
                .expect("append");
            if i % 10 == 0 {
                log.append_one(&noop(1)).expect("append no-op");
            }
        }
        log.flush().await.expect("flush");
        log.flush().await.expect("finalize");
        assert_eq!(
            log.retention_due(RaftIndex(0)).expect("usable"),
            None,
            "nothing applied"
        );
        let through = log
            .retention_due(log.last_index())
            .expect("usable")
            .expect("retention is due")
            .through;
        let bounded = log
            .retention_due(RaftIndex(through.0 - 1))
            .expect("usable")
            .map(|c| c.through);
        assert!(
            bounded.is_none_or(|b| b < through),
            "bounded by the applied index"
        );
        let before = log.size_bytes();
        let out = log.delete_segments_through(through).await.expect("delete");
        assert!(out.segments_deleted > 0 && log.size_bytes() < before);
        assert_eq!(log.first_index(), RaftIndex(through.0 + 1));
        let start = log.log_start_offset();
        assert_eq!(offsets(&log, start.0).await[0], start.0);

        log.reset(RaftIndex(500), KafkaOffset(400))
            .await
            .expect("reset");
        assert_eq!(
            (log.first_index(), log.last_index()),
            (RaftIndex(500), RaftIndex(499))
        );
        assert_eq!(
            (log.log_start_offset(), log.log_end_offset()),
            (KafkaOffset(400), KafkaOffset(400))
        );
        assert_eq!(log.segment_count(), 0);
        let a = log
            .append_one(&data(7, batch(3, 5_000, 10)))
            .expect("append after reset");
        assert_eq!(
            (a.index, a.kafka_base_offset),
            (RaftIndex(500), KafkaOffset(400))
        );
        log.flush().await.expect("flush");
        drop(log);
        let log = Log::open(dir.path(), cfg, clock, cache)
            .await
            .expect("reopen");
        assert_eq!(
            (log.first_index(), log.last_index()),
            (RaftIndex(500), RaftIndex(500))
        );
        assert_eq!(log.log_start_offset(), KafkaOffset(400));
        assert_eq!(log.term_at(RaftIndex(500)), Some(RaftTerm(7)));
        assert_eq!(offsets(&log, 400).await, vec![400]);
    });
}

#[test]
fn timestamp_lookup() {
    let dir = tempfile::tempdir_in(".").expect("tempdir");
    run(async {
        let log = open(dir.path(), config(8192), 0).await.expect("open");
        for i in 0..30 {
            log.append_one(&data(1, batch(2, 1_000 * i, 600)))
                .expect("append");
        }
        log.flush().await.expect("flush");
        for (ts, want) in [
            (0, Some(0)),
            (5_000, Some(10)),
            (5_001, Some(10)),
            (29_001, Some(58)),
        ] {
            let f = log.find_by_timestamp(ts).await.expect("lookup");
            assert_eq!(f.map(|f| f.header.kafka_base_offset.0), want, "ts {ts}");
        }
        assert!(log
            .find_by_timestamp(40_000)
            .await
            .expect("lookup")
            .is_none());
    });
}

#[test]
fn corrupt_closed_segment_is_an_error_not_a_skip() {
    let dir = tempfile::tempdir_in(".").expect("tempdir");
    run(async {
        let log = open(dir.path(), config(8192), 0).await.expect("open");
        for i in 0..30 {
            log.append_one(&data(1, batch(1, i, 700))).expect("append");
        }
        log.flush().await.expect("flush");
        log.flush().await.expect("finalize");
        let first = log.segment_names()[0].stem();
        drop(log);
        let path = dir.path().join(format!("{first}.log"));
        let mut bytes = std::fs::read(&path).expect("read");
        bytes[1000] ^= 0x10;
        std::fs::write(&path, &bytes).expect("write");
        // With the index present, open succeeds and the read finds the corruption.
        let log = open(dir.path(), config(8192), 0).await.expect("open");
        let err = log
            .read(KafkaOffset(0), log.log_end_offset(), usize::MAX, true)
            .await;
        let msg = format!("{:?}", err.expect_err("corruption detected"));
        assert!(msg.contains(&first), "error names the file: {msg}");
        assert!(log.fenced().is_some(), "log fenced after corruption");
        drop(log);
        std::fs::remove_file(path.with_extension("index")).expect("rm index");
        let err = open(dir.path(), config(8192), 0)
            .await
            .err()
            .expect("open fails");
        assert!(matches!(err, StorageError::Corrupt { .. }), "{err}");
    });
}

#[test]
fn tmpfs_without_opt_in_is_refused() {
    let shm = Path::new("/dev/shm");
    if !shm.is_dir() {
        eprintln!("skipped: no /dev/shm");
        return;
    }
    let dir = tempfile::tempdir_in(shm).expect("tempdir");
    run(async {
        let err = open(dir.path(), config(8192), 0)
            .await
            .err()
            .expect("refused");
        assert!(matches!(err, StorageError::NoDirectIo { .. }), "{err}");
        assert!(
            err.to_string().contains("buffered"),
            "message names the opt-in: {err}"
        );
        let cfg = LogConfig {
            allow_buffered_io: true,
            ..config(8192)
        };
        let log = open(dir.path(), cfg, 0).await.expect("opt-in works");
        log.append_one(&data(1, batch(1, 1, 10))).expect("append");
        log.flush().await.expect("flush");
    });
}

#[test]
fn appends_during_flush_across_rolls() {
    let dir = tempfile::tempdir_in(".").expect("tempdir");
    run(async {
        let log = open(dir.path(), config(8192), 1 << 20).await.expect("open");
        let mut n = 0i64;
        for round in 0..20 {
            for _ in 0..(round % 4 + 1) {
                log.append_one(&data(1, batch(1, n, 900))).expect("append");
                n += 1;
            }
            let job = log.begin_flush().expect("begin").expect("pending");
            // Appends while the flush is in flight, some of them rolling the segment.
            for _ in 0..(round % 5) {
                log.append_one(&data(1, batch(1, n, 900)))
                    .expect("append in flight");
                n += 1;
            }
            assert!(log.begin_flush().is_err(), "one flush at a time");
            let outcome = job.run().await;
            log.complete_flush(outcome).expect("complete");
        }
        log.flush().await.expect("flush");
        log.flush().await.expect("finalize");
        assert_eq!(offsets(&log, 0).await, (0..n).collect::<Vec<_>>());
        drop(log);
        let log = open(dir.path(), config(8192), 0).await.expect("reopen");
        assert_eq!(offsets(&log, 0).await, (0..n).collect::<Vec<_>>());
    });
}

#[test]
fn dropped_log_closes_its_files_before_block_on_returns() {
    let dir = tempfile::tempdir_in(".").expect("tempdir");
    run(async {
        let log = open(dir.path(), config(8192), 0).await.expect("open");
        log.append_one(&data(1, batch(1, 1, 10))).expect("append");
        log.flush().await.expect("flush");
    });
    let dir_path = dir.path().canonicalize().expect("canonical");
    let open: Vec<_> = std::fs::read_dir("/proc/self/fd")
        .expect("fds")
        .filter_map(|e| e.ok().and_then(|e| std::fs::read_link(e.path()).ok()))
        .filter(|p| p.starts_with(&dir_path))
        .collect();
    assert!(
        open.is_empty(),
        "still open after the executor ended: {open:?}"
    );
}

/// The io_uring small-file writer works on a relative path too (glommio opens directories
/// relative to no directory; `make run-cluster` uses a relative data directory).
#[test]
fn small_file_atomic_async_with_a_relative_path() {
    let dir = tempfile::tempdir_in(".").expect("tempdir");
    let cwd = std::env::current_dir().expect("cwd");
    let rel = dir
        .path()
        .strip_prefix(&cwd)
        .unwrap_or(dir.path())
        .join("state.json");
    assert!(rel.is_relative(), "{}", rel.display());
    run(async {
        strand_storage::io::write_small_file_atomic_async(&rel, b"{\"term\":1}")
            .await
            .expect("written");
    });
    assert_eq!(std::fs::read(&rel).expect("read back"), b"{\"term\":1}");
}

/// Whether any extent of `file` overlapping `[from, to)` is unwritten (fallocated, never
/// written), by FIEMAP; `None` where the filesystem does not answer FIEMAP (tmpfs).
fn unwritten_in(file: &Path, from: u64, to: u64) -> Option<bool> {
    use std::os::fd::AsRawFd;
    const FS_IOC_FIEMAP: libc::c_ulong = 0xC020_660B;
    const FIEMAP_EXTENT_UNWRITTEN: u32 = 0x800;
    const EXTENTS: usize = 64;
    // struct fiemap (32 bytes) then EXTENTS struct fiemap_extent (56 bytes each).
    let mut buf = vec![0u64; (32 + 56 * EXTENTS) / 8];
    buf[0] = from;
    buf[1] = to - from;
    // fm_flags = 0, fm_mapped_extents = 0, fm_extent_count = EXTENTS, fm_reserved = 0.
    buf[3] = EXTENTS as u64;
    let f = std::fs::File::open(file).expect("open segment");
    // SAFETY: `buf` is a properly sized, 8-aligned struct fiemap with room for EXTENTS.
    let rc = unsafe { libc::ioctl(f.as_raw_fd(), FS_IOC_FIEMAP, buf.as_mut_ptr()) };
    if rc != 0 {
        return None;
    }
    let mapped = (buf[2] >> 32) as usize; // fm_mapped_extents: the high half of word 2
    Some((0..mapped.min(EXTENTS)).any(|i| {
        let e = &buf[4 + i * 7..4 + (i + 1) * 7];
        let (logical, length, flags) = (e[0], e[2], (e[5] & 0xFFFF_FFFF) as u32);
        logical < to && logical + length > from && flags & FIEMAP_EXTENT_UNWRITTEN != 0
    }))
}

/// Small flushes of a segment past `ZERO_AHEAD_MIN_SEGMENT_BYTES` write zeros ahead of
/// the data, so the next durable writes land in written blocks (no extent conversion);
/// the zeroed tail reads as a clean end at reopen.
#[test]
fn small_flushes_zero_the_space_ahead() {
    let dir = tempfile::tempdir_in(".").expect("tempdir");
    let end = run(async {
        let log = open(dir.path(), config(8 << 20), 1 << 20)
            .await
            .expect("open");
        let mut flushed = 0;
        while flushed < strand_storage::ZERO_AHEAD_MIN_SEGMENT_BYTES + 8192 {
            log.append_one(&data(1, batch(1, 1_000, 3_000)))
                .expect("append");
            log.flush().await.expect("flush");
            flushed = log.stats().bytes_appended;
        }
        let file = std::fs::read_dir(dir.path())
            .expect("dir")
            .map(|e| e.expect("entry").path())
            .find(|p| p.extension().is_some_and(|x| x == "log"))
            .expect("a segment");
        let ahead = flushed.next_multiple_of(4096) + 4096;
        if let Some(unwritten) = unwritten_in(&file, ahead, ahead + 32 * 1024) {
            assert!(!unwritten, "the space after the data is still unwritten");
        }
        log.log_end_offset()
    });
    run(async {
        let log = open(dir.path(), config(8 << 20), 1 << 20)
            .await
            .expect("reopen");
        assert_eq!(log.log_end_offset(), end, "the zeros are a clean end");
        assert_eq!(offsets(&log, 0).await.len() as i64, end.0);
        log.append_one(&data(1, batch(1, 2_000, 10)))
            .expect("append after reopen");
        log.flush().await.expect("flush");
    });
}

/// Kafka base offset, last offset and record count of every batch read from `from`
/// (stored batches, which compaction may have emptied or thinned).
async fn stored_batches(log: &Log, from: i64) -> Vec<(i64, i64, i32)> {
    let batches = read_all(log, from).await;
    batches
        .iter()
        .map(|b| {
            b.validate_stored().expect("batch valid as stored");
            (b.base_offset(), b.last_offset(), b.record_count())
        })
        .collect()
}

/// The first segment's batches rewritten: odd indexes become stubs, index 2 keeps only its
/// last record, the rest stay.
fn clean_first_segment(
    h: &strand_storage::FrameHeader,
    body: &Bytes,
) -> strand_storage::FrameRewrite {
    use strand_storage::FrameRewrite;
    if h.kind != FrameKind::Data {
        return FrameRewrite::Keep;
    }
    match h.index.0 {
        2 => {
            let orig = RecordBatch::parse(body.clone()).expect("parses");
            let records = strand_wire::records::decode_records(
                body.slice(strand_wire::BATCH_HEADER_BYTES..),
                orig.record_count(),
            )
            .expect("decodes");
            let mut kept = bytes::BytesMut::new();
            strand_wire::records::encode_record(&mut kept, records.last().expect("a record"));
            let header = strand_wire::BatchHeader {
                record_count: 1,
                ..strand_wire::BatchHeader::of(&orig)
            };
            FrameRewrite::Replace(header.encode(&kept))
        }
        i if i % 2 == 1 => FrameRewrite::Stub,
        _ => FrameRewrite::Keep,
    }
}

/// A log of 24 batches of 3 records (a new term every `term_every`) over several closed,
/// finalized 8 KiB segments.
async fn closed_segments(dir: &Path, term_every: u64) -> Log {
    let log = open(dir, config(8192), 0).await.expect("open");
    for i in 0..24u64 {
        let term = 1 + i / term_every;
        log.append_one(&data(term, batch(3, i as i64, 300)))
            .expect("append");
    }
    log.flush().await.expect("flush");
    log.flush()
        .await
        .expect("flush finalizes the closed segments");
    log
}

type FrameKey = (RaftIndex, RaftTerm, KafkaOffset, u32);

fn frame_key(f: &strand_storage::LogFrame) -> FrameKey {
    (
        f.header.index,
        f.header.term,
        f.header.kafka_base_offset,
        f.header.offset_count,
    )
}

/// The log `clean_first_segment` left, whose first segment ends at index `last`.
async fn check_cleaned(log: &Log, want: &[FrameKey], last: u64) {
    let after = log
        .read_entries(RaftIndex(1), RaftIndex(25), usize::MAX)
        .await
        .expect("entries");
    assert_eq!(after.iter().map(frame_key).collect::<Vec<_>>(), want);
    for f in &after {
        let stub = f.header.index.0 <= last && f.header.index.0 % 2 == 1;
        assert_eq!(f.header.kind == FrameKind::Cleaned, stub, "{:?}", f.header);
    }
    // Offsets 0..2 (index 1) are gone: a read from 0 or 1 starts at index 2's batch, which
    // kept only its last record but spans its three offsets.
    assert_eq!(stored_batches(log, 0).await[0], (3, 5, 1));
    assert_eq!(stored_batches(log, 1).await[0], (3, 5, 1));
    assert_eq!(
        stored_batches(log, 6).await[0],
        (9, 11, 3),
        "index 3 is a stub"
    );
    let all = stored_batches(log, 0).await;
    assert_eq!(all.last(), Some(&(69, 71, 3)));
    assert_eq!(log.log_end_offset(), KafkaOffset(72));
}

/// A compaction rewrite of a closed segment keeps every Raft index, term and Kafka
/// offset; reads from a removed offset return the next batch kept; the result survives
/// a reopen with and without index files; a leftover `.cleaned` file goes at open.
#[test]
fn a_rewritten_segment_keeps_indexes_offsets_and_terms() {
    let dir = tempfile::tempdir_in(".").expect("tempdir");
    run(async {
        let log = closed_segments(dir.path(), 12).await;
        let before = log
            .read_entries(RaftIndex(1), RaftIndex(25), usize::MAX)
            .await
            .expect("entries");
        let first = log.segments_info().into_iter().next().expect("a segment");
        assert!(first.rewritable, "a closed, flushed segment is rewritable");
        let last = first.last_index.expect("not empty").0;
        assert!(last >= 4, "the first segment holds several batches: {last}");
        let out = log
            .rewrite_segment(&first, &mut clean_first_segment, &mut IoBudget::unlimited())
            .await
            .expect("rewrite")
            .expect("not raced");
        assert_eq!(out.frames_replaced, 1);
        assert_eq!(out.frames_stubbed, last.div_ceil(2));
        assert!(out.bytes_after < out.bytes_before, "{out:?}");

        let want: Vec<_> = before.iter().map(frame_key).collect();
        check_cleaned(&log, &want, last).await;
        drop(log);
        let log = open(dir.path(), config(8192), 0).await.expect("reopen");
        check_cleaned(&log, &want, last).await;
        drop(log);
        for e in std::fs::read_dir(dir.path()).expect("ls").flatten() {
            if e.path()
                .extension()
                .is_some_and(|x| x == "index" || x == "timeindex")
            {
                std::fs::remove_file(e.path()).expect("rm index");
            }
        }
        let stem = first.base_index;
        let leftover = std::fs::read_dir(dir.path())
            .expect("ls")
            .flatten()
            .map(|e| e.path())
            .find(|p| p.extension().is_some_and(|x| x == "log"))
            .expect("a segment file")
            .with_extension("cleaned");
        std::fs::write(&leftover, b"a rewrite cut short").expect("leftover");
        let log = open(dir.path(), config(8192), 0)
            .await
            .expect("reopen rebuilds indexes");
        assert!(
            !leftover.exists(),
            "a leftover rewrite of {stem:?} is removed at open"
        );
        check_cleaned(&log, &want, last).await;
    });
}

/// A rewrite with nothing to change only reads the segment (no new file is written); one
/// that changes only the last frame writes the frames before it unchanged.
#[test]
fn a_rewrite_writes_only_when_a_frame_changes() {
    let dir = tempfile::tempdir_in(".").expect("tempdir");
    run(async {
        let log = closed_segments(dir.path(), 12).await;
        let before = log
            .read_entries(RaftIndex(1), RaftIndex(25), usize::MAX)
            .await
            .expect("entries");
        let first = log.segments_info().into_iter().next().expect("a segment");
        let last = first.last_index.expect("not empty").0;
        let mut budget = IoBudget::unlimited();
        let out = log
            .rewrite_segment(
                &first,
                &mut |_, _| strand_storage::FrameRewrite::Keep,
                &mut budget,
            )
            .await
            .expect("rewrite")
            .expect("not raced");
        assert_eq!(out.bytes_after, out.bytes_before);
        assert_eq!(
            budget.written_bytes(),
            0,
            "nothing changed, nothing written"
        );
        assert!(budget.read_bytes() >= first.size_bytes, "{budget:?}");

        let mut budget = IoBudget::unlimited();
        let out = log
            .rewrite_segment(
                &first,
                &mut |h, _| {
                    if h.index.0 == last && h.kind == FrameKind::Data {
                        strand_storage::FrameRewrite::Stub
                    } else {
                        strand_storage::FrameRewrite::Keep
                    }
                },
                &mut budget,
            )
            .await
            .expect("rewrite")
            .expect("not raced");
        assert_eq!((out.frames_stubbed, out.frames_replaced), (1, 0));
        assert!(
            budget.written_bytes() >= out.bytes_after,
            "{budget:?} {out:?}"
        );
        let after = log
            .read_entries(RaftIndex(1), RaftIndex(25), usize::MAX)
            .await
            .expect("entries");
        assert_eq!(
            after.iter().map(frame_key).collect::<Vec<_>>(),
            before.iter().map(frame_key).collect::<Vec<_>>()
        );
        for (a, b) in after.iter().zip(&before) {
            if a.header.index.0 == last {
                assert_eq!(a.header.kind, FrameKind::Cleaned);
            } else {
                assert_eq!((a.header.kind, &a.body), (b.header.kind, &b.body));
            }
        }
    });
}

/// A rewrite planned on a segment that is gone by the time it starts does nothing, and an
/// appended entry cannot be a cleaned frame.
#[test]
fn a_rewrite_of_a_replaced_log_does_nothing() {
    let dir = tempfile::tempdir_in(".").expect("tempdir");
    run(async {
        let log = closed_segments(dir.path(), 1).await;
        let first = log.segments_info().into_iter().next().expect("a segment");
        log.reset(RaftIndex(100), KafkaOffset(500))
            .await
            .expect("reset");
        let r = log
            .rewrite_segment(
                &first,
                &mut |_, _| strand_storage::FrameRewrite::Stub,
                &mut IoBudget::unlimited(),
            )
            .await
            .expect("no error");
        assert_eq!(r, None);
        let stub = AppendEntry {
            term: RaftTerm(1),
            kind: FrameKind::Cleaned,
            body: Bytes::new(),
        };
        assert!(matches!(log.append_one(&stub), Err(StorageError::Usage(_))));
    });
}

/// A quiet partition's active segment closes once older than `segment.ms` without an
/// append; the next flush finalizes it (rewritable), and appends go on in a new segment.
#[test]
fn an_idle_active_segment_rolls_after_segment_ms() {
    let dir = tempfile::tempdir_in(".").expect("tempdir");
    run(async {
        let clock = Rc::new(FakeClock(Cell::new(1_000_000)));
        let cfg = LogConfig {
            segment_ms: 500,
            ..config(1 << 20)
        };
        let log = Log::open(
            dir.path(),
            cfg.clone(),
            clock.clone(),
            Rc::new(BatchCache::new(0)),
        )
        .await
        .expect("open");
        log.append_one(&data(1, batch(3, 1, 10))).expect("append");
        log.flush().await.expect("flush");
        clock.0.set(1_000_499);
        assert!(!log.roll_if_idle(), "younger than segment.ms");
        clock.0.set(1_000_500);
        assert!(log.roll_if_idle());
        assert!(!log.roll_if_idle(), "rolled once");
        log.flush().await.expect("flush finalizes");
        let info = log.segments_info();
        assert_eq!(info.len(), 1);
        assert!(info[0].rewritable, "{info:?}");
        let a = log.append_one(&data(1, batch(2, 2, 10))).expect("append");
        assert_eq!(a.kafka_base_offset, KafkaOffset(3));
        log.flush().await.expect("flush");
        assert_eq!(log.segment_count(), 2);
        drop(log);
        let log = Log::open(dir.path(), cfg, clock, Rc::new(BatchCache::new(0)))
            .await
            .expect("reopen");
        assert_eq!(offsets(&log, 0).await, vec![0, 3]);
    });
}

/// A rewrite that fails half-way (here a replacement batch that would move offsets)
/// leaves the old segment as it was, no `.cleaned` file, and the log usable: the next
/// rewrite of the same segment succeeds.
#[test]
fn a_failed_rewrite_changes_nothing() {
    let dir = tempfile::tempdir_in(".").expect("tempdir");
    run(async {
        let log = closed_segments(dir.path(), 1).await;
        let before = stored_batches(&log, 0).await;
        let first = log.segments_info().into_iter().next().expect("a segment");
        let moved = batch(1, 1, 10);
        let r = log
            .rewrite_segment(
                &first,
                &mut |h, _| {
                    if h.index.0 == 3 {
                        strand_storage::FrameRewrite::Replace(moved.clone())
                    } else {
                        strand_storage::FrameRewrite::Keep
                    }
                },
                &mut IoBudget::unlimited(),
            )
            .await;
        assert!(matches!(r, Err(StorageError::Usage(_))), "{r:?}");
        assert_eq!(stored_batches(&log, 0).await, before);
        let leftovers = std::fs::read_dir(dir.path())
            .expect("ls")
            .flatten()
            .filter(|e| e.path().extension().is_some_and(|x| x == "cleaned"))
            .count();
        assert_eq!(leftovers, 0);
        let out = log
            .rewrite_segment(&first, &mut clean_first_segment, &mut IoBudget::unlimited())
            .await
            .expect("rewrite")
            .expect("done");
        assert!(out.frames_stubbed > 0);
        assert_eq!(stored_batches(&log, 0).await[0], (3, 5, 1));
    });
}

/// Descriptors of this process open on deleted files under `dir`.
fn deleted_files_open(dir: &Path) -> usize {
    let dir = dir.canonicalize().expect("dir");
    std::fs::read_dir("/proc/self/fd")
        .expect("fds")
        .filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
        .filter(|t| t.starts_with(&dir) && t.to_string_lossy().ends_with("(deleted)"))
        // Not the shard's unnamed flush anchor (`O_TMPFILE`, shown as `#<inode>`).
        .filter(|t| {
            !t.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with('#'))
        })
        .count()
}

/// The file of a segment compaction replaced or retention deleted stays open while a
/// reader holds it, and is closed (every descriptor, the last off the shard) by the first
/// reap after the reader is done.
#[test]
fn a_dropped_segment_file_is_closed_once_its_readers_are_done() {
    let dir = tempfile::tempdir_in(".").expect("tempdir");
    run(async {
        let log = closed_segments(dir.path(), 12).await;
        let mut segs = log.segments_info().into_iter();
        let (first, second) = (segs.next().expect("first"), segs.next().expect("second"));
        drop(segs);
        let last = first.last_index.expect("not empty").0;
        log.rewrite_segment(
            &first,
            &mut |h, _| {
                if h.index.0 == last && h.kind == FrameKind::Data {
                    strand_storage::FrameRewrite::Stub
                } else {
                    strand_storage::FrameRewrite::Keep
                }
            },
            &mut IoBudget::unlimited(),
        )
        .await
        .expect("rewrite")
        .expect("not raced");
        assert_eq!(log.reap_retired().await, 1, "the plan still holds the file");
        // The replaced file is renamed over: only the held descriptors keep it (2: the
        // shard's and the duplicate for the last close).
        assert_eq!(deleted_files_open(dir.path()), 2);
        drop(first);
        assert_eq!(log.reap_retired().await, 0);
        assert_eq!(deleted_files_open(dir.path()), 0);

        log.truncate_prefix(second.next_offset)
            .await
            .expect("prefix deleted");
        assert!(log.log_start_offset() >= second.next_offset);
        assert_eq!(log.reap_retired().await, 1, "`second` holds its file");
        assert_eq!(deleted_files_open(dir.path()), 2);
        drop(second);
        assert_eq!(log.reap_retired().await, 0);
        assert_eq!(deleted_files_open(dir.path()), 0);
    });
}

/// A log in `dir` without a batch cache (every read goes to disk), segments of
/// `segment_bytes`, holding `count` batches of one 1,000-byte record with timestamps from
/// 1,000, flushed.
async fn log_on_disk(dir: &Path, segment_bytes: u64, count: i64) -> (Rc<BatchCache>, Log) {
    let cache = Rc::new(BatchCache::new(0));
    let clock = Rc::new(FakeClock(Cell::new(1_000_000)));
    let log = Log::open(dir, config(segment_bytes), clock, Rc::clone(&cache))
        .await
        .expect("open");
    for i in 0..count {
        log.append_one(&data(1, batch(1, 1_000 + i, 1000)))
            .expect("append");
    }
    log.flush().await.expect("flush");
    (cache, log)
}

/// Reads from `from` to the log end in reads of `max_bytes`, as a consumer does; returns
/// each batch's (base offset, first timestamp).
async fn consume(log: &Log, from: i64, max_bytes: usize) -> Vec<(i64, i64)> {
    let mut seen = Vec::new();
    let mut at = from;
    while at < log.log_end_offset().0 {
        let r = log
            .read(KafkaOffset(at), log.log_end_offset(), max_bytes, true)
            .await
            .expect("read");
        for b in r.batches {
            let b = RecordBatch::parse(b).expect("batch parses");
            b.validate().expect("batch valid");
            seen.push((b.base_offset(), b.first_timestamp()));
        }
        at = r.next_offset.0;
    }
    seen
}

#[test]
fn a_sequential_reader_from_disk_is_read_ahead_and_reads_what_was_written() {
    let dir = tempfile::tempdir_in(".").expect("tempdir");
    run(async {
        let (cache, log) = log_on_disk(dir.path(), 1 << 20, 2000).await;
        log.flush().await.expect("finalize");
        let want: Vec<(i64, i64)> = (0..2000).map(|i| (i, 1_000 + i)).collect();
        assert_eq!(consume(&log, 0, 64 * 1024).await, want);
        let s = cache.stats();
        // About 2 MiB over 256 KiB windows in two segments: every window after the first
        // of each segment run is read ahead, and each read ahead is used.
        assert!(s.read_aheads >= 4, "{s:?}");
        assert!(s.read_aheads_used + 2 >= s.read_aheads, "{s:?}");
        // A reader that jumps around starts no read-ahead.
        let before = cache.stats().read_aheads;
        for from in [1500, 100, 900, 20] {
            let r = log
                .read(KafkaOffset(from), log.log_end_offset(), 4096, true)
                .await
                .expect("read");
            assert_eq!(r.batches.len(), 3, "from {from}");
        }
        assert_eq!(cache.stats().read_aheads, before);
    });
}

#[test]
fn a_sequential_reader_reads_each_byte_from_disk_once() {
    let dir = tempfile::tempdir_in(".").expect("tempdir");
    run(async {
        let (cache, log) = log_on_disk(dir.path(), 8 << 20, 3000).await;
        let size = log.size_bytes();
        // Reads of 64 KiB in windows of 256 KiB (`READ_WINDOW_BYTES`): without the
        // leftover frames each read would read its window again from where it stopped
        // (about four times the log); with them, the log once, blocks at the windows'
        // edges, and the second read's window again (no read-ahead yet: the first read
        // only predicts where it starts).
        let want: Vec<(i64, i64)> = (0..3000).map(|i| (i, 1_000 + i)).collect();
        assert_eq!(consume(&log, 0, 64 * 1024).await, want);
        let read = log.stats().disk_read_bytes;
        assert!(
            read <= size + 2 * strand_storage::log_read::READ_WINDOW_BYTES,
            "read {read} bytes from disk for a log of {size}"
        );
        let s = cache.stats();
        assert!(s.read_aheads >= 8, "{s:?}");
        assert!(s.read_aheads_used + 1 >= s.read_aheads, "{s:?}");
        // A reader stopping inside the leftover and another reading whatever size: still
        // every batch in order.
        for max_bytes in [1, 5_000, 300 * 1024] {
            assert_eq!(consume(&log, 7, max_bytes).await, want[7..].to_vec());
        }
    });
}

#[test]
fn a_leftover_cut_from_a_leftover_counts_the_whole_buffer_it_holds() {
    let dir = tempfile::tempdir_in(".").expect("tempdir");
    run(async {
        let (cache, log) = log_on_disk(dir.path(), 8 << 20, 1000).await;
        // Reads of one batch each: the second keeps the rest of its 256 KiB window as the
        // leftover and reads ahead; every read after it is served from the leftover and
        // leaves a shorter leftover that is still a slice of the same window's buffer.
        let mut held = Vec::new();
        for at in 0..100 {
            let r = log
                .read(KafkaOffset(at), log.log_end_offset(), 1, true)
                .await
                .expect("read");
            assert_eq!(r.next_offset, KafkaOffset(at + 1));
            held.push(cache.stats().read_ahead_bytes);
        }
        let window = strand_storage::io::read_buffer_bytes(
            usize::try_from(strand_storage::log_read::READ_WINDOW_BYTES).expect("window"),
        );
        assert!(held[2] >= window, "the leftover's window: {}", held[2]);
        assert!(
            held[2..].iter().all(|&h| h == held[2]),
            "the same buffers held while the leftover shrinks: {held:?}"
        );
    });
}

#[test]
fn a_read_ahead_never_serves_bytes_a_truncation_replaced() {
    let dir = tempfile::tempdir_in(".").expect("tempdir");
    run(async {
        let (cache, log) = log_on_disk(dir.path(), 8 << 20, 1000).await;
        // Two reads in order: the second begins reading ahead from where it ends.
        let mut at = 0;
        for _ in 0..2 {
            let r = log
                .read(KafkaOffset(at), log.log_end_offset(), 256 * 1024, true)
                .await
                .expect("read");
            at = r.next_offset.0;
        }
        assert_eq!(cache.stats().read_aheads, 1);
        // Raft replaces everything from inside the read-ahead window with other batches
        // of the same size.
        log.truncate_suffix(RaftIndex(u64::try_from(at).expect("offset") + 11))
            .await
            .expect("truncate");
        for i in 0..(1000 - at - 10) {
            log.append_one(&data(2, batch(1, 900_000 + i, 1000)))
                .expect("append");
        }
        log.flush().await.expect("flush");
        let read = consume(&log, at, 256 * 1024).await;
        let want: Vec<(i64, i64)> = (at..1000)
            .map(|o| {
                (
                    o,
                    if o < at + 10 {
                        1_000 + o
                    } else {
                        900_000 + o - at - 10
                    },
                )
            })
            .collect();
        let wrong = read.iter().zip(&want).find(|(r, w)| r != w);
        assert_eq!(wrong, None, "first batch read unlike what was written");
        assert_eq!(read.len(), want.len());
    });
}

/// A consumer whose batches are each about its `max_bytes` (librdkafka's large batches
/// against a 1 MiB partition fetch) reads each window once: the batch the window cut is
/// judged by its header (it does not fit) instead of by reading the next window.
#[test]
fn a_batch_cut_by_the_window_is_not_read_just_to_stop_before_it() {
    let dir = tempfile::tempdir_in(".").expect("tempdir");
    run(async {
        let clock = Rc::new(FakeClock(Cell::new(1_000_000)));
        let log = Log::open(
            dir.path(),
            config(64 << 20),
            clock,
            Rc::new(BatchCache::new(0)),
        )
        .await
        .expect("open");
        for i in 0..20 {
            log.append_one(&data(1, batch(1, 1_000 + i, 900 * 1024)))
                .expect("append");
        }
        log.flush().await.expect("flush");
        let before = log.stats().disk_reads;
        let want: Vec<(i64, i64)> = (0..20).map(|i| (i, 1_000 + i)).collect();
        assert_eq!(consume(&log, 0, 1 << 20).await, want);
        let reads = log.stats().disk_reads - before;
        // One read per batch (its window, or the read-ahead of it), and the read of the
        // tail's partial block at the end.
        assert!(reads <= 21, "{reads} disk reads for 20 batches");
    });
}
