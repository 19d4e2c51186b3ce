//! A partition's answer to a read: whole record batches in log order, each the `Bytes` the
//! log read gave (a slice of its disk read or its cached frame), not concatenated. In the
//! log a frame header sits between two batches, so one contiguous record set would cost a
//! copy of every byte; a writer instead sends large batches from where they are and copies
//! only runs of small ones together ([`RecordSet::pieces`]).
//!
//! Invariant: every element is one whole batch, none empty, and `len_bytes` is the sum of
//! their lengths.

use bytes::{Bytes, BytesMut};

/// Whole record batches, in order.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RecordSet {
    batches: Vec<Bytes>,
    len_bytes: usize,
}

impl RecordSet {
    /// The record set of `batches` (each one whole batch; empty ones are left out).
    pub fn from_batches(batches: Vec<Bytes>) -> RecordSet {
        let batches: Vec<Bytes> = batches.into_iter().filter(|b| !b.is_empty()).collect();
        let len_bytes = batches.iter().map(Bytes::len).sum();
        RecordSet { batches, len_bytes }
    }

    /// Bytes in all the batches.
    pub fn len(&self) -> usize {
        self.len_bytes
    }

    /// Whether it holds no batch.
    pub fn is_empty(&self) -> bool {
        self.len_bytes == 0
    }

    /// The batches, in order.
    pub fn batches(&self) -> &[Bytes] {
        &self.batches
    }

    /// The batches as one contiguous buffer: the batch itself when there is one, a copy of
    /// them all otherwise.
    pub fn to_bytes(&self) -> Bytes {
        join(&self.batches)
    }

    /// The same bytes as pieces to write in order: each batch of at least `min_piece_bytes`
    /// as it is, each run of smaller ones between them copied into one piece (an `iovec`
    /// per small batch would cost more than the copy). None empty.
    pub fn pieces(&self, min_piece_bytes: usize) -> Vec<Bytes> {
        let mut out = Vec::new();
        let mut run_from = 0usize;
        for (i, b) in self.batches.iter().enumerate() {
            if b.len() >= min_piece_bytes {
                if run_from < i {
                    out.push(join(&self.batches[run_from..i]));
                }
                out.push(b.clone());
                run_from = i + 1;
            }
        }
        if run_from < self.batches.len() {
            out.push(join(&self.batches[run_from..]));
        }
        out
    }

    /// The longest prefix of whole batches that is at most `room` bytes.
    pub fn whole_batches_within(&self, room: usize) -> RecordSet {
        let mut len_bytes = 0usize;
        let mut n = 0usize;
        for b in &self.batches {
            if len_bytes + b.len() > room {
                break;
            }
            len_bytes += b.len();
            n += 1;
        }
        RecordSet {
            batches: self.batches[..n].to_vec(),
            len_bytes,
        }
    }

    /// Records in all the batches (from each batch's header; a batch too short for one
    /// counts none).
    pub fn record_count(&self) -> u64 {
        self.batches
            .iter()
            .filter_map(|b| strand_wire::RecordBatch::parse(b.clone()).ok())
            .map(|b| u64::try_from(b.record_count()).unwrap_or(0))
            .sum()
    }
}

/// `batches` as one contiguous buffer: the batch itself when there is one, a copy of them
/// all otherwise.
fn join(batches: &[Bytes]) -> Bytes {
    match batches {
        [] => Bytes::new(),
        [one] => one.clone(),
        many => {
            let mut out = BytesMut::with_capacity(many.iter().map(Bytes::len).sum());
            for b in many {
                out.extend_from_slice(b);
            }
            out.freeze()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(sizes: &[usize]) -> RecordSet {
        let batches = sizes
            .iter()
            .enumerate()
            .map(|(i, &n)| Bytes::from(vec![i as u8 + 1; n]))
            .collect();
        RecordSet::from_batches(batches)
    }

    #[test]
    fn pieces_keep_large_batches_and_join_runs_of_small_ones() {
        let s = set(&[10, 20, 100, 5, 200, 7, 8]);
        let pieces = s.pieces(100);
        let lens: Vec<usize> = pieces.iter().map(Bytes::len).collect();
        assert_eq!(lens, [30, 100, 5, 200, 15]);
        // The large batches are the batches themselves, not copies.
        assert_eq!(pieces[1].as_ptr(), s.batches()[2].as_ptr());
        assert_eq!(pieces[3].as_ptr(), s.batches()[4].as_ptr());
        // In order, the pieces are the concatenation.
        let joined: Vec<u8> = pieces.iter().flat_map(|p| p.to_vec()).collect();
        assert_eq!(joined, s.to_bytes().to_vec());
        assert_eq!(s.len(), joined.len());
        assert!(set(&[]).pieces(1).is_empty());
        assert_eq!(set(&[3]).pieces(100), vec![Bytes::from(vec![1u8; 3])]);
    }

    #[test]
    fn one_batch_is_its_own_contiguous_buffer() {
        let s = set(&[64]);
        assert_eq!(s.to_bytes().as_ptr(), s.batches()[0].as_ptr());
        assert!(RecordSet::from_batches(vec![Bytes::new()]).is_empty());
    }

    #[test]
    fn a_prefix_of_whole_batches_within_room() {
        let s = set(&[40, 30, 20]);
        assert_eq!(s.whole_batches_within(69).len(), 40);
        assert_eq!(s.whole_batches_within(70).len(), 70);
        assert_eq!(s.whole_batches_within(1000), s);
        assert!(s.whole_batches_within(39).is_empty());
    }
}
