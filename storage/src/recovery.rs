//! Opening a partition log: list segments, load or rebuild indexes of closed segments,
//! validate the tail segment frame by frame and truncate it at the first torn or corrupt
//! frame (ARCHITECTURE.md, Storage: Recovery).
//!
//! Invariant: after `open`, every frame in the log passed its CRCs and continuity checks
//! (dense Raft indexes, non-decreasing terms, dense Kafka offsets), and everything the log
//! holds is durable. A bad frame in a closed segment is never skipped: open fails with the
//! file and position.

use std::path::{Path, PathBuf};
use std::rc::Rc;

use crate::cache::BatchCache;
use crate::config::{Clock, LogConfig};
use crate::error::StorageError;
use crate::frame::{decode_frame, FrameError, FrameHeader};
use crate::io::{self, align_down, SegmentFile, WriteSync};
use crate::log::{Durable, Log, LogStats, Segment, State, Tail};
use crate::segment::{SegmentMeta, SegmentName};
use crate::tail_buf::TailBuf;
use crate::types::{FilePos, KafkaOffset, RaftIndex, RaftTerm};

/// Bytes read per window while scanning a segment.
const SCAN_WINDOW_BYTES: u64 = 1024 * 1024;
/// File holding the persisted log start offset (DeleteRecords, retention).
pub(crate) const LOG_START_FILE: &str = "log-start-offset";

/// What the next frame must continue from.
#[derive(Clone, Copy, Debug)]
struct Expect {
    index: RaftIndex,
    offset: KafkaOffset,
    term: RaftTerm,
}

/// How a scan ended.
struct Scanned {
    meta: SegmentMeta,
    valid_end: u64,
    bad: Option<(u64, String)>,
}

impl Log {
    /// Opens (creating if needed) the partition log in `dir` and recovers it.
    #[expect(
        clippy::too_many_lines,
        reason = "longer than 70 lines when the lint came in (issue 27): split it when it next changes"
    )]
    pub async fn open(
        dir: &Path,
        config: LogConfig,
        clock: Rc<dyn Clock>,
        cache: Rc<BatchCache>,
    ) -> Result<Log, StorageError> {
        config
            .validate()
            .map_err(|e| StorageError::Environment(format!("bad log config: {e}")))?;
        io::create_dir_all(dir).await?;
        let flush_device = match io::probe_direct_io(dir).await {
            // Writes may join the shard's device flush only where an overwrite changes no
            // metadata (`device_flush`); elsewhere each log syncs its own file.
            Ok(()) => io::in_place_device(dir).await,
            Err(e) if config.allow_buffered_io => {
                tracing::warn!(dir = %dir.display(), error = %e, "using buffered i/o as configured");
                None
            }
            Err(e) => return Err(e),
        };
        io::prime_device_probe(dir).await?;
        // After the probe: glommio judges a device's polled I/O by the first file opened on
        // it, and an empty unnamed file misleads it.
        let flush_anchor = match flush_device {
            Some(device) => crate::device_flush::anchor(dir, device).await,
            None => None,
        };
        let names = list_segments(dir).await?;
        let now_ms = clock.now_ms();
        let mut segments: Vec<Segment> = Vec::with_capacity(names.len());
        let mut expect: Option<Expect> = None;
        for (k, name) in names.iter().enumerate() {
            let path = dir.join(format!("{}.log", name.stem()));
            let last = k + 1 == names.len();
            let e = expect.unwrap_or(Expect {
                index: name.raft_base_index,
                offset: name.kafka_base_offset,
                term: RaftTerm(0),
            });
            if e.index != name.raft_base_index || e.offset != name.kafka_base_offset {
                return Err(StorageError::Corrupt {
                    path,
                    pos: FilePos(0),
                    reason: format!("segment does not continue the log: expected {e:?}"),
                });
            }
            let seg = if last {
                open_tail(&path, *name, e, now_ms).await?
            } else {
                open_closed(&path, *name, e, now_ms).await?
            };
            if let Some(seg) = seg {
                expect = Some(Expect {
                    index: seg.meta.last_index.map_or(e.index, RaftIndex::next),
                    offset: seg.meta.next_offset,
                    term: seg.meta.terms().last().map_or(e.term, |&(_, t)| t),
                });
                segments.push(seg);
            } else {
                expect = Some(e);
            }
        }
        let first_offset = segments.first().map(|s| s.meta.name.kafka_base_offset);
        let log_start_offset = read_log_start(dir)
            .await?
            .max(first_offset.unwrap_or_default());
        let next_index = expect.map_or(RaftIndex(1), |e| e.index);
        let log_end_offset = expect
            .map_or(log_start_offset, |e| e.offset)
            .max(log_start_offset);
        let terms: Vec<_> = segments
            .iter()
            .flat_map(|s| s.meta.terms().iter().copied())
            .collect();
        let cache_id = cache.register();
        let durable = Durable {
            last_index: RaftIndex(next_index.0 - 1),
            next_offset: log_end_offset,
        };
        tracing::info!(dir = %dir.display(), segments = segments.len(), %next_index,
            %log_end_offset, "partition log opened");
        Ok(Log {
            dir: dir.to_path_buf(),
            config: std::cell::RefCell::new(config),
            clock,
            cache,
            cache_id,
            log_start_write: futures::lock::Mutex::new(()),
            files_lock: futures::lock::Mutex::new(()),
            read_next: std::cell::Cell::new(None),
            flush_device,
            _flush_anchor: flush_anchor,
            st: std::cell::RefCell::new(State {
                segments,
                log_start_offset,
                log_end_offset,
                next_index,
                terms,
                durable,
                flush_in_flight: false,
                busy: false,
                fenced: None,
                stats: LogStats::default(),
                cleaning: None,
                swaps: 0,
                retired: Vec::new(),
            }),
        })
    }
}

/// Segment names in `dir`, in log order. Leftover temporary files are removed.
async fn list_segments(dir: &Path) -> Result<Vec<SegmentName>, StorageError> {
    let mut names = Vec::new();
    for path in io::list_dir(dir).await? {
        let ext = path.extension().and_then(|e| e.to_str());
        let stem = path
            .file_stem()
            .and_then(|s| s.to_str())
            .unwrap_or_default();
        match ext {
            Some("log") => match SegmentName::parse(stem) {
                Some(n) => names.push(n),
                None => tracing::warn!(path = %path.display(), "ignoring unrecognised .log file"),
            },
            // A rewrite that did not reach its rename: the segment it was to replace is
            // intact (log_clean).
            Some("tmp" | "cleaned") => io::remove_file(&path).await?,
            _ => {}
        }
    }
    names.sort_by_key(|n| n.raft_base_index);
    Ok(names)
}

/// Opens a closed segment: its index files if current, else a strict rebuild by scanning.
async fn open_closed(
    path: &Path,
    name: SegmentName,
    e: Expect,
    now_ms: i64,
) -> Result<Option<Segment>, StorageError> {
    let file = Rc::new(SegmentFile::open(path, WriteSync::EachWrite).await?);
    let size = file.size_bytes().await?;
    let index = io::read_small_file(&path.with_extension("index")).await?;
    let time = io::read_small_file(&path.with_extension("timeindex")).await?;
    if let (Some(i), Some(t)) = (index, time) {
        if let Some(meta) = SegmentMeta::decode(name, size, &i, &t) {
            if !meta.is_empty() {
                let seg = Segment {
                    meta,
                    file: Some(file),
                    tail: None,
                    closed: true,
                };
                return Ok(Some(seg));
            }
        }
    }
    tracing::info!(path = %path.display(), "rebuilding index of closed segment");
    let s = scan_segment(&file, name, size, e, now_ms).await?;
    if let Some((pos, reason)) = s.bad {
        return Err(StorageError::Corrupt {
            path: path.to_path_buf(),
            pos: FilePos(pos),
            reason,
        });
    }
    if s.meta.is_empty() {
        return Err(StorageError::Corrupt {
            path: path.to_path_buf(),
            pos: FilePos(0),
            reason: "closed segment holds no frames".into(),
        });
    }
    // Not finalized: the next flush trims it to size and writes its index files.
    let tail = Tail {
        buf: TailBuf::default(),
        base_pos: s.valid_end,
        flushed_pos: s.valid_end,
        preallocated_to: 0,
        zeroed_to: s.valid_end,
        zeros_to: s.valid_end,
    };
    Ok(Some(Segment {
        meta: s.meta,
        file: Some(file),
        tail: Some(tail),
        closed: true,
    }))
}

/// Opens the tail segment: validates every frame and truncates at the first bad one.
/// Returns `None` (and removes the file) when no valid frame is left.
async fn open_tail(
    path: &Path,
    name: SegmentName,
    e: Expect,
    now_ms: i64,
) -> Result<Option<Segment>, StorageError> {
    // Plain writes: the flush syncs this file, or joins the shard's device flush.
    let file = SegmentFile::open(path, WriteSync::Fdatasync).await?;
    let size = file.size_bytes().await?;
    let s = scan_segment(&file, name, size, e, now_ms).await?;
    if let Some((pos, reason)) = &s.bad {
        tracing::warn!(path = %path.display(), pos, %reason, "truncating torn or corrupt tail");
    }
    if s.meta.is_empty() {
        file.close().await?;
        for ext in ["log", "index", "timeindex"] {
            io::remove_file(&path.with_extension(ext)).await?;
        }
        io::fsync_dir_async(parent(path)).await?;
        return Ok(None);
    }
    if size != s.valid_end {
        file.truncate(s.valid_end).await?;
        file.fdatasync()
            .await
            .map_err(|f| StorageError::io(path, fault_io(f)))?;
    }
    let base_pos = align_down(s.valid_end);
    let partial = file
        .read(
            base_pos,
            usize::try_from(s.valid_end - base_pos).unwrap_or(0),
        )
        .await?;
    let tail = Tail {
        buf: TailBuf::from_bytes(partial),
        base_pos,
        flushed_pos: s.valid_end,
        preallocated_to: s.valid_end,
        zeroed_to: s.valid_end,
        zeros_to: s.valid_end,
    };
    for ext in ["index", "timeindex"] {
        io::remove_file(&path.with_extension(ext)).await?;
    }
    Ok(Some(Segment {
        meta: s.meta,
        file: Some(Rc::new(file)),
        tail: Some(tail),
        closed: false,
    }))
}

fn parent(path: &Path) -> &Path {
    path.parent().unwrap_or(Path::new("."))
}

fn fault_io(f: io::IoFault) -> std::io::Error {
    match f {
        io::IoFault::NoSpace => std::io::Error::from_raw_os_error(libc::ENOSPC),
        io::IoFault::Other(e) => e,
    }
}

/// Scans a segment file frame by frame, checking CRCs and continuity.
async fn scan_segment(
    file: &SegmentFile,
    name: SegmentName,
    size: u64,
    mut e: Expect,
    now_ms: i64,
) -> Result<Scanned, StorageError> {
    let mut meta = SegmentMeta::new(name, now_ms);
    let mut pos = 0u64;
    let mut want = SCAN_WINDOW_BYTES;
    while pos < size {
        let window = file
            .read(pos, usize::try_from(want.min(size - pos)).unwrap_or(0))
            .await?;
        let at_file_end = pos + window.len() as u64 >= size;
        let mut at = 0usize;
        while at < window.len() {
            let rest = &window[at..];
            let frame_pos = pos + at as u64;
            match decode_frame(rest) {
                Ok((h, body)) => {
                    if let Err(reason) = continues(&e, &h, &rest[body.clone()]) {
                        return Ok(Scanned {
                            meta,
                            valid_end: frame_pos,
                            bad: Some((frame_pos, reason)),
                        });
                    }
                    let max_ts = batch_max_timestamp(&h, &rest[body]);
                    meta.on_frame(FilePos(frame_pos), &h, max_ts);
                    e = Expect {
                        index: h.index.next(),
                        offset: h.next_offset(),
                        term: h.term,
                    };
                    at += h.frame_len_bytes as usize;
                }
                Err(FrameError::Truncated { needed, .. }) if !at_file_end => {
                    want = if at == 0 {
                        (needed as u64).max(want)
                    } else {
                        SCAN_WINDOW_BYTES
                    };
                    break;
                }
                Err(err) => {
                    let bad = (!rest.iter().all(|&b| b == 0)).then(|| (frame_pos, err.to_string()));
                    return Ok(Scanned {
                        meta,
                        valid_end: frame_pos,
                        bad,
                    });
                }
            }
        }
        if at == 0 && window.is_empty() {
            break;
        }
        pos += at as u64;
    }
    Ok(Scanned {
        meta,
        valid_end: pos,
        bad: None,
    })
}

/// Checks a frame continues the log (dense indexes and offsets, terms never go back).
fn continues(e: &Expect, h: &FrameHeader, body: &[u8]) -> Result<(), String> {
    if h.index != e.index {
        return Err(format!("raft index {:?}, expected {:?}", h.index, e.index));
    }
    if h.term < e.term {
        return Err(format!("term {:?} after {:?}", h.term, e.term));
    }
    if h.kafka_base_offset != e.offset {
        return Err(format!(
            "kafka offset {:?}, expected {:?}",
            h.kafka_base_offset, e.offset
        ));
    }
    if h.kind.has_kafka_batch() {
        let base = body.first_chunk::<8>().map(|a| i64::from_be_bytes(*a));
        if base != Some(h.kafka_base_offset.0) {
            return Err("batch base offset differs from frame header".into());
        }
    }
    Ok(())
}

/// The batch's max timestamp for data frames.
pub(crate) fn batch_max_timestamp(h: &FrameHeader, body: &[u8]) -> Option<i64> {
    if !h.kind.has_kafka_batch() {
        return None;
    }
    let at = strand_wire::record_batch::MAX_TIMESTAMP_FIELD_START;
    body.get(at..at + 8)
        .and_then(|s| s.first_chunk::<8>())
        .map(|a| i64::from_be_bytes(*a))
}

async fn read_log_start(dir: &Path) -> Result<KafkaOffset, StorageError> {
    let path: PathBuf = dir.join(LOG_START_FILE);
    let Some(b) = io::read_small_file(&path).await? else {
        return Ok(KafkaOffset(0));
    };
    let ok = b.len() == 12
        && b.get(8..12)
            .and_then(|s| s.first_chunk::<4>())
            .map(|a| u32::from_le_bytes(*a))
            == Some(crc32c::crc32c(&b[..8]));
    match b.first_chunk::<8>() {
        Some(a) if ok => Ok(KafkaOffset(i64::from_le_bytes(*a))),
        _ => Err(StorageError::Corrupt {
            path,
            pos: FilePos(0),
            reason: "log start offset file fails its crc".into(),
        }),
    }
}

/// Encodes the log start offset file.
pub(crate) fn encode_log_start(o: KafkaOffset) -> Vec<u8> {
    let mut b = o.0.to_le_bytes().to_vec();
    let crc = crc32c::crc32c(&b);
    b.extend_from_slice(&crc.to_le_bytes());
    b
}
