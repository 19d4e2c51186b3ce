//! A segment's unflushed bytes, shared between the log and the flush in flight, built in
//! place: an append writes its frame straight into the tail's aligned memory (one copy of
//! the batch, from the request into that memory) and gets back the frame as a `Bytes`
//! slice of it, which the batch cache keeps; a flush writes the tail to disk from that same
//! memory (no copy into a separate DMA buffer) when its range lies in one chunk.
//!
//! The memory is a list of chunks ([`AlignedMem`]); a chunk starts at a block-aligned tail
//! position and holds the tail from there until the next chunk starts. A new chunk begins
//! with a copy of the partial last block (at most one block) so that a flush, which always
//! rewrites that block whole, finds it in the same chunk.
//!
//! Invariants:
//! - A byte of a chunk is written once, before the frame holding it is handed out, and never
//!   again: appends only write past the end of the last chunk, and after a truncation the
//!   next append starts a new chunk (`sealed`) instead of writing over the cut frames,
//!   which readers may still hold.
//! - While a flush holds a [`FlushBytes`], the bytes `[0, data_len)` it was made with do not
//!   change: appends only add at the end, and the two operations that remove bytes —
//!   dropping the front once a flush completes, and truncation — never run while a flush is
//!   in flight (`Log::begin_flush` and truncation refuse each other). Appends during a
//!   flush may write past its data, into the zero padding it writes from the same memory:
//!   those bytes on disk are past the flushed length, which recovery treats as a torn tail
//!   and the next flush rewrites.
//! - A tail position is block-aligned in the file when it is block-aligned here: the tail
//!   starts at a block boundary (`Log` keeps `base_pos` aligned while a segment takes
//!   appends) and positions never shift.

use std::cell::RefCell;
use std::collections::VecDeque;
use std::ops::Range;
use std::rc::Rc;

use bytes::{Bytes, BytesMut};

use crate::cache::ChunkCharge;
use crate::io::{AppendMem, WriteSource, WRITE_ALIGN_BYTES};

/// The write alignment as a memory size.
const BLOCK_BYTES: usize = WRITE_ALIGN_BYTES as usize;
/// The largest chunk made for ordinary appends (a frame larger than this gets a chunk of
/// its own size); chunks double from one block up to this (or the lower cap of
/// [`chunk_bytes_max`]) while a partition keeps filling them.
pub(crate) const CHUNK_BYTES_MAX: usize = 256 * 1024;
/// Divides the batch cache's bound per log into the chunk cap (see [`chunk_bytes_max`]).
const CACHE_SHARE_PER_CHUNK: usize = 8;

/// The largest chunk for a tail whose frames go to a batch cache bounded at `cache_bytes`
/// that serves `logs` logs. Cached frames are slices of their chunks, so a chunk outlives
/// the tail's use of it until the cache evicts its last frame: each log can hold about two
/// chunks the cache's byte bound does not count (the tail chunk's spare room, and the part
/// of its oldest cached chunk whose frames were already evicted). Chunks of at most an
/// eighth of the cache's share per log keep that within a quarter of the bound, so many
/// partitions on a shard get small chunks (whose appends copy more: a new chunk starts
/// with the partial block, and a flush spanning chunks is copied) and few get large ones.
pub(crate) fn chunk_bytes_max(cache_bytes: usize, logs: usize) -> usize {
    if cache_bytes == 0 {
        // No cache: nothing outlives the tail's use of a chunk.
        return CHUNK_BYTES_MAX;
    }
    let share = cache_bytes / (CACHE_SHARE_PER_CHUNK * logs.max(1));
    align_down(share.clamp(BLOCK_BYTES, CHUNK_BYTES_MAX))
}
/// A chunk with more room than this left unused when the tail goes quiet (everything
/// flushed) is swapped for a one-block chunk holding the partial block, so that idle
/// partitions hold a block each rather than a large chunk.
const QUIET_SPARE_BYTES_MAX: usize = 16 * 1024;

/// One piece of aligned memory and the tail positions it holds.
#[derive(Debug)]
struct Chunk {
    mem: AppendMem,
    /// Tail position of the memory's first byte.
    start: usize,
    /// Bytes of the memory holding the tail: positions `[start, start + len)`.
    len: usize,
    /// Takes no more appends (a truncation cut frames in it).
    sealed: bool,
}

impl Chunk {
    fn end(&self) -> usize {
        self.start + self.len
    }
}

/// The chunks and the tail positions they hold.
#[derive(Debug, Default)]
struct Chunks {
    /// In position order; chunk `k` holds `[start_k, start_{k+1})`, the last `[start, end)`.
    chunks: VecDeque<Chunk>,
    /// Tail position of the first byte held (earlier ones were dropped).
    front: usize,
    /// Tail position after the last byte.
    end: usize,
    /// Capacity of the next chunk (doubles up to `CHUNK_BYTES_MAX`).
    next_cap: usize,
}

impl Chunks {
    /// Where chunk `k`'s authority ends.
    fn authority_end(&self, k: usize) -> usize {
        self.chunks.get(k + 1).map_or(self.end, |next| next.start)
    }

    /// Calls `f` with each chunk's memory range holding tail positions `range`, in order.
    fn each_in(&self, range: Range<usize>, mut f: impl FnMut(&Chunk, Range<usize>)) {
        for (k, c) in self.chunks.iter().enumerate() {
            let (a, b) = (
                range.start.max(c.start),
                range.end.min(self.authority_end(k)),
            );
            if a < b {
                f(c, a - c.start..b - c.start);
            }
        }
    }

    /// Copies tail positions `range` into `dst`.
    fn copy_out(&self, range: Range<usize>, dst: &mut [u8]) {
        let mut at = 0usize;
        self.each_in(range, |c, r| {
            let n = r.len();
            dst[at..at + n].copy_from_slice(c.mem.read(r));
            at += n;
        });
    }

    /// A new chunk holding tail positions `start..self.end` (a copy), with room for at
    /// least `cap` bytes in all.
    fn chunk_from(&self, start: usize, cap: usize) -> Chunk {
        let mut mem = AppendMem::new(cap);
        self.each_in(start..self.end, |c, r| {
            mem.append_copy(c.mem.read(r));
        });
        Chunk {
            len: mem.written(),
            mem,
            start,
            sealed: false,
        }
    }

    /// Makes the last chunk one that can take `n` more bytes: a new chunk, starting at the
    /// partial block's start with a copy of it, when the last is sealed or full.
    /// New chunks hold at most `cap_max` bytes unless `n` needs more.
    fn room_for(&mut self, n: usize, cap_max: usize) {
        if let Some(last) = self.chunks.back() {
            if !last.sealed && last.end() == self.end && last.mem.room() >= n {
                return;
            }
        }
        let start = align_down(self.end).max(self.front);
        let cap_max = cap_max.min(CHUNK_BYTES_MAX);
        let cap = (self.end - start + n).max(self.next_cap.min(cap_max));
        let chunk = self.chunk_from(start, cap);
        self.next_cap = (chunk.mem.cap() * 2).min(cap_max);
        self.chunks.push_back(chunk);
    }
}

/// Rounds a tail position down to the block.
fn align_down(pos: usize) -> usize {
    pos - pos % BLOCK_BYTES
}

/// The bytes of a segment from its tail's `base_pos`; cloning shares them.
#[derive(Debug, Default)]
pub(crate) struct TailBuf(Rc<RefCell<Chunks>>);

impl TailBuf {
    /// A tail holding `bytes` (the partial block read back at recovery or truncation).
    pub(crate) fn from_bytes(bytes: Bytes) -> Self {
        let t = Self::default();
        t.extend(&bytes);
        t
    }

    pub(crate) fn len(&self) -> usize {
        let c = self.0.borrow();
        c.end - c.front
    }

    /// Appends `n` bytes that `build` appends to the tail's memory (exactly `n`, with
    /// [`AppendMem::append_copy`], patching them before it returns if it likes), and
    /// returns them as a `Bytes` sharing that memory, with what that memory costs the
    /// batch cache while it holds the bytes, and what `build` returned. A new
    /// chunk, if one is needed, holds at most `chunk_bytes_max` (see [`chunk_bytes_max`])
    /// unless the `n` bytes need more.
    pub(crate) fn append_with<R>(
        &self,
        n: usize,
        chunk_bytes_max: usize,
        build: impl FnOnce(&mut AppendMem) -> R,
    ) -> (Bytes, ChunkCharge, R) {
        let mut c = self.0.borrow_mut();
        c.room_for(n, chunk_bytes_max);
        let last = c.chunks.back_mut().expect("room_for leaves a last chunk");
        let at = last.mem.written();
        let out = build(&mut last.mem);
        assert_eq!(
            last.mem.written(),
            at + n,
            "an append of {n} bytes wrote another length"
        );
        last.len += n;
        let frame = last.mem.bytes(at..at + n);
        let charge = ChunkCharge {
            id: last.mem.id(),
            // An aligned allocation can waste up to its alignment.
            bytes: last.mem.cap() + BLOCK_BYTES,
        };
        c.end += n;
        (frame, charge, out)
    }

    /// Appends a copy of `bytes`.
    pub(crate) fn extend(&self, bytes: &[u8]) {
        if !bytes.is_empty() {
            self.append_with(bytes.len(), CHUNK_BYTES_MAX, |mem| {
                mem.append_copy(bytes);
            });
        }
    }

    /// Keeps the first `len` bytes (all when it holds fewer). The next append starts a
    /// new chunk: the cut bytes may be held by readers.
    pub(crate) fn truncate(&self, len: usize) {
        let mut c = self.0.borrow_mut();
        let new_end = c.front + len;
        if new_end >= c.end {
            return;
        }
        while c.chunks.len() > 1 && c.chunks.back().is_some_and(|l| l.start >= new_end) {
            c.chunks.pop_back();
        }
        if let Some(last) = c.chunks.back_mut() {
            last.len = new_end.saturating_sub(last.start).min(last.len);
            last.sealed = true;
        }
        c.end = new_end;
    }

    /// Drops the first `n` bytes (fewer when it holds fewer). When that leaves less than a
    /// block in a large chunk (the tail went quiet), those bytes move to a one-block chunk
    /// and the large one is left to the frames readers hold.
    pub(crate) fn drop_front(&self, n: usize) {
        let mut c = self.0.borrow_mut();
        c.front += n.min(c.end - c.front);
        while c.chunks.len() > 1 && c.chunks.get(1).is_some_and(|next| next.start <= c.front) {
            c.chunks.pop_front();
        }
        let quiet = c.end - c.front < BLOCK_BYTES
            && c.chunks.len() == 1
            && c.chunks
                .back()
                .is_some_and(|l| l.mem.room() > QUIET_SPARE_BYTES_MAX);
        if quiet {
            // All it holds (less than a block, starting the block while the segment takes
            // appends: `front` is then aligned).
            let chunk = c.chunk_from(c.front, BLOCK_BYTES);
            c.chunks.clear();
            c.chunks.push_back(chunk);
            c.next_cap = BLOCK_BYTES;
        }
    }

    /// The bytes in `range`: shared, not copied, when one chunk holds them all.
    pub(crate) fn slice(&self, range: Range<usize>) -> Bytes {
        let c = self.0.borrow();
        assert!(
            range.start <= range.end && range.end <= c.end - c.front,
            "range {range:?} of a tail of {}",
            c.end - c.front
        );
        let abs = c.front + range.start..c.front + range.end;
        let mut parts = Vec::new();
        c.each_in(abs.clone(), |chunk, r| parts.push(chunk.mem.bytes(r)));
        match parts.len() {
            0 => Bytes::new(),
            1 => parts.pop().unwrap_or_default(),
            _ => {
                let mut out = BytesMut::zeroed(abs.len());
                c.copy_out(abs, &mut out);
                out.freeze()
            }
        }
    }

    /// The first `data_len` bytes, to be written as `write_len` bytes (zeros after them).
    pub(crate) fn for_flush(&self, data_len: usize, write_len: usize) -> FlushBytes {
        let c = self.0.borrow();
        assert!(
            data_len <= c.end - c.front && data_len <= write_len,
            "flush of {data_len} bytes from a tail of {} into {write_len}",
            c.end - c.front
        );
        FlushBytes {
            buf: Self(Rc::clone(&self.0)),
            from: c.front,
            data_len,
            write_len,
        }
    }
}

/// What one flush writes of a tail: its first `data_len` bytes, zero-padded to
/// `write_len` (the write alignment).
pub(crate) struct FlushBytes {
    buf: TailBuf,
    /// Tail position of the first byte.
    from: usize,
    data_len: usize,
    write_len: usize,
}

impl FlushBytes {
    pub(crate) fn write_len(&self) -> usize {
        self.write_len
    }

    /// The memory to write from as it is, when the last chunk holds all of the data at an
    /// aligned place and has room for the padding (zeroed now); `None` otherwise (then
    /// [`FlushBytes::fill`] a buffer).
    pub(crate) fn in_place(&self) -> Option<WriteSource> {
        let mut c = self.buf.0.borrow_mut();
        let last = c.chunks.back_mut()?;
        let (data_end, write_end) = (self.from + self.data_len, self.from + self.write_len);
        let fits = last.start <= self.from
            && self.from % BLOCK_BYTES == 0
            && (self.from - last.start) % BLOCK_BYTES == 0
            && !last.sealed
            && last.end() >= data_end
            && write_end - last.start <= last.mem.cap();
        if !fits {
            return None;
        }
        let at = self.from - last.start;
        // Frames appended since the flush began may fill part of the padding: the write
        // then carries them past `data_len` (the module's second invariant); the rest of it
        // is zeros.
        last.mem.zero_to(write_end - last.start);
        Some(last.mem.write_source(at..at + self.write_len))
    }

    /// Fills the write buffer `dst` (`write_len` bytes).
    pub(crate) fn fill(&self, dst: &mut [u8]) {
        let c = self.buf.0.borrow();
        // The module's invariant: nothing removed bytes under a flush.
        assert!(
            c.front <= self.from && c.end >= self.from + self.data_len,
            "tail bytes removed under a flush"
        );
        c.copy_out(
            self.from..self.from + self.data_len,
            &mut dst[..self.data_len],
        );
        dst[self.data_len..].fill(0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A tail of the given chunks.
    fn tail_of(chunks: &[&'static [u8]]) -> TailBuf {
        let t = TailBuf::default();
        for c in chunks {
            t.extend(c);
        }
        t
    }

    #[test]
    fn a_flush_writes_the_bytes_it_was_begun_with_padded_with_zeros() {
        let tail = tail_of(&[b"ab", b"c"]);
        let flush = tail.for_flush(3, 8);
        // An append after the flush began is not part of it.
        tail.extend(b"def");
        let mut dst = [0xff; 8];
        flush.fill(&mut dst);
        assert_eq!(&dst, b"abc\0\0\0\0\0");
        assert_eq!(flush.write_len(), 8);
    }

    #[test]
    fn the_front_is_dropped_and_ranges_read() {
        let tail = tail_of(&[b"0123", b"456", b"789"]);
        tail.drop_front(5);
        assert_eq!(tail.len(), 5);
        assert_eq!(&tail.slice(0..5)[..], b"56789");
        assert_eq!(&tail.slice(1..3)[..], b"67");
        tail.truncate(2);
        assert_eq!(tail.len(), 2);
        assert_eq!(&tail.slice(0..2)[..], b"56");
        tail.drop_front(10);
        assert_eq!(tail.len(), 0);
        assert!(tail.slice(0..0).is_empty());
    }

    #[test]
    fn chunks_shrink_as_more_logs_share_the_cache() {
        let cache_bytes = 64 << 20;
        assert_eq!(chunk_bytes_max(cache_bytes, 6), CHUNK_BYTES_MAX);
        assert_eq!(chunk_bytes_max(cache_bytes, 100), 80 * 1024);
        assert_eq!(chunk_bytes_max(cache_bytes, 2000), BLOCK_BYTES);
        assert_eq!(chunk_bytes_max(cache_bytes, 0), CHUNK_BYTES_MAX);
        assert_eq!(chunk_bytes_max(0, 2000), CHUNK_BYTES_MAX);
        // A tail capped at a block holds chunks of about a block and the frame each
        // began with, and its bytes stay right across them.
        let tail = TailBuf::default();
        let mut frames = Vec::new();
        for k in 0..100u8 {
            let (frame, _, ()) = tail.append_with(1000, BLOCK_BYTES, |m| {
                m.append_copy(&[k; 1000]);
            });
            frames.push(frame);
        }
        assert!(tail
            .0
            .borrow()
            .chunks
            .iter()
            .all(|c| c.mem.cap() <= 2 * BLOCK_BYTES));
        for (k, frame) in frames.iter().enumerate() {
            assert_eq!(&frame[..], &[k as u8; 1000][..]);
            assert_eq!(tail.slice(k * 1000..(k + 1) * 1000), frame);
        }
    }

    #[test]
    fn a_range_inside_one_chunk_is_that_chunk_not_a_copy() {
        let tail = tail_of(&[b"xyz"]);
        let (frame, _, ()) = tail.append_with(100, CHUNK_BYTES_MAX, |m| {
            m.append_copy(&[5u8; 100]);
        });
        let s = tail.slice(13..53);
        assert_eq!(s.as_ptr(), frame[10..].as_ptr());
        assert_eq!(&s[..], &[5u8; 40][..]);
    }

    #[test]
    fn a_flush_writes_from_the_frames_memory_zero_padded() {
        let tail = TailBuf::default();
        let (frame, _, ()) = tail.append_with(5000, CHUNK_BYTES_MAX, |m| {
            m.append_copy(&[7u8; 5000]);
        });
        let flush = tail.for_flush(5000, 8192);
        let src = flush.in_place().expect("one chunk holds it");
        let written = src.as_slice();
        assert_eq!(written.len(), 8192);
        assert_eq!(
            written.as_ptr(),
            frame.as_ptr(),
            "the frame's memory itself"
        );
        assert!(written[..5000].iter().all(|&b| b == 7));
        assert!(written[5000..].iter().all(|&b| b == 0), "zero padding");
    }

    #[test]
    fn frames_handed_out_never_change_through_truncation_and_appends() {
        let tail = TailBuf::default();
        let (a, _, ()) = tail.append_with(3000, CHUNK_BYTES_MAX, |m| {
            m.append_copy(&[1u8; 3000]);
        });
        let (b, _, ()) = tail.append_with(3000, CHUNK_BYTES_MAX, |m| {
            m.append_copy(&[2u8; 3000]);
        });
        tail.truncate(3000);
        let (c, _, ()) = tail.append_with(3000, CHUNK_BYTES_MAX, |m| {
            m.append_copy(&[3u8; 3000]);
        });
        assert!(a.iter().all(|&x| x == 1));
        assert!(
            b.iter().all(|&x| x == 2),
            "a cut frame a reader holds is intact"
        );
        assert!(c.iter().all(|&x| x == 3));
        assert_ne!(
            c.as_ptr(),
            b.as_ptr(),
            "the append after a cut went elsewhere"
        );
        let mut dst = vec![0xff; 8192];
        tail.for_flush(6000, 8192).fill(&mut dst);
        assert!(dst[..3000].iter().all(|&x| x == 1));
        assert!(dst[3000..6000].iter().all(|&x| x == 3));
        // The new chunk began at the partial block: a flush from it is in place.
        let src = tail.for_flush(6000, 8192).in_place().expect("one chunk");
        assert_eq!(src.len(), 8192);
    }

    #[test]
    fn a_quiet_tail_keeps_one_block_not_a_large_chunk() {
        let tail = TailBuf::default();
        for _ in 0..40 {
            tail.extend(&[9u8; 4000]);
        }
        let held = tail.len();
        tail.drop_front(held - held % BLOCK_BYTES);
        let c = tail.0.borrow();
        assert_eq!(c.chunks.len(), 1);
        assert_eq!(c.chunks[0].mem.cap(), BLOCK_BYTES);
        drop(c);
        assert_eq!(
            &tail.slice(0..tail.len())[..],
            &vec![9u8; held % BLOCK_BYTES][..]
        );
    }

    /// Every sequence of appends, drops, truncations, reads and flush fills agrees with a
    /// plain byte vector doing the same.
    #[test]
    fn it_behaves_as_one_byte_vector() {
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move |n: usize| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            usize::try_from(seed % (n as u64)).unwrap_or(0)
        };
        let tail = TailBuf::default();
        let mut model: Vec<u8> = Vec::new();
        for step in 0..20_000 {
            match next(5) {
                0 | 1 => {
                    let n = next(40);
                    let b: Vec<u8> = (0..n).map(|i| (step + i) as u8).collect();
                    model.extend_from_slice(&b);
                    tail.extend(&b);
                }
                2 => {
                    let n = next(model.len() + 3);
                    model.drain(..n.min(model.len()));
                    tail.drop_front(n);
                }
                3 => {
                    let n = next(model.len() + 3);
                    model.truncate(n);
                    tail.truncate(n);
                }
                _ => {
                    let a = next(model.len() + 1);
                    let b = a + next(model.len() - a + 1);
                    assert_eq!(&tail.slice(a..b)[..], &model[a..b], "step {step}");
                    let mut dst = vec![0xff; b + 7];
                    let flush = tail.for_flush(b, b + 7);
                    flush.fill(&mut dst);
                    assert_eq!(&dst[..b], &model[..b], "step {step}");
                    assert!(dst[b..].iter().all(|&x| x == 0));
                    // A flush of everything, from the tail's own memory: the same bytes.
                    let all = tail.for_flush(model.len(), model.len() + 7);
                    if let Some(src) = all.in_place() {
                        let got = src.as_slice();
                        assert_eq!(&got[..model.len()], &model[..], "step {step}");
                        assert!(got[model.len()..].iter().all(|&x| x == 0), "step {step}");
                    }
                }
            }
            assert_eq!(tail.len(), model.len(), "step {step}");
        }
    }

    #[test]
    #[should_panic(expected = "flush of 4 bytes")]
    fn a_flush_cannot_claim_more_than_the_tail_holds() {
        let _ = tail_of(&[b"abc"]).for_flush(4, 8);
    }
}
