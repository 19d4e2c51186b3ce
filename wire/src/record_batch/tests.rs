//! Data-driven unit tests (one `check`) and property tests against the independent encoder
//! of the `kafka-protocol` crate.

use bytes::{Bytes, BytesMut};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::records as kp;
use proptest::collection::vec;
use proptest::option;
use proptest::prelude::*;

use super::*;

/// One record as a producer encodes it: attributes 0, timestamp and offset deltas 0,
/// null key, value "v", no headers; led by its varint length (zigzag 7 = 14).
const RECORD: [u8; 8] = [14, 0, 0, 0, 1, 2, b'v', 0];

/// Header fields of a hand-built batch. `Spec::default()` is a valid one-record batch as a
/// non-idempotent producer sends it.
#[derive(Debug, Clone)]
struct Spec {
    base_offset: i64,
    /// `None`: the right value, `records.len() + 49`.
    batch_length: Option<i32>,
    partition_leader_epoch: i32,
    magic: i8,
    /// `None`: the right CRC.
    crc: Option<u32>,
    attributes: i16,
    last_offset_delta: i32,
    first_timestamp: i64,
    max_timestamp: i64,
    producer_id: i64,
    producer_epoch: i16,
    base_sequence: i32,
    record_count: i32,
    records: Vec<u8>,
}

impl Default for Spec {
    fn default() -> Spec {
        Spec {
            base_offset: 0,
            batch_length: None,
            partition_leader_epoch: -1,
            magic: 2,
            crc: None,
            attributes: 0,
            last_offset_delta: 0,
            first_timestamp: 1_700_000_000_000,
            max_timestamp: 1_700_000_000_000,
            producer_id: -1,
            producer_epoch: -1,
            base_sequence: -1,
            record_count: 1,
            records: RECORD.to_vec(),
        }
    }
}

impl Spec {
    fn encode(&self) -> Vec<u8> {
        let mut covered = Vec::new();
        covered.extend(self.attributes.to_be_bytes());
        covered.extend(self.last_offset_delta.to_be_bytes());
        covered.extend(self.first_timestamp.to_be_bytes());
        covered.extend(self.max_timestamp.to_be_bytes());
        covered.extend(self.producer_id.to_be_bytes());
        covered.extend(self.producer_epoch.to_be_bytes());
        covered.extend(self.base_sequence.to_be_bytes());
        covered.extend(self.record_count.to_be_bytes());
        covered.extend(&self.records);
        let batch_length = i32::try_from(covered.len() + 9).unwrap();
        let mut out = Vec::new();
        out.extend(self.base_offset.to_be_bytes());
        out.extend(self.batch_length.unwrap_or(batch_length).to_be_bytes());
        out.extend(self.partition_leader_epoch.to_be_bytes());
        out.extend(self.magic.to_be_bytes());
        out.extend(self.crc.unwrap_or(crc32c::crc32c(&covered)).to_be_bytes());
        out.extend(covered);
        out
    }
}

/// A change to the fields of a valid batch.
type Edit = fn(&mut Spec);

/// A valid batch with `edit` applied to its fields.
fn batch(edit: impl FnOnce(&mut Spec)) -> Vec<u8> {
    let mut spec = Spec::default();
    edit(&mut spec);
    spec.encode()
}

fn concat(parts: &[Vec<u8>]) -> Vec<u8> {
    parts.concat()
}

/// Splits `input` with `batches` and renders each item, validated, as one line.
fn check(input: Vec<u8>, expected: &[&str]) {
    let got: Vec<String> = batches(Bytes::from(input)).map(render).collect();
    assert_eq!(got, expected);
}

fn render(item: Result<RecordBatch, BatchError>) -> String {
    let batch = match item {
        Ok(batch) => batch,
        Err(error) => return format!("err {error:?}"),
    };
    let verdict = match (batch.validate(), batch.validate_produce()) {
        (Ok(()), Ok(())) => "ok".to_string(),
        (Ok(()), Err(error)) => format!("ok, not from a producer: {error:?}"),
        (Err(error), _) => format!("invalid {error:?}"),
    };
    let attributes = batch.attributes();
    let mut flags = format!(
        "{:?} {:?}",
        attributes.compression(),
        attributes.timestamp_type()
    );
    for (set, name) in [
        (attributes.is_transactional(), " txn"),
        (attributes.is_control(), " control"),
        (attributes.has_delete_horizon(), " delete-horizon"),
    ] {
        if set {
            flags.push_str(name);
        }
    }
    format!(
        "{verdict}: {}B offsets {}..={} {flags}",
        batch.len_bytes(),
        batch.base_offset(),
        batch.last_offset()
    )
}

#[test]
fn framing() {
    let valid = batch(|_| {});
    check(valid.clone(), &["ok: 69B offsets 0..=0 None CreateTime"]);
    check(vec![], &[]);
    check(
        concat(&[valid.clone(), valid.clone()]),
        &[
            "ok: 69B offsets 0..=0 None CreateTime",
            "ok: 69B offsets 0..=0 None CreateTime",
        ],
    );
    check(
        vec![0; 11],
        &["err Truncated { needed: 61, available: 11 }"],
    );
    check(
        valid[..68].to_vec(),
        &["err Truncated { needed: 69, available: 68 }"],
    );
    check(
        concat(&[valid.clone(), vec![0; 5]]),
        &[
            "ok: 69B offsets 0..=0 None CreateTime",
            "err Truncated { needed: 61, available: 5 }",
        ],
    );
    // After a bad batch nothing can be framed, so a good one after it is never reached.
    check(
        concat(&[batch(|s| s.batch_length = Some(48)), valid.clone()]),
        &["err LengthTooSmall { batch_length: 48 }"],
    );
    check(
        batch(|s| s.batch_length = Some(-1)),
        &["err LengthTooSmall { batch_length: -1 }"],
    );
    // Limits are checked from the length field alone, before the bytes are there.
    check(
        batch(|s| s.batch_length = Some(i32::MAX)),
        &["err TooLarge { batch_bytes: 2147483659 }"],
    );
    check(
        batch(|s| s.batch_length = Some(64 * 1024 * 1024 - 11)),
        &["err TooLarge { batch_bytes: 67108865 }"],
    );
    check(
        batch(|s| s.batch_length = Some(64 * 1024 * 1024 - 12)),
        &["err Truncated { needed: 67108864, available: 69 }"],
    );
}

#[test]
fn validation() {
    for magic in [0, 1, 3, -1] {
        let expected =
            format!("invalid BadMagic {{ magic: {magic} }}: 69B offsets 0..=0 None CreateTime");
        check(batch(|s| s.magic = magic), &[&expected]);
    }
    check(
        batch(|s| s.crc = Some(0xdead_beef)),
        &["invalid CrcMismatch { stored: 3735928559, computed: 3555896437 }: 69B offsets 0..=0 None CreateTime"],
    );
    check(
        batch(|s| s.record_count = 0),
        &["invalid RecordCount { count: 0 }: 69B offsets 0..=0 None CreateTime"],
    );
    check(
        batch(|s| s.record_count = i32::MIN),
        &["invalid RecordCount { count: -2147483648 }: 69B offsets 0..=0 None CreateTime"],
    );
    check(
        batch(|s| s.last_offset_delta = 1),
        &["invalid OffsetDeltaMismatch { last_offset_delta: 1, record_count: 1 }: 69B offsets 0..=1 None CreateTime"],
    );
    check(
        batch(|s| s.last_offset_delta = -1),
        &["invalid OffsetDeltaMismatch { last_offset_delta: -1, record_count: 1 }: 69B offsets 0..=-1 None CreateTime"],
    );
    check(
        batch(|s| s.attributes = 5),
        &["invalid UnknownCompression { codec: 5 }: 69B offsets 0..=0 Unknown(5) CreateTime"],
    );
    check(
        batch(|s| s.attributes = 0x7f),
        &["invalid UnknownCompression { codec: 7 }: 69B offsets 0..=0 Unknown(7) LogAppendTime txn control delete-horizon"],
    );
    // Two records cannot fit in 8 uncompressed bytes; compressed, their size is unknown.
    let two = |s: &mut Spec| {
        s.record_count = 2;
        s.last_offset_delta = 1;
    };
    check(
        batch(two),
        &["invalid RecordCountExceedsBytes { record_count: 2, records_bytes: 8 }: 69B offsets 0..=1 None CreateTime"],
    );
    check(
        batch(|s| {
            two(s);
            s.attributes = 1;
        }),
        &["ok: 69B offsets 0..=1 Gzip CreateTime"],
    );
    check(
        batch(|s| {
            two(s);
            s.records = concat(&[RECORD.to_vec(), RECORD.to_vec()]);
        }),
        &["ok: 77B offsets 0..=1 None CreateTime"],
    );
}

#[test]
fn attributes_and_producer_checks() {
    let cases: [(Edit, &str); 11] = [
        (|s| s.attributes = 2, "ok: 69B offsets 0..=0 Snappy CreateTime"),
        (|s| s.attributes = 3, "ok: 69B offsets 0..=0 Lz4 CreateTime"),
        (|s| s.attributes = 0x0c, "ok: 69B offsets 0..=0 Zstd LogAppendTime"),
        (|s| s.attributes = 0x10, "ok: 69B offsets 0..=0 None CreateTime txn"),
        (|s| s.attributes = 0x40, "ok: 69B offsets 0..=0 None CreateTime delete-horizon"),
        // Unused high bits are ignored, as Kafka does.
        (|s| s.attributes = -0x80, "ok: 69B offsets 0..=0 None CreateTime"),
        (
            |s| s.attributes = 0x30,
            "ok, not from a producer: ControlFromProducer: 69B offsets 0..=0 None CreateTime txn control",
        ),
        (
            |s| s.base_offset = 42,
            "ok, not from a producer: BaseOffsetNotZero { base_offset: 42 }: 69B offsets 42..=42 None CreateTime",
        ),
        (
            |s| s.producer_id = 7,
            "ok, not from a producer: BadSequence { producer_id: 7, base_sequence: -1 }: 69B offsets 0..=0 None CreateTime",
        ),
        (
            |s| {
                s.producer_id = 7;
                s.base_sequence = 0;
            },
            "ok: 69B offsets 0..=0 None CreateTime",
        ),
        // last_offset saturates instead of overflowing.
        (
            |s| {
                s.base_offset = i64::MAX;
                s.record_count = 2;
                s.last_offset_delta = 1;
                s.records = concat(&[RECORD.to_vec(), RECORD.to_vec()]);
            },
            "ok, not from a producer: BaseOffsetNotZero { base_offset: 9223372036854775807 }: 77B offsets 9223372036854775807..=9223372036854775807 None CreateTime",
        ),
    ];
    for (edit, expected) in cases {
        check(batch(edit), &[expected]);
    }
}

#[test]
fn getters_read_each_field() {
    let spec = Spec {
        base_offset: 0x0102_0304_0506_0708,
        batch_length: None,
        partition_leader_epoch: 0x1112_1314,
        magic: 2,
        crc: None,
        attributes: 0x001b,
        last_offset_delta: 0,
        first_timestamp: 0x2122_2324_2526_2728,
        max_timestamp: 0x3132_3334_3536_3738,
        producer_id: 0x4142_4344_4546_4748,
        producer_epoch: 0x5152,
        base_sequence: 0x6162_6364,
        record_count: 1,
        records: RECORD.to_vec(),
    };
    let bytes = Bytes::from(spec.encode());
    let batch = RecordBatch::parse(bytes.clone()).unwrap();
    assert_eq!(batch.validate(), Ok(()));
    assert_eq!(batch.base_offset(), spec.base_offset);
    assert_eq!(batch.batch_length(), 57);
    assert_eq!(batch.partition_leader_epoch(), spec.partition_leader_epoch);
    assert_eq!(batch.magic(), 2);
    assert_eq!(batch.crc(), batch.compute_crc());
    assert_eq!(batch.attributes(), Attributes::from_raw(0x001b));
    assert_eq!(batch.attributes().raw(), 0x001b);
    assert_eq!(batch.attributes().compression(), Compression::Lz4);
    assert_eq!(
        batch.attributes().timestamp_type(),
        TimestampType::LogAppendTime
    );
    assert!(batch.attributes().is_transactional());
    assert_eq!(batch.last_offset_delta(), 0);
    assert_eq!(batch.first_timestamp(), spec.first_timestamp);
    assert_eq!(batch.max_timestamp(), spec.max_timestamp);
    assert_eq!(batch.producer_id(), spec.producer_id);
    assert_eq!(batch.producer_epoch(), spec.producer_epoch);
    assert_eq!(batch.base_sequence(), spec.base_sequence);
    assert_eq!(batch.record_count(), 1);
    assert_eq!(batch.last_offset(), spec.base_offset);
    assert_eq!(batch.len_bytes(), 69);
    assert_eq!(batch.as_bytes(), &bytes);
    assert_eq!(batch.into_bytes().as_ptr(), bytes.as_ptr(), "no copy");
}

#[test]
fn crc_is_castagnoli() {
    // The CRC-32C check value (RFC 3720, B.4); IEEE CRC-32 would give 0xcbf43926.
    assert_eq!(crc32c::crc32c(b"123456789"), 0xe306_9283);
}

#[test]
fn parse_frames_exactly_one_batch() {
    let valid = batch(|_| {});
    let parse = |bytes: Vec<u8>| RecordBatch::parse(Bytes::from(bytes)).map(|b| b.len_bytes());
    assert_eq!(parse(valid.clone()), Ok(69));
    assert_eq!(
        parse(valid[..60].to_vec()),
        Err(BatchError::Truncated {
            needed: 61,
            available: 60
        })
    );
    assert_eq!(
        parse(concat(&[valid.clone(), vec![0]])),
        Err(BatchError::LengthMismatch {
            declared: 57,
            actual: 70
        })
    );
    assert_eq!(
        parse(batch(|s| s.batch_length = Some(-12))),
        Err(BatchError::LengthMismatch {
            declared: -12,
            actual: 69
        })
    );
    // parse frames only: a bad magic or CRC is for validate.
    assert_eq!(parse(batch(|s| s.magic = 0)), Ok(69));
}

#[test]
fn setters_rewrite_in_place() {
    let mut bytes = batch(|s| s.crc = None);
    assert_eq!(set_base_offset(&mut bytes, 1_234), Ok(()));
    assert_eq!(set_partition_leader_epoch(&mut bytes, 7), Ok(()));
    let batch = RecordBatch::parse(Bytes::from(bytes)).unwrap();
    assert_eq!(
        (batch.base_offset(), batch.partition_leader_epoch()),
        (1_234, 7)
    );
    assert_eq!(batch.validate(), Ok(()));

    let mut short = vec![0; 60];
    let truncated = Err(BatchError::Truncated {
        needed: 61,
        available: 60,
    });
    assert_eq!(set_base_offset(&mut short, 1), truncated);
    assert_eq!(set_partition_leader_epoch(&mut short, 1), truncated);
    assert_eq!(short, vec![0; 60], "nothing written on error");
}

#[test]
fn error_messages_are_lowercase_without_final_period() {
    let errors = [
        BatchError::Truncated {
            needed: 61,
            available: 3,
        },
        BatchError::LengthTooSmall { batch_length: -1 },
        BatchError::TooLarge {
            batch_bytes: 1 << 30,
        },
        BatchError::CrcMismatch {
            stored: 1,
            computed: 2,
        },
        BatchError::ControlFromProducer,
    ];
    for error in errors {
        let message = error.to_string();
        assert!(message.starts_with(char::is_lowercase), "{message}");
        assert!(!message.ends_with('.'), "{message}");
    }
    assert_eq!(
        BatchError::TooLarge {
            batch_bytes: 1 << 30
        }
        .to_string(),
        "batch of 1073741824 bytes exceeds the limit of 67108864 bytes"
    );
}

// ---- Property tests: batches built by kafka-protocol's encoder. ----

/// What a producer put into one batch.
#[derive(Debug, Clone)]
struct Produced {
    base_offset: i64,
    partition_leader_epoch: i32,
    producer_id: i64,
    producer_epoch: i16,
    base_sequence: i32,
    transactional: bool,
    control: bool,
    delete_horizon: bool,
    compression: kp::Compression,
    records: Vec<RecordBody>,
}

type RecordBody = (
    Option<Vec<u8>>,
    Option<Vec<u8>>,
    i64,
    Vec<(String, Option<Vec<u8>>)>,
);

impl Produced {
    fn encode(&self) -> Bytes {
        let records: Vec<kp::Record> = (0_i32..)
            .zip(&self.records)
            .map(|(index, body)| self.record(index, body))
            .collect();
        let options = kp::RecordEncodeOptions {
            version: 2,
            compression: self.compression,
        };
        let mut buf = BytesMut::new();
        kp::RecordBatchEncoder::encode(&mut buf, &records, &options).unwrap();
        buf.freeze()
    }

    fn record(&self, index: i32, (key, value, timestamp, headers): &RecordBody) -> kp::Record {
        let mut record = kp::Record {
            transactional: self.transactional,
            control: self.control,
            delete_horizon: self.delete_horizon,
            partition_leader_epoch: self.partition_leader_epoch,
            producer_id: self.producer_id,
            producer_epoch: self.producer_epoch,
            timestamp_type: kp::TimestampType::Creation,
            offset: self.base_offset + i64::from(index),
            sequence: self.base_sequence.wrapping_add(index),
            timestamp: *timestamp,
            key: key.clone().map(Bytes::from),
            value: value.clone().map(Bytes::from),
            headers: Default::default(),
        };
        for (name, value) in headers {
            let name = StrBytes::from_string(name.clone());
            record.headers.insert(name, value.clone().map(Bytes::from));
        }
        record
    }

    fn count(&self) -> i32 {
        i32::try_from(self.records.len()).unwrap()
    }
}

fn arb_compression() -> impl Strategy<Value = kp::Compression> {
    prop_oneof![
        4 => Just(kp::Compression::None),
        1 => Just(kp::Compression::Gzip),
        1 => Just(kp::Compression::Snappy),
        1 => Just(kp::Compression::Lz4),
        1 => Just(kp::Compression::Zstd),
    ]
}

fn arb_record() -> impl Strategy<Value = RecordBody> {
    (
        option::of(vec(any::<u8>(), 0..24)),
        option::of(vec(any::<u8>(), 0..96)),
        // NO_TIMESTAMP (-1) up to year ~10889; the encoder subtracts timestamps.
        -1_i64..(1 << 48),
        vec(("[a-z]{0,6}", option::of(vec(any::<u8>(), 0..8))), 0..3),
    )
}

prop_compose! {
    fn arb_produced()(
        base_offset in prop_oneof![Just(0_i64), 0..=i64::MAX / 2],
        partition_leader_epoch in any::<i32>(),
        producer_id in prop_oneof![Just(-1_i64), any::<i64>()],
        producer_epoch in any::<i16>(),
        base_sequence in any::<i32>(),
        (transactional, control, delete_horizon) in any::<(bool, bool, bool)>(),
        compression in arb_compression(),
        records in vec(arb_record(), 1..12),
    ) -> Produced {
        Produced {
            base_offset, partition_leader_epoch, producer_id, producer_epoch, base_sequence,
            transactional, control, delete_horizon, compression, records,
        }
    }
}

fn expected_compression(compression: kp::Compression) -> Compression {
    match compression {
        kp::Compression::None => Compression::None,
        kp::Compression::Gzip => Compression::Gzip,
        kp::Compression::Snappy => Compression::Snappy,
        kp::Compression::Lz4 => Compression::Lz4,
        kp::Compression::Zstd => Compression::Zstd,
    }
}

fn parse_validated(bytes: Bytes) -> Result<RecordBatch, BatchError> {
    let batch = RecordBatch::parse(bytes)?;
    batch.validate()?;
    Ok(batch)
}

proptest! {
    #[test]
    fn getters_match_the_encoder(produced in arb_produced()) {
        let bytes = produced.encode();
        prop_assert_eq!(batches(bytes.clone()).count(), 1, "the encoder made one batch");
        let batch = parse_validated(bytes.clone()).unwrap();
        let count = produced.count();
        let timestamps = produced.records.iter().map(|r| r.2);
        prop_assert_eq!(batch.base_offset(), produced.base_offset);
        prop_assert_eq!(batch.batch_length(), i32::try_from(bytes.len() - 12).unwrap());
        prop_assert_eq!(batch.partition_leader_epoch(), produced.partition_leader_epoch);
        prop_assert_eq!(batch.magic(), 2);
        prop_assert_eq!(batch.crc(), batch.compute_crc());
        let attributes = batch.attributes();
        prop_assert_eq!(attributes.compression(), expected_compression(produced.compression));
        prop_assert_eq!(attributes.timestamp_type(), TimestampType::CreateTime);
        prop_assert_eq!(attributes.is_transactional(), produced.transactional);
        prop_assert_eq!(attributes.is_control(), produced.control);
        prop_assert_eq!(attributes.has_delete_horizon(), produced.delete_horizon);
        prop_assert_eq!(batch.last_offset_delta(), count - 1);
        prop_assert_eq!(batch.first_timestamp(), timestamps.clone().min().unwrap());
        prop_assert_eq!(batch.max_timestamp(), timestamps.max().unwrap());
        prop_assert_eq!(batch.producer_id(), produced.producer_id);
        prop_assert_eq!(batch.producer_epoch(), produced.producer_epoch);
        prop_assert_eq!(batch.base_sequence(), produced.base_sequence);
        prop_assert_eq!(batch.record_count(), count);
        prop_assert_eq!(batch.last_offset(), produced.base_offset + i64::from(count - 1));
        prop_assert_eq!(batch.len_bytes(), bytes.len());
        prop_assert_eq!(batch.as_bytes(), &bytes);

        let expected_produce = if produced.base_offset != 0 {
            Err(BatchError::BaseOffsetNotZero { base_offset: produced.base_offset })
        } else if produced.control {
            Err(BatchError::ControlFromProducer)
        } else if produced.producer_id >= 0 && produced.base_sequence < 0 {
            Err(BatchError::BadSequence {
                producer_id: produced.producer_id,
                base_sequence: produced.base_sequence,
            })
        } else {
            Ok(())
        };
        prop_assert_eq!(batch.validate_produce(), expected_produce);
    }

    #[test]
    fn every_flipped_bit_is_caught_or_harmless(produced in arb_produced()) {
        let mut bytes = produced.encode().to_vec();
        for bit in 0..bytes.len() * 8 {
            let at = bit / 8;
            bytes[at] ^= 1 << (bit % 8);
            let got = parse_validated(Bytes::copy_from_slice(&bytes));
            bytes[at] ^= 1 << (bit % 8);
            let caught = match at {
                // baseOffset and partitionLeaderEpoch: not covered, by design.
                0..8 | 12..16 => got.is_ok(),
                8..12 => matches!(got, Err(BatchError::LengthMismatch { .. })),
                16 => matches!(got, Err(BatchError::BadMagic { .. })),
                _ => matches!(got, Err(BatchError::CrcMismatch { .. })),
            };
            prop_assert!(caught, "bit {} of byte {}: {:?}", bit % 8, at, got);
        }
    }

    #[test]
    fn setters_keep_the_batch_valid(
        produced in arb_produced(),
        base_offset in any::<i64>(),
        epoch in any::<i32>(),
    ) {
        let original = produced.encode();
        let mut bytes = original.to_vec();
        prop_assert_eq!(set_base_offset(&mut bytes, base_offset), Ok(()));
        prop_assert_eq!(set_partition_leader_epoch(&mut bytes, epoch), Ok(()));
        prop_assert_eq!(&bytes[8..12], &original[8..12]);
        prop_assert_eq!(&bytes[16..], &original[16..]);
        let batch = parse_validated(Bytes::from(bytes)).unwrap();
        prop_assert_eq!(batch.base_offset(), base_offset);
        prop_assert_eq!(batch.partition_leader_epoch(), epoch);
    }

    #[test]
    fn concatenated_batches_split_without_copying(
        produced in vec(arb_produced(), 1..4),
        cut in any::<prop::sample::Index>(),
    ) {
        let parts: Vec<Bytes> = produced.iter().map(Produced::encode).collect();
        let whole = Bytes::from(parts.concat());
        let cut = cut.index(whole.len() + 1);
        let input = whole.slice(..cut);
        let mut start = 0;
        let mut items = batches(input.clone());
        for part in &parts {
            if start == cut {
                break;
            }
            let item = items.next().unwrap();
            if start + part.len() > cut {
                let truncated = matches!(item, Err(BatchError::Truncated { .. }));
                prop_assert!(truncated, "{:?}", item);
                break;
            }
            let batch = item.unwrap();
            prop_assert_eq!(batch.as_bytes(), part);
            prop_assert_eq!(batch.as_bytes().as_ptr(), input[start..].as_ptr(), "zero-copy");
            prop_assert_eq!(batch.validate(), Ok(()));
            start += part.len();
        }
        prop_assert!(items.next().is_none());
    }

    #[test]
    fn arbitrary_bytes_never_panic(data in vec(any::<u8>(), 0..300)) {
        crate::fuzz::record_batch(&data);
    }

    #[test]
    fn mutated_batches_never_panic(
        produced in arb_produced(),
        edits in vec((any::<prop::sample::Index>(), any::<u8>()), 1..8),
        cut in any::<prop::sample::Index>(),
    ) {
        let mut bytes = produced.encode().to_vec();
        let len = bytes.len();
        for (at, value) in edits {
            bytes[at.index(len)] = value;
        }
        bytes.truncate(cut.index(len + 1).max(len / 2));
        crate::fuzz::record_batch(&bytes);
    }
}

#[test]
fn set_producer_restamps_the_batch_and_keeps_it_valid() {
    let mut b = crate::BatchBuilder::new(1_000).producer(7, 1, 40);
    b.push(1_000, Some(b"k"), Some(b"v"), &[]);
    let mut bytes = b.build().to_vec();
    set_producer(&mut bytes, 9, 0, 3).expect("whole header");
    let batch = RecordBatch::parse(Bytes::from(bytes)).expect("parses");
    batch.validate().expect("valid after restamp");
    assert_eq!(
        (
            batch.producer_id(),
            batch.producer_epoch(),
            batch.base_sequence()
        ),
        (9, 0, 3)
    );
    assert_eq!(batch.crc(), batch.compute_crc());
    assert!(
        set_producer(&mut [0u8; 60], 1, 0, 0).is_err(),
        "short header refused"
    );
}
