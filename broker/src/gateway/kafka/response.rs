//! A response as the pieces it is written from: the encoded frame, in which each large
//! record set of a Fetch answer stays where the log read put it — a piece of its own, sent
//! with the rest in one vectored write (`sendmsg`) — instead of being copied into the frame.
//!
//! Invariant: the pieces, in order, are exactly the bytes `Ctx::respond` encodes for the
//! same body (the tests compare every Fetch version), and a piece is never empty.

use std::io::IoSlice;

use bytes::Bytes;
use futures::io::{AsyncWrite, AsyncWriteExt};

use kafka_protocol::protocol::buf::ByteBufMut;

pub use crate::partition::record_set::RecordSet;
pub use crate::runtime::piece_buf::{Chain, PieceBuf};

/// A record set shorter than this is copied into the frame: one more `iovec` (and the
/// bookkeeping around it) costs more than copying a few KiB.
pub const PIECE_MIN_BYTES: usize = 16 * 1024;
/// Pieces given to one `sendmsg` (Linux's `IOV_MAX` is 1024).
const PIECES_PER_WRITE_MAX: usize = 64;

/// The record sets of a response, laid out for `Ctx::respond_pieces`: what the body holds
/// for each ([`RecordPieces::body_bytes`]), and the sources and chains that put them back.
#[derive(Debug, Default)]
pub struct RecordPieces {
    /// Record sets the body holds as they are.
    pub sources: Vec<Bytes>,
    /// Record sets in several pieces, which the body holds as stand-ins.
    pub chains: Vec<Chain>,
    /// Stand-in bytes given out so far.
    stand_ins_bytes: usize,
}

impl RecordPieces {
    /// Record sets given as plain buffers (no chains).
    pub fn of_sources(sources: Vec<Bytes>) -> Self {
        RecordPieces {
            sources,
            ..Default::default()
        }
    }

    /// What the body holds for `set`: the set itself when it is one piece, else a stand-in
    /// for its pieces (large batches as they are, runs of small ones joined); past
    /// `STAND_IN_BYTES_MAX` of stand-ins in one response, the batches joined by copying.
    pub fn body_bytes(&mut self, set: &RecordSet) -> Bytes {
        let mut pieces = set.pieces(PIECE_MIN_BYTES);
        let whole = match pieces.len() {
            0 | 1 => pieces.pop().unwrap_or_default(),
            _ => match Chain::stand_in_for(pieces, self.stand_ins_bytes) {
                Some(chain) => {
                    let stand_in = chain.stand_in.clone();
                    self.stand_ins_bytes += stand_in.len();
                    self.chains.push(chain);
                    return stand_in;
                }
                None => set.to_bytes(),
            },
        };
        if whole.len() >= PIECE_MIN_BYTES {
            self.sources.push(whole.clone());
        }
        whole
    }

    /// Bytes that go out as pieces of their own rather than copied into the frame.
    pub fn pieces_bytes(&self) -> usize {
        let chained = self.chains.iter().flat_map(|c| c.pieces.iter());
        self.sources
            .iter()
            .chain(chained)
            .map(Bytes::len)
            .filter(|&n| n >= PIECE_MIN_BYTES)
            .sum()
    }
}

/// An encoded response: one buffer, or the pieces of one.
#[derive(Debug)]
pub enum Response {
    /// The whole frame in one buffer (every response but a Fetch with large record sets).
    One(Bytes),
    /// The frame's pieces in order.
    Pieces(Vec<Bytes>),
}

impl From<Bytes> for Response {
    fn from(b: Bytes) -> Self {
        Response::One(b)
    }
}

impl Response {
    /// Bytes in the frame (its size prefix included).
    pub fn len(&self) -> usize {
        self.pieces().iter().map(Bytes::len).sum()
    }

    /// Whether the frame is empty (never, for an encoded response).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The pieces, in order.
    pub fn pieces(&self) -> &[Bytes] {
        match self {
            Response::One(b) => std::slice::from_ref(b),
            Response::Pieces(p) => p,
        }
    }

    /// The response with its first piece — the size prefix, the header and the body's
    /// leading fields, at least — replaced by `f` of it (same length).
    pub fn map_head(self, f: impl FnOnce(Bytes) -> Bytes) -> Response {
        match self {
            Response::One(b) => Response::One(f(b)),
            Response::Pieces(mut p) => {
                if let Some(first) = p.first_mut() {
                    *first = f(std::mem::take(first));
                }
                Response::Pieces(p)
            }
        }
    }

    /// Writes every piece to `w`, several per vectored write.
    pub async fn write_to<W: AsyncWrite + Unpin>(&self, w: &mut W) -> std::io::Result<()> {
        let pieces = self.pieces();
        if let [one] = pieces {
            return w.write_all(one).await;
        }
        let (mut at, mut skip) = (0usize, 0usize);
        while at < pieces.len() {
            let slices: Vec<IoSlice<'_>> = pieces[at..]
                .iter()
                .take(PIECES_PER_WRITE_MAX)
                .enumerate()
                .map(|(i, p)| IoSlice::new(if i == 0 { &p[skip..] } else { &p[..] }))
                .collect();
            let mut n = w.write_vectored(&slices).await?;
            if n == 0 {
                return Err(std::io::ErrorKind::WriteZero.into());
            }
            while n > 0 && at < pieces.len() {
                let left = pieces[at].len() - skip;
                if n < left {
                    skip += n;
                    n = 0;
                } else {
                    n -= left;
                    at += 1;
                    skip = 0;
                }
            }
        }
        Ok(())
    }
}

/// The encoders of kafka-protocol write through this; the responses encoded in pieces
/// (Fetch) never seek back over a record set.
impl ByteBufMut for PieceBuf<'_> {
    fn offset(&self) -> usize {
        self.written()
    }

    fn seek(&mut self, offset: usize) {
        self.set_written(offset);
    }

    fn range(&mut self, r: std::ops::Range<usize>) -> &mut [u8] {
        self.written_range(r)
    }
}

/// `PieceBuf::finish` as a response.
pub fn finish(buf: PieceBuf<'_>) -> Response {
    match buf.finish() {
        Ok(pieces) => Response::Pieces(pieces),
        Err(one) => Response::One(one),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::BufMut;

    /// Runs a future that never waits (the writers here are always ready).
    fn block_on<F: std::future::Future>(f: F) -> F::Output {
        let mut f = std::pin::pin!(f);
        let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
        match f.as_mut().poll(&mut cx) {
            std::task::Poll::Ready(v) => v,
            std::task::Poll::Pending => panic!("a ready writer left the write pending"),
        }
    }

    fn joined(r: &Response) -> Vec<u8> {
        r.pieces().iter().flat_map(|p| p.iter().copied()).collect()
    }

    #[test]
    fn a_large_source_slice_becomes_a_piece_and_small_ones_are_copied() {
        let big = Bytes::from(vec![7u8; PIECE_MIN_BYTES + 5]);
        let small = Bytes::from(vec![9u8; 10]);
        let sources = [big.clone(), small.clone()];
        let mut b = PieceBuf::new(64, &sources, PIECE_MIN_BYTES);
        b.put_i32(42);
        b.put_slice(&big[..]);
        b.put_slice(&small[..]);
        b.put_slice(&big[5..]);
        assert_eq!(b.offset(), 4 + big.len() + 10 + big.len() - 5);
        let r = finish(b);
        let Response::Pieces(p) = &r else {
            panic!("expected pieces")
        };
        assert_eq!(p.len(), 4, "head, big, small copied, big tail");
        assert_eq!(
            p[1].as_ptr(),
            big.as_ptr(),
            "the record set itself, not a copy"
        );
        let mut want = 42i32.to_be_bytes().to_vec();
        want.extend_from_slice(&big);
        want.extend_from_slice(&small);
        want.extend_from_slice(&big[5..]);
        assert_eq!(joined(&r), want);
    }

    #[test]
    fn without_sources_it_is_one_buffer() {
        let mut b = PieceBuf::new(8, &[], PIECE_MIN_BYTES);
        b.put_slice(&[1; PIECE_MIN_BYTES]);
        assert!(matches!(finish(b), Response::One(x) if x.len() == PIECE_MIN_BYTES));
    }

    /// A writer that takes at most `step` bytes per call, vectored or not.
    struct Trickle {
        out: Vec<u8>,
        step: usize,
    }

    impl AsyncWrite for Trickle {
        fn poll_write(
            mut self: std::pin::Pin<&mut Self>,
            _: &mut std::task::Context<'_>,
            buf: &[u8],
        ) -> std::task::Poll<std::io::Result<usize>> {
            let n = buf.len().min(self.step);
            self.out.extend_from_slice(&buf[..n]);
            std::task::Poll::Ready(Ok(n))
        }

        fn poll_write_vectored(
            mut self: std::pin::Pin<&mut Self>,
            _: &mut std::task::Context<'_>,
            bufs: &[IoSlice<'_>],
        ) -> std::task::Poll<std::io::Result<usize>> {
            let mut left = self.step;
            for b in bufs {
                let n = b.len().min(left);
                self.out.extend_from_slice(&b[..n]);
                left -= n;
            }
            std::task::Poll::Ready(Ok(self.step - left))
        }

        fn poll_flush(
            self: std::pin::Pin<&mut Self>,
            _: &mut std::task::Context<'_>,
        ) -> std::task::Poll<std::io::Result<()>> {
            std::task::Poll::Ready(Ok(()))
        }

        fn poll_close(
            self: std::pin::Pin<&mut Self>,
            _: &mut std::task::Context<'_>,
        ) -> std::task::Poll<std::io::Result<()>> {
            std::task::Poll::Ready(Ok(()))
        }
    }

    #[test]
    fn partial_vectored_writes_send_every_byte_once_in_order() {
        let pieces: Vec<Bytes> = (0..150u8)
            .map(|i| Bytes::from(vec![i; 1 + usize::from(i) % 7]))
            .collect();
        let r = Response::Pieces(pieces);
        let want = joined(&r);
        for step in [1, 3, 8, 100, 100_000] {
            let mut w = Trickle {
                out: Vec::new(),
                step,
            };
            block_on(r.write_to(&mut w)).unwrap();
            assert_eq!(w.out, want, "step {step}");
        }
    }
}
