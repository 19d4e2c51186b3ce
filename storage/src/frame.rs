//! The on-disk frame: a 48-byte Strand header followed by the entry body.
//!
//! For data and control frames the body is the Kafka RecordBatch v2 exactly as the producer
//! sent it, with base offset and partition leader epoch rewritten (ARCHITECTURE.md,
//! Storage). Raft configuration and no-op frames carry opaque bodies and occupy no Kafka
//! offsets. All integers are little-endian.
//!
//! ```text
//!  0      4      8      12  13  14    16          24          32          40     44    48
//!  +------+------+------+---+---+-----+-----------+-----------+-----------+------+-----+----
//!  |hdrcrc|len   |bodycrc|kd|ver|rsvd | raft_term | raft_index| kafka_base| offs | rsvd| body
//!  +------+------+------+---+---+-----+-----------+-----------+-----------+------+-----+----
//! ```
//! - `hdrcrc`: CRC32C of header bytes 4..48. `len`: header + body bytes.
//! - `bodycrc`: CRC32C of the body (the Kafka CRC does not cover the first 21 batch bytes).
//! - `kafka_base`: first Kafka offset of a data/control frame; for other kinds, the log end
//!   offset when the frame was written (so every frame maps to a Kafka offset position).
//! - `offs`: Kafka offsets the frame occupies (`last_offset_delta + 1`; 0 for non-data).
//! - A `Cleaned` frame (kind 6) is a bare header, no body, standing for a data batch whose
//!   records compaction removed: it keeps the batch's offsets (`offs` > 0). Binaries older
//!   than this kind refuse it (a one-way format change).
//!
//! Invariant: a decoded header has a valid CRC, a known kind and version, and a length
//! within `FRAME_BYTES_MAX`; nothing is allocated from an unchecked length.

use crate::types::{KafkaOffset, RaftIndex, RaftTerm};

/// Bytes in the frame header.
pub const FRAME_HEADER_BYTES: usize = 48;
/// Largest frame (header + body) the log writes or trusts when reading. Kafka's
/// `message.max.bytes` default is ~1 MiB; 64 MiB leaves room for raised limits while
/// keeping a corrupt length from causing a huge read.
pub const FRAME_BYTES_MAX: u32 = 64 * 1024 * 1024;
/// Frame format version written by this code.
pub const FRAME_VERSION: u8 = 1;

/// What a frame holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FrameKind {
    /// A Kafka record batch of user data.
    Data,
    /// A Raft configuration change.
    RaftConfig,
    /// A Raft no-op (a new leader's first entry).
    NoOp,
    /// A Kafka control batch (transaction marker); occupies Kafka offsets.
    Control,
    /// A replicated DeleteRecords: the body is the new log start offset (8 bytes BE).
    LogStart,
    /// A data batch whose records log compaction all removed: a header without a body
    /// that keeps the entry's Raft index and term and its Kafka offsets (`log_clean`).
    Cleaned,
}

impl FrameKind {
    fn to_u8(self) -> u8 {
        match self {
            FrameKind::Data => 1,
            FrameKind::RaftConfig => 2,
            FrameKind::NoOp => 3,
            FrameKind::Control => 4,
            FrameKind::LogStart => 5,
            FrameKind::Cleaned => 6,
        }
    }

    fn from_u8(v: u8) -> Option<FrameKind> {
        match v {
            1 => Some(FrameKind::Data),
            2 => Some(FrameKind::RaftConfig),
            3 => Some(FrameKind::NoOp),
            4 => Some(FrameKind::Control),
            5 => Some(FrameKind::LogStart),
            6 => Some(FrameKind::Cleaned),
            _ => None,
        }
    }

    /// Whether the body is a Kafka record batch that occupies Kafka offsets.
    pub fn has_kafka_batch(self) -> bool {
        matches!(self, FrameKind::Data | FrameKind::Control)
    }

    /// Whether the frame occupies Kafka offsets: a batch, or what compaction left of one.
    pub fn occupies_offsets(self) -> bool {
        self.has_kafka_batch() || self == FrameKind::Cleaned
    }
}

/// A decoded, CRC-checked frame header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FrameHeader {
    /// Header + body bytes.
    pub frame_len_bytes: u32,
    /// CRC32C of the body.
    pub body_crc: u32,
    /// What the body is.
    pub kind: FrameKind,
    /// Raft term the entry was written in.
    pub term: RaftTerm,
    /// Raft index of the entry.
    pub index: RaftIndex,
    /// First Kafka offset (data/control) or the log end offset at write time (others).
    pub kafka_base_offset: KafkaOffset,
    /// Kafka offsets occupied (0 for non-data kinds).
    pub offset_count: u32,
}

impl FrameHeader {
    /// Body length in bytes.
    pub fn body_len_bytes(&self) -> usize {
        (self.frame_len_bytes as usize).saturating_sub(FRAME_HEADER_BYTES)
    }

    /// One past the last Kafka offset this frame occupies.
    pub fn next_offset(&self) -> KafkaOffset {
        KafkaOffset(self.kafka_base_offset.0 + i64::from(self.offset_count))
    }
}

/// Why a frame failed to decode.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum FrameError {
    /// Fewer bytes than a header or than the declared length.
    #[error("truncated frame: need {needed} bytes, have {available}")]
    Truncated {
        /// Bytes needed.
        needed: usize,
        /// Bytes present.
        available: usize,
    },
    /// Header CRC mismatch (torn write or corruption).
    #[error("header crc mismatch: stored {stored:#010x}, computed {computed:#010x}")]
    HeaderCrc {
        /// Stored CRC.
        stored: u32,
        /// Computed CRC.
        computed: u32,
    },
    /// Body CRC mismatch.
    #[error("body crc mismatch: stored {stored:#010x}, computed {computed:#010x}")]
    BodyCrc {
        /// Stored CRC.
        stored: u32,
        /// Computed CRC.
        computed: u32,
    },
    /// Unknown kind or version byte, or a length outside limits.
    #[error("bad frame header: {0}")]
    BadHeader(&'static str),
}

fn u32_at(b: &[u8; FRAME_HEADER_BYTES], at: usize) -> u32 {
    let mut a = [0u8; 4];
    a.copy_from_slice(&b[at..at + 4]);
    u32::from_le_bytes(a)
}

fn u64_at(b: &[u8; FRAME_HEADER_BYTES], at: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(a)
}

/// Encodes a header for `body` into its 48 bytes.
pub fn encode_header(h: &FrameHeader) -> [u8; FRAME_HEADER_BYTES] {
    let mut b = [0u8; FRAME_HEADER_BYTES];
    b[4..8].copy_from_slice(&h.frame_len_bytes.to_le_bytes());
    b[8..12].copy_from_slice(&h.body_crc.to_le_bytes());
    b[12] = h.kind.to_u8();
    b[13] = FRAME_VERSION;
    b[16..24].copy_from_slice(&h.term.0.to_le_bytes());
    b[24..32].copy_from_slice(&h.index.0.to_le_bytes());
    b[32..40].copy_from_slice(&h.kafka_base_offset.0.to_le_bytes());
    b[40..44].copy_from_slice(&h.offset_count.to_le_bytes());
    let crc = crc32c::crc32c(&b[4..]);
    b[0..4].copy_from_slice(&crc.to_le_bytes());
    b
}

/// Decodes and checks the header at the start of `bytes` (the body is not checked).
pub fn decode_header(bytes: &[u8]) -> Result<FrameHeader, FrameError> {
    let b: &[u8; FRAME_HEADER_BYTES] = bytes.first_chunk().ok_or(FrameError::Truncated {
        needed: FRAME_HEADER_BYTES,
        available: bytes.len(),
    })?;
    let stored = u32_at(b, 0);
    let computed = crc32c::crc32c(&b[4..]);
    if stored != computed {
        return Err(FrameError::HeaderCrc { stored, computed });
    }
    let frame_len_bytes = u32_at(b, 4);
    if (frame_len_bytes as usize) < FRAME_HEADER_BYTES || frame_len_bytes > FRAME_BYTES_MAX {
        return Err(FrameError::BadHeader("frame length outside limits"));
    }
    if b[13] != FRAME_VERSION {
        return Err(FrameError::BadHeader("unknown frame version"));
    }
    let kind = FrameKind::from_u8(b[12]).ok_or(FrameError::BadHeader("unknown frame kind"))?;
    let kafka_base_offset = KafkaOffset(u64_at(b, 32) as i64);
    let offset_count = u32_at(b, 40);
    if kafka_base_offset.0 < 0 || (!kind.occupies_offsets() && offset_count != 0) {
        return Err(FrameError::BadHeader(
            "kafka offsets inconsistent with kind",
        ));
    }
    if kind == FrameKind::Cleaned
        && (frame_len_bytes as usize != FRAME_HEADER_BYTES || offset_count == 0)
    {
        return Err(FrameError::BadHeader(
            "a cleaned frame is a bare header over at least one offset",
        ));
    }
    Ok(FrameHeader {
        frame_len_bytes,
        body_crc: u32_at(b, 8),
        kind,
        term: RaftTerm(u64_at(b, 16)),
        index: RaftIndex(u64_at(b, 24)),
        kafka_base_offset,
        offset_count,
    })
}

/// Decodes the whole frame at the start of `bytes`, checking both CRCs; returns the header
/// and the body's byte range within `bytes`.
pub fn decode_frame(bytes: &[u8]) -> Result<(FrameHeader, std::ops::Range<usize>), FrameError> {
    let h = decode_header(bytes)?;
    let end = h.frame_len_bytes as usize;
    let body = bytes
        .get(FRAME_HEADER_BYTES..end)
        .ok_or(FrameError::Truncated {
            needed: end,
            available: bytes.len(),
        })?;
    let computed = crc32c::crc32c(body);
    if computed != h.body_crc {
        return Err(FrameError::BodyCrc {
            stored: h.body_crc,
            computed,
        });
    }
    Ok((h, FRAME_HEADER_BYTES..end))
}

/// Builds a complete frame (header + body) into `out`.
pub fn encode_frame(
    out: &mut Vec<u8>,
    kind: FrameKind,
    term: RaftTerm,
    index: RaftIndex,
    kafka_base_offset: KafkaOffset,
    offset_count: u32,
    body: &[u8],
) -> FrameHeader {
    let frame_len = FRAME_HEADER_BYTES + body.len();
    assert!(
        frame_len <= FRAME_BYTES_MAX as usize,
        "frame too large: {frame_len}"
    );
    let h = FrameHeader {
        frame_len_bytes: frame_len as u32,
        body_crc: crc32c::crc32c(body),
        kind,
        term,
        index,
        kafka_base_offset,
        offset_count,
    };
    out.extend_from_slice(&encode_header(&h));
    out.extend_from_slice(body);
    h
}

/// One valid frame found by [`scan`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ScannedFrame {
    /// Where the frame starts in the scanned buffer.
    pub at: usize,
    /// Its header.
    pub header: FrameHeader,
}

/// Where a scan stopped.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ScanStop {
    /// The buffer ended exactly at a frame boundary (or was all zero padding after it).
    Clean,
    /// The bytes at `at` are not a whole valid frame.
    Bad {
        /// Where the bad frame starts.
        at: usize,
        /// Why.
        error: FrameError,
    },
}

/// Validates frames back to back from the start of `buf`, calling `visit` for each valid
/// one, until the first invalid or incomplete frame. A run of zero bytes after the last
/// frame (preallocated space, alignment padding) counts as a clean end. Pure; fuzzed.
pub fn scan(buf: &[u8], mut visit: impl FnMut(ScannedFrame, &[u8])) -> ScanStop {
    let mut at = 0usize;
    loop {
        let rest = &buf[at..];
        if rest.is_empty() {
            return ScanStop::Clean;
        }
        match decode_frame(rest) {
            Ok((header, body)) => {
                visit(ScannedFrame { at, header }, &rest[body]);
                at += header.frame_len_bytes as usize;
            }
            Err(error) => {
                if rest.iter().all(|&b| b == 0) {
                    return ScanStop::Clean;
                }
                return ScanStop::Bad { at, error };
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(index: u64, body: &[u8]) -> Vec<u8> {
        let mut v = Vec::new();
        encode_frame(
            &mut v,
            FrameKind::Data,
            RaftTerm(3),
            RaftIndex(index),
            KafkaOffset(10),
            2,
            body,
        );
        v
    }

    fn check(buf: &[u8], frames: usize, clean: bool) {
        let mut n = 0;
        let stop = scan(buf, |_, _| n += 1);
        assert_eq!(n, frames, "frames found");
        assert_eq!(stop == ScanStop::Clean, clean, "stop {stop:?}");
    }

    #[test]
    fn scan_cases() {
        let mut two = frame(1, b"hello");
        two.extend(frame(2, b"world!"));
        check(&two, 2, true);
        check(&two[..two.len() - 1], 1, false);
        let mut padded = two.clone();
        padded.extend([0u8; 100]);
        check(&padded, 2, true);
        let mut flipped = two.clone();
        let last = flipped.len() - 1;
        flipped[last] ^= 1;
        check(&flipped, 1, false);
        let mut hdr = two.clone();
        hdr[60] ^= 0x80;
        check(&hdr, 1, false);
        check(&[], 0, true);
        check(&[1, 2, 3], 0, false);
    }

    #[test]
    fn header_round_trip() {
        let f = frame(7, b"abc");
        let (h, body) = decode_frame(&f).expect("valid");
        assert_eq!(h.index, RaftIndex(7));
        assert_eq!(h.term, RaftTerm(3));
        assert_eq!(h.next_offset(), KafkaOffset(12));
        assert_eq!(&f[body], b"abc");
    }

    #[test]
    fn scan_never_panics_on_noise() {
        let mut x = 0x1234_5678_u32;
        for len in 0..300 {
            let buf: Vec<u8> = (0..len)
                .map(|_| {
                    x ^= x << 13;
                    x ^= x >> 17;
                    x ^= x << 5;
                    x as u8
                })
                .collect();
            let _ = scan(&buf, |_, _| {});
        }
    }
}
