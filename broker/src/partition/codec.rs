//! The four Kafka record codecs, bounded: what the broker needs to read the records of a
//! compressed batch (the log cleaner reads keys; a compacted topic refuses keyless
//! records) and to compress the records the cleaner keeps with the batch's own codec.
//!
//! Invariant: `decompress` never returns, nor grows a buffer to, more than the caller's
//! limit: more is `TooLarge`, never a cut result, and bad input is an error, never a
//! panic. What `compress` returns, `decompress` (and other Kafka clients) read back.
//! Snappy is written in the xerial framing the Java client writes; raw snappy is read too.

use std::io::{Read, Write};

use bytes::Bytes;
use strand_wire::records::{decode_records, Record};
use strand_wire::{Compression, RecordBatch, BATCH_HEADER_BYTES};

/// Largest records section the broker decompresses (a stored batch is at most 64 MiB
/// compressed; a larger section is left as it is).
pub const DECOMPRESSED_BYTES_MAX: usize = 64 * 1024 * 1024;
/// zstd level for re-compressed records (Kafka's default, 3).
const ZSTD_LEVEL: i32 = 3;
/// lz4 level (kafka-protocol's; any level reads back the same).
const LZ4_LEVEL: u32 = 4;
/// xerial snappy stream header: magic, version 1, compatible version 1.
const SNAPPY_XERIAL_HEADER: &[u8; 16] = b"\x82SNAPPY\x00\x00\x00\x00\x01\x00\x00\x00\x01";
/// Bytes of the magic that marks a xerial stream.
const SNAPPY_XERIAL_MAGIC_BYTES: usize = 8;
/// Uncompressed bytes per xerial block (the Java client's default).
const SNAPPY_XERIAL_BLOCK_BYTES: usize = 32 * 1024;

/// Why records could not be compressed or decompressed.
#[derive(Debug, thiserror::Error)]
pub enum CodecError {
    /// The records decompress to more than the limit.
    #[error("records decompress past {limit} bytes")]
    TooLarge {
        /// The limit asked for.
        limit: usize,
    },
    /// The bytes are not a valid stream of the codec.
    #[error("{codec:?} records do not decode: {reason}")]
    Corrupt {
        /// The batch's codec.
        codec: Compression,
        /// What the codec said.
        reason: String,
    },
    /// A codec number Kafka does not define.
    #[error("compression codec {0} is unknown")]
    Unknown(u8),
}

fn corrupt(codec: Compression, e: impl std::fmt::Display) -> CodecError {
    CodecError::Corrupt {
        codec,
        reason: e.to_string(),
    }
}

/// Reads `r` to its end, refusing more than `limit` bytes.
fn read_bounded(codec: Compression, r: impl Read, limit: usize) -> Result<Vec<u8>, CodecError> {
    let mut out = Vec::new();
    r.take(limit as u64 + 1)
        .read_to_end(&mut out)
        .map_err(|e| corrupt(codec, e))?;
    if out.len() > limit {
        return Err(CodecError::TooLarge { limit });
    }
    Ok(out)
}

/// The records section `data` of a batch compressed with `codec`, decompressed; at most
/// `limit` bytes.
pub fn decompress(codec: Compression, data: &[u8], limit: usize) -> Result<Vec<u8>, CodecError> {
    match codec {
        Compression::None if data.len() > limit => Err(CodecError::TooLarge { limit }),
        Compression::None => Ok(data.to_vec()),
        Compression::Gzip => read_bounded(codec, flate2::read::MultiGzDecoder::new(data), limit),
        Compression::Lz4 => {
            let d = lz4::Decoder::new(data).map_err(|e| corrupt(codec, e))?;
            read_bounded(codec, d, limit)
        }
        Compression::Zstd => {
            let d = zstd::stream::read::Decoder::new(data).map_err(|e| corrupt(codec, e))?;
            read_bounded(codec, d, limit)
        }
        Compression::Snappy => snappy_decompress(data, limit),
        Compression::Unknown(c) => Err(CodecError::Unknown(c)),
    }
}

/// One raw snappy block appended to `out`, its declared length checked against what
/// `limit` leaves before anything is allocated.
fn snappy_block(block: &[u8], out: &mut Vec<u8>, limit: usize) -> Result<(), CodecError> {
    let codec = Compression::Snappy;
    let n = snap::raw::decompress_len(block).map_err(|e| corrupt(codec, e))?;
    if out.len() + n > limit {
        return Err(CodecError::TooLarge { limit });
    }
    let start = out.len();
    out.resize(start + n, 0);
    let written = snap::raw::Decoder::new()
        .decompress(block, &mut out[start..])
        .map_err(|e| corrupt(codec, e))?;
    out.truncate(start + written);
    Ok(())
}

fn snappy_decompress(data: &[u8], limit: usize) -> Result<Vec<u8>, CodecError> {
    let mut out = Vec::new();
    if !data.starts_with(&SNAPPY_XERIAL_HEADER[..SNAPPY_XERIAL_MAGIC_BYTES]) {
        snappy_block(data, &mut out, limit)?;
        return Ok(out);
    }
    let mut rest = data
        .get(SNAPPY_XERIAL_HEADER.len()..)
        .ok_or_else(|| corrupt(Compression::Snappy, "xerial header cut short"))?;
    while !rest.is_empty() {
        let (len, tail) = rest
            .split_first_chunk::<4>()
            .ok_or_else(|| corrupt(Compression::Snappy, "xerial block length cut short"))?;
        let len = u32::from_be_bytes(*len) as usize;
        let block = tail
            .get(..len)
            .ok_or_else(|| corrupt(Compression::Snappy, "xerial block cut short"))?;
        snappy_block(block, &mut out, limit)?;
        rest = &tail[len..];
    }
    Ok(out)
}

/// `data` (a records section) compressed with `codec`.
pub fn compress(codec: Compression, data: &[u8]) -> Result<Vec<u8>, CodecError> {
    match codec {
        Compression::None => Ok(data.to_vec()),
        Compression::Gzip => {
            let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
            e.write_all(data).map_err(|e| corrupt(codec, e))?;
            e.finish().map_err(|e| corrupt(codec, e))
        }
        Compression::Lz4 => {
            let mut e = lz4::EncoderBuilder::new()
                .level(LZ4_LEVEL)
                // Kafka's reader refuses dependent blocks.
                .block_mode(lz4::BlockMode::Independent)
                .build(Vec::new())
                .map_err(|e| corrupt(codec, e))?;
            e.write_all(data).map_err(|e| corrupt(codec, e))?;
            let (out, r) = e.finish();
            r.map_err(|e| corrupt(codec, e))?;
            Ok(out)
        }
        Compression::Zstd => zstd::bulk::compress(data, ZSTD_LEVEL).map_err(|e| corrupt(codec, e)),
        Compression::Snappy => {
            let mut out = SNAPPY_XERIAL_HEADER.to_vec();
            let mut enc = snap::raw::Encoder::new();
            for chunk in data.chunks(SNAPPY_XERIAL_BLOCK_BYTES) {
                let block = enc.compress_vec(chunk).map_err(|e| corrupt(codec, e))?;
                out.extend_from_slice(&(block.len() as u32).to_be_bytes());
                out.extend_from_slice(&block);
            }
            Ok(out)
        }
        Compression::Unknown(c) => Err(CodecError::Unknown(c)),
    }
}

/// The records of a stored batch, decompressed (at most `DECOMPRESSED_BYTES_MAX`) and
/// decoded.
pub fn records_of(batch: &RecordBatch) -> Result<Vec<Record>, CodecError> {
    let section = batch.as_bytes().slice(BATCH_HEADER_BYTES..);
    let codec = batch.attributes().compression();
    let plain = match codec {
        Compression::None => section,
        _ => Bytes::from(decompress(codec, &section, DECOMPRESSED_BYTES_MAX)?),
    };
    decode_records(plain, batch.record_count()).map_err(|e| corrupt(codec, e))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const CODECS: [Compression; 5] = [
        Compression::None,
        Compression::Gzip,
        Compression::Snappy,
        Compression::Lz4,
        Compression::Zstd,
    ];

    proptest! {
        #[test]
        fn every_codec_reads_back_what_it_wrote(data in proptest::collection::vec(any::<u8>(), 0..100_000), runs in 0usize..3) {
            // Runs of one byte make the compressible inputs the codecs take other paths for.
            let data: Vec<u8> = data.iter().flat_map(|&b| std::iter::repeat_n(b, 1 + runs * 40)).take(200_000).collect();
            for codec in CODECS {
                let packed = compress(codec, &data).expect("compresses");
                let back = decompress(codec, &packed, DECOMPRESSED_BYTES_MAX).expect("decompresses");
                prop_assert_eq!(&back, &data, "{:?}", codec);
            }
        }

        /// Bad input is an error, never a panic or an unbounded allocation.
        #[test]
        fn garbage_is_an_error_or_bounded(data in proptest::collection::vec(any::<u8>(), 0..2_000)) {
            for codec in CODECS {
                if let Ok(out) = decompress(codec, &data, 4096) {
                    prop_assert!(out.len() <= 4096);
                }
            }
        }
    }

    #[test]
    fn more_than_the_limit_is_refused_not_cut() {
        let zeros = vec![0u8; 1 << 20];
        for codec in CODECS {
            let packed = compress(codec, &zeros).expect("compresses");
            let r = decompress(codec, &packed, (1 << 20) - 1);
            assert!(
                matches!(r, Err(CodecError::TooLarge { .. })),
                "{codec:?}: {r:?}"
            );
            assert_eq!(
                decompress(codec, &packed, 1 << 20).expect("fits").len(),
                1 << 20
            );
        }
    }

    /// kafka-protocol's encoders (another implementation of the framings Kafka clients
    /// write) are read back, and ours are read by its decoders.
    #[test]
    fn another_implementations_streams_read_back() {
        use bytes::{BufMut, BytesMut};
        use kafka_protocol::compression as kc;
        use kc::{Compressor, Decompressor};
        let data: Vec<u8> = (0..100_000u32)
            .flat_map(|i| (i % 251).to_be_bytes())
            .collect();
        fn theirs<C: Compressor<BytesMut>>(data: &[u8]) -> Vec<u8> {
            let mut out = BytesMut::new();
            C::compress(&mut out, |b: &mut C::BufMut| {
                b.put_slice(data);
                Ok(())
            })
            .expect("their compress");
            out.to_vec()
        }
        fn their_read<C: Decompressor<bytes::Bytes>>(packed: Vec<u8>) -> Vec<u8> {
            let mut b = bytes::Bytes::from(packed);
            C::decompress(&mut b, |b: &mut C::Buf| {
                Ok(b.copy_to_bytes(b.remaining()).to_vec())
            })
            .expect("their decompress")
        }
        use bytes::Buf;
        let cases: [(Compression, Vec<u8>); 4] = [
            (Compression::Gzip, theirs::<kc::Gzip>(&data)),
            (Compression::Snappy, theirs::<kc::Snappy>(&data)),
            (Compression::Lz4, theirs::<kc::Lz4>(&data)),
            (Compression::Zstd, theirs::<kc::Zstd>(&data)),
        ];
        for (codec, packed) in cases {
            let back = decompress(codec, &packed, DECOMPRESSED_BYTES_MAX).expect("ours reads");
            assert_eq!(back, data, "{codec:?}");
        }
        assert_eq!(
            their_read::<kc::Gzip>(compress(Compression::Gzip, &data).expect("c")),
            data
        );
        assert_eq!(
            their_read::<kc::Snappy>(compress(Compression::Snappy, &data).expect("c")),
            data
        );
        assert_eq!(
            their_read::<kc::Lz4>(compress(Compression::Lz4, &data).expect("c")),
            data
        );
        assert_eq!(
            their_read::<kc::Zstd>(compress(Compression::Zstd, &data).expect("c")),
            data
        );
        let raw = snap::raw::Encoder::new().compress_vec(&data).expect("raw");
        assert_eq!(
            decompress(Compression::Snappy, &raw, DECOMPRESSED_BYTES_MAX).expect("raw"),
            data
        );
    }
}
