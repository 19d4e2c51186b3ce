//! The seeded mutator both fuzz-corpus replay tests use (a module of the test targets, not a
//! test target itself): structure-aware mutations and a fixed-seed PRNG.

/// One structure-aware mutation of `data`: bit flips, byte writes, truncation, length-field
/// values at the edges, splicing with another corpus input, or duplication.
pub fn mutate(data: &[u8], corpus: &[(String, Vec<u8>)], rng: &mut SplitMix64) -> Vec<u8> {
    let mut out = data.to_vec();
    match rng.below(6) {
        0 => {
            for _ in 0..=rng.below(4) {
                if !out.is_empty() {
                    let bit = rng.below(out.len() * 8);
                    out[bit / 8] ^= 1 << (bit % 8);
                }
            }
        }
        1 => {
            for _ in 0..=rng.below(8) {
                if !out.is_empty() {
                    let at = rng.below(out.len());
                    out[at] = rng.byte();
                }
            }
        }
        2 => {
            // Half the cuts land in the last few bytes, where off-by-one framing bugs live.
            let cut = if rng.below(2) == 0 {
                rng.below(out.len() + 1)
            } else {
                out.len().saturating_sub(1 + rng.below(4))
            };
            out.truncate(cut);
        }
        3 => {
            let len = i32::try_from(out.len()).unwrap_or(i32::MAX);
            let edges = [
                0,
                -1,
                48,
                49,
                50,
                i32::MAX,
                i32::MIN,
                len - 12,
                len - 11,
                len - 13,
            ];
            let value = edges[rng.below(edges.len())];
            if out.len() >= 12 {
                out[8..12].copy_from_slice(&value.to_be_bytes());
            }
        }
        4 => {
            let other = &corpus[rng.below(corpus.len())].1;
            let cut = rng.below(out.len() + 1);
            out.truncate(cut);
            out.extend_from_slice(&other[rng.below(other.len() + 1)..]);
        }
        _ => out.extend_from_slice(data),
    }
    out
}

/// SplitMix64 (Steele, Lea, Flood 2014): a fixed-seed PRNG, so every run tests the same inputs.
pub struct SplitMix64(pub u64);

impl SplitMix64 {
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform enough in `0..n` for test inputs; `n` must be positive.
    pub fn below(&mut self, n: usize) -> usize {
        usize::try_from(self.next_u64() % u64::try_from(n).unwrap()).unwrap()
    }

    pub fn byte(&mut self) -> u8 {
        self.next_u64().to_be_bytes()[0]
    }
}
