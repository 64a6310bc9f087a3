//! The explorer's random numbers: SplitMix64 (Steele, Lea, Flood 2014), a 64-bit generator of
//! a dozen lines that passes BigCrush. Our own rather than `rand`'s `StdRng`, whose algorithm
//! `rand` may change in any release: the same seed must give the same cases for as long as
//! packetproof's own code stays the same, whatever a dependency update does.

/// A seeded stream of numbers; cloning it forks the stream.
#[derive(Debug, Clone)]
pub struct Rng {
    state: u64,
}

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng { state: seed }
    }

    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A number in `0..n` (`n` > 0), by Lemire's multiply-shift: bias below 2^-32 for the
    /// small ranges the grammar draws from.
    pub fn below(&mut self, n: usize) -> usize {
        debug_assert!(n > 0);
        (((self.next_u64() >> 32) * n as u64) >> 32) as usize
    }

    /// A number in `low..=high`.
    pub fn between(&mut self, low: usize, high: usize) -> usize {
        low + self.below(high - low + 1)
    }

    /// True with probability `percent`/100.
    pub fn chance(&mut self, percent: usize) -> bool {
        self.below(100) < percent
    }

    /// One of `items` (not empty).
    pub fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len())]
    }

    /// An index into `weights`, each chosen in proportion to its weight.
    pub fn weighted(&mut self, weights: &[usize]) -> usize {
        let total: usize = weights.iter().sum();
        let mut roll = self.below(total.max(1));
        for (i, &w) in weights.iter().enumerate() {
            if roll < w {
                return i;
            }
            roll -= w;
        }
        weights.len() - 1
    }

    /// A new stream for the `n`th case of a seed: each case is drawn from its own stream, so a
    /// case is the same whatever was drawn for the others.
    pub fn for_case(seed: u64, n: u64) -> Rng {
        let mut mix = Rng::new(seed ^ n.wrapping_mul(0xd1b5_4a32_d192_ed03));
        Rng::new(mix.next_u64())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splitmix_gives_its_reference_values() {
        // The first outputs for seed 1234567 (the reference implementation's test vector).
        let mut rng = Rng::new(1234567);
        assert_eq!(rng.next_u64(), 6457827717110365317);
        assert_eq!(rng.next_u64(), 3203168211198807973);
    }

    #[test]
    fn below_stays_in_range_and_reaches_every_value() {
        let mut rng = Rng::new(7);
        let mut seen = [0usize; 5];
        for _ in 0..1000 {
            seen[rng.below(5)] += 1;
        }
        // Each value's count is binomial(1000, 1/5): below 100 with probability < 1e-12.
        assert!(seen.iter().all(|&n| n > 100), "{seen:?}");
    }
}
