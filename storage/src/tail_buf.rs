//! A segment's unflushed bytes, shared between the log and the flush in flight, so the
//! flush's write copies them straight into its DMA buffer (no intermediate copy).
//!
//! Invariant: while a flush holds a [`FlushBytes`], the bytes `[0, data_len)` it was made
//! with do not change: appends only add at the end, and the two operations that remove
//! bytes — dropping the front once a flush completes, and truncation — never run while a
//! flush is in flight (`Log::begin_flush` and truncation refuse each other).

use std::cell::RefCell;
use std::ops::Range;
use std::rc::Rc;

use bytes::BytesMut;

/// The bytes of a segment from its tail's `base_pos`; cloning shares them.
#[derive(Debug, Default)]
pub(crate) struct TailBuf(Rc<RefCell<Vec<u8>>>);

impl TailBuf {
    pub(crate) fn from_vec(bytes: Vec<u8>) -> Self {
        Self(Rc::new(RefCell::new(bytes)))
    }

    pub(crate) fn len(&self) -> usize {
        self.0.borrow().len()
    }

    pub(crate) fn extend(&self, bytes: &[u8]) {
        self.0.borrow_mut().extend_from_slice(bytes);
    }

    pub(crate) fn truncate(&self, len: usize) {
        self.0.borrow_mut().truncate(len);
    }

    /// Drops the first `n` bytes (fewer when it holds fewer).
    pub(crate) fn drop_front(&self, n: usize) {
        let mut b = self.0.borrow_mut();
        let n = n.min(b.len());
        b.drain(..n);
    }

    /// Appends the bytes in `range` to `out`.
    pub(crate) fn copy_to(&self, range: Range<usize>, out: &mut BytesMut) {
        out.extend_from_slice(&self.0.borrow()[range]);
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
        let b = self.buf.0.borrow();
        // The module's invariant: nothing removed bytes under a flush.
        assert!(b.len() >= self.data_len, "tail bytes removed under a flush");
        dst[..self.data_len].copy_from_slice(&b[..self.data_len]);
        dst[self.data_len..].fill(0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_flush_writes_the_bytes_it_was_begun_with_padded_with_zeros() {
        let tail = TailBuf::from_vec(b"abc".to_vec());
        let flush = tail.for_flush(3, 8);
        // An append after the flush began is not part of it.
        tail.extend(b"def");
        let mut dst = [0xff; 8];
        flush.fill(&mut dst);
        assert_eq!(&dst, b"abc\0\0\0\0\0");
        assert_eq!(flush.write_len(), 8);
    }

    #[test]
    fn the_front_is_dropped_and_ranges_copied() {
        let tail = TailBuf::from_vec(b"0123456789".to_vec());
        tail.drop_front(4);
        let mut out = BytesMut::new();
        tail.copy_to(1..3, &mut out);
        assert_eq!(&out[..], b"56");
        tail.truncate(2);
        assert_eq!(tail.len(), 2);
        tail.drop_front(10);
        assert_eq!(tail.len(), 0);
    }

    #[test]
    #[should_panic(expected = "flush of 4 bytes")]
    fn a_flush_cannot_claim_more_than_the_tail_holds() {
        let _ = TailBuf::from_vec(b"abc".to_vec()).for_flush(4, 8);
    }
}
