//! Kafka's default partitioner for keyed records: `murmur2(key) & 0x7fffffff % partitions`,
//! so a key lands on the same partition as with the Java client (and librdkafka's
//! `murmur2_random`). Records without a key are spread by the producer (sticky per batch).

/// Kafka's murmur2 (`org.apache.kafka.common.utils.Utils.murmur2`), bit for bit.
pub fn murmur2(data: &[u8]) -> i32 {
    const SEED: u32 = 0x9747_b28c;
    const M: u32 = 0x5bd1_e995;
    const R: u32 = 24;
    let len = data.len();
    // Kafka mixes the length in as a Java int (keys are far below 2^31 bytes).
    let mut h: u32 = SEED ^ (len as u32);
    let mut chunks = data.chunks_exact(4);
    for c in &mut chunks {
        let mut k = u32::from_le_bytes([c[0], c[1], c[2], c[3]]);
        k = k.wrapping_mul(M);
        k ^= k >> R;
        k = k.wrapping_mul(M);
        h = h.wrapping_mul(M);
        h ^= k;
    }
    let tail = chunks.remainder();
    if tail.len() >= 3 {
        h ^= u32::from(tail[2]) << 16;
    }
    if tail.len() >= 2 {
        h ^= u32::from(tail[1]) << 8;
    }
    if let Some(&b) = tail.first() {
        h ^= u32::from(b);
        h = h.wrapping_mul(M);
    }
    h ^= h >> 13;
    h = h.wrapping_mul(M);
    h ^= h >> 15;
    // Reinterpret the bits as Java's int.
    h as i32
}

/// The partition Kafka's default partitioner picks for `key` among `partitions`.
pub fn partition_for_key(key: &[u8], partitions: u32) -> u32 {
    let positive = (murmur2(key) & 0x7fff_ffff) as u32;
    positive % partitions.max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_kafkas_test_vectors() {
        // From Kafka's UtilsTest.testMurmur2.
        let cases: [(&str, i32); 6] = [
            ("21", -973_932_308),
            ("foobar", -790_332_482),
            ("a-little-bit-long-string", -985_981_536),
            ("a-little-bit-longer-string", -1_486_304_829),
            (
                "lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8",
                -58_897_971,
            ),
            ("abc", 479_470_107),
        ];
        for (key, want) in cases {
            assert_eq!(murmur2(key.as_bytes()), want, "{key}");
        }
        // From kafka-python's port, as unsigned 32-bit values.
        for (key, want) in [
            (&b""[..], 275_646_681u32),
            (b"a", 2_731_586_172),
            (b"ab", 316_155_434),
            (b"kafka", 3_496_464_228),
            (b"key-17", 956_945_460),
            (b"giberish123456789", 2_404_723_468),
        ] {
            assert_eq!(
                murmur2(key) as u32,
                want,
                "{:?}",
                String::from_utf8_lossy(key)
            );
        }
        assert_eq!(
            partition_for_key(b"kafka", 3),
            (3_496_464_228u32 & 0x7fff_ffff) % 3
        );
    }

    #[test]
    fn partitions_are_in_range() {
        for i in 0..1000u32 {
            assert!(partition_for_key(&i.to_be_bytes(), 7) < 7);
        }
    }
}
