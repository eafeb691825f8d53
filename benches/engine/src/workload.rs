//! Pre-generated operation streams, so that choosing a key (a Zipf sample costs tens of
//! nanoseconds) is not timed.

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use rand_distr::{Distribution, Zipf};

/// Marks an operation as a set; the other bits are the key number.
pub const SET_BIT: u32 = 1 << 31;

/// How keys are chosen.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum KeyDist {
    Uniform,
    /// Zipf with this exponent; rank 1 is key 0.
    Zipf(f64),
}

/// A key chooser over `n` keys.
pub struct KeyGen {
    n: u64,
    zipf: Option<Zipf<f64>>,
}

impl KeyGen {
    pub fn new(n: usize, dist: KeyDist) -> Self {
        assert!(n > 0 && (n as u64) < u64::from(SET_BIT), "key count must be from 1 to 2^31");
        let zipf = match dist {
            KeyDist::Uniform => None,
            KeyDist::Zipf(s) => Some(Zipf::new(n as u64, s).expect("valid Zipf exponent")),
        };
        KeyGen { n: n as u64, zipf }
    }

    /// A key number in `0..n`.
    #[inline]
    pub fn sample(&self, rng: &mut impl Rng) -> u64 {
        match &self.zipf {
            // Zipf yields ranks 1..=n as floats.
            Some(z) => (z.sample(rng) as u64).clamp(1, self.n) - 1,
            None => rng.gen_range(0..self.n),
        }
    }
}

/// `len` operations on `n` keys: a set with probability `set_pct`/100, else a get.
pub fn ops(len: usize, n: usize, dist: KeyDist, set_pct: u32, seed: u64) -> Vec<u32> {
    let gen = KeyGen::new(n, dist);
    let mut rng = SmallRng::seed_from_u64(seed);
    (0..len)
        .map(|_| {
            let k = gen.sample(&mut rng) as u32;
            if set_pct > 0 && rng.gen_range(0..100) < set_pct {
                k | SET_BIT
            } else {
                k
            }
        })
        .collect()
}

/// Numbers `0..n` in a random order.
pub fn shuffled(n: usize, seed: u64) -> Vec<u32> {
    use rand::seq::SliceRandom;
    let mut v: Vec<u32> = (0..n as u32).collect();
    v.shuffle(&mut SmallRng::seed_from_u64(seed));
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn set_share_and_key_range() {
        let v = ops(100_000, 1000, KeyDist::Uniform, 10, 1);
        let sets = v.iter().filter(|&&o| o & SET_BIT != 0).count();
        assert!((8_000..12_000).contains(&sets), "{sets}");
        assert!(v.iter().all(|&o| (o & !SET_BIT) < 1000));
        assert!(ops(1000, 10, KeyDist::Uniform, 0, 1).iter().all(|&o| o & SET_BIT == 0));
    }

    #[test]
    fn zipf_is_skewed_to_low_keys() {
        let v = ops(100_000, 100_000, KeyDist::Zipf(0.99), 0, 2);
        let top = v.iter().filter(|&&o| o < 100).count();
        // With s = 0.99 over 1e5 keys the top 100 ranks draw about 40% of requests.
        assert!(top > 30_000 && top < 50_000, "{top}");
        assert!(v.iter().all(|&o| o < 100_000));
    }

    #[test]
    fn shuffled_is_a_permutation() {
        let mut v = shuffled(1000, 3);
        assert_ne!(v, (0..1000).collect::<Vec<_>>());
        v.sort_unstable();
        assert_eq!(v, (0..1000).collect::<Vec<_>>());
    }
}
