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

/// Every file of a corpus directory as (name, bytes), sorted by name so that runs are
/// reproducible.
#[allow(
    dead_code,
    reason = "not every replay test reads its corpus through this"
)]
pub fn corpus_files(dir: &std::path::Path) -> Vec<(String, Vec<u8>)> {
    let mut files: Vec<(String, Vec<u8>)> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|entry| {
            let path = entry.expect("corpus entry").path();
            let name = path
                .file_name()
                .expect("name")
                .to_string_lossy()
                .into_owned();
            (name, std::fs::read(&path).expect("corpus file"))
        })
        .collect();
    files.sort();
    files
}

/// Checks that each seed is in `dir` as it is built now; with `STRAND_WRITE_FUZZ_SEEDS`
/// set, writes them there first.
#[allow(
    dead_code,
    reason = "not every replay test keeps its seeds through this"
)]
pub fn check_seeds(dir: &std::path::Path, seeds: &[(&str, Vec<u8>)]) {
    for (name, bytes) in seeds {
        let path = dir.join(name);
        if std::env::var_os("STRAND_WRITE_FUZZ_SEEDS").is_some() {
            std::fs::create_dir_all(dir).expect("corpus dir");
            std::fs::write(&path, bytes).expect("write seed");
        }
        let stored = std::fs::read(&path)
            .unwrap_or_else(|e| panic!("{}: {e} (STRAND_WRITE_FUZZ_SEEDS=1)", path.display()));
        assert_eq!(&stored, bytes, "{} is stale", path.display());
    }
}
