//! Decoder and encoder of the records inside one (uncompressed or already decompressed)
//! RecordBatch v2: for consumers (the native client, tools, tests), producers
//! (`BatchBuilder`), and the broker's log cleaner, which decodes a batch's records to
//! read their keys and re-encodes the ones it keeps.
//!
//! Invariant: every length and count read from the bytes is checked against what remains
//! before anything is sliced or allocated; keys, values and headers are `Bytes` slices of
//! the input (no copy). `encode_record` writes what `decode_records` reads back unchanged.
//! Decompression is the caller's (this crate has no codecs).
//!
//! # Record layout (all varints zig-zag encoded)
//!
//! ```text
//!  length varint | attributes i8 | timestampDelta varlong | offsetDelta varint |
//!  keyLength varint (-1 = null) | key | valueLength varint | value |
//!  headerCount varint | { headerKeyLength varint | key | headerValueLength varint | value }*
//! ```

use bytes::{BufMut, Bytes, BytesMut};

use crate::record_batch::RECORD_BYTES_MIN;

/// Fewest bytes one header takes (two 1-byte varints).
const HEADER_BYTES_MIN: usize = 2;

/// One decoded record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    /// Offset relative to the batch's base offset.
    pub offset_delta: i32,
    /// Timestamp relative to the batch's first timestamp, in ms.
    pub timestamp_delta_ms: i64,
    /// Key (`None` = null).
    pub key: Option<Bytes>,
    /// Value (`None` = null, a tombstone).
    pub value: Option<Bytes>,
    /// Headers in order: key and value (`None` = null).
    pub headers: Vec<(Bytes, Option<Bytes>)>,
}

/// Why record bytes do not decode.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RecordError {
    /// The bytes end inside a record.
    #[error("records truncated at byte {at}")]
    Truncated {
        /// Where decoding stopped.
        at: usize,
    },
    /// A varint is longer than 10 bytes or out of its type's range.
    #[error("malformed varint at byte {at}")]
    Varint {
        /// Where it starts.
        at: usize,
    },
    /// A length or count is negative (other than -1 for null) or past the bytes.
    #[error("invalid length {length} at byte {at}")]
    Length {
        /// The value read.
        length: i64,
        /// Where it was read.
        at: usize,
    },
    /// The batch header's count does not match the records found.
    #[error("batch says {expected} records, found {found}")]
    Count {
        /// Record count in the batch header.
        expected: i32,
        /// Records decoded.
        found: usize,
    },
}

struct Cursor {
    buf: Bytes,
    pos: usize,
}

impl Cursor {
    fn varlong(&mut self) -> Result<i64, RecordError> {
        let start = self.pos;
        let mut z: u64 = 0;
        for shift in (0..70).step_by(7) {
            let b = *self
                .buf
                .get(self.pos)
                .ok_or(RecordError::Truncated { at: self.pos })?;
            self.pos += 1;
            if shift == 63 && b > 1 {
                return Err(RecordError::Varint { at: start });
            }
            z |= u64::from(b & 0x7f) << shift;
            if b & 0x80 == 0 {
                return Ok(((z >> 1) as i64) ^ -((z & 1) as i64));
            }
        }
        Err(RecordError::Varint { at: start })
    }

    fn varint(&mut self) -> Result<i32, RecordError> {
        let at = self.pos;
        i32::try_from(self.varlong()?).map_err(|_| RecordError::Varint { at })
    }

    fn take(&mut self, n: usize) -> Result<Bytes, RecordError> {
        let end = self
            .pos
            .checked_add(n)
            .filter(|&e| e <= self.buf.len())
            .ok_or(RecordError::Truncated { at: self.pos })?;
        let out = self.buf.slice(self.pos..end);
        self.pos = end;
        Ok(out)
    }

    /// A length-prefixed byte string; -1 is null.
    fn nullable(&mut self) -> Result<Option<Bytes>, RecordError> {
        let at = self.pos;
        let n = self.varlong()?;
        if n == -1 {
            return Ok(None);
        }
        let n = usize::try_from(n).map_err(|_| RecordError::Length { length: n, at })?;
        self.take(n).map(Some)
    }

    fn remaining(&self) -> usize {
        self.buf.len().saturating_sub(self.pos)
    }
}

/// Bytes of `v` as a zig-zag varint.
fn varint_len(v: i64) -> usize {
    let z = ((v << 1) ^ (v >> 63)) as u64;
    (64 - z.max(1).leading_zeros() as usize).div_ceil(7)
}

fn put_varint(out: &mut BytesMut, v: i64) {
    let mut z = ((v << 1) ^ (v >> 63)) as u64;
    while z >= 0x80 {
        out.put_u8((z as u8 & 0x7f) | 0x80);
        z >>= 7;
    }
    out.put_u8(z as u8);
}

/// Bytes of a length-prefixed byte string (-1 for null).
fn nullable_len(b: Option<&[u8]>) -> usize {
    b.map_or(varint_len(-1), |b| varint_len(b.len() as i64) + b.len())
}

fn put_nullable(out: &mut BytesMut, b: Option<&[u8]>) {
    match b {
        Some(b) => {
            put_varint(out, b.len() as i64);
            out.put_slice(b);
        }
        None => put_varint(out, -1),
    }
}

/// Appends one record with these fields to a records section (attributes 0, as v2
/// records always have), its length prefix computed first so nothing is copied twice.
pub(crate) fn put_record<'a>(
    out: &mut BytesMut,
    timestamp_delta_ms: i64,
    offset_delta: i32,
    key: Option<&[u8]>,
    value: Option<&[u8]>,
    headers: impl Iterator<Item = (&'a [u8], Option<&'a [u8]>)> + Clone,
) {
    let header_count = headers.clone().count();
    let body_len = 1
        + varint_len(timestamp_delta_ms)
        + varint_len(i64::from(offset_delta))
        + nullable_len(key)
        + nullable_len(value)
        + varint_len(header_count as i64)
        + headers
            .clone()
            .map(|(k, v)| nullable_len(Some(k)) + nullable_len(v))
            .sum::<usize>();
    out.reserve(varint_len(body_len as i64) + body_len);
    put_varint(out, body_len as i64);
    out.put_i8(0);
    put_varint(out, timestamp_delta_ms);
    put_varint(out, i64::from(offset_delta));
    put_nullable(out, key);
    put_nullable(out, value);
    put_varint(out, header_count as i64);
    for (k, v) in headers {
        put_nullable(out, Some(k));
        put_nullable(out, v);
    }
}

/// Appends `r` to a records section: the inverse of [`decode_records`] for one record.
pub fn encode_record(out: &mut BytesMut, r: &Record) {
    put_record(
        out,
        r.timestamp_delta_ms,
        r.offset_delta,
        r.key.as_deref(),
        r.value.as_deref(),
        r.headers.iter().map(|(k, v)| (&k[..], v.as_deref())),
    );
}

/// Decodes the records section of a batch whose header says `record_count` records.
pub fn decode_records(records: Bytes, record_count: i32) -> Result<Vec<Record>, RecordError> {
    let bound = records.len() / RECORD_BYTES_MIN;
    let expected = usize::try_from(record_count)
        .ok()
        .filter(|&n| n <= bound)
        .ok_or(RecordError::Count {
            expected: record_count,
            found: 0,
        })?;
    let mut out = Vec::with_capacity(expected);
    let mut c = Cursor {
        buf: records,
        pos: 0,
    };
    while c.remaining() > 0 {
        let at = c.pos;
        let len = c.varlong()?;
        let len = usize::try_from(len)
            .ok()
            .filter(|&l| l <= c.remaining())
            .ok_or(RecordError::Length { length: len, at })?;
        let mut r = Cursor {
            buf: c.take(len)?,
            pos: 0,
        };
        r.take(1)?; // attributes: unused in v2
        let timestamp_delta_ms = r.varlong()?;
        let offset_delta = r.varint()?;
        let key = r.nullable()?;
        let value = r.nullable()?;
        let hat = r.pos;
        let n = r.varint()?;
        let n = usize::try_from(n)
            .ok()
            .filter(|&n| n <= r.remaining() / HEADER_BYTES_MIN)
            .ok_or(RecordError::Length {
                length: i64::from(n),
                at: hat,
            })?;
        let mut headers = Vec::with_capacity(n);
        for _ in 0..n {
            let kat = r.pos;
            let k = r.nullable()?.ok_or(RecordError::Length {
                length: -1,
                at: kat,
            })?;
            headers.push((k, r.nullable()?));
        }
        out.push(Record {
            offset_delta,
            timestamp_delta_ms,
            key,
            value,
            headers,
        });
        if out.len() > expected {
            break;
        }
    }
    if out.len() != expected {
        return Err(RecordError::Count {
            expected: record_count,
            found: out.len(),
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{BatchBuilder, RecordBatch, BATCH_HEADER_BYTES};
    use proptest::prelude::*;

    #[test]
    fn decodes_what_the_builder_wrote() {
        let mut bb = BatchBuilder::new(1_000);
        bb.push(
            1_000,
            Some(b"k1"),
            Some(b"v1"),
            &[("h", Some(b"x")), ("n", None)],
        );
        bb.push(1_005, None, None, &[]);
        let b = RecordBatch::parse(bb.build()).expect("parses");
        let recs = decode_records(b.as_bytes().slice(BATCH_HEADER_BYTES..), b.record_count())
            .expect("decodes");
        assert_eq!(recs.len(), 2);
        assert_eq!(recs[0].key.as_deref(), Some(&b"k1"[..]));
        assert_eq!(recs[0].value.as_deref(), Some(&b"v1"[..]));
        assert_eq!(recs[0].headers.len(), 2);
        assert_eq!(recs[0].headers[1].1, None);
        assert_eq!(recs[1].offset_delta, 1);
        assert_eq!(recs[1].timestamp_delta_ms, 5);
        assert_eq!(recs[1].key, None);
    }

    #[test]
    fn wrong_count_and_truncation_are_errors() {
        let mut bb = BatchBuilder::new(0);
        bb.push(0, Some(b"k"), Some(b"v"), &[]);
        let b = RecordBatch::parse(bb.build()).expect("parses");
        let recs = b.as_bytes().slice(BATCH_HEADER_BYTES..);
        assert!(matches!(
            decode_records(recs.clone(), 2),
            Err(RecordError::Count { .. })
        ));
        assert!(decode_records(recs.clone(), -1).is_err());
        for cut in 0..recs.len() {
            assert!(decode_records(recs.slice(..cut), 1).is_err(), "cut {cut}");
        }
    }

    #[test]
    fn varint_lengths_match_what_is_written() {
        for v in [
            0,
            1,
            -1,
            63,
            64,
            -64,
            -65,
            8191,
            8192,
            i64::from(i32::MAX),
            i64::MIN,
            i64::MAX,
        ] {
            let mut out = BytesMut::new();
            put_varint(&mut out, v);
            assert_eq!(out.len(), varint_len(v), "{v}");
        }
    }

    fn arb_bytes() -> impl Strategy<Value = Option<Bytes>> {
        proptest::option::of(proptest::collection::vec(any::<u8>(), 0..300).prop_map(Bytes::from))
    }

    fn arb_record() -> impl Strategy<Value = Record> {
        (
            any::<i32>(),
            any::<i64>(),
            arb_bytes(),
            arb_bytes(),
            proptest::collection::vec(
                (
                    proptest::collection::vec(any::<u8>(), 0..20).prop_map(Bytes::from),
                    arb_bytes(),
                ),
                0..4,
            ),
        )
            .prop_map(
                |(offset_delta, timestamp_delta_ms, key, value, headers)| Record {
                    offset_delta,
                    timestamp_delta_ms,
                    key,
                    value,
                    headers,
                },
            )
    }

    proptest! {
        /// What `encode_record` writes decodes to the same records.
        #[test]
        fn encoded_records_decode_unchanged(records in proptest::collection::vec(arb_record(), 0..8)) {
            let mut out = BytesMut::new();
            for r in &records {
                encode_record(&mut out, r);
            }
            let back = decode_records(out.freeze(), records.len() as i32).expect("decodes");
            prop_assert_eq!(back, records);
        }
    }

    #[test]
    fn huge_header_count_is_refused_without_allocating() {
        // length 4, attributes, ts 0, offset 0, key null(1 byte), value null, headers = 2^30.
        let raw: &[u8] = &[20, 0, 0, 0, 1, 1, 0x80, 0x80, 0x80, 0x80, 0x08];
        assert!(decode_records(Bytes::from_static(raw), 1).is_err());
    }
}
