//! What a topic's configs make of a produced batch before it is appended, as Kafka's log
//! validator does for a v2 batch: `message.timestamp.type=LogAppendTime` stamps the batch
//! with the time of the append (its max timestamp and timestamp-type bit; the records
//! keep their own deltas, which consumers then ignore), and a `compression.type` other
//! than `producer` re-compresses the records with the topic's codec when the producer used
//! another one.
//!
//! Invariant: the records (keys, values, headers, offset and timestamp deltas), the
//! producer fields, the base sequence and the transactional bit are unchanged and the
//! result's CRC is valid; a batch the configs leave alone is returned as it is, without a
//! copy.

use bytes::Bytes;
use strand_wire::{BatchHeader, Compression, RecordBatch, TimestampType, BATCH_HEADER_BYTES};

use super::codec;
use crate::common::errors::KafkaError;

/// The codec `compression.type` asks for.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum TopicCompression {
    /// `producer`: the batch keeps the producer's codec.
    #[default]
    Producer,
    /// `uncompressed`, `gzip`, `snappy`, `lz4` or `zstd`.
    Codec(Compression),
}

impl TopicCompression {
    /// Parses a `compression.type` value.
    pub fn parse(value: &str) -> Option<TopicCompression> {
        Some(match value.trim() {
            "producer" => TopicCompression::Producer,
            "uncompressed" => TopicCompression::Codec(Compression::None),
            "gzip" => TopicCompression::Codec(Compression::Gzip),
            "snappy" => TopicCompression::Codec(Compression::Snappy),
            "lz4" => TopicCompression::Codec(Compression::Lz4),
            "zstd" => TopicCompression::Codec(Compression::Zstd),
            _ => return None,
        })
    }
}

/// The topic configs that change a produced batch.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BatchPolicy {
    /// `message.timestamp.type=LogAppendTime`.
    pub log_append_time: bool,
    /// `compression.type`.
    pub compression: TopicCompression,
}

/// A batch as the topic stores it.
pub struct Stamped {
    /// The batch to append (the one produced when nothing changed).
    pub batch: Bytes,
    /// Its parsed view.
    pub view: RecordBatch,
    /// The append time stamped into it (`LogAppendTime`), the `log_append_time_ms` of the
    /// produce answer.
    pub log_append_time_ms: Option<i64>,
}

impl BatchPolicy {
    /// Applies the policy to a validated produced batch at wall-clock `now_ms`.
    pub fn apply(
        self,
        batch: Bytes,
        view: RecordBatch,
        now_ms: i64,
    ) -> Result<Stamped, KafkaError> {
        let from = view.attributes().compression();
        let to = match self.compression {
            TopicCompression::Codec(c) if c != from => Some(c),
            _ => None,
        };
        if !self.log_append_time && to.is_none() {
            return Ok(Stamped {
                batch,
                view,
                log_append_time_ms: None,
            });
        }
        let mut header = BatchHeader::of(&view);
        let section = batch.slice(BATCH_HEADER_BYTES..);
        let records = match to {
            None => section,
            Some(codec) => {
                header.attributes = header.attributes.with_compression(codec);
                let decompressed;
                let plain: &[u8] = match from {
                    Compression::None => &section,
                    _ => {
                        decompressed =
                            codec::decompress(from, &section, codec::DECOMPRESSED_BYTES_MAX)
                                .map_err(|e| KafkaError::CorruptMessage(e.to_string()))?;
                        &decompressed
                    }
                };
                Bytes::from(
                    codec::compress(codec, plain)
                        .map_err(|e| KafkaError::CorruptMessage(e.to_string()))?,
                )
            }
        };
        if self.log_append_time {
            header.attributes = header
                .attributes
                .with_timestamp_type(TimestampType::LogAppendTime);
            header.max_timestamp_ms = now_ms;
        }
        let batch = header.encode(&records);
        let view = RecordBatch::parse(batch.clone()).map_err(KafkaError::from_batch)?;
        Ok(Stamped {
            batch,
            view,
            log_append_time_ms: self.log_append_time.then_some(now_ms),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use strand_wire::BatchBuilder;

    const NOW_MS: i64 = 1_700_000_000_000;

    fn produced(codec: Compression) -> RecordBatch {
        let mut b = BatchBuilder::new(1_000).producer(42, 3, 7);
        b.push(1_000, Some(b"k1"), Some(b"v1"), &[]);
        b.push(1_005, None, Some(b"v2"), &[("h", Some(b"x".as_slice()))]);
        let packed = codec::compress(codec, b.records_bytes()).expect("compress");
        RecordBatch::parse(b.build_with_records(codec, &packed)).expect("parse")
    }

    fn apply(policy: BatchPolicy, view: RecordBatch) -> Stamped {
        policy
            .apply(view.as_bytes().clone(), view, NOW_MS)
            .expect("apply")
    }

    #[test]
    fn a_batch_the_configs_leave_alone_is_not_copied() {
        let view = produced(Compression::Lz4);
        let ptr = view.as_bytes().as_ptr();
        for policy in [
            BatchPolicy::default(),
            BatchPolicy {
                compression: TopicCompression::Codec(Compression::Lz4),
                ..BatchPolicy::default()
            },
        ] {
            let out = apply(policy, view.clone());
            assert_eq!(out.batch.as_ptr(), ptr);
            assert_eq!(out.log_append_time_ms, None);
        }
    }

    #[test]
    fn log_append_time_stamps_the_header_and_keeps_the_records() {
        let view = produced(Compression::None);
        let policy = BatchPolicy {
            log_append_time: true,
            ..BatchPolicy::default()
        };
        let out = apply(policy, view.clone());
        out.view.validate().expect("valid CRC");
        let a = out.view.attributes();
        assert_eq!(a.timestamp_type(), TimestampType::LogAppendTime);
        assert_eq!(out.view.max_timestamp(), NOW_MS);
        assert_eq!(out.log_append_time_ms, Some(NOW_MS));
        assert_eq!(out.view.first_timestamp(), view.first_timestamp());
        assert_eq!(
            (
                out.view.producer_id(),
                out.view.producer_epoch(),
                out.view.base_sequence()
            ),
            (42, 3, 7)
        );
        assert_eq!(
            out.batch.slice(BATCH_HEADER_BYTES..),
            view.as_bytes().slice(BATCH_HEADER_BYTES..)
        );
    }

    #[test]
    fn recompression_keeps_every_record_under_the_topic_codec() {
        let codecs = [
            Compression::None,
            Compression::Gzip,
            Compression::Snappy,
            Compression::Lz4,
            Compression::Zstd,
        ];
        for from in codecs {
            for to in codecs {
                let view = produced(from);
                let policy = BatchPolicy {
                    log_append_time: to == Compression::Zstd,
                    compression: TopicCompression::Codec(to),
                };
                let out = apply(policy, view.clone());
                out.view.validate().expect("valid CRC");
                assert_eq!(
                    out.view.attributes().compression(),
                    to,
                    "{from:?} -> {to:?}"
                );
                assert_eq!(
                    codec::records_of(&out.view).expect("records"),
                    codec::records_of(&view).expect("records"),
                    "{from:?} -> {to:?}"
                );
                assert_eq!(out.view.base_sequence(), 7);
            }
        }
    }

    #[test]
    fn records_that_do_not_decompress_are_a_corrupt_message() {
        let view = produced(Compression::None);
        // Claims gzip over records that are not a gzip stream.
        let header = BatchHeader {
            attributes: view.attributes().with_compression(Compression::Gzip),
            ..BatchHeader::of(&view)
        };
        let bad = RecordBatch::parse(header.encode(&view.as_bytes()[BATCH_HEADER_BYTES..]))
            .expect("parse");
        let policy = BatchPolicy {
            compression: TopicCompression::Codec(Compression::Zstd),
            ..BatchPolicy::default()
        };
        let err = policy
            .apply(bad.as_bytes().clone(), bad, NOW_MS)
            .err()
            .expect("refused");
        assert!(matches!(err, KafkaError::CorruptMessage(_)), "{err:?}");
    }

    #[test]
    fn every_kafka_compression_type_parses() {
        for name in crate::common::config::COMPRESSION_TYPES {
            assert!(TopicCompression::parse(name).is_some(), "{name}");
        }
        assert_eq!(TopicCompression::parse("brotli"), None);
    }
}
