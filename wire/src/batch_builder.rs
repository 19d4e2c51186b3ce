//! Encoder of uncompressed Kafka RecordBatch v2 bytes, for producers (the native client,
//! benchmarks, tests). The broker never re-encodes batches; it stores what producers send.
//!
//! Invariant: `build` returns a batch that [`crate::RecordBatch::validate`] accepts.

use bytes::{BufMut, Bytes, BytesMut};

use crate::record_batch::{Compression, BATCH_HEADER_BYTES, BATCH_LENGTH_FIELD_END, MAGIC_V2};

/// Builds one batch record by record.
#[derive(Debug, Clone)]
pub struct BatchBuilder {
    records: BytesMut,
    count: i32,
    base_timestamp_ms: i64,
    max_timestamp_ms: i64,
    producer_id: i64,
    producer_epoch: i16,
    base_sequence: i32,
}

fn put_varint(out: &mut BytesMut, v: i64) {
    let mut z = ((v << 1) ^ (v >> 63)) as u64;
    while z >= 0x80 {
        out.put_u8((z as u8 & 0x7f) | 0x80);
        z >>= 7;
    }
    out.put_u8(z as u8);
}

fn put_bytes(out: &mut BytesMut, b: Option<&[u8]>) {
    match b {
        Some(b) => {
            put_varint(out, b.len() as i64);
            out.put_slice(b);
        }
        None => put_varint(out, -1),
    }
}

impl BatchBuilder {
    /// An empty batch whose first record has timestamp `base_timestamp_ms`.
    pub fn new(base_timestamp_ms: i64) -> BatchBuilder {
        BatchBuilder {
            records: BytesMut::new(),
            count: 0,
            base_timestamp_ms,
            max_timestamp_ms: base_timestamp_ms,
            producer_id: -1,
            producer_epoch: -1,
            base_sequence: -1,
        }
    }

    /// Marks the batch as from an idempotent producer.
    pub fn producer(mut self, producer_id: i64, producer_epoch: i16, base_sequence: i32) -> Self {
        self.producer_id = producer_id;
        self.producer_epoch = producer_epoch;
        self.base_sequence = base_sequence;
        self
    }

    /// Number of records pushed.
    pub fn len(&self) -> i32 {
        self.count
    }

    /// Whether no record was pushed.
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// Bytes the batch will take.
    pub fn size_bytes(&self) -> usize {
        BATCH_HEADER_BYTES + self.records.len()
    }

    /// Appends a record.
    pub fn push(
        &mut self,
        timestamp_ms: i64,
        key: Option<&[u8]>,
        value: Option<&[u8]>,
        headers: &[(&str, Option<&[u8]>)],
    ) {
        let mut body = BytesMut::new();
        body.put_i8(0);
        put_varint(&mut body, timestamp_ms - self.base_timestamp_ms);
        put_varint(&mut body, i64::from(self.count));
        put_bytes(&mut body, key);
        put_bytes(&mut body, value);
        put_varint(&mut body, headers.len() as i64);
        for (k, v) in headers {
            put_bytes(&mut body, Some(k.as_bytes()));
            put_bytes(&mut body, *v);
        }
        put_varint(&mut self.records, body.len() as i64);
        self.records.put_slice(&body);
        self.count += 1;
        self.max_timestamp_ms = self.max_timestamp_ms.max(timestamp_ms);
    }

    /// The encoded records section (what a codec compresses).
    pub fn records_bytes(&self) -> &[u8] {
        &self.records
    }

    /// Encodes the batch (base offset 0, leader epoch -1, CreateTime, uncompressed).
    pub fn build(&self) -> Bytes {
        self.build_with_records(Compression::None, &self.records)
    }

    /// Encodes the batch with `records` as its records section, compressed with
    /// `compression` by the caller (this crate has no codecs): `records` must be
    /// [`Self::records_bytes`] passed through that codec.
    pub fn build_with_records(&self, compression: Compression, records: &[u8]) -> Bytes {
        let codec: i16 = match compression {
            Compression::None => 0,
            Compression::Gzip => 1,
            Compression::Snappy => 2,
            Compression::Lz4 => 3,
            Compression::Zstd => 4,
            Compression::Unknown(c) => i16::from(c),
        };
        let size_bytes = BATCH_HEADER_BYTES + records.len();
        let mut b = BytesMut::with_capacity(size_bytes);
        b.put_i64(0);
        b.put_i32((size_bytes - BATCH_LENGTH_FIELD_END) as i32);
        b.put_i32(-1);
        b.put_i8(MAGIC_V2);
        b.put_u32(0);
        b.put_i16(codec);
        b.put_i32(self.count - 1);
        b.put_i64(self.base_timestamp_ms);
        b.put_i64(self.max_timestamp_ms);
        b.put_i64(self.producer_id);
        b.put_i16(self.producer_epoch);
        b.put_i32(self.base_sequence);
        b.put_i32(self.count);
        b.put_slice(records);
        let crc = crc32c::crc32c(&b[21..]);
        b[17..21].copy_from_slice(&crc.to_be_bytes());
        b.freeze()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::RecordBatch;

    #[test]
    fn built_batches_validate() {
        let mut bb = BatchBuilder::new(1_000);
        for i in 0..5 {
            bb.push(
                1_000 + i,
                Some(b"k"),
                Some(&[7u8; 100]),
                &[("h", Some(b"v"))],
            );
        }
        let batch = RecordBatch::parse(bb.build()).expect("parses");
        batch.validate().expect("valid");
        assert_eq!(batch.record_count(), 5);
        assert_eq!(batch.last_offset_delta(), 4);
        assert_eq!(batch.max_timestamp(), 1_004);
    }
}
