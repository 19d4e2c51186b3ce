//! Reads: by Kafka offset (whole batches), by Raft index range, by timestamp.
//!
//! The tail of every log is served from the shard's batch cache; older data is read with
//! aligned DMA reads in windows the size of what the caller asked for (between
//! `READ_WINDOW_BYTES` and `READ_WINDOW_MAX_BYTES`: a consumer fetching 1 MiB gets one
//! read, not four in a row), and the active segment's bytes not
//! yet on disk come from its tail buffer. A sequential reader's next window is read ahead
//! (`read_ahead`), beginning where the whole frames of its last window end: those past
//! where it stopped are kept and served first, so no byte is read from disk twice. Every
//! frame read from disk has both CRCs checked;
//! a bad frame below the logical end fences the log with the file and position.
//!
//! Invariant: a read never returns a frame past the log end at the time of the read, and
//! never a partial frame.

use bytes::{Bytes, BytesMut};

use crate::error::StorageError;
use crate::frame::{decode_frame, decode_header, FrameError, FrameHeader};
use crate::log::Log;
use crate::read_ahead::{Ahead, Leftover};
use crate::types::{FilePos, KafkaOffset, RaftIndex};

/// Bytes read from disk per window at least (frames larger than the window are read whole).
pub const READ_WINDOW_BYTES: u64 = 256 * 1024;

/// Bytes read from disk per window at most, however much the caller asked for: a bound on
/// the memory one read holds.
pub const READ_WINDOW_MAX_BYTES: u64 = 4 * 1024 * 1024;

/// The window for a read that wants `max_bytes` of bodies (frame headers add a little).
fn window_for(max_bytes: usize) -> u64 {
    let wanted = u64::try_from(max_bytes).unwrap_or(u64::MAX);
    wanted
        .saturating_add(wanted / 16)
        .clamp(READ_WINDOW_BYTES, READ_WINDOW_MAX_BYTES)
}

/// A frame as stored.
#[derive(Clone, Debug)]
pub struct LogFrame {
    /// The header.
    pub header: FrameHeader,
    /// The body (for data, the Kafka batch with its assigned base offset).
    pub body: Bytes,
}

/// Whole data batches returned by [`Log::read`].
#[derive(Clone, Debug, Default)]
pub struct ReadBatches {
    /// Record batches in offset order.
    pub batches: Vec<Bytes>,
    /// Sum of their lengths.
    pub bytes: usize,
    /// One past the last offset returned (or the requested offset when none).
    pub next_offset: KafkaOffset,
}

/// Where a walk starts.
#[derive(Clone, Copy, Debug)]
enum Start {
    Offset(KafkaOffset),
    Index(RaftIndex),
    Time(i64),
}

/// Whether a walk goes on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Walk {
    Continue,
    Stop,
}

/// A window a walk read: `bytes` of segment `key` from `pos`, held in a buffer that was
/// read as `buffer_bytes` (a leftover's bytes are a slice of the window read before).
struct Window {
    key: RaftIndex,
    pos: u64,
    bytes: Bytes,
    buffer_bytes: usize,
}

impl Window {
    /// The whole frames from `pos` (a frame boundary inside the window) to the last one
    /// the window holds entirely; `None` when there is none.
    fn whole_frames_from(self, pos: u64) -> Option<Leftover> {
        let start = usize::try_from(pos.checked_sub(self.pos)?).ok()?;
        let mut at = start;
        while let Ok(h) = decode_header(self.bytes.get(at..)?) {
            let end = at.checked_add(h.frame_len_bytes as usize)?;
            if end > self.bytes.len() || end == at {
                break;
            }
            at = end;
        }
        (at > start).then(|| Leftover {
            pos,
            bytes: self.bytes.slice(start..at),
            window_bytes: self.buffer_bytes,
        })
    }
}

impl Log {
    /// Reads whole batches starting with the one containing `from`, stopping before a
    /// batch that would exceed `max_bytes` (the first batch is returned regardless when
    /// `min_one`, KIP-74) or that does not end before `end` (the high watermark).
    pub async fn read(
        &self,
        from: KafkaOffset,
        end: KafkaOffset,
        max_bytes: usize,
        min_one: bool,
    ) -> Result<ReadBatches, StorageError> {
        {
            let st = self.st.borrow();
            self.check_usable(&st)?;
            if from < st.log_start_offset || from > st.log_end_offset {
                return Err(StorageError::OffsetOutOfRange {
                    requested: from,
                    start: st.log_start_offset,
                    end: st.log_end_offset,
                });
            }
        }
        let mut out = ReadBatches {
            next_offset: from,
            ..ReadBatches::default()
        };
        let mut take = |h: &FrameHeader, body: Option<&Bytes>| {
            if !h.kind.has_kafka_batch() || h.next_offset() <= from {
                return Walk::Continue;
            }
            let len = h.body_len_bytes();
            let fits = out.bytes + len <= max_bytes || (min_one && out.batches.is_empty());
            if h.next_offset() > end || !fits {
                return Walk::Stop;
            }
            let Some(body) = body else {
                return Walk::Continue;
            };
            out.bytes += len;
            out.batches.push(body.clone());
            out.next_offset = h.next_offset();
            Walk::Continue
        };
        let cached = self.cache.read_from_offset(self.cache_id, from, |f| {
            take(&f.header, Some(&f.body)) == Walk::Continue
        });
        if !cached {
            let started = self.locate(Start::Offset(from));
            let window = window_for(max_bytes);
            let last = self.walk(Start::Offset(from), window, &mut take).await?;
            self.read_ahead_after(started, out.next_offset, window, last);
        }
        Ok(out)
    }

    /// After a read from disk that started at `started` and ended before `next`, its last
    /// window `last`: predicts where the next read starts and, when this read started
    /// where the previous one predicted (a sequential reader), keeps the whole frames of
    /// `last` from there as the leftover and begins reading `window` bytes from where they
    /// end (see `read_ahead`).
    fn read_ahead_after(
        &self,
        started: Option<(RaftIndex, FilePos)>,
        next: KafkaOffset,
        window: u64,
        last: Option<Window>,
    ) {
        let next_at = self.locate(Start::Offset(next));
        let predicted = self.read_next.replace(next_at);
        let Some((key, pos)) = next_at.filter(|_| started.is_some() && started == predicted) else {
            return;
        };
        let leftover = last
            .filter(|w| w.key == key)
            .and_then(|w| w.whole_frames_from(pos.0));
        let from = leftover
            .as_ref()
            .map_or(pos.0, |l| l.pos + l.bytes.len() as u64);
        let (file, len, swaps) = {
            let st = self.st.borrow();
            let Some(seg) = st.segment(key) else {
                return;
            };
            let durable_end = seg
                .tail
                .as_ref()
                .map_or(seg.meta.size_bytes, |t| t.base_pos.min(seg.meta.size_bytes));
            let (Some(file), true) = (seg.file.clone(), from < durable_end) else {
                return;
            };
            (file, (durable_end - from).min(window), st.swaps)
        };
        {
            let mut aheads = self.cache.read_ahead.borrow_mut();
            if aheads.reading_at(self.cache_id, key, from, swaps) {
                // A read that stopped inside the leftover: the disk read is under way.
                aheads.set_leftover(self.cache_id, leftover);
                return;
            }
        }
        let len = usize::try_from(len).unwrap_or(usize::MAX);
        if let Some(bytes) = file.prefetch(from, len) {
            self.count_disk_read(len);
            let ahead = Ahead {
                key,
                pos: from,
                len,
                swaps,
                bytes,
                leftover,
            };
            self.cache.read_ahead.borrow_mut().put(self.cache_id, ahead);
        }
    }

    /// Counts a read of `len` bytes from disk.
    fn count_disk_read(&self, len: usize) {
        let stats = &mut self.st.borrow_mut().stats;
        stats.disk_reads += 1;
        stats.disk_read_bytes += len as u64;
    }

    /// Drops the log's read-ahead and its prediction (its bytes may change).
    pub(crate) fn forget_read_ahead(&self) {
        self.cache.read_ahead.borrow_mut().remove(self.cache_id);
        self.read_next.set(None);
    }

    /// The bytes a read-ahead holds for the read of `len` bytes of segment `key` at `pos`.
    async fn read_ahead_of(&self, key: RaftIndex, pos: u64, len: usize) -> Option<Bytes> {
        let swaps = self.st.borrow().swaps;
        let ahead = self
            .cache
            .read_ahead
            .borrow_mut()
            .take(self.cache_id, key, pos, len, swaps)?;
        ahead.bytes(len).await
    }

    /// Reads frames with Raft index in `lo..hi`, at most `max_bytes` of bodies but at least
    /// one frame when `lo < hi`.
    pub async fn read_entries(
        &self,
        lo: RaftIndex,
        hi: RaftIndex,
        max_bytes: usize,
    ) -> Result<Vec<LogFrame>, StorageError> {
        {
            let st = self.st.borrow();
            self.check_usable(&st)?;
            let first = st
                .segments
                .first()
                .map_or(st.next_index, |s| s.meta.name.raft_base_index);
            if lo < first || hi > st.next_index {
                return Err(StorageError::IndexOutOfRange {
                    requested: if lo < first { lo } else { hi },
                    first,
                    last: RaftIndex(st.next_index.0 - 1),
                });
            }
        }
        let mut out: Vec<LogFrame> = Vec::new();
        let mut bytes = 0usize;
        let mut take = |h: &FrameHeader, body: Option<&Bytes>| {
            if h.index < lo {
                return Walk::Continue;
            }
            let len = h.body_len_bytes();
            if h.index >= hi || (!out.is_empty() && bytes + len > max_bytes) {
                return Walk::Stop;
            }
            let Some(body) = body else {
                return Walk::Continue;
            };
            bytes += len;
            out.push(LogFrame {
                header: *h,
                body: body.clone(),
            });
            Walk::Continue
        };
        if lo >= hi {
            return Ok(out);
        }
        let cached = self.cache.read_from_index(self.cache_id, lo, |f| {
            take(&f.header, Some(&f.body)) == Walk::Continue
        });
        if !cached {
            self.walk(Start::Index(lo), window_for(max_bytes), &mut take)
                .await?;
        }
        Ok(out)
    }

    /// Frames from Raft index `from` on, only if the batch cache holds all of them:
    /// calls `take` in order until it returns false and returns true; false (nothing
    /// called) on a miss. Synchronous: the Raft read path tries it before going to disk.
    pub fn read_cached_entries(
        &self,
        from: RaftIndex,
        mut take: impl FnMut(&FrameHeader, &Bytes) -> bool,
    ) -> bool {
        self.cache
            .read_from_index(self.cache_id, from, |f| take(&f.header, &f.body))
    }

    /// The first data frame whose batch max timestamp is >= `ts` (ListOffsets by time; the
    /// caller finds the exact record inside the batch), or `None`.
    pub async fn find_by_timestamp(&self, ts: i64) -> Result<Option<LogFrame>, StorageError> {
        let start = self.log_start_offset();
        let mut found = None;
        let mut take = |h: &FrameHeader, body: Option<&Bytes>| {
            let Some(body) = body.filter(|_| h.kind.has_kafka_batch() && h.next_offset() > start)
            else {
                return Walk::Continue;
            };
            match strand_wire::RecordBatch::parse(body.clone()) {
                Ok(b) if b.max_timestamp() >= ts => {
                    found = Some(LogFrame {
                        header: *h,
                        body: body.clone(),
                    });
                    Walk::Stop
                }
                _ => Walk::Continue,
            }
        };
        self.walk(Start::Time(ts), READ_WINDOW_BYTES, &mut take)
            .await?;
        Ok(found)
    }

    /// Finds the segment and position where a walk starts.
    fn locate(&self, start: Start) -> Option<(RaftIndex, FilePos)> {
        let st = self.st.borrow();
        let seg = st.segments.iter().find(|s| match start {
            Start::Offset(o) => !s.meta.is_empty() && s.meta.next_offset > o,
            Start::Index(i) => s.meta.last_index.is_some_and(|l| l >= i),
            Start::Time(ts) => s.meta.max_timestamp_ms >= ts,
        })?;
        let pos = match start {
            Start::Offset(o) => seg.meta.locate_offset(o),
            Start::Index(i) => seg.meta.locate_index(i),
            Start::Time(ts) => seg.meta.locate_time(ts),
        };
        Some((seg.meta.name.raft_base_index, pos))
    }

    /// The segment after `key` and its logical size.
    fn next_segment(&self, key: RaftIndex) -> Option<RaftIndex> {
        let st = self.st.borrow();
        let k = st
            .segments
            .iter()
            .position(|s| s.meta.name.raft_base_index == key)?;
        st.segments.get(k + 1).map(|s| s.meta.name.raft_base_index)
    }

    /// Visits frames in log order from `start` until `visit` stops or the log ends, and
    /// returns the last window it read. A frame whose header is read but whose body the
    /// window cut is first shown to `visit` without its body: `Stop` ends the walk there;
    /// `Continue` reads on (and visits it whole).
    async fn walk(
        &self,
        start: Start,
        window_bytes: u64,
        visit: &mut dyn FnMut(&FrameHeader, Option<&Bytes>) -> Walk,
    ) -> Result<Option<Window>, StorageError> {
        let Some((mut key, mut pos)) = self.locate(start) else {
            return Ok(None);
        };
        let mut last = None;
        let mut want = window_bytes;
        // A compaction rewrite moves frames within their segment: on one, the walk goes
        // back to where it was by Raft index (which a rewrite keeps), skipping what it
        // visited already.
        let (mut swaps, mut resume, mut visited_below) =
            (self.st.borrow().swaps, start, RaftIndex(0));
        loop {
            let (window, buffer_bytes) = self.read_window(key, pos.0, want).await?;
            let now_swaps = self.st.borrow().swaps;
            if now_swaps != swaps {
                swaps = now_swaps;
                let Some(at) = self.locate(resume) else {
                    return Ok(None);
                };
                (key, pos, want) = (at.0, at.1, window_bytes);
                continue;
            }
            if window.is_empty() {
                match self.next_segment(key) {
                    Some(next) => (key, pos, want) = (next, FilePos(0), window_bytes),
                    None => return Ok(last),
                }
                continue;
            }
            last = Some(Window {
                key,
                pos: pos.0,
                bytes: window.clone(),
                buffer_bytes,
            });
            let mut at = 0usize;
            while at < window.len() {
                match decode_frame(&window[at..]) {
                    Ok((h, body)) => {
                        let body = window.slice(at + body.start..at + body.end);
                        if h.index >= visited_below {
                            if visit(&h, Some(&body)) == Walk::Stop {
                                return Ok(last);
                            }
                            visited_below = h.index.next();
                            resume = Start::Index(visited_below);
                        }
                        at += h.frame_len_bytes as usize;
                    }
                    Err(FrameError::Truncated { .. }) if at > 0 => {
                        // A frame cut by the window's end: when its header alone says
                        // the walk stops there (a batch that does not fit), do not read
                        // the next window just to find that out.
                        if let Ok(h) = decode_header(&window[at..]) {
                            if h.index >= visited_below && visit(&h, None) == Walk::Stop {
                                return Ok(last);
                            }
                        }
                        break;
                    }
                    Err(FrameError::Truncated { needed, .. }) if window.len() as u64 == want => {
                        // The first frame is larger than the window: read it whole.
                        want = (needed as u64).max(want + 1);
                        break;
                    }
                    Err(e) => return Err(self.corrupt_at(key, FilePos(pos.0 + at as u64), &e)),
                }
            }
            if at > 0 {
                want = window_bytes;
            }
            pos = FilePos(pos.0 + at as u64);
        }
    }

    /// Fences the log for the bad frame `e` of segment `key` at `pos`, and says so.
    fn corrupt_at(&self, key: RaftIndex, pos: FilePos, e: &FrameError) -> StorageError {
        let path = self.segment_path(key);
        let _ = self.fence(format!("{e} in {} at {pos:?}", path.display()));
        StorageError::Corrupt {
            path,
            pos,
            reason: e.to_string(),
        }
    }

    pub(crate) fn segment_path(&self, key: RaftIndex) -> std::path::PathBuf {
        let st = self.st.borrow();
        match st.segment(key) {
            Some(s) => s.path(&self.dir),
            None => self.dir.clone(),
        }
    }

    /// The next bytes of segment `key` from `pos` for a walk: the leftover frames of a
    /// sequential reader's last window when they start exactly there (whole frames, maybe
    /// fewer bytes than `want`), else `read_span`; with the size of the buffer they are
    /// held in, which the read-ahead's bound counts for a leftover cut from them.
    async fn read_window(
        &self,
        key: RaftIndex,
        pos: u64,
        want: u64,
    ) -> Result<(Bytes, usize), StorageError> {
        let swaps = self.st.borrow().swaps;
        let leftover =
            self.cache
                .read_ahead
                .borrow_mut()
                .take_leftover(self.cache_id, key, pos, swaps);
        match leftover {
            Some(l) => {
                let len = usize::try_from(want)
                    .unwrap_or(usize::MAX)
                    .min(l.bytes.len());
                Ok((l.bytes.slice(..len), l.window_bytes))
            }
            None => {
                let bytes = self.read_span(key, pos, want).await?;
                let len = bytes.len();
                Ok((bytes, len))
            }
        }
    }

    /// Reads up to `len` bytes of segment `key` from `pos`, never past its logical end,
    /// combining disk (durable part) and the tail buffer. Empty when `pos` is at the end
    /// or the segment is gone.
    pub(crate) async fn read_span(
        &self,
        key: RaftIndex,
        pos: u64,
        len: u64,
    ) -> Result<Bytes, StorageError> {
        let mut out = BytesMut::new();
        let mut p = pos;
        loop {
            let disk = {
                let st = self.st.borrow();
                let Some(seg) = st.segment(key) else {
                    return Ok(out.freeze());
                };
                let end = (pos + len).min(seg.meta.size_bytes);
                if p >= end {
                    return Ok(out.freeze());
                }
                match &seg.tail {
                    Some(t) if p >= t.base_pos => {
                        let a = usize::try_from(p - t.base_pos).unwrap_or(usize::MAX);
                        let b = usize::try_from(end - t.base_pos).unwrap_or(usize::MAX);
                        let tail = t.buf.slice(a..b);
                        if out.is_empty() {
                            return Ok(tail);
                        }
                        out.extend_from_slice(&tail);
                        return Ok(out.freeze());
                    }
                    Some(t) => (seg.file.clone(), end.min(t.base_pos), end),
                    None => (seg.file.clone(), end, end),
                }
            };
            let (Some(file), disk_end, end) = disk else {
                return Err(StorageError::Usage(
                    "segment without file has no tail buffer",
                ));
            };
            let len_now = usize::try_from(disk_end - p).unwrap_or(usize::MAX);
            let bytes = match self.read_ahead_of(key, p, len_now).await {
                Some(bytes) => bytes,
                None => {
                    self.count_disk_read(len_now);
                    file.read(p, len_now).await?
                }
            };
            if bytes.len() < len_now {
                let reason = format!("short read: {} of {len_now} bytes", bytes.len());
                return Err(StorageError::Corrupt {
                    path: file.path().into(),
                    pos: FilePos(p),
                    reason,
                });
            }
            // All of the span from one disk read (the usual case, also when the span
            // was cut at the segment's end): no copy.
            if out.is_empty() && disk_end == end {
                return Ok(bytes);
            }
            out.extend_from_slice(&bytes);
            p = disk_end;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_read_window_is_what_the_caller_wants_within_bounds() {
        assert_eq!(window_for(0), READ_WINDOW_BYTES);
        assert_eq!(window_for(1024 * 1024), 1024 * 1024 + 64 * 1024);
        assert_eq!(window_for(usize::MAX), READ_WINDOW_MAX_BYTES);
    }
}
