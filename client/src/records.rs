//! Record batches on the client: build (optionally zstd-compressed) and decode fetched
//! batches into records with absolute offsets.
//!
//! Invariant: decoded records are those of whole, CRC-valid batches; decompressed sizes are
//! bounded by `DECOMPRESSED_BYTES_MAX` before allocation grows past it.

use std::io::Read;

use bytes::Bytes;
use strand_wire::{
    batches, records::decode_records, BatchBuilder, Compression as WireCompression, RecordBatch,
    TimestampType, BATCH_HEADER_BYTES,
};

use crate::error::{Error, Result};

/// Largest decompressed records section accepted (a batch is at most 64 MiB on the wire;
/// compression ratios past 4x on top are unusual, and the bound keeps a zip bomb out).
pub const DECOMPRESSED_BYTES_MAX: u64 = 256 * 1024 * 1024;

/// One consumed record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConsumedRecord {
    /// Topic.
    pub topic: String,
    /// Partition.
    pub partition: i32,
    /// Kafka offset.
    pub offset: i64,
    /// Timestamp in ms (create time, or log append time if the topic says so).
    pub timestamp_ms: i64,
    /// Key.
    pub key: Option<Bytes>,
    /// Value.
    pub value: Option<Bytes>,
    /// Headers, in order.
    pub headers: Vec<(String, Option<Bytes>)>,
}

/// Builds the batch bytes for `builder`, zstd-compressed when asked.
pub(crate) fn build(builder: &BatchBuilder, zstd_level: Option<i32>) -> Result<Bytes> {
    match zstd_level {
        None => Ok(builder.build()),
        Some(level) => {
            let packed = zstd::bulk::compress(builder.records_bytes(), level)
                .map_err(|e| Error::Records(format!("zstd: {e}")))?;
            Ok(builder.build_with_records(WireCompression::Zstd, &packed))
        }
    }
}

fn records_section(batch: &RecordBatch) -> Result<Bytes> {
    let raw = batch.as_bytes().slice(BATCH_HEADER_BYTES..);
    match batch.attributes().compression() {
        WireCompression::None => Ok(raw),
        WireCompression::Zstd => {
            let mut out = Vec::new();
            zstd::stream::read::Decoder::new(&raw[..])
                .map_err(|e| Error::Records(format!("zstd: {e}")))?
                .take(DECOMPRESSED_BYTES_MAX + 1)
                .read_to_end(&mut out)
                .map_err(|e| Error::Records(format!("zstd: {e}")))?;
            if out.len() as u64 > DECOMPRESSED_BYTES_MAX {
                return Err(Error::Records(format!(
                    "batch decompresses past {DECOMPRESSED_BYTES_MAX} bytes"
                )));
            }
            Ok(Bytes::from(out))
        }
        other => Err(Error::UnsupportedCompression(format!("{other:?}"))),
    }
}

/// Records decoded from a fetch.
#[derive(Debug, Default)]
pub(crate) struct Decoded {
    /// The records at or after the fetch offset.
    pub records: Vec<ConsumedRecord>,
    /// Where the next fetch starts: past the last batch, even one compaction emptied or
    /// a control batch (`None`: no batch reached the fetch offset).
    pub next_offset: Option<i64>,
}

/// Decodes the records at or after `from_offset` in the fetched `records`.
pub(crate) fn decode(
    topic: &str,
    partition: i32,
    records: Bytes,
    from_offset: i64,
) -> Result<Decoded> {
    let mut decoded = Decoded::default();
    let out = &mut decoded.records;
    for batch in batches(records) {
        let batch = batch.map_err(|e| Error::Records(e.to_string()))?;
        // As stored: log compaction may have removed records (a batch keeps its offsets,
        // and may be left empty).
        batch
            .validate_stored()
            .map_err(|e| Error::Records(e.to_string()))?;
        if batch.last_offset() < from_offset {
            continue;
        }
        decoded.next_offset = Some(batch.last_offset() + 1);
        if batch.attributes().is_control() {
            continue;
        }
        let section = records_section(&batch)?;
        let recs = decode_records(section, batch.record_count())
            .map_err(|e| Error::Records(e.to_string()))?;
        let log_append = batch.attributes().timestamp_type() == TimestampType::LogAppendTime;
        for r in recs {
            let offset = batch.base_offset() + i64::from(r.offset_delta);
            if offset < from_offset {
                continue;
            }
            let headers = r
                .headers
                .into_iter()
                .map(|(k, v)| (String::from_utf8_lossy(&k).into_owned(), v))
                .collect();
            out.push(ConsumedRecord {
                topic: topic.to_string(),
                partition,
                offset,
                timestamp_ms: if log_append {
                    batch.max_timestamp()
                } else {
                    batch.first_timestamp() + r.timestamp_delta_ms
                },
                key: r.key,
                value: r.value,
                headers,
            });
        }
    }
    Ok(decoded)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn batch(base_offset: i64, n: usize, zstd: bool) -> Bytes {
        let mut b = BatchBuilder::new(1_000);
        for i in 0..n {
            let v = format!("value-{i}");
            b.push(
                1_000 + i as i64,
                Some(b"k"),
                Some(v.as_bytes()),
                &[("h", None)],
            );
        }
        let mut bytes = build(&b, zstd.then_some(3)).unwrap().to_vec();
        bytes[..8].copy_from_slice(&base_offset.to_be_bytes());
        Bytes::from(bytes)
    }

    #[test]
    fn decodes_plain_and_zstd_and_skips_before_the_offset() {
        for zstd in [false, true] {
            let recs = decode("t", 0, batch(10, 5, zstd), 12).unwrap().records;
            assert_eq!(
                recs.iter().map(|r| r.offset).collect::<Vec<_>>(),
                [12, 13, 14]
            );
            assert_eq!(recs[0].value.as_deref(), Some(&b"value-2"[..]));
            assert_eq!(recs[0].timestamp_ms, 1_002);
            assert_eq!(recs[0].headers, vec![("h".to_string(), None)]);
        }
    }

    /// Batches as log compaction leaves them: records removed (offset gaps inside a
    /// batch) or none left; the records that remain keep their offsets.
    #[test]
    fn decodes_batches_compaction_thinned_or_emptied() {
        let full = RecordBatch::parse(batch(10, 5, false)).unwrap();
        let section = full.as_bytes().slice(BATCH_HEADER_BYTES..);
        let recs = decode_records(section, 5).unwrap();
        let mut kept = bytes::BytesMut::new();
        strand_wire::records::encode_record(&mut kept, &recs[3]);
        let header = strand_wire::BatchHeader {
            record_count: 1,
            ..strand_wire::BatchHeader::of(&full)
        };
        let mut fetched = header.encode(&kept).to_vec();
        fetched.extend_from_slice(&strand_wire::empty_batch(
            &RecordBatch::parse(batch(15, 2, false)).unwrap(),
        ));
        fetched.extend_from_slice(&batch(17, 1, false));
        let got = decode("t", 0, Bytes::from(fetched), 10).unwrap();
        let offsets: Vec<_> = got.records.iter().map(|r| r.offset).collect();
        assert_eq!(offsets, [13, 17]);
        assert_eq!(got.records[0].value.as_deref(), Some(&b"value-3"[..]));
        assert_eq!(got.next_offset, Some(18));
        // A fetch that returns only an emptied batch still moves the position past it.
        let empty = strand_wire::empty_batch(&RecordBatch::parse(batch(15, 2, false)).unwrap());
        let got = decode("t", 0, empty, 15).unwrap();
        assert!(got.records.is_empty());
        assert_eq!(got.next_offset, Some(17));
    }

    #[test]
    fn a_corrupt_batch_is_an_error() {
        let mut b = batch(0, 3, false).to_vec();
        let last = b.len() - 1;
        b[last] ^= 1;
        assert!(decode("t", 0, Bytes::from(b), 0).is_err());
    }
}
