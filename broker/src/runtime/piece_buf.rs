//! A `bytes::BufMut` for encoders that leaves large slices of buffers it was given where
//! they are: the encoded output is a list of pieces, some of them references to those
//! buffers instead of copies (the gateway's Fetch answers, whose record sets go out with
//! one vectored write). It lives here because implementing `BufMut` takes `unsafe`.
//!
//! Invariant: the pieces, in order, are exactly the bytes written to the buffer; a piece is
//! never empty; a slice becomes a piece only when it lies wholly inside one of the given
//! buffers (checked by address before `Bytes::slice_ref`).

use std::ops::Range;

use bytes::buf::UninitSlice;
use bytes::{BufMut, Bytes, BytesMut};

/// An encoder's buffer that, for a slice lying inside one of `sources` (a record set the
/// response holds) and at least `min_piece_bytes` long, keeps a reference to it as a piece
/// instead of copying it; everything else goes into the frame's current buffer.
pub struct PieceBuf<'a> {
    /// Slices shorter than this are copied.
    min_piece_bytes: usize,
    inline: BytesMut,
    pieces: Vec<Bytes>,
    /// Bytes in `pieces`.
    done_bytes: usize,
    sources: &'a [Bytes],
}

impl<'a> PieceBuf<'a> {
    /// An empty buffer with room for `capacity` bytes of frame, referring to `sources`;
    /// slices of them at least `min_piece_bytes` long become pieces.
    pub fn new(capacity: usize, sources: &'a [Bytes], min_piece_bytes: usize) -> Self {
        PieceBuf {
            min_piece_bytes,
            inline: BytesMut::with_capacity(capacity),
            pieces: Vec::new(),
            done_bytes: 0,
            sources,
        }
    }

    /// The encoded bytes: one buffer when no slice became a piece (`Err`), else the
    /// pieces in order (`Ok`), none empty.
    pub fn finish(mut self) -> Result<Vec<Bytes>, Bytes> {
        if self.pieces.is_empty() {
            return Err(self.inline.freeze());
        }
        if !self.inline.is_empty() {
            self.pieces.push(self.inline.freeze());
        }
        Ok(self.pieces)
    }

    fn source_of(&self, src: &[u8]) -> Option<Bytes> {
        if src.len() < self.min_piece_bytes {
            return None;
        }
        let (start, end) = (src.as_ptr() as usize, src.as_ptr() as usize + src.len());
        self.sources
            .iter()
            .find(|s| {
                let at = s.as_ptr() as usize;
                at <= start && end <= at + s.len()
            })
            .map(|s| s.slice_ref(src))
    }
}

// SAFETY: every method delegates to the inner `BytesMut`, which upholds `BufMut`'s
// contract; `put_slice` either does the same or keeps a reference and writes nothing.
unsafe impl BufMut for PieceBuf<'_> {
    fn remaining_mut(&self) -> usize {
        self.inline.remaining_mut()
    }

    unsafe fn advance_mut(&mut self, cnt: usize) {
        // SAFETY: the caller initialized `cnt` bytes of `chunk_mut`, the inner buffer's.
        unsafe { self.inline.advance_mut(cnt) }
    }

    fn chunk_mut(&mut self) -> &mut UninitSlice {
        self.inline.chunk_mut()
    }

    fn put_slice(&mut self, src: &[u8]) {
        match self.source_of(src) {
            Some(piece) => {
                if !self.inline.is_empty() {
                    let head = self.inline.split().freeze();
                    self.done_bytes += head.len();
                    self.pieces.push(head);
                }
                self.done_bytes += piece.len();
                self.pieces.push(piece);
            }
            None => self.inline.extend_from_slice(src),
        }
    }
}

impl PieceBuf<'_> {
    /// Bytes written so far (pieces and the current buffer).
    pub fn written(&self) -> usize {
        self.done_bytes + self.inline.len()
    }

    /// Sets the length written to `offset`, within the current buffer only (zero-filled
    /// when it grows; a position inside an earlier piece leaves the current buffer empty).
    pub fn set_written(&mut self, offset: usize) {
        self.inline
            .resize(offset.saturating_sub(self.done_bytes), 0);
    }

    /// The written bytes `r`, within the current buffer only; a range before it reads as
    /// empty.
    pub fn written_range(&mut self, r: Range<usize>) -> &mut [u8] {
        let len = self.inline.len();
        let start = r.start.saturating_sub(self.done_bytes).min(len);
        let end = r.end.saturating_sub(self.done_bytes).min(len).max(start);
        &mut self.inline[start..end]
    }
}
