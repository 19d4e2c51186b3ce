//! The shard's batch cache: the most recent frames of every log on the shard, bounded in
//! bytes, evicted oldest-first across logs.
//!
//! Invariant: for each registered log, the cached frames are a contiguous run of Raft
//! indexes ending at that log's last appended frame (appends push at the back, eviction
//! pops at the front, suffix truncation pops at the back). `used_bytes <= max_bytes`
//! (unless the tails' own chunks alone exceed it), where `used_bytes` is the memory the
//! cached frames keep alive: a frame that is a slice of a tail chunk (`tail_buf`) keeps
//! the whole chunk, so each chunk is charged once, whole, while any of its frames is
//! cached, and such a frame itself costs only its bookkeeping. A tail appends only to its
//! last chunk, so a chunk's cached frames are contiguous in their log's run: the chunk is
//! charged with the first of them that enters and released with the last that leaves,
//! which its neighbours in the run tell (`frame_charge`), with no table of chunks.
//! Lives on one shard (`!Send`); no borrow is held across an `.await`. It also keeps the
//! shard's read-aheads (`read_ahead`), which have their own bound.

use std::cell::RefCell;
use std::collections::{HashMap, VecDeque};

use bytes::Bytes;

use crate::frame::{FrameHeader, FRAME_HEADER_BYTES};
use crate::read_ahead::ReadAheads;
use crate::types::{KafkaOffset, RaftIndex};

/// Default shard batch cache size.
pub const BATCH_CACHE_BYTES_DEFAULT: usize = 64 * 1024 * 1024;

/// Identifies a log's slot in the cache.
pub type LogId = u64;

/// A cached frame: header plus body bytes (base offset and leader epoch already rewritten).
#[derive(Clone, Debug)]
pub struct CachedFrame {
    /// The frame header.
    pub header: FrameHeader,
    /// The frame body.
    pub body: Bytes,
    /// The memory `body` is a slice of, when it is shared with other frames (a tail chunk).
    pub chunk: Option<ChunkCharge>,
}

/// A piece of memory several cached frames may be slices of, charged once.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ChunkCharge {
    /// Identifies the memory while any slice of it is alive (its address).
    pub id: usize,
    /// What it costs the heap.
    pub bytes: usize,
}

#[derive(Default)]
struct Inner {
    max_bytes: usize,
    used_bytes: usize,
    next_log_id: LogId,
    fifo: VecDeque<(LogId, RaftIndex, usize)>,
    logs: HashMap<LogId, VecDeque<CachedFrame>>,
    /// Frames in `logs`, all logs together.
    frames: usize,
    hits: u64,
    misses: u64,
}

/// Shard-wide batch cache shared (by `Rc`) among the shard's logs.
pub struct BatchCache {
    inner: RefCell<Inner>,
    /// The logs' read-aheads (the module `read_ahead`), bounded on their own.
    pub(crate) read_ahead: RefCell<ReadAheads>,
}

/// Counters for metrics.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CacheStats {
    /// Bytes cached.
    pub used_bytes: usize,
    /// Reads fully served from the cache.
    pub hits: u64,
    /// Reads that went to disk.
    pub misses: u64,
    /// Read-aheads begun for sequential readers from disk (`read_ahead`).
    pub read_aheads: u64,
    /// Read-aheads that served the read they were begun for.
    pub read_aheads_used: u64,
    /// Memory the read-aheads hold now: the buffers of reads under way and of leftover
    /// frames, counted by their size class (`io::read_buffer_bytes`).
    pub read_ahead_bytes: usize,
}

/// Heap bytes the allocator spends per allocation beyond its size (glibc: a chunk header
/// and 16-byte rounding).
const ALLOCATION_OVERHEAD_BYTES: usize = 32;
/// The shared header `bytes` allocates when a frame buffer is first cloned (the cached
/// body is a clone of the appended frame).
const SHARED_HEADER_BYTES: usize = 24;

/// What a cached frame costs the heap, so that `max_bytes` bounds memory rather than
/// payload: small frames cost about twice their body (in the one-hour cluster soak of
/// issue 24, one record per batch, a cache counted by body bytes held 1.7-1.8 times its
/// count in heap). The body is a slice of the tail memory the frame was built in
/// (`tail_buf`, header included) with a `bytes` header of its own; the frame sits in its log's
/// `VecDeque`, whose spare capacity can equal its length, and has an entry in `fifo`,
/// which holds up to twice as many entries as frames (`compact_fifo`) plus spare capacity.
/// A frame that is a slice of a chunk costs its bookkeeping here; its bytes are the
/// chunk's, charged by `frame_charge`.
fn cost(f: &CachedFrame) -> usize {
    let bytes = if f.chunk.is_some() {
        0
    } else {
        FRAME_HEADER_BYTES + f.body.len()
    };
    bytes
        + 2 * ALLOCATION_OVERHEAD_BYTES
        + SHARED_HEADER_BYTES
        + 2 * std::mem::size_of::<CachedFrame>()
        + 4 * std::mem::size_of::<(LogId, RaftIndex, usize)>()
}

impl BatchCache {
    /// A cache bounded at `max_bytes`.
    pub fn new(max_bytes: usize) -> BatchCache {
        BatchCache {
            inner: RefCell::new(Inner {
                max_bytes,
                ..Inner::default()
            }),
            read_ahead: RefCell::new(ReadAheads::default()),
        }
    }

    /// Registers a log; its frames are dropped by [`BatchCache::unregister`].
    pub fn register(&self) -> LogId {
        let mut i = self.inner.borrow_mut();
        i.next_log_id += 1;
        let id = i.next_log_id;
        i.logs.insert(id, VecDeque::new());
        id
    }

    /// The largest chunk a log on this shard builds frames in (`tail_buf::chunk_bytes_max`).
    pub(crate) fn tail_chunk_bytes_max(&self) -> usize {
        let i = self.inner.borrow();
        crate::tail_buf::chunk_bytes_max(i.max_bytes, i.logs.len())
    }

    /// Drops every frame of `log`.
    pub fn unregister(&self, log: LogId) {
        self.read_ahead.borrow_mut().remove(log);
        let mut i = self.inner.borrow_mut();
        if let Some(q) = i.logs.remove(&log) {
            let mut prev = None;
            for f in &q {
                i.used_bytes -= frame_charge(f, prev);
                prev = Some(f);
            }
            i.frames -= q.len();
        }
    }

    /// Caches the frame just appended to `log`. Frames too large for the cache are not
    /// cached, and then the log's cached run is cleared to keep it contiguous.
    pub fn insert(&self, log: LogId, frame: CachedFrame) {
        let mut guard = self.inner.borrow_mut();
        let i = &mut *guard;
        let alone_bytes = cost(&frame)
            + frame
                .chunk
                .map_or(0, |_| FRAME_HEADER_BYTES + frame.body.len());
        if alone_bytes > i.max_bytes / 4 {
            drop(guard);
            self.truncate_from(log, RaftIndex(0));
            return;
        }
        let Some(q) = i.logs.get(&log) else {
            return;
        };
        if let Some(back) = q.back() {
            assert_eq!(
                back.header.index.next(),
                frame.header.index,
                "cache run not contiguous"
            );
        }
        let mut back_shares = shares_chunk(q.back(), &frame);
        let c = loop {
            let c = charge_beside(&frame, back_shares);
            if i.used_bytes + c <= i.max_bytes {
                break c;
            }
            match evict_oldest(i) {
                Some((from, emptied)) => back_shares &= !(from == log && emptied),
                None => break c,
            }
        };
        i.fifo.push_back((log, frame.header.index, c));
        i.used_bytes += c;
        if let Some(q) = i.logs.get_mut(&log) {
            q.push_back(frame);
            i.frames += 1;
        }
        compact_fifo(i);
    }

    /// Drops frames of `log` with index >= `from` (suffix truncation).
    pub fn truncate_from(&self, log: LogId, from: RaftIndex) {
        let mut i = self.inner.borrow_mut();
        let Some(q) = i.logs.get_mut(&log) else {
            return;
        };
        let mut freed = 0;
        let mut cut = 0;
        while q.back().is_some_and(|f| f.header.index >= from) {
            if let Some(f) = q.pop_back() {
                freed += frame_charge(&f, q.back());
                cut += 1;
            }
        }
        i.used_bytes -= freed;
        i.frames -= cut;
    }

    /// Drops frames of `log` with index < `below` (prefix truncation).
    pub fn truncate_below(&self, log: LogId, below: RaftIndex) {
        let mut i = self.inner.borrow_mut();
        let Some(q) = i.logs.get_mut(&log) else {
            return;
        };
        let mut freed = 0;
        let mut cut = 0;
        while q.front().is_some_and(|f| f.header.index < below) {
            if let Some(f) = q.pop_front() {
                freed += frame_charge(&f, q.front());
                cut += 1;
            }
        }
        i.used_bytes -= freed;
        i.frames -= cut;
    }

    /// If the cache holds every frame of `log` from the one containing Kafka offset
    /// `from` to the log end, calls `take` on those data frames in order until it returns
    /// false, and returns true. Otherwise returns false (the caller reads from disk).
    pub fn read_from_offset(
        &self,
        log: LogId,
        from: KafkaOffset,
        mut take: impl FnMut(&CachedFrame) -> bool,
    ) -> bool {
        self.serve(
            log,
            |f| f.header.kafka_base_offset <= from,
            |f| f.header.next_offset() <= from,
            |f| !f.header.kind.has_kafka_batch() || take(f),
        )
    }

    /// Like [`BatchCache::read_from_offset`] by Raft index, all kinds of frame.
    pub fn read_from_index(
        &self,
        log: LogId,
        from: RaftIndex,
        take: impl FnMut(&CachedFrame) -> bool,
    ) -> bool {
        self.serve(
            log,
            |f| f.header.index <= from,
            |f| f.header.index < from,
            take,
        )
    }

    /// Serves a read when the first cached frame of `log` satisfies `covers` (so every
    /// frame the read needs is cached): skips frames while `before`, then calls `take`
    /// until it returns false. Counts a hit or a miss.
    fn serve(
        &self,
        log: LogId,
        covers: impl Fn(&CachedFrame) -> bool,
        before: impl Fn(&CachedFrame) -> bool,
        mut take: impl FnMut(&CachedFrame) -> bool,
    ) -> bool {
        let mut i = self.inner.borrow_mut();
        let served = match i.logs.get(&log) {
            Some(q) if q.front().is_some_and(&covers) => {
                let start = q.partition_point(&before);
                for f in q.range(start..) {
                    if !take(f) {
                        break;
                    }
                }
                true
            }
            _ => false,
        };
        if served {
            i.hits += 1;
        } else {
            i.misses += 1;
        }
        served
    }

    /// Current counters.
    pub fn stats(&self) -> CacheStats {
        let i = self.inner.borrow();
        CacheStats {
            used_bytes: i.used_bytes,
            hits: i.hits,
            misses: i.misses,
            read_aheads: self.read_ahead.borrow().begun,
            read_aheads_used: self.read_ahead.borrow().used,
            read_ahead_bytes: self.read_ahead.borrow().bytes(),
        }
    }
}

/// Whether `f` is a slice of the same chunk as `neighbour`, its neighbour in its log's run.
fn shares_chunk(neighbour: Option<&CachedFrame>, f: &CachedFrame) -> bool {
    matches!(
        (neighbour.and_then(|n| n.chunk), f.chunk),
        (Some(a), Some(b)) if a.id == b.id
    )
}

/// What `f` counts in `used_bytes`: its cost, and its chunk's unless a neighbour in its
/// log's run (the one that stays when `f` enters or leaves) holds that chunk too.
fn frame_charge(f: &CachedFrame, neighbour: Option<&CachedFrame>) -> usize {
    charge_beside(f, shares_chunk(neighbour, f))
}

/// `frame_charge` when whether a neighbour shares `f`'s chunk is known.
fn charge_beside(f: &CachedFrame, neighbour_shares: bool) -> usize {
    let chunk = if neighbour_shares {
        0
    } else {
        f.chunk.map_or(0, |ch| ch.bytes)
    };
    cost(f) + chunk
}

/// Evicts the globally oldest cached frame: its log and whether that log's run is now
/// empty; `None` when nothing is left to evict.
fn evict_oldest(i: &mut Inner) -> Option<(LogId, bool)> {
    while let Some((log, index, _)) = i.fifo.pop_front() {
        let Some(q) = i.logs.get_mut(&log) else {
            continue;
        };
        if q.front().is_some_and(|f| f.header.index == index) {
            if let Some(f) = q.pop_front() {
                i.used_bytes -= frame_charge(&f, q.front());
                i.frames -= 1;
            }
            return Some((log, q.is_empty()));
        }
        // Stale entry: the frame was truncated or its log unregistered.
    }
    None
}

/// Drops stale FIFO entries once they outnumber live frames, bounding the FIFO's length.
fn compact_fifo(i: &mut Inner) {
    if i.fifo.len() <= 2 * i.frames + 1024 {
        return;
    }
    let logs = &i.logs;
    i.fifo.retain(|(log, index, _)| {
        logs.get(log).is_some_and(|q| {
            q.front().is_some_and(|f| f.header.index <= *index)
                && q.back().is_some_and(|b| b.header.index >= *index)
        })
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::frame::{FrameHeader, FrameKind};
    use crate::types::RaftTerm;

    fn frame(index: u64, base: i64, body_len: usize) -> CachedFrame {
        CachedFrame {
            header: FrameHeader {
                frame_len_bytes: 48 + body_len as u32,
                body_crc: 0,
                kind: FrameKind::Data,
                term: RaftTerm(1),
                index: RaftIndex(index),
                kafka_base_offset: KafkaOffset(base),
                offset_count: 10,
            },
            body: Bytes::from(vec![0u8; body_len]),
            chunk: None,
        }
    }

    fn offsets_from(c: &BatchCache, log: LogId, from: i64) -> Option<Vec<i64>> {
        let mut out = Vec::new();
        c.read_from_offset(log, KafkaOffset(from), |f| {
            out.push(f.header.kafka_base_offset.0);
            true
        })
        .then_some(out)
    }

    #[test]
    fn bounded_and_evicts_oldest_across_logs() {
        let per = cost(&frame(1, 0, 1000));
        let c = BatchCache::new(per * 10);
        let a = c.register();
        let b = c.register();
        for i in 0..8 {
            c.insert(a, frame(i + 1, i as i64 * 10, 1000));
        }
        for i in 0..8 {
            c.insert(b, frame(i + 1, i as i64 * 10, 1000));
        }
        assert!(c.stats().used_bytes <= per * 10);
        // a's six oldest frames were evicted first.
        assert_eq!(offsets_from(&c, a, 0), None);
        assert_eq!(offsets_from(&c, a, 65), Some(vec![60, 70]));
        assert_eq!(
            offsets_from(&c, b, 0),
            Some((0..8).map(|i| i * 10).collect())
        );
        c.truncate_from(b, RaftIndex(5));
        assert_eq!(offsets_from(&c, b, 0), Some(vec![0, 10, 20, 30]));
        c.unregister(a);
        c.unregister(b);
        assert_eq!(c.stats().used_bytes, 0);
    }

    #[test]
    fn a_chunk_is_charged_once_while_any_of_its_frames_is_cached() {
        let in_chunk = |index: u64, id: usize| CachedFrame {
            chunk: Some(ChunkCharge {
                id,
                bytes: 64 * 1024,
            }),
            ..frame(index, index as i64 * 10, 1000)
        };
        let per = cost(&in_chunk(1, 1));
        let c = BatchCache::new(1 << 20);
        let a = c.register();
        c.insert(a, in_chunk(1, 1));
        assert_eq!(c.stats().used_bytes, 64 * 1024 + per);
        c.insert(a, in_chunk(2, 1));
        c.insert(a, in_chunk(3, 2));
        assert_eq!(c.stats().used_bytes, 2 * 64 * 1024 + 3 * per);
        // Frame 3 leaves, and with it chunk 2; chunk 1 stays while frame 1 or 2 is cached.
        c.truncate_from(a, RaftIndex(3));
        assert_eq!(c.stats().used_bytes, 64 * 1024 + 2 * per);
        c.truncate_below(a, RaftIndex(2));
        assert_eq!(c.stats().used_bytes, 64 * 1024 + per);
        c.unregister(a);
        assert_eq!(c.stats().used_bytes, 0);

        // Bounded by chunks: three chunks of 64 KiB in a cache of 150 KiB keep two.
        let c = BatchCache::new(150 * 1024);
        let b = c.register();
        for index in 1..=6u64 {
            c.insert(b, in_chunk(index, index.div_ceil(2) as usize));
        }
        assert!(c.stats().used_bytes <= 150 * 1024);
        assert_eq!(offsets_from(&c, b, 0), None);
        assert_eq!(offsets_from(&c, b, 30), Some(vec![30, 40, 50, 60]));

        // Room for a chunk and one frame: the second frame of the chunk evicts the first,
        // and then it holds the chunk itself.
        let c = BatchCache::new(64 * 1024 + per + per / 2);
        let d = c.register();
        c.insert(d, in_chunk(1, 7));
        c.insert(d, in_chunk(2, 7));
        assert_eq!(offsets_from(&c, d, 20), Some(vec![20]));
        assert_eq!(c.stats().used_bytes, 64 * 1024 + per);
        assert_eq!(recount(&c), 64 * 1024 + per);
    }

    /// `used_bytes` recomputed from what is cached: every frame's cost and each chunk once.
    fn recount(c: &BatchCache) -> usize {
        let i = c.inner.borrow();
        let mut chunks = std::collections::HashSet::new();
        let mut total = 0;
        for f in i.logs.values().flatten() {
            total += cost(f);
            if let Some(ch) = f.chunk {
                if chunks.insert(ch.id) {
                    total += ch.bytes;
                }
            }
        }
        assert_eq!(i.frames, i.logs.values().map(VecDeque::len).sum::<usize>());
        total
    }

    #[test]
    fn chunk_charges_match_what_is_cached_through_any_operations() {
        use rand::{Rng, SeedableRng};
        for seed in 0..50u64 {
            let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
            let c = BatchCache::new(rng.gen_range(20_000..200_000));
            let logs: Vec<LogId> = (0..3).map(|_| c.register()).collect();
            // Per log: next index, and the chunk its tail appends to.
            let mut next = [1u64; 3];
            let mut chunk = [0usize; 3];
            let mut chunk_ids = 0usize;
            for _ in 0..400 {
                let k = rng.gen_range(0..3);
                match rng.gen_range(0..10) {
                    0 => {
                        let back = rng.gen_range(1..=next[k]);
                        c.truncate_from(logs[k], RaftIndex(back));
                        next[k] = back;
                        // The tail starts a new chunk after a truncation.
                        chunk[k] = 0;
                    }
                    1 => c.truncate_below(logs[k], RaftIndex(rng.gen_range(1..=next[k]))),
                    _ => {
                        if chunk[k] == 0 || rng.gen_range(0..4) == 0 {
                            chunk_ids += 1;
                            chunk[k] = chunk_ids;
                        }
                        let f = CachedFrame {
                            chunk: Some(ChunkCharge {
                                id: chunk[k],
                                bytes: 8192,
                            }),
                            ..frame(next[k], next[k] as i64 * 10, rng.gen_range(0..3000))
                        };
                        c.insert(logs[k], f);
                        next[k] += 1;
                    }
                }
                assert_eq!(c.stats().used_bytes, recount(&c), "seed {seed}");
                assert!(c.stats().used_bytes <= c.inner.borrow().max_bytes);
            }
            for log in logs {
                c.unregister(log);
            }
            assert_eq!(c.stats().used_bytes, 0);
        }
    }
}
