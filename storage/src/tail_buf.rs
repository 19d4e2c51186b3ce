//! A segment's unflushed bytes, shared between the log and the flush in flight, kept as
//! the frames themselves: an append adds the frame it built (the same bytes the batch
//! cache holds, not a copy of them), and the flush's write copies the frames straight into
//! its DMA buffer. So a stored byte is copied once in memory on its way to disk (into its
//! frame) plus the fill of the DMA buffer.
//!
//! Invariant: while a flush holds a [`FlushBytes`], the bytes `[0, data_len)` it was made
//! with do not change: appends only add at the end, and the two operations that remove
//! bytes — dropping the front once a flush completes, and truncation — never run while a
//! flush is in flight (`Log::begin_flush` and truncation refuse each other). `len` is
//! always the sum of the chunks' lengths, and no chunk is empty.

use std::cell::RefCell;
use std::collections::VecDeque;
use std::ops::Range;
use std::rc::Rc;

use bytes::{Buf, Bytes, BytesMut};

/// The chunks (frames, or the part of a block read back at recovery) and their total.
#[derive(Debug, Default)]
struct Chunks {
    chunks: VecDeque<Bytes>,
    len: usize,
}

impl Chunks {
    /// Calls `f` with each chunk's part inside `range`, in order.
    fn each_in(&self, range: Range<usize>, mut f: impl FnMut(&Bytes, Range<usize>)) {
        let mut start = 0usize;
        for c in &self.chunks {
            let end = start + c.len();
            if end > range.start {
                let a = range.start.max(start) - start;
                let b = range.end.min(end) - start;
                if a < b {
                    f(c, a..b);
                }
            }
            if end >= range.end {
                return;
            }
            start = end;
        }
    }
}

/// The bytes of a segment from its tail's `base_pos`; cloning shares them.
#[derive(Debug, Default)]
pub(crate) struct TailBuf(Rc<RefCell<Chunks>>);

impl TailBuf {
    pub(crate) fn from_bytes(bytes: Bytes) -> Self {
        let t = Self::default();
        t.extend(bytes);
        t
    }

    pub(crate) fn len(&self) -> usize {
        self.0.borrow().len
    }

    /// Adds `bytes` at the end, without copying them.
    pub(crate) fn extend(&self, bytes: Bytes) {
        if bytes.is_empty() {
            return;
        }
        let mut c = self.0.borrow_mut();
        c.len += bytes.len();
        c.chunks.push_back(bytes);
    }

    /// Keeps the first `len` bytes (all when it holds fewer).
    pub(crate) fn truncate(&self, len: usize) {
        let mut c = self.0.borrow_mut();
        while c.len > len {
            let excess = c.len - len;
            let Some(last) = c.chunks.back_mut() else {
                break;
            };
            if last.len() <= excess {
                c.len -= last.len();
                c.chunks.pop_back();
            } else {
                last.truncate(last.len() - excess);
                c.len = len;
            }
        }
    }

    /// Drops the first `n` bytes (fewer when it holds fewer).
    pub(crate) fn drop_front(&self, n: usize) {
        let mut c = self.0.borrow_mut();
        let mut left = n.min(c.len);
        c.len -= left;
        while left > 0 {
            let Some(first) = c.chunks.front_mut() else {
                break;
            };
            if first.len() <= left {
                left -= first.len();
                c.chunks.pop_front();
            } else {
                first.advance(left);
                left = 0;
            }
        }
    }

    /// The bytes in `range`: shared, not copied, when one chunk holds them all.
    pub(crate) fn slice(&self, range: Range<usize>) -> Bytes {
        let c = self.0.borrow();
        assert!(
            range.start <= range.end && range.end <= c.len,
            "range {range:?} of a tail of {}",
            c.len
        );
        let mut parts = Vec::new();
        c.each_in(range.clone(), |chunk, r| parts.push(chunk.slice(r)));
        match parts.len() {
            0 => Bytes::new(),
            1 => parts.pop().unwrap_or_default(),
            _ => {
                let mut out = BytesMut::with_capacity(range.len());
                for p in &parts {
                    out.extend_from_slice(p);
                }
                out.freeze()
            }
        }
    }

    /// The first `data_len` bytes, to be written as `write_len` bytes (zeros after them).
    pub(crate) fn for_flush(&self, data_len: usize, write_len: usize) -> FlushBytes {
        assert!(
            data_len <= self.len() && data_len <= write_len,
            "flush of {data_len} bytes from a tail of {} into {write_len}",
            self.len()
        );
        FlushBytes {
            buf: Self(Rc::clone(&self.0)),
            data_len,
            write_len,
        }
    }
}

/// What one flush writes of a tail: its first `data_len` bytes, zero-padded to
/// `write_len` (the write alignment).
pub(crate) struct FlushBytes {
    buf: TailBuf,
    data_len: usize,
    write_len: usize,
}

impl FlushBytes {
    pub(crate) fn write_len(&self) -> usize {
        self.write_len
    }

    /// Fills the write buffer `dst` (`write_len` bytes).
    pub(crate) fn fill(&self, dst: &mut [u8]) {
        let c = self.buf.0.borrow();
        // The module's invariant: nothing removed bytes under a flush.
        assert!(c.len >= self.data_len, "tail bytes removed under a flush");
        let mut at = 0usize;
        c.each_in(0..self.data_len, |chunk, r| {
            let n = r.len();
            dst[at..at + n].copy_from_slice(&chunk[r]);
            at += n;
        });
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
            t.extend(Bytes::from_static(c));
        }
        t
    }

    #[test]
    fn a_flush_writes_the_bytes_it_was_begun_with_padded_with_zeros() {
        let tail = tail_of(&[b"ab", b"c"]);
        let flush = tail.for_flush(3, 8);
        // An append after the flush began is not part of it.
        tail.extend(Bytes::from_static(b"def"));
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
    fn a_range_inside_one_chunk_is_that_chunk_not_a_copy() {
        let frame = Bytes::from(vec![5u8; 100]);
        let tail = tail_of(&[b"xyz"]);
        tail.extend(frame.clone());
        let s = tail.slice(13..53);
        assert_eq!(s.as_ptr(), frame[10..].as_ptr());
        assert_eq!(s.len(), 40);
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
                    tail.extend(Bytes::from(b));
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
                    tail.for_flush(b, b + 7).fill(&mut dst);
                    assert_eq!(&dst[..b], &model[..b], "step {step}");
                    assert!(dst[b..].iter().all(|&x| x == 0));
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
