//! Seeds, the PRNG, and test knobs from the environment (STYLE.md 9: one seed drives a run,
//! a failure prints it, `STRAND_SEED=<n>` replays it).
//!
//! The only module of this crate that takes entropy from outside (a fresh seed when
//! `STRAND_SEED` is unset); everything random in a test derives from the seed.

use std::hash::{BuildHasher, Hasher};

/// SplitMix64: tiny, fast, and its output is fixed by the seed alone (no crate version
/// can change a replay).
#[derive(Clone, Debug)]
pub struct Rng {
    state: u64,
}

impl Rng {
    /// A generator whose whole output is a function of `seed`.
    pub fn new(seed: u64) -> Rng {
        Rng { state: seed }
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (multiply-shift; the bias is below 2^-32 for test-sized `n`).
    pub fn below(&mut self, n: u64) -> u64 {
        assert!(n > 0, "empty range");
        ((u128::from(self.next_u64()) * u128::from(n)) >> 64) as u64
    }

    /// Uniform in `lo..=hi`.
    pub fn range(&mut self, lo: u64, hi: u64) -> u64 {
        assert!(lo <= hi, "empty range {lo}..={hi}");
        lo + self.below(hi - lo + 1)
    }

    /// True with probability `1 / n`.
    pub fn one_in(&mut self, n: u64) -> bool {
        self.below(n) == 0
    }

    /// Fills `buf` with random bytes.
    pub fn fill(&mut self, buf: &mut [u8]) {
        for chunk in buf.chunks_mut(8) {
            let r = self.next_u64().to_le_bytes();
            chunk.copy_from_slice(&r[..chunk.len()]);
        }
    }
}

/// Derives an independent seed for a sub-stream (a case, an entry) from `seed` and `salt`.
pub fn mix(seed: u64, salt: u64) -> u64 {
    let mut r = Rng::new(seed ^ salt.wrapping_mul(0xd6e8_feb8_6659_fd93));
    r.next_u64()
}

/// A test run's seed. Printed when drawn (cargo shows a failing test's output) and again,
/// with the replay command, when the test panics while it is alive.
#[derive(Debug)]
pub struct Seed {
    /// The seed.
    pub value: u64,
    test: &'static str,
}

impl Drop for Seed {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!(
                "{} failed with seed {v}; replay: STRAND_SEED={v} cargo test -p strand-tests \
                 --test {}",
                self.test,
                self.test,
                v = self.value
            );
        }
    }
}

/// The seed of test binary `test`: `STRAND_SEED` when set, else a fresh random one.
pub fn test_seed(test: &'static str) -> Seed {
    let value = match std::env::var("STRAND_SEED") {
        Ok(s) => s
            .trim()
            .parse()
            .unwrap_or_else(|_| panic!("STRAND_SEED={s:?} is not a u64")),
        Err(_) => {
            // RandomState is seeded by the OS per process: entropy without a clock.
            let mut h = std::collections::hash_map::RandomState::new().build_hasher();
            h.write_u32(std::process::id());
            h.finish()
        }
    };
    eprintln!("{test}: seed {value} (replay with STRAND_SEED={value})");
    Seed { value, test }
}

/// A numeric knob from the environment, `default` when unset.
pub fn env_u64(name: &str, default: u64) -> u64 {
    match std::env::var(name) {
        Ok(s) => s
            .trim()
            .parse()
            .unwrap_or_else(|_| panic!("{name}={s:?} is not a u64")),
        Err(_) => default,
    }
}

/// Prints `what` if the thread panics while this guard is alive (e.g. which case failed).
#[derive(Debug)]
pub struct OnPanic(pub String);

impl Drop for OnPanic {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("failed in {}", self.0);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_seed_same_stream() {
        let (mut a, mut b) = (Rng::new(7), Rng::new(7));
        let xs: Vec<u64> = (0..8).map(|_| a.next_u64()).collect();
        let ys: Vec<u64> = (0..8).map(|_| b.next_u64()).collect();
        assert_eq!(xs, ys);
        assert_ne!(mix(7, 1), mix(7, 2));
        let mut r = Rng::new(1);
        assert!((0..1000).all(|_| r.range(3, 5) >= 3 && r.range(3, 5) <= 5));
    }
}
