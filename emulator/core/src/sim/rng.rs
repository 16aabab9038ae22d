//! The simulator's seeded random numbers.

/// A small deterministic generator (splitmix64).
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    /// A generator from a seed.
    pub fn new(seed: u64) -> Self {
        Rng(seed ^ 0x5851_f42d_4c95_7f2d)
    }
    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    /// Uniform in `[0, 1)`.
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
    /// Uniform in `[0, n)`.
    pub fn below(&mut self, n: u64) -> u64 {
        if n == 0 {
            0
        } else {
            self.next_u64() % n
        }
    }
    /// True with probability `p`.
    pub fn chance(&mut self, p: f64) -> bool {
        self.unit() < p
    }
}

/// The seeds a loss suite runs: `SIM_SEEDS` of them (1000 by default) from
/// `SIM_SEED_START` (0).
pub fn seed_range() -> std::ops::Range<u64> {
    let var = |name: &str, default: u64| {
        std::env::var(name)
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(default)
    };
    let start = var("SIM_SEED_START", 0);
    start..start + var("SIM_SEEDS", 1000)
}

/// A first PSN for seed `seed`: every fourth seed right below the 24-bit wrap, the
/// others anywhere.
pub fn start_psn(seed: u64, rng: &mut Rng) -> u32 {
    if seed & 3 == 0 {
        0x00ff_ffff - rng.below(40) as u32
    } else {
        rng.below(1 << 24) as u32
    }
}
