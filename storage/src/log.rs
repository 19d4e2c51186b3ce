//! One partition's log: an ordered list of segments, the last of which is active.
//!
//! Invariants (ARCHITECTURE.md, Storage and Offsets):
//! - Raft indexes are dense from `first_index` to `next_index - 1`; Kafka offsets are
//!   dense and assigned once, in order, only to data and control frames.
//! - Bytes below a segment's `flushed_pos` are written durably (O_DSYNC, or write and
//!   fdatasync); bytes above it exist only in that segment's tail buffer and may vanish on
//!   a crash.
//! - After a failed durable write (or fdatasync) the log is fenced and refuses every
//!   further operation.
//! - `Log` lives on one shard (`!Send`). Every method takes `&self` and holds its
//!   `RefCell` borrow only between awaits, so appends proceed while a flush is in flight.
//!
//! The work is split by concern: `log_flush` (group commit), `log_read` (reads),
//! `log_truncate` (suffix/prefix truncation and retention), `recovery` (open).

use std::cell::RefCell;
use std::path::{Path, PathBuf};
use std::rc::Rc;

use bytes::Bytes;
use strand_wire::RecordBatch;

use crate::cache::{BatchCache, CachedFrame, LogId};
use crate::config::{Clock, LogConfig, TAIL_PENDING_BYTES_MAX};
use crate::error::StorageError;
use crate::frame::{encode_header, FrameHeader, FrameKind, FRAME_BYTES_MAX, FRAME_HEADER_BYTES};
use crate::io::{AppendMem, SharedFile};
use crate::segment::{SegmentMeta, SegmentName};
use crate::tail_buf::TailBuf;
use crate::types::{FilePos, KafkaOffset, RaftIndex, RaftTerm};

/// Unflushed bytes of a segment.
///
/// Invariant: `buf` holds the segment's bytes `base_pos..meta.size_bytes`;
/// `base_pos <= flushed_pos <= meta.size_bytes`; for the active segment `base_pos` is
/// write-aligned so a flush rewrites the partially filled last page.
#[derive(Debug, Default)]
pub(crate) struct Tail {
    pub(crate) buf: TailBuf,
    pub(crate) base_pos: u64,
    pub(crate) flushed_pos: u64,
    pub(crate) preallocated_to: u64,
    /// File bytes before this are written blocks (data or zeros), durably: a durable write
    /// there changes no extent (see `config::ZERO_AHEAD_BYTES`).
    pub(crate) zeroed_to: u64,
    /// File bytes before this are written blocks, durably or not yet (zeros written ahead
    /// whose extents' conversion awaits the file's next own sync); `>= zeroed_to`.
    pub(crate) zeros_to: u64,
}

/// A segment and its I/O state.
#[derive(Debug)]
pub(crate) struct Segment {
    pub(crate) meta: SegmentMeta,
    /// `None` until the first flush creates the file.
    pub(crate) file: Option<SharedFile>,
    /// `Some` while the segment has bytes not yet durable or is not finalized.
    pub(crate) tail: Option<Tail>,
    /// No more appends go here.
    pub(crate) closed: bool,
}

impl Segment {
    pub(crate) fn path(&self, dir: &Path) -> PathBuf {
        segment_path(dir, &self.meta.name)
    }
}

/// The file of the segment `name` in `dir`.
pub(crate) fn segment_path(dir: &Path, name: &SegmentName) -> PathBuf {
    dir.join(format!("{}.log", name.stem()))
}

/// Mutable state of a log.
#[derive(Debug)]
pub(crate) struct State {
    pub(crate) segments: Vec<Segment>,
    pub(crate) log_start_offset: KafkaOffset,
    pub(crate) log_end_offset: KafkaOffset,
    pub(crate) next_index: RaftIndex,
    pub(crate) terms: Vec<(RaftIndex, RaftTerm)>,
    pub(crate) durable: Durable,
    pub(crate) flush_in_flight: bool,
    pub(crate) busy: bool,
    pub(crate) fenced: Option<String>,
    pub(crate) stats: LogStats,
    /// The segment (by first index) a compaction rewrite is replacing: retention leaves
    /// it and the segments after it for a later round (`log_clean`).
    pub(crate) cleaning: Option<RaftIndex>,
    /// Segments replaced by compaction rewrites so far: a walk that sees it change goes
    /// back to its segment's index, since file positions changed.
    pub(crate) swaps: u64,
    /// Files of segments the log dropped, waiting for their readers to finish so that
    /// their last close runs off the shard (`io::RetiredFile`; `Log::reap_retired`).
    pub(crate) retired: Vec<crate::io::RetiredFile>,
}

impl State {
    /// The segment whose first Raft index is `key`.
    pub(crate) fn segment(&self, key: RaftIndex) -> Option<&Segment> {
        self.segments
            .iter()
            .find(|s| s.meta.name.raft_base_index == key)
    }

    /// Bytes appended to the segments' tails and not yet flushed.
    pub(crate) fn pending_bytes(&self) -> u64 {
        self.segments
            .iter()
            .filter_map(|s| s.tail.as_ref().map(|t| s.meta.size_bytes - t.flushed_pos))
            .sum()
    }

    /// Drops `seg` from the log's view, keeping its file for `Log::reap_retired`.
    pub(crate) fn retire(&mut self, seg: Segment) {
        if let Some(f) = seg.file {
            self.retired.push(crate::io::RetiredFile::new(f));
        }
    }

    /// Retires `dropped` (segments taken out of `segments`); returns their paths in `dir`
    /// and sizes, in the order given, for the caller to unlink.
    pub(crate) fn retire_all(&mut self, dropped: Vec<Segment>, dir: &Path) -> Vec<(PathBuf, u64)> {
        dropped
            .into_iter()
            .map(|s| {
                let path = (s.path(dir), s.meta.size_bytes);
                self.retire(s);
                path
            })
            .collect()
    }
}

/// What is known durable.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Durable {
    /// Last durable Raft index (0 when none).
    pub last_index: RaftIndex,
    /// One past the last durable Kafka offset.
    pub next_offset: KafkaOffset,
}

/// Plain counters for metrics (shard-local; the broker sums and exports them).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LogStats {
    /// Frames appended.
    pub frames_appended: u64,
    /// Bytes appended (frames, headers included).
    pub bytes_appended: u64,
    /// Write calls issued.
    pub writes: u64,
    /// Bytes written (aligned, rewrites included).
    pub bytes_written: u64,
    /// fdatasync calls of this log's own (the device flushes logs share are counted by
    /// `device_flush::rounds`).
    pub fdatasyncs: u64,
    /// Shared device flushes of the thread (`device_flush::rounds`; set by the shard's
    /// aggregate, 0 for one log).
    pub device_flushes: u64,
    /// Flushes made durable by them (`device_flush::joined`; as `device_flushes`).
    pub device_flush_writes: u64,
    /// Segments rolled.
    pub rolls: u64,
    /// Reads from disk (read-aheads included).
    pub disk_reads: u64,
    /// Bytes asked of the disk by them.
    pub disk_read_bytes: u64,
}

/// One entry to append.
#[derive(Clone, Debug)]
pub struct AppendEntry {
    /// Raft term to write it in (the Kafka leader epoch of a data batch).
    pub term: RaftTerm,
    /// What it is.
    pub kind: FrameKind,
    /// For data/control: one Kafka RecordBatch v2 whose CRC the caller has validated.
    pub body: Bytes,
}

/// Where an entry landed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Appended {
    /// Its Raft index.
    pub index: RaftIndex,
    /// Its first Kafka offset (for non-data entries, the log end offset).
    pub kafka_base_offset: KafkaOffset,
    /// The log end offset after it.
    pub next_offset: KafkaOffset,
    /// Bytes appended and not yet flushed, this entry included (see
    /// `TAIL_PENDING_BYTES_WAIT`).
    pub pending_bytes: u64,
}

/// A partition log. See the module docs for its invariants.
pub struct Log {
    pub(crate) dir: PathBuf,
    pub(crate) config: RefCell<LogConfig>,
    pub(crate) clock: Rc<dyn Clock>,
    pub(crate) cache: Rc<BatchCache>,
    pub(crate) cache_id: LogId,
    pub(crate) st: RefCell<State>,
    /// Held while the log start offset file is written: one write at a time (they share
    /// a temporary file), each writing the latest offset.
    pub(crate) log_start_write: futures::lock::Mutex<()>,
    /// Held while segment files are unlinked (truncation, retention, reset) and while a
    /// compaction rewrite renames its file over a segment, so an unlinked segment is
    /// never brought back by a rename.
    pub(crate) files_lock: futures::lock::Mutex<()>,
    /// Where the next read by Kafka offset starts if its reader reads in order (segment,
    /// position), as the last read from disk predicted (`read_ahead`).
    pub(crate) read_next: std::cell::Cell<Option<(RaftIndex, FilePos)>>,
    /// The device of the directory when it does O_DIRECT on a filesystem that overwrites
    /// in place (`io::in_place_device`): only then may a flush join the shard's device
    /// flush of that device (`device_flush`; a buffered write's pages, or a copy-on-write
    /// filesystem's new blocks, need their own file's sync).
    pub(crate) flush_device: Option<u64>,
    /// Keeps the shard's clean file for that device's shared flushes open
    /// (`device_flush::anchor`).
    pub(crate) _flush_anchor: Option<crate::io::SharedFile>,
}

impl Drop for Log {
    fn drop(&mut self) {
        self.cache.unregister(self.cache_id);
    }
}

impl Log {
    /// The partition directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Closes the files of dropped segments that no read holds any more, their last
    /// descriptor on the blocking thread pool (`io::RetiredFile`). Returns how many wait
    /// on reads still in flight. Run after every drop of segments and periodically.
    pub async fn reap_retired(&self) -> usize {
        let unused: Vec<_> = {
            let mut st = self.st.borrow_mut();
            let (unused, busy) = std::mem::take(&mut st.retired)
                .into_iter()
                .partition(|f| f.unused());
            st.retired = busy;
            unused
        };
        for f in unused {
            if let Err(f) = f.close().await {
                self.st.borrow_mut().retired.push(f);
            }
        }
        self.st.borrow().retired.len()
    }

    /// The configuration in force.
    pub fn config(&self) -> LogConfig {
        self.config.borrow().clone()
    }

    /// Least time between two flush starts (`LogConfig::flush_min_interval_us`).
    pub fn flush_min_interval(&self) -> std::time::Duration {
        std::time::Duration::from_micros(self.config.borrow().flush_min_interval_us)
    }

    /// Changes the configuration (topic config altered); applies from the next append,
    /// flush or retention run.
    pub fn set_config(&self, config: LogConfig) -> Result<(), StorageError> {
        config
            .validate()
            .map_err(|e| StorageError::Environment(format!("bad log config: {e}")))?;
        *self.config.borrow_mut() = config;
        Ok(())
    }

    /// The end offset of leader epoch (term) `term`: the first offset of the next larger
    /// term, or the log end offset when `term` is the latest. Returns the largest term
    /// <= `term` with it, or `None` when `term` precedes the log.
    pub async fn epoch_end_offset(
        &self,
        term: RaftTerm,
    ) -> Result<Option<(RaftTerm, KafkaOffset)>, StorageError> {
        let (found, next_start) = {
            let st = self.st.borrow();
            let k = st.terms.partition_point(|&(_, t)| t <= term);
            (
                k.checked_sub(1).map(|k| st.terms[k].1),
                st.terms.get(k).map(|&(i, _)| i),
            )
        };
        let Some(found) = found else { return Ok(None) };
        let Some(start) = next_start else {
            return Ok(Some((found, self.log_end_offset())));
        };
        let frames = self.read_entries(start, start.next(), 0).await?;
        let offset = frames
            .first()
            .map_or(self.log_end_offset(), |f| f.header.kafka_base_offset);
        Ok(Some((found, offset)))
    }

    /// Kafka offset of the first record still readable.
    pub fn log_start_offset(&self) -> KafkaOffset {
        self.st.borrow().log_start_offset
    }

    /// The largest record timestamp any segment holds (-1 when none has a record): the
    /// target of ListOffsets MAX_TIMESTAMP, found with `find_by_timestamp`.
    pub fn max_timestamp_ms(&self) -> i64 {
        let st = self.st.borrow();
        st.segments
            .iter()
            .map(|s| s.meta.max_timestamp_ms)
            .max()
            .unwrap_or(-1)
    }

    /// Bytes appended and not yet flushed (see `TAIL_PENDING_BYTES_WAIT`).
    pub fn pending_bytes(&self) -> u64 {
        self.st.borrow().pending_bytes()
    }

    /// Next Kafka offset to assign.
    pub fn log_end_offset(&self) -> KafkaOffset {
        self.st.borrow().log_end_offset
    }

    /// First Raft index present (equals `next_index` when the log is empty).
    pub fn first_index(&self) -> RaftIndex {
        let st = self.st.borrow();
        st.segments
            .first()
            .map_or(st.next_index, |s| s.meta.name.raft_base_index)
    }

    /// Last Raft index present (`first_index - 1` when empty).
    pub fn last_index(&self) -> RaftIndex {
        RaftIndex(self.st.borrow().next_index.0 - 1)
    }

    /// Term of the last entry, 0 when empty.
    pub fn last_term(&self) -> RaftTerm {
        self.st
            .borrow()
            .terms
            .last()
            .map_or(RaftTerm(0), |&(_, t)| t)
    }

    /// Term of the entry at `index`, answered from memory; `None` outside the log.
    pub fn term_at(&self, index: RaftIndex) -> Option<RaftTerm> {
        let first = self.first_index();
        let st = self.st.borrow();
        if index < first || index >= st.next_index {
            return None;
        }
        let k = st.terms.partition_point(|&(start, _)| start <= index);
        k.checked_sub(1).map(|k| st.terms[k].1)
    }

    /// Term runs `(first index, term)` of the entries `lo..=hi`, the first starting at
    /// `lo`, runs of one term merged; empty unless both ends are in the log and `lo <= hi`.
    pub fn term_runs(&self, lo: RaftIndex, hi: RaftIndex) -> Vec<(RaftIndex, RaftTerm)> {
        let (Some(first), Some(_)) = (self.term_at(lo), self.term_at(hi)) else {
            return Vec::new();
        };
        if hi < lo {
            return Vec::new();
        }
        let mut out = vec![(lo, first)];
        for &(start, term) in &self.st.borrow().terms {
            if start > lo && start <= hi && out.last().is_some_and(|&(_, t)| t != term) {
                out.push((start, term));
            }
        }
        out
    }

    /// Kafka offset of the first entry's records (the log end offset when empty): where
    /// the first segment starts, whatever the log start offset says.
    pub fn first_entry_offset(&self) -> KafkaOffset {
        let st = self.st.borrow();
        st.segments
            .first()
            .map_or(st.log_end_offset, |s| s.meta.name.kafka_base_offset)
    }

    /// Kafka offset just past entry `index` when it is the last entry of a closed
    /// segment (where retention cuts), from memory; `None` otherwise.
    pub fn segment_end_offset(&self, index: RaftIndex) -> Option<KafkaOffset> {
        let st = self.st.borrow();
        st.segments
            .iter()
            .find(|s| s.tail.is_none() && s.meta.last_index == Some(index))
            .map(|s| s.meta.next_offset)
    }

    /// What is durable.
    pub fn durable(&self) -> Durable {
        self.st.borrow().durable
    }

    /// Total bytes of all segments (logical sizes).
    pub fn size_bytes(&self) -> u64 {
        self.st
            .borrow()
            .segments
            .iter()
            .map(|s| s.meta.size_bytes)
            .sum()
    }

    /// Number of segments.
    pub fn segment_count(&self) -> usize {
        self.st.borrow().segments.len()
    }

    /// Names of the segments, oldest first.
    pub fn segment_names(&self) -> Vec<SegmentName> {
        self.st
            .borrow()
            .segments
            .iter()
            .map(|s| s.meta.name)
            .collect()
    }

    /// Counters.
    pub fn stats(&self) -> LogStats {
        self.st.borrow().stats
    }

    /// Why the log is fenced, if it is.
    pub fn fenced(&self) -> Option<String> {
        self.st.borrow().fenced.clone()
    }

    pub(crate) fn check_usable(&self, st: &State) -> Result<(), StorageError> {
        match &st.fenced {
            Some(reason) => Err(StorageError::Fenced {
                dir: self.dir.clone(),
                reason: reason.clone(),
            }),
            None => Ok(()),
        }
    }

    pub(crate) fn fence(&self, reason: String) -> StorageError {
        tracing::error!(dir = %self.dir.display(), %reason, "partition log fenced");
        self.st.borrow_mut().fenced = Some(reason.clone());
        StorageError::Fenced {
            dir: self.dir.clone(),
            reason,
        }
    }

    /// Appends entries in order (logically: readable at once, durable after a flush).
    /// Data bodies get their base offset and leader epoch rewritten in the stored copy.
    pub fn append(&self, entries: &[AppendEntry]) -> Result<Option<Appended>, StorageError> {
        let mut last = None;
        for e in entries {
            last = Some(self.append_one(e)?);
        }
        Ok(last)
    }

    /// Appends one entry; see [`Log::append`].
    pub fn append_one(&self, e: &AppendEntry) -> Result<Appended, StorageError> {
        let mut guard = self.st.borrow_mut();
        let st = &mut *guard;
        self.check_usable(st)?;
        if st.busy {
            return Err(StorageError::Usage("append during truncation"));
        }
        let pending = st.pending_bytes();
        if pending > TAIL_PENDING_BYTES_MAX {
            return Err(StorageError::TailFull {
                pending_bytes: pending,
                limit_bytes: TAIL_PENDING_BYTES_MAX,
            });
        }
        let last_term = st.terms.last().map_or(RaftTerm(0), |&(_, t)| t);
        assert!(
            e.term >= last_term,
            "term went back: {:?} < {last_term:?}",
            e.term
        );
        let (index, base_offset) = (st.next_index, st.log_end_offset);
        let plan = plan_frame(e)?;
        let seg = self.segment_for(st, e.term, plan.frame_len_bytes);
        let tail = seg
            .tail
            .as_mut()
            .expect("the active segment always has a tail");
        let pos = seg.meta.size_bytes;
        let chunk_bytes_max = self.cache.tail_chunk_bytes_max();
        let (frame, chunk, header) =
            tail.buf
                .append_with(plan.frame_len_bytes as usize, chunk_bytes_max, |mem| {
                    write_frame(mem, e, &plan, index, base_offset)
                });
        let header = match header {
            Ok(h) => h,
            Err(err) => {
                // Unreachable after `plan_frame`'s checks; leave the tail as it was.
                tail.buf
                    .truncate(usize::try_from(pos - tail.base_pos).unwrap_or(usize::MAX));
                return Err(err);
            }
        };
        seg.meta.on_frame(FilePos(pos), &header, plan.max_ts);
        assert_eq!(
            tail.base_pos + tail.buf.len() as u64,
            seg.meta.size_bytes,
            "tail desync"
        );
        if st.terms.last().is_none_or(|&(_, t)| t != header.term) {
            st.terms.push((header.index, header.term));
        }
        st.next_index = header.index.next();
        st.log_end_offset = header.next_offset();
        st.stats.frames_appended += 1;
        st.stats.bytes_appended += u64::from(header.frame_len_bytes);
        drop(guard);
        let body = frame.slice(FRAME_HEADER_BYTES..);
        self.cache.insert(
            self.cache_id,
            CachedFrame {
                header,
                body,
                chunk: Some(chunk),
            },
        );
        Ok(Appended {
            index: header.index,
            kafka_base_offset: header.kafka_base_offset,
            next_offset: header.next_offset(),
            pending_bytes: pending + u64::from(header.frame_len_bytes),
        })
    }

    /// The segment the next frame (`frame_len` bytes, of `term`) goes to: the active one,
    /// or a new one when there is none or it rolls.
    fn segment_for<'s>(
        &self,
        st: &'s mut State,
        term: RaftTerm,
        frame_len: u32,
    ) -> &'s mut Segment {
        let now_ms = self.clock.now_ms();
        self.roll_if_needed(st, frame_len, now_ms);
        if st.segments.last().is_none_or(|s| s.closed) {
            let name = SegmentName {
                kafka_base_offset: st.log_end_offset,
                raft_base_index: st.next_index,
                term,
            };
            st.segments.push(Segment {
                meta: SegmentMeta::new(name, now_ms),
                file: None,
                tail: Some(Tail::default()),
                closed: false,
            });
        }
        st.segments
            .last_mut()
            .expect("an open segment was just ensured")
    }

    /// Closes the active segment once it is older than `segment.ms` even without an
    /// append, so a quiet partition's last records reach a closed segment that the next
    /// flush finalizes (log compaction cleans only those). Returns whether it rolled.
    pub fn roll_if_idle(&self) -> bool {
        let mut guard = self.st.borrow_mut();
        let st = &mut *guard;
        if st.busy || st.fenced.is_some() {
            return false;
        }
        let rolls = st.stats.rolls;
        self.roll_if_needed(st, 0, self.clock.now_ms());
        st.stats.rolls != rolls
    }

    /// Closes the active segment when the next frame would overflow `segment.bytes` or the
    /// segment is older than `segment.ms`. A segment always keeps at least one frame.
    fn roll_if_needed(&self, st: &mut State, frame_len: u32, now_ms: i64) {
        let Some(active) = st.segments.last_mut() else {
            return;
        };
        if active.closed || active.meta.is_empty() {
            return;
        }
        let full =
            active.meta.size_bytes + u64::from(frame_len) > self.config.borrow().segment_bytes;
        let old = now_ms.saturating_sub(active.meta.created_ms) >= self.config.borrow().segment_ms;
        if full || old {
            active.closed = true;
            st.stats.rolls += 1;
            tracing::info!(dir = %self.dir.display(), segment = %active.meta.name.stem(),
                size_bytes = active.meta.size_bytes, "segment rolled");
        }
    }
}

/// What an entry's frame will be, checked before anything is written.
struct FramePlan {
    frame_len_bytes: u32,
    /// Kafka offsets the frame takes (0 for entries without a Kafka batch).
    offset_count: u32,
    max_ts: Option<i64>,
    /// Partition leader epoch written into a Kafka batch.
    epoch: i32,
}

/// Checks `e` and plans its frame: size, offsets, timestamp.
fn plan_frame(e: &AppendEntry) -> Result<FramePlan, StorageError> {
    if e.kind == FrameKind::Cleaned {
        return Err(StorageError::Usage(
            "only log compaction writes cleaned frames",
        ));
    }
    let frame_len = FRAME_HEADER_BYTES + e.body.len();
    if frame_len > FRAME_BYTES_MAX as usize {
        return Err(StorageError::Usage("entry larger than FRAME_BYTES_MAX"));
    }
    let (offset_count, max_ts, epoch) = if e.kind.has_kafka_batch() {
        let batch = RecordBatch::parse(e.body.clone())?;
        let count = u32::try_from(i64::from(batch.last_offset_delta()) + 1)
            .map_err(|_| StorageError::Usage("negative last offset delta"))?;
        let epoch = i32::try_from(e.term.0).map_err(|_| StorageError::Usage("term > i32"))?;
        (count, Some(batch.max_timestamp()), epoch)
    } else {
        (0, None, 0)
    };
    Ok(FramePlan {
        frame_len_bytes: frame_len as u32,
        offset_count,
        max_ts,
        epoch,
    })
}

/// Appends the frame `plan` describes for `e` at `index` to `mem`, assigning Kafka
/// offsets from `next_offset`: the body copied once, its Kafka base offset and leader
/// epoch rewritten in place, its CRC computed while those bytes are in cache.
fn write_frame(
    mem: &mut AppendMem,
    e: &AppendEntry,
    plan: &FramePlan,
    index: RaftIndex,
    next_offset: KafkaOffset,
) -> Result<FrameHeader, StorageError> {
    let head = mem.append_copy(&[0u8; FRAME_HEADER_BYTES]);
    let body = mem.append_copy(&e.body);
    if e.kind.has_kafka_batch() {
        // `plan_frame` parsed the batch: its header is there to rewrite.
        let batch = mem.patch(body.clone());
        strand_wire::set_base_offset(batch, next_offset.0)?;
        strand_wire::set_partition_leader_epoch(batch, plan.epoch)?;
    }
    let header = FrameHeader {
        frame_len_bytes: plan.frame_len_bytes,
        body_crc: crc32c::crc32c(mem.read(body)),
        kind: e.kind,
        term: e.term,
        index,
        kafka_base_offset: next_offset,
        offset_count: plan.offset_count,
    };
    mem.patch(head).copy_from_slice(&encode_header(&header));
    Ok(header)
}
