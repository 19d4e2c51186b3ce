//! Zero-copy view of one Kafka RecordBatch v2 (magic 2), the unit Strand stores and serves.
//!
//! Owns: reading and checking the batch header, the batch CRC32C, the two in-place rewrites
//! the broker makes (base offset, partition leader epoch), and splitting a Produce request's
//! `records` field into batches. Records stay opaque (possibly compressed) bytes: the broker
//! stores and returns the producer's bytes unchanged (ARCHITECTURE.md, "Kafka gateway" and
//! "Storage").
//!
//! Invariant: a [`RecordBatch`] holds exactly one batch framed by its own length field:
//! `BATCH_HEADER_BYTES <= len <= BATCH_BYTES_MAX` and `batchLength + 12 == len`.
//! [`RecordBatch::parse`] establishes it and nothing else builds a `RecordBatch`. Magic,
//! record count and CRC are checked only by [`RecordBatch::validate`].
//!
//! Plain data, no shard: no I/O, no allocation (a batch is a `Bytes` slice of its source).
//! Deliberately absent: decoding or decompressing records, the pre-v2 message sets (magic 0
//! and 1), and rewriting anything the CRC covers.
//!
//! # Layout
//!
//! All integers big-endian. The CRC is CRC32C (Castagnoli) over bytes 21..len, from
//! `attributes` to the end of the batch; the first 21 bytes are not covered, so the broker can
//! rewrite `baseOffset` and `partitionLeaderEpoch` without recomputing it.
//!
//! ```text
//!  byte size  field                 type  CRC  notes
//!     0    8  baseOffset            i64   no   0 from producers; the broker assigns it
//!     8    4  batchLength           i32   no   bytes after this field: len - 12
//!    12    4  partitionLeaderEpoch  i32   no   set by the broker (= Raft term)
//!    16    1  magic                 i8    no   2
//!    17    4  crc                   u32   no   CRC32C of bytes 21..len
//!    21    2  attributes            i16   yes  see below
//!    23    4  lastOffsetDelta       i32   yes  recordCount - 1
//!    27    8  baseTimestamp         i64   yes  timestamp of the first record
//!    35    8  maxTimestamp          i64   yes
//!    43    8  producerId            i64   yes  -1 if not idempotent
//!    51    2  producerEpoch         i16   yes
//!    53    4  baseSequence          i32   yes  -1 if not idempotent
//!    57    4  recordCount           i32   yes
//!    61    …  records                     yes  compressed as a whole if attributes say so
//!
//!  attributes: bits 0-2 compression (0 none, 1 gzip, 2 snappy, 3 lz4, 4 zstd)
//!              bit 3 timestamp type (0 CreateTime, 1 LogAppendTime)
//!              bit 4 transactional, bit 5 control, bit 6 has delete horizon
//! ```

use std::iter::FusedIterator;

use bytes::Bytes;

#[cfg(test)]
mod tests;

/// Bytes in a v2 batch header, up to the first record.
pub const BATCH_HEADER_BYTES: usize = 61;

/// Where the `baseOffset` field (`i64`) starts.
pub const BASE_OFFSET_FIELD_START: usize = 0;
/// Where the `batchLength` field (`i32`) starts.
pub const BATCH_LENGTH_FIELD_START: usize = 8;
/// Where the `batchLength` field ends: it counts the bytes after this point (8 + 4).
pub const BATCH_LENGTH_FIELD_END: usize = 12;
/// Where the `partitionLeaderEpoch` field (`i32`) starts.
pub const PARTITION_LEADER_EPOCH_FIELD_START: usize = 12;
/// Where the `magic` field (`i8`) starts.
pub const MAGIC_FIELD_START: usize = 16;
/// Where the `crc` field (`u32`) starts.
pub const CRC_FIELD_START: usize = 17;
/// Where the `attributes` field (`i16`) starts; the CRC covers from here to the end.
pub const ATTRIBUTES_FIELD_START: usize = 21;
/// Where the `lastOffsetDelta` field (`i32`) starts.
pub const LAST_OFFSET_DELTA_FIELD_START: usize = 23;
/// Where the `baseTimestamp` field (`i64`) starts.
pub const BASE_TIMESTAMP_FIELD_START: usize = 27;
/// Where the `maxTimestamp` field (`i64`) starts.
pub const MAX_TIMESTAMP_FIELD_START: usize = 35;
/// Where the `producerId` field (`i64`) starts.
pub const PRODUCER_ID_FIELD_START: usize = 43;
/// Where the `producerEpoch` field (`i16`) starts.
pub const PRODUCER_EPOCH_FIELD_START: usize = 51;
/// Where the `baseSequence` field (`i32`) starts.
pub const BASE_SEQUENCE_FIELD_START: usize = 53;
/// Where the `recordCount` field (`i32`) starts.
pub const RECORD_COUNT_FIELD_START: usize = 57;

/// The only `magic` this crate accepts: RecordBatch v2, used by Produce v3 and later.
pub const MAGIC_V2: i8 = 2;

/// Smallest valid `batchLength`: a header with no records.
pub const BATCH_LENGTH_MIN: i32 = 49;

/// Largest batch, in total bytes (`batchLength + 12`), that this crate slices out of a buffer.
///
/// A hard ceiling, not the per-topic `max.message.bytes` (Kafka's default is 1 MiB + 12 bytes),
/// which the broker enforces below it. 64 MiB is far above any producer default
/// (`batch.size` 16 KiB, `max.request.size` 1 MiB) and below Kafka's 100 MiB
/// `socket.request.max.bytes`, so a batch always fits in one request frame. A larger length
/// field yields [`BatchError::TooLarge`] before anything is sliced or allocated.
pub const BATCH_BYTES_MAX: usize = 64 * 1024 * 1024;

/// Fewest bytes one v2 record can take uncompressed: a 1-byte varint for each of length,
/// timestamp delta, offset delta, key length, value length and header count, plus the
/// attributes byte. Bounds the record count of an uncompressed batch without decoding it.
pub const RECORD_BYTES_MIN: usize = 7;

const COMPRESSION_MASK: u8 = 0x07;
const TIMESTAMP_TYPE_BIT: i16 = 1 << 3;
const TRANSACTIONAL_BIT: i16 = 1 << 4;
const CONTROL_BIT: i16 = 1 << 5;
const DELETE_HORIZON_BIT: i16 = 1 << 6;

const _: () = assert!(BATCH_LENGTH_FIELD_END == BATCH_LENGTH_FIELD_START + 4);
const _: () = assert!(PARTITION_LEADER_EPOCH_FIELD_START == BATCH_LENGTH_FIELD_END);
const _: () = assert!(MAGIC_FIELD_START == PARTITION_LEADER_EPOCH_FIELD_START + 4);
const _: () = assert!(CRC_FIELD_START == MAGIC_FIELD_START + 1);
const _: () = assert!(ATTRIBUTES_FIELD_START == CRC_FIELD_START + 4);
const _: () = assert!(LAST_OFFSET_DELTA_FIELD_START == ATTRIBUTES_FIELD_START + 2);
const _: () = assert!(BASE_TIMESTAMP_FIELD_START == LAST_OFFSET_DELTA_FIELD_START + 4);
const _: () = assert!(MAX_TIMESTAMP_FIELD_START == BASE_TIMESTAMP_FIELD_START + 8);
const _: () = assert!(PRODUCER_ID_FIELD_START == MAX_TIMESTAMP_FIELD_START + 8);
const _: () = assert!(PRODUCER_EPOCH_FIELD_START == PRODUCER_ID_FIELD_START + 8);
const _: () = assert!(BASE_SEQUENCE_FIELD_START == PRODUCER_EPOCH_FIELD_START + 2);
const _: () = assert!(RECORD_COUNT_FIELD_START == BASE_SEQUENCE_FIELD_START + 4);
const _: () = assert!(BATCH_HEADER_BYTES == RECORD_COUNT_FIELD_START + 4);
const _: () = assert!(BATCH_LENGTH_MIN as usize == BATCH_HEADER_BYTES - BATCH_LENGTH_FIELD_END);
// The length field is an i32, so a batch can never be larger than this anyway.
const _: () = assert!(BATCH_BYTES_MAX <= i32::MAX as usize);

const INVARIANT_LEN: &str = "RecordBatch invariant: parse checked len >= BATCH_HEADER_BYTES";

/// Why bytes are not one acceptable v2 batch. Each variant carries the values it saw.
///
/// The doc of each variant names the error a Kafka broker answers for the same input; the
/// broker maps variants to Kafka error codes in one exhaustive `match`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BatchError {
    /// Fewer bytes than the batch needs: a buffer shorter than the header, or a trailing
    /// batch cut short. Kafka: `CORRUPT_MESSAGE`.
    #[error("batch truncated: needs {needed} bytes, {available} available")]
    Truncated {
        /// Bytes the batch needs (the header size when even the length field is missing).
        needed: usize,
        /// Bytes there were.
        available: usize,
    },
    /// The `batchLength` field is below [`BATCH_LENGTH_MIN`] (it may be negative).
    /// Kafka: `CORRUPT_MESSAGE`.
    #[error(
        "batch length field {batch_length} is below the minimum {}",
        BATCH_LENGTH_MIN
    )]
    LengthTooSmall {
        /// The `batchLength` field.
        batch_length: i32,
    },
    /// The batch is larger than [`BATCH_BYTES_MAX`]. Kafka: `MESSAGE_TOO_LARGE`.
    #[error(
        "batch of {batch_bytes} bytes exceeds the limit of {} bytes",
        BATCH_BYTES_MAX
    )]
    TooLarge {
        /// Total batch size, `batchLength + 12`.
        batch_bytes: usize,
    },
    /// `batchLength + 12` differs from the number of bytes given to [`RecordBatch::parse`].
    /// Kafka: `CORRUPT_MESSAGE`.
    #[error("batch length field {declared} + 12 does not match the {actual} bytes given")]
    LengthMismatch {
        /// The `batchLength` field.
        declared: i32,
        /// Bytes given.
        actual: usize,
    },
    /// `magic` is not 2. Kafka (Produce v3+): `INVALID_RECORD`.
    #[error("batch magic {magic} is not 2")]
    BadMagic {
        /// The `magic` field.
        magic: i8,
    },
    /// The stored CRC differs from the CRC32C of bytes 21..len. Kafka: `CORRUPT_MESSAGE`,
    /// which producers retry.
    #[error("batch crc mismatch: stored {stored:#010x}, computed {computed:#010x}")]
    CrcMismatch {
        /// The `crc` field.
        stored: u32,
        /// CRC32C of the covered bytes.
        computed: u32,
    },
    /// `recordCount` is not positive. Kafka: `INVALID_RECORD`.
    #[error("batch record count {count} is not positive")]
    RecordCount {
        /// The `recordCount` field.
        count: i32,
    },
    /// `lastOffsetDelta + 1 != recordCount`. Kafka: `INVALID_RECORD`.
    #[error(
        "batch last offset delta {last_offset_delta} does not match record count {record_count}"
    )]
    OffsetDeltaMismatch {
        /// The `lastOffsetDelta` field.
        last_offset_delta: i32,
        /// The `recordCount` field.
        record_count: i32,
    },
    /// The compression codec (attribute bits 0-2) is 5, 6 or 7. Kafka throws
    /// `IllegalArgumentException` (`UNKNOWN_SERVER_ERROR`); `INVALID_RECORD` fits better.
    #[error("batch compression codec {codec} is unknown")]
    UnknownCompression {
        /// Attribute bits 0-2.
        codec: u8,
    },
    /// An uncompressed batch declares more records than its bytes can hold at
    /// [`RECORD_BYTES_MIN`] each. Kafka finds this while iterating records:
    /// `INVALID_RECORD` (or `CORRUPT_MESSAGE`).
    #[error("batch declares {record_count} records in {records_bytes} uncompressed bytes")]
    RecordCountExceedsBytes {
        /// The `recordCount` field.
        record_count: i32,
        /// Bytes after the header.
        records_bytes: usize,
    },
    /// A producer sent a batch whose `baseOffset` is not 0. Kafka: `INVALID_RECORD`.
    #[error("produced batch base offset {base_offset} is not 0")]
    BaseOffsetNotZero {
        /// The `baseOffset` field.
        base_offset: i64,
    },
    /// A producer sent a control batch. Kafka: `INVALID_RECORD`.
    #[error("producers may not write control batches")]
    ControlFromProducer,
    /// An idempotent producer (`producerId >= 0`) sent a negative `baseSequence`.
    /// Kafka: `INVALID_RECORD`.
    #[error("batch from producer id {producer_id} has invalid base sequence {base_sequence}")]
    BadSequence {
        /// The `producerId` field.
        producer_id: i64,
        /// The `baseSequence` field.
        base_sequence: i32,
    },
}

/// One RecordBatch v2, a zero-copy view over its bytes.
///
/// Getters read the header in place on every call; they are a few loads each.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordBatch {
    // Invariant: BATCH_HEADER_BYTES <= len <= BATCH_BYTES_MAX and batchLength + 12 == len.
    bytes: Bytes,
}

impl RecordBatch {
    /// Frames `bytes` as exactly one batch: at least [`BATCH_HEADER_BYTES`], at most
    /// [`BATCH_BYTES_MAX`], and `batchLength + 12 == bytes.len()`.
    ///
    /// Checks nothing else: call [`RecordBatch::validate`] before trusting any other field.
    pub fn parse(bytes: Bytes) -> Result<RecordBatch, BatchError> {
        let available = bytes.len();
        if available < BATCH_HEADER_BYTES {
            return Err(BatchError::Truncated {
                needed: BATCH_HEADER_BYTES,
                available,
            });
        }
        if available > BATCH_BYTES_MAX {
            return Err(BatchError::TooLarge {
                batch_bytes: available,
            });
        }
        let declared = read_i32(&bytes, BATCH_LENGTH_FIELD_START).ok_or(BatchError::Truncated {
            needed: BATCH_HEADER_BYTES,
            available,
        })?;
        let declared_bytes = usize::try_from(declared)
            .ok()
            .and_then(|length| length.checked_add(BATCH_LENGTH_FIELD_END));
        if declared_bytes != Some(available) {
            return Err(BatchError::LengthMismatch {
                declared,
                actual: available,
            });
        }
        Ok(RecordBatch { bytes })
    }

    /// Checks what a Kafka broker checks in a batch header, in Kafka's order: magic is 2,
    /// the CRC32C matches, `recordCount >= 1`, `lastOffsetDelta == recordCount - 1`; then
    /// that the compression codec is known and an uncompressed batch's bytes can hold its
    /// record count.
    ///
    /// The CRC comes before the counts so that a bit flipped in transit is reported as
    /// [`BatchError::CrcMismatch`] (which producers retry), as Kafka does. The records are
    /// not decoded. Checks that depend on who sent the batch are in
    /// [`RecordBatch::validate_produce`].
    pub fn validate(&self) -> Result<(), BatchError> {
        self.validate_magic_and_crc()?;
        let record_count = self.record_count();
        if record_count < 1 {
            return Err(BatchError::RecordCount {
                count: record_count,
            });
        }
        let last_offset_delta = self.last_offset_delta();
        if i64::from(last_offset_delta) + 1 != i64::from(record_count) {
            return Err(BatchError::OffsetDeltaMismatch {
                last_offset_delta,
                record_count,
            });
        }
        self.validate_codec_and_count(record_count)
    }

    fn validate_magic_and_crc(&self) -> Result<(), BatchError> {
        let magic = self.magic();
        if magic != MAGIC_V2 {
            return Err(BatchError::BadMagic { magic });
        }
        let stored = self.crc();
        let computed = self.compute_crc();
        if stored != computed {
            return Err(BatchError::CrcMismatch { stored, computed });
        }
        Ok(())
    }

    fn validate_codec_and_count(&self, record_count: i32) -> Result<(), BatchError> {
        match self.attributes().compression() {
            Compression::Unknown(codec) => Err(BatchError::UnknownCompression { codec }),
            Compression::None => {
                let records_bytes = self
                    .len_bytes()
                    .checked_sub(BATCH_HEADER_BYTES)
                    .expect(INVARIANT_LEN);
                let count_max = records_bytes / RECORD_BYTES_MIN;
                let fits = usize::try_from(record_count).is_ok_and(|count| count <= count_max);
                if fits {
                    Ok(())
                } else {
                    Err(BatchError::RecordCountExceedsBytes {
                        record_count,
                        records_bytes,
                    })
                }
            }
            Compression::Gzip | Compression::Snappy | Compression::Lz4 | Compression::Zstd => {
                Ok(())
            }
        }
    }

    /// What a batch read back from the log must satisfy, where compaction may have removed
    /// records (so [`RecordBatch::validate`] does not apply): magic 2, the CRC32C,
    /// `0 <= recordCount <= lastOffsetDelta + 1`, and a known codec whose uncompressed
    /// bytes can hold the count.
    pub fn validate_stored(&self) -> Result<(), BatchError> {
        self.validate_magic_and_crc()?;
        let (record_count, last_offset_delta) = (self.record_count(), self.last_offset_delta());
        if record_count < 0 || i64::from(record_count) > i64::from(last_offset_delta) + 1 {
            return Err(BatchError::OffsetDeltaMismatch {
                last_offset_delta,
                record_count,
            });
        }
        self.validate_codec_and_count(record_count)
    }

    /// [`RecordBatch::validate`] plus what Kafka checks only in batches a producer sends:
    /// `baseOffset` is 0, it is not a control batch, and an idempotent producer
    /// (`producerId >= 0`) sends a non-negative `baseSequence`.
    ///
    /// Not checked here, because they need more than the header: one batch per partition in
    /// a Produce request, record timestamps against `message.timestamp.*` configs, keys on
    /// compacted topics, and the producer's sequence state.
    pub fn validate_produce(&self) -> Result<(), BatchError> {
        self.validate()?;
        let base_offset = self.base_offset();
        if base_offset != 0 {
            return Err(BatchError::BaseOffsetNotZero { base_offset });
        }
        if self.attributes().is_control() {
            return Err(BatchError::ControlFromProducer);
        }
        let producer_id = self.producer_id();
        let base_sequence = self.base_sequence();
        if producer_id >= 0 && base_sequence < 0 {
            return Err(BatchError::BadSequence {
                producer_id,
                base_sequence,
            });
        }
        Ok(())
    }

    /// The `baseOffset` field: the Kafka offset of the first record.
    pub fn base_offset(&self) -> i64 {
        i64::from_be_bytes(self.field(BASE_OFFSET_FIELD_START))
    }

    /// The `batchLength` field: bytes after it, `len_bytes() - 12`.
    pub fn batch_length(&self) -> i32 {
        i32::from_be_bytes(self.field(BATCH_LENGTH_FIELD_START))
    }

    /// The `partitionLeaderEpoch` field.
    pub fn partition_leader_epoch(&self) -> i32 {
        i32::from_be_bytes(self.field(PARTITION_LEADER_EPOCH_FIELD_START))
    }

    /// The `magic` field; 2 once validated.
    pub fn magic(&self) -> i8 {
        i8::from_be_bytes(self.field(MAGIC_FIELD_START))
    }

    /// The `crc` field as stored.
    pub fn crc(&self) -> u32 {
        u32::from_be_bytes(self.field(CRC_FIELD_START))
    }

    /// The `attributes` field.
    pub fn attributes(&self) -> Attributes {
        Attributes(i16::from_be_bytes(self.field(ATTRIBUTES_FIELD_START)))
    }

    /// The `lastOffsetDelta` field: last record's offset minus `baseOffset`.
    pub fn last_offset_delta(&self) -> i32 {
        i32::from_be_bytes(self.field(LAST_OFFSET_DELTA_FIELD_START))
    }

    /// The `baseTimestamp` field: the first record's timestamp (Kafka's `firstTimestamp`).
    pub fn first_timestamp(&self) -> i64 {
        i64::from_be_bytes(self.field(BASE_TIMESTAMP_FIELD_START))
    }

    /// The `maxTimestamp` field.
    pub fn max_timestamp(&self) -> i64 {
        i64::from_be_bytes(self.field(MAX_TIMESTAMP_FIELD_START))
    }

    /// The `producerId` field; -1 when the producer is not idempotent.
    pub fn producer_id(&self) -> i64 {
        i64::from_be_bytes(self.field(PRODUCER_ID_FIELD_START))
    }

    /// The `producerEpoch` field.
    pub fn producer_epoch(&self) -> i16 {
        i16::from_be_bytes(self.field(PRODUCER_EPOCH_FIELD_START))
    }

    /// The `baseSequence` field; -1 when the producer is not idempotent.
    pub fn base_sequence(&self) -> i32 {
        i32::from_be_bytes(self.field(BASE_SEQUENCE_FIELD_START))
    }

    /// The `recordCount` field.
    pub fn record_count(&self) -> i32 {
        i32::from_be_bytes(self.field(RECORD_COUNT_FIELD_START))
    }

    /// Kafka offset of the last record, `baseOffset + lastOffsetDelta`. Saturates at the
    /// `i64` bounds instead of overflowing; a validated batch with an assigned base offset
    /// never gets there.
    pub fn last_offset(&self) -> i64 {
        self.base_offset()
            .saturating_add(i64::from(self.last_offset_delta()))
    }

    /// Total size of the batch in bytes, header included.
    pub fn len_bytes(&self) -> usize {
        self.bytes.len()
    }

    /// The batch bytes, exactly as received.
    pub fn as_bytes(&self) -> &Bytes {
        &self.bytes
    }

    /// Gives back the batch bytes without copying.
    pub fn into_bytes(self) -> Bytes {
        self.bytes
    }

    /// CRC32C (Castagnoli) of bytes 21..len, to compare with [`RecordBatch::crc`].
    pub fn compute_crc(&self) -> u32 {
        crc32c::crc32c(
            self.bytes
                .get(ATTRIBUTES_FIELD_START..)
                .expect(INVARIANT_LEN),
        )
    }

    fn field<const N: usize>(&self, start: usize) -> [u8; N] {
        read_array(&self.bytes, start).expect(INVARIANT_LEN)
    }
}

/// Writes `base_offset` into the `baseOffset` field of the batch at the start of `batch`.
///
/// The CRC does not cover this field, so a valid batch stays valid. Fails only when `batch`
/// is shorter than the header; nothing else is checked.
pub fn set_base_offset(batch: &mut [u8], base_offset: i64) -> Result<(), BatchError> {
    write_header_field(batch, BASE_OFFSET_FIELD_START, base_offset.to_be_bytes())
}

/// Writes `epoch` into the `partitionLeaderEpoch` field of the batch at the start of `batch`.
///
/// The CRC does not cover this field, so a valid batch stays valid. Fails only when `batch`
/// is shorter than the header; nothing else is checked.
pub fn set_partition_leader_epoch(batch: &mut [u8], epoch: i32) -> Result<(), BatchError> {
    write_header_field(
        batch,
        PARTITION_LEADER_EPOCH_FIELD_START,
        epoch.to_be_bytes(),
    )
}

/// Writes the producer id, epoch and base sequence of the batch at the start of `batch`
/// and its CRC computed again (the CRC covers them): a producer resending a batch under a
/// new producer id. Fails only when `batch` is shorter than the header.
pub fn set_producer(
    batch: &mut [u8],
    producer_id: i64,
    producer_epoch: i16,
    base_sequence: i32,
) -> Result<(), BatchError> {
    write_header_field(batch, PRODUCER_ID_FIELD_START, producer_id.to_be_bytes())?;
    write_header_field(
        batch,
        PRODUCER_EPOCH_FIELD_START,
        producer_epoch.to_be_bytes(),
    )?;
    write_header_field(
        batch,
        BASE_SEQUENCE_FIELD_START,
        base_sequence.to_be_bytes(),
    )?;
    let crc = crc32c::crc32c(batch.get(ATTRIBUTES_FIELD_START..).unwrap_or_default());
    write_header_field(batch, CRC_FIELD_START, crc.to_be_bytes())
}

fn write_header_field<const N: usize>(
    batch: &mut [u8],
    start: usize,
    value: [u8; N],
) -> Result<(), BatchError> {
    let truncated = BatchError::Truncated {
        needed: BATCH_HEADER_BYTES,
        available: batch.len(),
    };
    if batch.len() < BATCH_HEADER_BYTES {
        return Err(truncated);
    }
    let field = batch
        .get_mut(start..)
        .and_then(|rest| rest.first_chunk_mut::<N>())
        .ok_or(truncated)?;
    *field = value;
    Ok(())
}

/// The `attributes` field of a batch header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Attributes(i16);

impl Attributes {
    /// Wraps a raw `attributes` value.
    pub const fn from_raw(raw: i16) -> Attributes {
        Attributes(raw)
    }

    /// The field as stored.
    pub const fn raw(self) -> i16 {
        self.0
    }

    /// Compression codec of the records (bits 0-2).
    pub const fn compression(self) -> Compression {
        let [_, low] = self.0.to_be_bytes();
        match low & COMPRESSION_MASK {
            0 => Compression::None,
            1 => Compression::Gzip,
            2 => Compression::Snappy,
            3 => Compression::Lz4,
            4 => Compression::Zstd,
            codec => Compression::Unknown(codec),
        }
    }

    /// Meaning of the record timestamps (bit 3).
    pub const fn timestamp_type(self) -> TimestampType {
        if self.0 & TIMESTAMP_TYPE_BIT == 0 {
            TimestampType::CreateTime
        } else {
            TimestampType::LogAppendTime
        }
    }

    /// Whether the batch is part of a transaction (bit 4).
    pub const fn is_transactional(self) -> bool {
        self.0 & TRANSACTIONAL_BIT != 0
    }

    /// Whether the batch holds control records (transaction markers; bit 5).
    pub const fn is_control(self) -> bool {
        self.0 & CONTROL_BIT != 0
    }

    /// Whether compaction set a delete horizon in `baseTimestamp` (bit 6).
    pub const fn has_delete_horizon(self) -> bool {
        self.0 & DELETE_HORIZON_BIT != 0
    }

    /// The delete-horizon bit (KIP-534), for masks.
    pub const DELETE_HORIZON: i16 = DELETE_HORIZON_BIT;

    /// The transactional bit, for building attributes.
    pub const TRANSACTIONAL: i16 = TRANSACTIONAL_BIT;

    /// The control bit, for building attributes.
    pub const CONTROL: i16 = CONTROL_BIT;

    /// These attributes with the codec bits set to `compression`.
    pub const fn with_compression(self, compression: Compression) -> Attributes {
        Attributes((self.0 & !(COMPRESSION_MASK as i16)) | compression.code() as i16)
    }

    /// These attributes with the timestamp-type bit saying `t`.
    pub const fn with_timestamp_type(self, t: TimestampType) -> Attributes {
        match t {
            TimestampType::CreateTime => Attributes(self.0 & !TIMESTAMP_TYPE_BIT),
            TimestampType::LogAppendTime => Attributes(self.0 | TIMESTAMP_TYPE_BIT),
        }
    }

    /// These attributes with the delete-horizon bit set.
    pub const fn with_delete_horizon(self) -> Attributes {
        Attributes(self.0 | DELETE_HORIZON_BIT)
    }
}

/// Compression codec of a batch's records.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Compression {
    /// Codec 0.
    None,
    /// Codec 1.
    Gzip,
    /// Codec 2.
    Snappy,
    /// Codec 3.
    Lz4,
    /// Codec 4.
    Zstd,
    /// Codecs 5-7, which Kafka does not define; [`RecordBatch::validate`] rejects them.
    Unknown(u8),
}

impl Compression {
    /// The codec number in the attribute bits 0-2.
    pub const fn code(self) -> u8 {
        match self {
            Compression::None => 0,
            Compression::Gzip => 1,
            Compression::Snappy => 2,
            Compression::Lz4 => 3,
            Compression::Zstd => 4,
            Compression::Unknown(c) => c & COMPRESSION_MASK,
        }
    }
}

/// Meaning of a batch's record timestamps.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TimestampType {
    /// Set by the producer when it created the record.
    CreateTime,
    /// Set by the broker when it appended the batch (then `maxTimestamp` holds it).
    LogAppendTime,
}

/// Iterates over the batches in `records`, a concatenation of batches such as the `records`
/// field of a Produce request partition. Zero-copy: each batch is a slice of `records`.
///
/// Each batch's length field is checked against [`BATCH_LENGTH_MIN`], [`BATCH_BYTES_MAX`] and
/// the bytes left before anything is sliced. The first bad batch yields one `Err` and ends the
/// iteration, since the bytes after it cannot be framed; a batch cut short at the end yields
/// [`BatchError::Truncated`]. Yielded batches are framed, not validated.
pub fn batches(records: Bytes) -> BatchIter {
    BatchIter { rest: records }
}

/// Iterator returned by [`batches`].
#[derive(Debug, Clone)]
pub struct BatchIter {
    // Invariant: empty once an error has been yielded, so the iterator is fused.
    rest: Bytes,
}

impl Iterator for BatchIter {
    type Item = Result<RecordBatch, BatchError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.rest.is_empty() {
            return None;
        }
        match next_batch_bytes(&self.rest) {
            Ok(batch_bytes) => Some(RecordBatch::parse(self.rest.split_to(batch_bytes))),
            Err(error) => {
                self.rest = Bytes::new();
                Some(Err(error))
            }
        }
    }
}

impl FusedIterator for BatchIter {}

/// Size of the batch at the start of `rest`, from its length field, checked before slicing.
fn next_batch_bytes(rest: &[u8]) -> Result<usize, BatchError> {
    let available = rest.len();
    let batch_length = read_i32(rest, BATCH_LENGTH_FIELD_START).ok_or(BatchError::Truncated {
        needed: BATCH_HEADER_BYTES,
        available,
    })?;
    if batch_length < BATCH_LENGTH_MIN {
        return Err(BatchError::LengthTooSmall { batch_length });
    }
    // i32 to usize cannot fail for a positive value on the 32- and 64-bit targets we build for;
    // if it ever did, the batch is too large for this machine anyway.
    let batch_bytes = usize::try_from(batch_length)
        .ok()
        .and_then(|length| length.checked_add(BATCH_LENGTH_FIELD_END))
        .unwrap_or(usize::MAX);
    if batch_bytes > BATCH_BYTES_MAX {
        return Err(BatchError::TooLarge { batch_bytes });
    }
    if batch_bytes > available {
        return Err(BatchError::Truncated {
            needed: batch_bytes,
            available,
        });
    }
    Ok(batch_bytes)
}

fn read_array<const N: usize>(bytes: &[u8], start: usize) -> Option<[u8; N]> {
    bytes.get(start..)?.first_chunk::<N>().copied()
}

fn read_i32(bytes: &[u8], start: usize) -> Option<i32> {
    read_array(bytes, start).map(i32::from_be_bytes)
}
