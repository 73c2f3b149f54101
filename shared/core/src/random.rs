//! Randomness as an argument: the pure core draws from a [`RandomSource`] that callers seed.

/// A source of uniform random numbers in `[0, 1)`.
pub trait RandomSource {
    fn next_unit(&mut self) -> f64;
}

/// SplitMix64: tiny, fast, and the same sequence for the same seed on every platform.
#[derive(Debug, Clone)]
pub struct SeededRandom {
    state: u64,
}

impl SeededRandom {
    pub fn new(seed: u64) -> SeededRandom {
        SeededRandom { state: seed }
    }

    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
}

impl RandomSource for SeededRandom {
    fn next_unit(&mut self) -> f64 {
        // 53 random bits -> [0, 1)
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_seed_same_sequence_and_within_unit_interval() {
        let mut a = SeededRandom::new(42);
        let mut b = SeededRandom::new(42);
        for _ in 0..1000 {
            let x = a.next_unit();
            assert_eq!(x.to_bits(), b.next_unit().to_bits());
            assert!((0.0..1.0).contains(&x));
        }
        assert_ne!(
            SeededRandom::new(1).next_u64(),
            SeededRandom::new(2).next_u64()
        );
    }
}
