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

/// Decodes the records at or after `from_offset` in the fetched `records`.
pub(crate) fn decode(
    topic: &str,
    partition: i32,
    records: Bytes,
    from_offset: i64,
) -> Result<Vec<ConsumedRecord>> {
    let mut out = Vec::new();
    for batch in batches(records) {
        let batch = batch.map_err(|e| Error::Records(e.to_string()))?;
        batch
            .validate()
            .map_err(|e| Error::Records(e.to_string()))?;
        if batch.attributes().is_control() || batch.last_offset() < from_offset {
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
    Ok(out)
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
            let recs = decode("t", 0, batch(10, 5, zstd), 12).unwrap();
            assert_eq!(
                recs.iter().map(|r| r.offset).collect::<Vec<_>>(),
                [12, 13, 14]
            );
            assert_eq!(recs[0].value.as_deref(), Some(&b"value-2"[..]));
            assert_eq!(recs[0].timestamp_ms, 1_002);
            assert_eq!(recs[0].headers, vec![("h".to_string(), None)]);
        }
    }

    #[test]
    fn a_corrupt_batch_is_an_error() {
        let mut b = batch(0, 3, false).to_vec();
        let last = b.len() - 1;
        b[last] ^= 1;
        assert!(decode("t", 0, Bytes::from(b), 0).is_err());
    }
}
