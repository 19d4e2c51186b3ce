//! Transaction markers: the control batches a transaction coordinator has written to each
//! partition of a transaction when it ends (Kafka's `EndTransactionMarker`).
//!
//! A marker batch has the transactional and control bits set, the producer id and epoch of
//! the transaction, no sequence (-1), no codec, and exactly one record: its key is the
//! control record key (`version: int16 = 0`, `type: int16`, 0 = abort, 1 = commit), its
//! value the marker (`version: int16 = 0`, `coordinator_epoch: int32`). It takes one
//! offset, and consumers never see it as a record.
//!
//! Invariant: `marker_batch` writes what `Marker::of` reads back; `Marker::of` never panics
//! and refuses (with `Err`) a control batch whose first record is not a marker it knows.

use bytes::Bytes;

use crate::batch_builder::BatchHeader;
use crate::record_batch::{Attributes, Compression, RecordBatch, BATCH_HEADER_BYTES};
use crate::records::{decode_records, put_record, RecordError};

/// The control record key version written and read.
const KEY_VERSION: i16 = 0;
/// The marker value version written; later versions are read by their common prefix.
const VALUE_VERSION: i16 = 0;
/// Bytes of a control record key: version and type.
const KEY_BYTES: usize = 4;
/// Bytes of a marker value at version 0: version and coordinator epoch.
const VALUE_BYTES: usize = 6;

/// How a transaction ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum MarkerKind {
    /// Its records are to be skipped by read_committed consumers.
    Abort,
    /// Its records are visible to read_committed consumers.
    Commit,
}

impl MarkerKind {
    /// The control record type code.
    pub const fn code(self) -> i16 {
        match self {
            MarkerKind::Abort => 0,
            MarkerKind::Commit => 1,
        }
    }
}

/// Why a control batch is not a marker this crate reads.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ControlError {
    /// The batch is not a control batch.
    #[error("not a control batch")]
    NotControl,
    /// A control batch must be uncompressed and hold one record.
    #[error("control batch with {records} records, codec {codec:?}")]
    Shape {
        /// Records in the header.
        records: i32,
        /// Its codec.
        codec: Compression,
    },
    /// The record does not decode.
    #[error(transparent)]
    Record(#[from] RecordError),
    /// Key or value missing or too short.
    #[error("control record {what} of {len} bytes")]
    Short {
        /// "key" or "value".
        what: &'static str,
        /// Bytes found.
        len: usize,
    },
    /// A key version this crate does not read.
    #[error("control record key version {0}")]
    KeyVersion(i16),
    /// A control record other than a transaction marker (e.g. Kafka's leader change, 2).
    #[error("control record type {0} is not a transaction marker")]
    Type(i16),
    /// A negative value version.
    #[error("transaction marker version {0}")]
    ValueVersion(i16),
}

/// One transaction marker.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Marker {
    /// Commit or abort.
    pub kind: MarkerKind,
    /// Epoch of the coordinator that wrote it (fences markers of a stale coordinator).
    pub coordinator_epoch: i32,
}

impl Marker {
    /// The marker a control batch holds.
    pub fn of(batch: &RecordBatch) -> Result<Marker, ControlError> {
        let a = batch.attributes();
        if !a.is_control() {
            return Err(ControlError::NotControl);
        }
        let codec = a.compression();
        if codec != Compression::None || batch.record_count() != 1 {
            return Err(ControlError::Shape {
                records: batch.record_count(),
                codec,
            });
        }
        let body = batch.as_bytes().slice(BATCH_HEADER_BYTES..);
        let record = decode_records(body, 1)?
            .pop()
            .ok_or(ControlError::Record(RecordError::Truncated { at: 0 }))?;
        let key = record.key.unwrap_or_default();
        let value = record.value.unwrap_or_default();
        if key.len() < KEY_BYTES {
            return Err(ControlError::Short {
                what: "key",
                len: key.len(),
            });
        }
        let key_version = i16::from_be_bytes([key[0], key[1]]);
        if key_version != KEY_VERSION {
            return Err(ControlError::KeyVersion(key_version));
        }
        let kind = match i16::from_be_bytes([key[2], key[3]]) {
            0 => MarkerKind::Abort,
            1 => MarkerKind::Commit,
            other => return Err(ControlError::Type(other)),
        };
        if value.len() < VALUE_BYTES {
            return Err(ControlError::Short {
                what: "value",
                len: value.len(),
            });
        }
        let value_version = i16::from_be_bytes([value[0], value[1]]);
        if value_version < 0 {
            return Err(ControlError::ValueVersion(value_version));
        }
        let coordinator_epoch = i32::from_be_bytes([value[2], value[3], value[4], value[5]]);
        Ok(Marker {
            kind,
            coordinator_epoch,
        })
    }
}

/// The marker batch ending producer `producer_id`'s transaction (base offset 0: the log
/// assigns it), timestamped `timestamp_ms`.
pub fn marker_batch(
    producer_id: i64,
    producer_epoch: i16,
    marker: Marker,
    timestamp_ms: i64,
) -> Bytes {
    let mut key = [0u8; KEY_BYTES];
    key[..2].copy_from_slice(&KEY_VERSION.to_be_bytes());
    key[2..].copy_from_slice(&marker.kind.code().to_be_bytes());
    let mut value = [0u8; VALUE_BYTES];
    value[..2].copy_from_slice(&VALUE_VERSION.to_be_bytes());
    value[2..].copy_from_slice(&marker.coordinator_epoch.to_be_bytes());
    let mut records = bytes::BytesMut::new();
    put_record(
        &mut records,
        0,
        0,
        Some(&key),
        Some(&value),
        std::iter::empty(),
    );
    BatchHeader {
        base_offset: 0,
        partition_leader_epoch: -1,
        attributes: Attributes::from_raw(Attributes::TRANSACTIONAL | Attributes::CONTROL),
        last_offset_delta: 0,
        first_timestamp_ms: timestamp_ms,
        max_timestamp_ms: timestamp_ms,
        producer_id,
        producer_epoch,
        base_sequence: -1,
        record_count: 1,
    }
    .encode(&records)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::BatchBuilder;
    use proptest::prelude::*;

    fn parse(b: Bytes) -> RecordBatch {
        let b = RecordBatch::parse(b).expect("parses");
        b.validate_stored().expect("valid");
        b
    }

    #[test]
    fn a_marker_batch_reads_back() {
        for kind in [MarkerKind::Abort, MarkerKind::Commit] {
            let m = Marker {
                kind,
                coordinator_epoch: 7,
            };
            let b = parse(marker_batch(42, 3, m, 1_000));
            let a = b.attributes();
            assert!(a.is_control() && a.is_transactional());
            assert_eq!(
                (b.producer_id(), b.producer_epoch(), b.base_sequence()),
                (42, 3, -1)
            );
            assert_eq!((b.record_count(), b.last_offset_delta()), (1, 0));
            assert_eq!(Marker::of(&b), Ok(m));
        }
    }

    #[test]
    fn a_data_batch_is_not_a_marker() {
        let mut builder = BatchBuilder::new(0);
        builder.push(0, Some(b"\0\0\0\x01"), Some(b"\0\0\0\0\0\0"), &[]);
        assert_eq!(
            Marker::of(&parse(builder.build())),
            Err(ControlError::NotControl)
        );
    }

    #[test]
    fn unknown_control_records_are_refused() {
        let m = Marker {
            kind: MarkerKind::Commit,
            coordinator_epoch: 0,
        };
        let good = marker_batch(1, 0, m, 0);
        // The record's key starts 2 bytes after the key-length varint: find the type.
        let at = good
            .windows(4)
            .rposition(|w| w == [0, 0, 0, 1])
            .expect("key in the batch");
        let mut bad = good.to_vec();
        bad[at + 3] = 2; // LEADER_CHANGE
        let mut header = BatchHeader::of(&RecordBatch::parse(Bytes::from(bad.clone())).unwrap());
        header.base_offset = 0;
        let rebuilt = header.encode(&bad[BATCH_HEADER_BYTES..]);
        assert_eq!(Marker::of(&parse(rebuilt)), Err(ControlError::Type(2)));
    }

    proptest! {
        #[test]
        fn any_marker_round_trips(pid in 0i64.., epoch in 0i16.., ce in any::<i32>(), commit: bool) {
            let kind = if commit { MarkerKind::Commit } else { MarkerKind::Abort };
            let m = Marker { kind, coordinator_epoch: ce };
            prop_assert_eq!(Marker::of(&parse(marker_batch(pid, epoch, m, 5))), Ok(m));
        }

        #[test]
        fn any_control_batch_bytes_never_panic(records in proptest::collection::vec(any::<u8>(), 0..64), count in -1i32..3) {
            let header = BatchHeader {
                base_offset: 0,
                partition_leader_epoch: -1,
                attributes: Attributes::from_raw(Attributes::TRANSACTIONAL | Attributes::CONTROL),
                last_offset_delta: 0,
                first_timestamp_ms: 0,
                max_timestamp_ms: 0,
                producer_id: 1,
                producer_epoch: 0,
                base_sequence: -1,
                record_count: count,
            };
            if let Ok(b) = RecordBatch::parse(header.encode(&records)) {
                let _ = Marker::of(&b);
            }
        }
    }
}
