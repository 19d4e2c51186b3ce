//! In-memory description of one segment (name, sizes, sparse indexes, term starts) and the
//! `.index` / `.timeindex` file formats written when a segment closes.
//!
//! Segment files are named `<kafka_base_offset>-<raft_base_index>-<term>.log` (20-digit
//! zero-padded numbers), so names sort by position in the log and never collide even when
//! a segment holds no data frames. The index files are derived data: a missing, corrupt or
//! stale index (its recorded log size differs from the `.log` size) is rebuilt by scanning.
//!
//! `.index` (little-endian):
//! ```text
//! "SIDX" u32 version | u64 log_size | u64 last_index (0 = empty) | i64 next_offset
//! | i64 max_timestamp_ms | i64 created_ms | u32 n_entries | u32 n_terms
//! | n_entries x (i64 kafka_offset, u64 raft_index, u64 pos) | n_terms x (u64 index, u64 term)
//! | u32 crc32c of everything before it
//! ```
//! `.timeindex`: `"STIX" u32 version | u64 log_size | u32 n | n x (i64 max_ts_ms, i64
//! kafka_offset, u64 pos) | u32 crc32c`.
//!
//! Invariant: `index`, `time_index` and `terms` are sorted; every entry points at the start
//! of a valid frame below `size_bytes`.

use crate::config::INDEX_INTERVAL_BYTES;
use crate::frame::FrameHeader;
use crate::types::{FilePos, KafkaOffset, RaftIndex, RaftTerm};

/// The identity of a segment, encoded in its file name.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct SegmentName {
    /// Kafka offset of the first data frame (or the log end offset at creation).
    pub kafka_base_offset: KafkaOffset,
    /// Raft index of the first frame.
    pub raft_base_index: RaftIndex,
    /// Term of the first frame.
    pub term: RaftTerm,
}

impl SegmentName {
    /// The file stem: `<offset>-<index>-<term>`.
    pub fn stem(&self) -> String {
        format!(
            "{:020}-{:020}-{:020}",
            self.kafka_base_offset.0, self.raft_base_index.0, self.term.0
        )
    }

    /// Parses a file stem written by [`SegmentName::stem`].
    pub fn parse(stem: &str) -> Option<SegmentName> {
        let mut it = stem.split('-');
        let o = it.next()?.parse::<i64>().ok()?;
        let i = it.next()?.parse::<u64>().ok()?;
        let t = it.next()?.parse::<u64>().ok()?;
        if it.next().is_some() || o < 0 {
            return None;
        }
        Some(SegmentName {
            kafka_base_offset: KafkaOffset(o),
            raft_base_index: RaftIndex(i),
            term: RaftTerm(t),
        })
    }
}

/// Sparse index entry: the frame at `pos` is the first with index >= `index` and its
/// Kafka base offset (or position in the offset space) is `kafka_offset`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IndexEntry {
    /// Kafka base offset of the frame.
    pub kafka_offset: KafkaOffset,
    /// Raft index of the frame.
    pub index: RaftIndex,
    /// Where it starts.
    pub pos: FilePos,
}

/// Time index entry: every frame before `pos` has max timestamp < `max_timestamp_ms`,
/// which is the max timestamp of the frame at `pos`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TimeEntry {
    /// Largest timestamp seen up to and including the frame at `pos`.
    pub max_timestamp_ms: i64,
    /// That frame's Kafka base offset.
    pub kafka_offset: KafkaOffset,
    /// Where it starts.
    pub pos: FilePos,
}

/// Everything the log knows about a segment without reading it.
#[derive(Clone, Debug)]
pub struct SegmentMeta {
    /// Identity.
    pub name: SegmentName,
    /// Bytes of whole frames appended (the logical end; the file may be longer).
    pub size_bytes: u64,
    /// Last Raft index in the segment, `None` when empty.
    pub last_index: Option<RaftIndex>,
    /// One past the last Kafka offset in the segment.
    pub next_offset: KafkaOffset,
    /// Largest record timestamp in the segment, -1 when it has no data.
    pub max_timestamp_ms: i64,
    /// When the segment was created (for `segment.ms` and retention of empty segments).
    pub created_ms: i64,
    index: Vec<IndexEntry>,
    time_index: Vec<TimeEntry>,
    terms: Vec<(RaftIndex, RaftTerm)>,
    last_indexed_pos: Option<u64>,
    last_timed_pos: Option<u64>,
}

impl SegmentMeta {
    /// An empty segment.
    pub fn new(name: SegmentName, created_ms: i64) -> SegmentMeta {
        SegmentMeta {
            name,
            size_bytes: 0,
            last_index: None,
            next_offset: name.kafka_base_offset,
            max_timestamp_ms: -1,
            created_ms,
            index: Vec::new(),
            time_index: Vec::new(),
            terms: Vec::new(),
            last_indexed_pos: None,
            last_timed_pos: None,
        }
    }

    /// Records a frame appended at `pos` (`max_ts` is the batch's max timestamp for data).
    pub fn on_frame(&mut self, pos: FilePos, h: &FrameHeader, max_ts: Option<i64>) {
        assert_eq!(pos.0, self.size_bytes, "frame not at segment end");
        let expected = self
            .last_index
            .map_or(self.name.raft_base_index, RaftIndex::next);
        assert_eq!(h.index, expected, "raft index gap in segment");
        if self.terms.last().is_none_or(|&(_, t)| t != h.term) {
            self.terms.push((h.index, h.term));
        }
        if self
            .last_indexed_pos
            .is_none_or(|p| pos.0 - p >= INDEX_INTERVAL_BYTES)
        {
            self.index.push(IndexEntry {
                kafka_offset: h.kafka_base_offset,
                index: h.index,
                pos,
            });
            self.last_indexed_pos = Some(pos.0);
        }
        if let Some(ts) = max_ts.filter(|&ts| ts > self.max_timestamp_ms) {
            self.max_timestamp_ms = ts;
            if self
                .last_timed_pos
                .is_none_or(|p| pos.0 - p >= INDEX_INTERVAL_BYTES)
            {
                let e = TimeEntry {
                    max_timestamp_ms: ts,
                    kafka_offset: h.kafka_base_offset,
                    pos,
                };
                self.time_index.push(e);
                self.last_timed_pos = Some(pos.0);
            }
        }
        self.size_bytes += u64::from(h.frame_len_bytes);
        self.last_index = Some(h.index);
        self.next_offset = h.next_offset();
    }

    /// Whether the segment has no frames.
    pub fn is_empty(&self) -> bool {
        self.last_index.is_none()
    }

    /// Term starts `(first index, term)` within this segment.
    pub fn terms(&self) -> &[(RaftIndex, RaftTerm)] {
        &self.terms
    }

    /// A position at or before the frame containing Kafka offset `o`.
    pub fn locate_offset(&self, o: KafkaOffset) -> FilePos {
        let n = self.index.partition_point(|e| e.kafka_offset <= o);
        n.checked_sub(1).map_or(FilePos(0), |k| self.index[k].pos)
    }

    /// A position at or before the frame with Raft index `i`.
    pub fn locate_index(&self, i: RaftIndex) -> FilePos {
        let n = self.index.partition_point(|e| e.index <= i);
        n.checked_sub(1).map_or(FilePos(0), |k| self.index[k].pos)
    }

    /// A position before which every frame's max timestamp is < `ts`.
    pub fn locate_time(&self, ts: i64) -> FilePos {
        let n = self.time_index.partition_point(|e| e.max_timestamp_ms < ts);
        n.checked_sub(1)
            .map_or(FilePos(0), |k| self.time_index[k].pos)
    }

    /// Encodes the `.index` file.
    pub fn encode_index(&self) -> Vec<u8> {
        let mut b = Vec::with_capacity(64 + self.index.len() * 24 + self.terms.len() * 16);
        b.extend_from_slice(b"SIDX");
        b.extend_from_slice(&1u32.to_le_bytes());
        b.extend_from_slice(&self.size_bytes.to_le_bytes());
        b.extend_from_slice(&self.last_index.map_or(0, |i| i.0).to_le_bytes());
        b.extend_from_slice(&self.next_offset.0.to_le_bytes());
        b.extend_from_slice(&self.max_timestamp_ms.to_le_bytes());
        b.extend_from_slice(&self.created_ms.to_le_bytes());
        b.extend_from_slice(&(self.index.len() as u32).to_le_bytes());
        b.extend_from_slice(&(self.terms.len() as u32).to_le_bytes());
        for e in &self.index {
            b.extend_from_slice(&e.kafka_offset.0.to_le_bytes());
            b.extend_from_slice(&e.index.0.to_le_bytes());
            b.extend_from_slice(&e.pos.0.to_le_bytes());
        }
        for (i, t) in &self.terms {
            b.extend_from_slice(&i.0.to_le_bytes());
            b.extend_from_slice(&t.0.to_le_bytes());
        }
        let crc = crc32c::crc32c(&b);
        b.extend_from_slice(&crc.to_le_bytes());
        b
    }

    /// Encodes the `.timeindex` file.
    pub fn encode_time_index(&self) -> Vec<u8> {
        let mut b = Vec::with_capacity(24 + self.time_index.len() * 24);
        b.extend_from_slice(b"STIX");
        b.extend_from_slice(&1u32.to_le_bytes());
        b.extend_from_slice(&self.size_bytes.to_le_bytes());
        b.extend_from_slice(&(self.time_index.len() as u32).to_le_bytes());
        for e in &self.time_index {
            b.extend_from_slice(&e.max_timestamp_ms.to_le_bytes());
            b.extend_from_slice(&e.kafka_offset.0.to_le_bytes());
            b.extend_from_slice(&e.pos.0.to_le_bytes());
        }
        let crc = crc32c::crc32c(&b);
        b.extend_from_slice(&crc.to_le_bytes());
        b
    }

    /// Decodes both index files of a closed segment whose `.log` is `log_size` bytes.
    /// `None` when either is corrupt or stale (the caller rebuilds by scanning).
    pub fn decode(
        name: SegmentName,
        log_size: u64,
        index: &[u8],
        time: &[u8],
    ) -> Option<SegmentMeta> {
        let mut r = Reader::checked(index, b"SIDX")?;
        if r.u64()? != log_size {
            return None;
        }
        let last = r.u64()?;
        let mut m = SegmentMeta::new(name, 0);
        m.size_bytes = log_size;
        m.last_index = (last != 0).then_some(RaftIndex(last));
        m.next_offset = KafkaOffset(r.i64()?);
        m.max_timestamp_ms = r.i64()?;
        m.created_ms = r.i64()?;
        let n_entries = r.count(24)?;
        let n_terms = r.count(16)?;
        for _ in 0..n_entries {
            let (o, i, p) = (r.i64()?, r.u64()?, r.u64()?);
            m.index.push(IndexEntry {
                kafka_offset: KafkaOffset(o),
                index: RaftIndex(i),
                pos: FilePos(p),
            });
        }
        for _ in 0..n_terms {
            m.terms.push((RaftIndex(r.u64()?), RaftTerm(r.u64()?)));
        }
        let mut t = Reader::checked(time, b"STIX")?;
        if t.u64()? != log_size {
            return None;
        }
        let n = t.count(24)?;
        for _ in 0..n {
            let (ts, o, p) = (t.i64()?, t.i64()?, t.u64()?);
            m.time_index.push(TimeEntry {
                max_timestamp_ms: ts,
                kafka_offset: KafkaOffset(o),
                pos: FilePos(p),
            });
        }
        m.last_indexed_pos = m.index.last().map(|e| e.pos.0);
        m.last_timed_pos = m.time_index.last().map(|e| e.pos.0);
        let sane = m.index.iter().all(|e| e.pos.0 < log_size.max(1))
            && m.index.windows(2).all(|w| w[0].pos < w[1].pos)
            && m.terms.windows(2).all(|w| w[0] < w[1]);
        sane.then_some(m)
    }
}

/// Bounds-checked little-endian reader over a CRC-verified buffer.
struct Reader<'a> {
    rest: &'a [u8],
}

impl<'a> Reader<'a> {
    fn checked(buf: &'a [u8], magic: &[u8; 4]) -> Option<Reader<'a>> {
        let (body, crc) = buf.split_last_chunk::<4>()?;
        if crc32c::crc32c(body) != u32::from_le_bytes(*crc) {
            return None;
        }
        let (m, rest) = body.split_first_chunk::<4>()?;
        let (v, rest) = rest.split_first_chunk::<4>()?;
        (m == magic && u32::from_le_bytes(*v) == 1).then_some(Reader { rest })
    }

    fn take<const N: usize>(&mut self) -> Option<[u8; N]> {
        let (a, rest) = self.rest.split_first_chunk::<N>()?;
        self.rest = rest;
        Some(*a)
    }

    fn u64(&mut self) -> Option<u64> {
        self.take::<8>().map(u64::from_le_bytes)
    }

    fn i64(&mut self) -> Option<i64> {
        self.take::<8>().map(i64::from_le_bytes)
    }

    /// A count of `unit`-byte items, checked against the bytes left before use.
    fn count(&mut self, unit: usize) -> Option<usize> {
        let n = usize::try_from(self.take::<4>().map(u32::from_le_bytes)?).ok()?;
        (n.checked_mul(unit)? <= self.rest.len()).then_some(n)
    }
}
