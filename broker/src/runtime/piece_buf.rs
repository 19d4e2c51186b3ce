//! A `bytes::BufMut` for encoders that leaves large slices of buffers it was given where
//! they are: the encoded output is a list of pieces, some of them references to those
//! buffers instead of copies (the gateway's Fetch answers, whose record sets go out with
//! one vectored write). It lives here because implementing `BufMut` takes `unsafe`.
//!
//! A record set kept in several pieces (its batches, which lie apart in memory) reaches the
//! encoder as a [`Chain`]: the encoder is given a stand-in of the same length, and the
//! buffer writes the chain's pieces where the stand-in's bytes would go.
//!
//! Invariant: the pieces, in order, are exactly the bytes written to the buffer, with each
//! chain's stand-in replaced by the chain's pieces; a piece is never empty; a slice becomes
//! a piece only when it lies wholly inside one of the given buffers or is a whole piece of
//! a chain (checked by address before `Bytes::slice_ref`).

use std::ops::Range;

use bytes::buf::UninitSlice;
use bytes::{BufMut, Bytes, BytesMut};

/// Bytes written in place of a stand-in: `pieces`, in order, as long together as `stand_in`.
/// The stand-in's own bytes are never read (see [`Chain::stand_in_for`]).
#[derive(Clone, Debug)]
pub struct Chain {
    /// What the encoder is given.
    pub stand_in: Bytes,
    /// What is written instead.
    pub pieces: Vec<Bytes>,
}

/// Zeros that stand-ins are cut from: bytes with an address of their own and no cost (the
/// pages are never touched, so never backed). Distinct stand-ins of one response are
/// distinct ranges of it.
static STAND_IN_ZEROS: [u8; STAND_IN_BYTES_MAX] = [0; STAND_IN_BYTES_MAX];
/// Bytes of stand-ins one response can hold; record sets past it are joined by copying.
pub const STAND_IN_BYTES_MAX: usize = 64 * 1024 * 1024;

impl Chain {
    /// A chain of `pieces` whose stand-in is `STAND_IN_ZEROS[at..]`, or `None` when they do
    /// not fit in what is left of it.
    pub fn stand_in_for(pieces: Vec<Bytes>, at: usize) -> Option<Chain> {
        let len: usize = pieces.iter().map(Bytes::len).sum();
        let zeros: &'static [u8] = STAND_IN_ZEROS.get(at..at.checked_add(len)?)?;
        Some(Chain {
            stand_in: Bytes::from_static(zeros),
            pieces,
        })
    }
}

/// An encoder's buffer that, for a slice lying inside one of `sources` (a record set the
/// response holds) and at least `min_piece_bytes` long, keeps a reference to it as a piece
/// instead of copying it, and writes a [`Chain`]'s pieces in place of its stand-in;
/// everything else goes into the frame's current buffer.
pub struct PieceBuf<'a> {
    /// Slices shorter than this are copied.
    min_piece_bytes: usize,
    inline: BytesMut,
    pieces: Vec<Bytes>,
    /// Bytes in `pieces`.
    done_bytes: usize,
    sources: &'a [Bytes],
    chains: &'a [Chain],
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
            chains: &[],
        }
    }

    /// The buffer, writing `chains`' pieces in place of their stand-ins.
    pub fn with_chains(mut self, chains: &'a [Chain]) -> Self {
        self.chains = chains;
        self
    }

    /// The chain whose stand-in holds `src`, and where `src` starts in it.
    fn chain_of(&self, src: &[u8]) -> Option<(&'a Chain, usize)> {
        let start = src.as_ptr() as usize;
        self.chains.iter().find_map(|c| {
            let at = c.stand_in.as_ptr() as usize;
            let inside = at <= start && start + src.len() <= at + c.stand_in.len();
            inside.then(|| (c, start - at))
        })
    }

    /// Writes the chain's bytes `from..from + len`: whole pieces of at least
    /// `min_piece_bytes` as pieces, the rest copied.
    fn put_chain(&mut self, chain: &Chain, from: usize, len: usize) {
        let (want_start, want_end) = (from, from + len);
        let mut at = 0usize;
        for p in &chain.pieces {
            let (start, end) = (at, at + p.len());
            at = end;
            let (a, b) = (start.max(want_start), end.min(want_end));
            if a >= b {
                continue;
            }
            if a == start && b == end && p.len() >= self.min_piece_bytes {
                self.push_piece(p.clone());
            } else {
                self.inline.extend_from_slice(&p[a - start..b - start]);
            }
        }
    }

    fn push_piece(&mut self, piece: Bytes) {
        if !self.inline.is_empty() {
            let head = self.inline.split().freeze();
            self.done_bytes += head.len();
            self.pieces.push(head);
        }
        self.done_bytes += piece.len();
        self.pieces.push(piece);
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
        if let Some((chain, from)) = self.chain_of(src) {
            return self.put_chain(chain, from, src.len());
        }
        match self.source_of(src) {
            Some(piece) => self.push_piece(piece),
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
