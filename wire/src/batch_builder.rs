//! Encoder of Kafka RecordBatch v2 bytes: for producers (the native client, benchmarks,
//! tests), and for the broker's log cleaner, which rewrites stored batches with fewer
//! records (`BatchHeader`, `empty_batch`). Otherwise the broker stores what producers send.
//!
//! Invariant: `build` returns a batch that [`crate::RecordBatch::validate`] accepts;
//! `BatchHeader::encode` and `empty_batch` return batches that
//! [`crate::RecordBatch::validate_stored`] accepts when their fields are consistent.

use bytes::{BufMut, Bytes, BytesMut};

use crate::record_batch::{
    Attributes, Compression, RecordBatch, ATTRIBUTES_FIELD_START, BATCH_HEADER_BYTES,
    BATCH_LENGTH_FIELD_END, CRC_FIELD_START, MAGIC_V2,
};
use crate::records::put_record;

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
    transactional: bool,
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
            transactional: false,
        }
    }

    /// Marks the batch as from an idempotent producer.
    pub fn producer(mut self, producer_id: i64, producer_epoch: i16, base_sequence: i32) -> Self {
        self.producer_id = producer_id;
        self.producer_epoch = producer_epoch;
        self.base_sequence = base_sequence;
        self
    }

    /// Marks the batch as part of its producer's transaction (set with [`Self::producer`]).
    pub fn transactional(mut self) -> Self {
        self.transactional = true;
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
        put_record(
            &mut self.records,
            timestamp_ms - self.base_timestamp_ms,
            self.count,
            key,
            value,
            headers.iter().map(|(k, v)| (k.as_bytes(), *v)),
        );
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
        BatchHeader {
            base_offset: 0,
            partition_leader_epoch: -1,
            attributes: Attributes::from_raw(if self.transactional {
                Attributes::TRANSACTIONAL
            } else {
                0
            })
            .with_compression(compression),
            last_offset_delta: self.count - 1,
            first_timestamp_ms: self.base_timestamp_ms,
            max_timestamp_ms: self.max_timestamp_ms,
            producer_id: self.producer_id,
            producer_epoch: self.producer_epoch,
            base_sequence: self.base_sequence,
            record_count: self.count,
        }
        .encode(records)
    }
}

/// The fields of a batch header that are not computed from the rest (the length, magic
/// and CRC are), for writing a batch: a producer's (`BatchBuilder`), or a stored batch
/// the log cleaner rewrites with fewer records (`of` the original with some fields
/// changed), keeping its base offset and `last_offset_delta` as Kafka's cleaner does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BatchHeader {
    /// Kafka offset of the batch's first offset.
    pub base_offset: i64,
    /// Leader epoch that appended it.
    pub partition_leader_epoch: i32,
    /// Codec, timestamp type, transactional, control and delete-horizon bits.
    pub attributes: Attributes,
    /// Offsets the batch spans, minus one (more than `record_count - 1` once cleaned).
    pub last_offset_delta: i32,
    /// `baseTimestamp`: the first record's time, or the delete horizon when the
    /// attributes say so.
    pub first_timestamp_ms: i64,
    /// Largest record timestamp.
    pub max_timestamp_ms: i64,
    /// Idempotent producer id, -1 for none.
    pub producer_id: i64,
    /// Its epoch, -1 for none.
    pub producer_epoch: i16,
    /// Sequence of the batch's first offset, -1 for none.
    pub base_sequence: i32,
    /// Records in the section.
    pub record_count: i32,
}

impl BatchHeader {
    /// The header fields of `batch`.
    pub fn of(batch: &RecordBatch) -> BatchHeader {
        BatchHeader {
            base_offset: batch.base_offset(),
            partition_leader_epoch: batch.partition_leader_epoch(),
            attributes: batch.attributes(),
            last_offset_delta: batch.last_offset_delta(),
            first_timestamp_ms: batch.first_timestamp(),
            max_timestamp_ms: batch.max_timestamp(),
            producer_id: batch.producer_id(),
            producer_epoch: batch.producer_epoch(),
            base_sequence: batch.base_sequence(),
            record_count: batch.record_count(),
        }
    }

    /// The batch of this header and `records` (its records section, already compressed
    /// with the attributes' codec), with its length and CRC32C.
    pub fn encode(&self, records: &[u8]) -> Bytes {
        let size_bytes = BATCH_HEADER_BYTES + records.len();
        let mut b = BytesMut::with_capacity(size_bytes);
        b.put_i64(self.base_offset);
        b.put_i32((size_bytes - BATCH_LENGTH_FIELD_END) as i32);
        b.put_i32(self.partition_leader_epoch);
        b.put_i8(MAGIC_V2);
        b.put_u32(0);
        b.put_i16(self.attributes.raw());
        b.put_i32(self.last_offset_delta);
        b.put_i64(self.first_timestamp_ms);
        b.put_i64(self.max_timestamp_ms);
        b.put_i64(self.producer_id);
        b.put_i16(self.producer_epoch);
        b.put_i32(self.base_sequence);
        b.put_i32(self.record_count);
        b.put_slice(records);
        let crc = crc32c::crc32c(&b[ATTRIBUTES_FIELD_START..]);
        b[CRC_FIELD_START..ATTRIBUTES_FIELD_START].copy_from_slice(&crc.to_be_bytes());
        b.freeze()
    }
}

/// A batch with no records in place of `batch`, as Kafka's cleaner writes one to keep a
/// producer's last sequence (`MemoryRecords.writeEmptyHeader`): same offsets, producer
/// fields, leader epoch, timestamp type and transactional and control bits; no codec; both
/// timestamps the original's largest.
pub fn empty_batch(batch: &RecordBatch) -> Bytes {
    let a = batch.attributes();
    let attributes = Attributes::from_raw(a.raw() & !Attributes::DELETE_HORIZON)
        .with_compression(Compression::None);
    BatchHeader {
        attributes,
        first_timestamp_ms: batch.max_timestamp(),
        record_count: 0,
        ..BatchHeader::of(batch)
    }
    .encode(&[])
}

#[cfg(test)]
mod tests {
    use super::*;

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

    #[test]
    fn a_rebuilt_batch_keeps_its_offsets_and_producer() {
        let mut bb = BatchBuilder::new(1_000).producer(7, 2, 40);
        for i in 0..4 {
            bb.push(1_000 + i, Some(b"k"), Some(b"v"), &[]);
        }
        let mut stored = bb.build().to_vec();
        crate::record_batch::set_base_offset(&mut stored, 100).expect("header");
        let orig = RecordBatch::parse(Bytes::from(stored)).expect("parses");
        let records = crate::records::decode_records(
            orig.as_bytes().slice(BATCH_HEADER_BYTES..),
            orig.record_count(),
        )
        .expect("decodes");
        let mut kept = BytesMut::new();
        crate::records::encode_record(&mut kept, &records[2]);
        let rebuilt = BatchHeader {
            record_count: 1,
            max_timestamp_ms: 1_002,
            ..BatchHeader::of(&orig)
        }
        .encode(&kept);
        let b = RecordBatch::parse(rebuilt).expect("parses");
        b.validate_stored().expect("valid as stored");
        assert!(b.validate().is_err(), "a producer may not send it");
        assert_eq!(
            (b.base_offset(), b.last_offset(), b.record_count()),
            (100, 103, 1)
        );
        assert_eq!(
            (b.producer_id(), b.producer_epoch(), b.base_sequence()),
            (7, 2, 40)
        );

        let empty = RecordBatch::parse(empty_batch(&orig)).expect("parses");
        empty.validate_stored().expect("valid as stored");
        assert_eq!(empty.len_bytes(), BATCH_HEADER_BYTES);
        assert_eq!(
            (
                empty.base_offset(),
                empty.last_offset(),
                empty.record_count()
            ),
            (100, 103, 0)
        );
        assert_eq!(empty.first_timestamp(), 1_003);
        assert_eq!(BatchHeader::of(&empty).producer_id, 7);
    }
}
