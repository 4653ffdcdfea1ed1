//! The pinned PRNG and how streams are derived from explicit `(seed, counters)`.
//!
//! Every random stream is a `Xoshiro256PlusPlus` (crate `rand_xoshiro` pinned at `=0.8.2`; the
//! algorithm is Blackman & Vigna's xoshiro256++). Its 256-bit state is derived by [`stream`]:
//!
//! ```text
//! h = splitmix64_mix(seed ^ DOMAIN_CONSTANT)
//! for c in counters: h = splitmix64_mix(h ^ c) + GOLDEN
//! state[i] = splitmix64_mix(h + (i + 1) * GOLDEN)      for i in 0..4
//! ```
//!
//! where `splitmix64_mix` is the `SplitMix64` finaliser (Steele, Lea & Flood 2014) and
//! `GOLDEN = 0x9E37_79B9_7F4A_7C15`. The derivation is written out here (no `seed_from_u64`),
//! so a `rand_core` upgrade cannot change it; `tests::golden_*` pin the resulting draws.
//! Nothing here reads a global or thread-local RNG.

use rand_core::{Rng, SeedableRng};
use rand_xoshiro::Xoshiro256PlusPlus;

/// The PRNG every kernel uses.
pub type Prng = Xoshiro256PlusPlus;

const GOLDEN: u64 = 0x9E37_79B9_7F4A_7C15;

/// Domain separators: streams of different kernels never coincide for the same seed.
pub mod domain {
    /// `WeightedSampler` draws, counters `(chunk,)`.
    pub const ALIAS: u64 = 0xA11A_5000_0000_0001;
    /// `sample_without_replacement`, counters `(chunk,)`.
    pub const WITHOUT_REPLACEMENT: u64 = 0xE5E5_0000_0000_0002;
    /// `epoch_permutation`, counters `(epoch,)`.
    pub const EPOCH: u64 = 0xE90C_0000_0000_0003;
    /// `BucketSampler` bucket choice, counters `(generation, call)`.
    pub const BUCKET_CHOICE: u64 = 0xB0C4_0000_0000_0004;
    /// `BucketSampler` per-bucket permutation, counters `(generation, bucket, epoch, chunk)`.
    pub const BUCKET_PERM: u64 = 0xB0C4_0000_0000_0005;
    /// `IndexShuffle` round keys (`permutation.rs`), counters `(stream, epoch)`.
    pub const INDEX_SHUFFLE: u64 = 0x15F1_0000_0000_0006;
}

/// The `SplitMix64` output function (a bijective 64-bit mixer).
#[inline]
pub fn splitmix64_mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// A fresh stream for `(seed, domain, counters)`; see the module docs for the exact mixing.
pub fn stream(seed: u64, domain: u64, counters: &[u64]) -> Prng {
    let mut h = splitmix64_mix(seed ^ domain);
    for &c in counters {
        h = splitmix64_mix(h ^ c).wrapping_add(GOLDEN);
    }
    let mut bytes = [0u8; 32];
    for (i, chunk) in bytes.chunks_exact_mut(8).enumerate() {
        let word = splitmix64_mix(h.wrapping_add((i as u64 + 1).wrapping_mul(GOLDEN)));
        chunk.copy_from_slice(&word.to_le_bytes());
    }
    // An all-zero state is impossible in practice (four distinct SplitMix64 outputs); rand_xoshiro
    // itself also maps an all-zero seed to a valid state.
    Prng::from_seed(bytes)
}

/// Unbiased uniform integer in `[0, n)` for `n >= 1` (Lemire 2019, "Fast Random Integer
/// Generation in an Interval", multiply + rare rejection). Consumes one or more `u64`s.
#[inline]
pub fn uniform_below(rng: &mut Prng, n: u64) -> u64 {
    debug_assert!(n > 0);
    let mut m = u128::from(rng.next_u64()) * u128::from(n);
    #[allow(
        clippy::cast_possible_truncation,
        reason = "low 64 bits of the product on purpose"
    )]
    let mut low = m as u64;
    if low < n {
        let threshold = n.wrapping_neg() % n;
        while low < threshold {
            m = u128::from(rng.next_u64()) * u128::from(n);
            #[allow(clippy::cast_possible_truncation, reason = "low 64 bits on purpose")]
            {
                low = m as u64;
            }
        }
    }
    #[allow(
        clippy::cast_possible_truncation,
        reason = "high 64 bits of a u128 fit a u64"
    )]
    let high = (m >> 64) as u64;
    high
}

/// Uniform `f64` in `(0, 1]` from the top 53 bits of one `u64` (never 0, so `ln` is finite).
#[inline]
pub fn open_closed_unit(rng: &mut Prng) -> f64 {
    ((rng.next_u64() >> 11) + 1) as f64 * (1.0 / (1u64 << 53) as f64)
}

/// Number of ziggurat layers.
const ZIG_LAYERS: usize = 256;
/// Start of the tail (rightmost layer edge) of the 256-layer exponential ziggurat.
const ZIG_EXP_R: f64 = 7.697_117_470_131_05;
/// Area of each layer (and of the base strip including the tail).
#[cfg(test)]
const ZIG_EXP_V: f64 = 0.003_949_659_822_581_557;

/// Layer edges `x[0..=256]` (decreasing, `x[1] = R`, `x[256] = 0`) and `f[i] = exp(-x[i])`.
struct ZigTables {
    x: [f64; ZIG_LAYERS + 1],
    f: [f64; ZIG_LAYERS + 1],
}

/// Bits to floats, at compile time.
const fn from_bits_257(bits: &[u64; ZIG_LAYERS + 1]) -> [f64; ZIG_LAYERS + 1] {
    let mut out = [0.0; ZIG_LAYERS + 1];
    let mut i = 0;
    while i <= ZIG_LAYERS {
        out[i] = f64::from_bits(bits[i]);
        i += 1;
    }
    out
}

/// The tables, fixed bit patterns (see `zig_tables.rs`): identical on every platform.
static TABLES: ZigTables = ZigTables {
    x: from_bits_257(&crate::zig_tables::ZIG_EXP_X),
    f: from_bits_257(&crate::zig_tables::ZIG_EXP_F),
};

fn zig_tables() -> &'static ZigTables {
    &TABLES
}

/// A standard exponential variate, `Exp(1)`, by the ziggurat method (Marsaglia & Tsang 2000,
/// "The Ziggurat Method for Generating Random Variables", JSS 5(8); 256 layers as in Doornik
/// 2005 and `rand_distr`'s `Exp1`). About 99% of calls take one `u64`, a multiply and a compare.
/// The layer index comes from the low 8 bits, the uniform from the top 53 bits of the same word.
///
/// Portability: the tables are fixed bit patterns; only the rare (~1%) rejection and tail paths
/// call `exp`/`ln`, where another libm could differ in the last bit.
#[inline]
pub fn exp1(rng: &mut Prng) -> f64 {
    exp1_with(zig_tables(), rng)
}

/// [`exp1`] with the tables passed in (hoists the one-time initialisation check out of loops).
#[inline]
fn exp1_with(tables: &ZigTables, rng: &mut Prng) -> f64 {
    loop {
        let bits = rng.next_u64();
        let layer = (bits & 0xFF) as usize;
        let unit = (bits >> 11) as f64 * (1.0 / (1u64 << 53) as f64);
        let x = unit * tables.x[layer];
        if x < tables.x[layer + 1] {
            return x;
        }
        if layer == 0 {
            // The tail beyond R is R + Exp(1) (memorylessness).
            return ZIG_EXP_R - open_closed_unit(rng).ln();
        }
        let (f_hi, f_lo) = (tables.f[layer + 1], tables.f[layer]);
        if f_hi + (f_lo - f_hi) * open_closed_unit(rng) < (-x).exp() {
            return x;
        }
    }
}

/// A stream of `Exp(1)` variates sharing one table lookup.
pub struct Exp1Stream<'a> {
    tables: &'a ZigTables,
}

impl Exp1Stream<'static> {
    /// The ziggurat tables, initialised on first use.
    pub fn new() -> Self {
        Self {
            tables: zig_tables(),
        }
    }
}

impl Default for Exp1Stream<'static> {
    fn default() -> Self {
        Self::new()
    }
}

impl Exp1Stream<'_> {
    /// One `Exp(1)` variate from `rng`.
    #[inline]
    pub fn sample(&self, rng: &mut Prng) -> f64 {
        exp1_with(self.tables, rng)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn streams_differ_by_counter_and_domain() {
        let a = stream(1, domain::ALIAS, &[0]).next_u64();
        let b = stream(1, domain::ALIAS, &[1]).next_u64();
        let c = stream(1, domain::EPOCH, &[0]).next_u64();
        let d = stream(2, domain::ALIAS, &[0]).next_u64();
        assert!(a != b && a != c && a != d && b != c);
        assert_eq!(a, stream(1, domain::ALIAS, &[0]).next_u64());
    }

    #[test]
    fn uniform_below_in_range() {
        let mut r = stream(7, domain::EPOCH, &[]);
        for n in [1u64, 2, 3, 7, 1 << 40, u64::MAX] {
            for _ in 0..1000 {
                assert!(uniform_below(&mut r, n) < n);
            }
        }
    }

    #[test]
    fn tables_match_recurrence() {
        let mut x = [0.0f64; ZIG_LAYERS + 1];
        x[0] = ZIG_EXP_V / (-ZIG_EXP_R).exp();
        x[1] = ZIG_EXP_R;
        for i in 1..ZIG_LAYERS - 1 {
            x[i + 1] = -(ZIG_EXP_V / x[i] + (-x[i]).exp()).ln();
        }
        let t = zig_tables();
        for (i, (&want, (&got, &f))) in x.iter().zip(t.x.iter().zip(&t.f)).enumerate() {
            // Equal up to libm rounding (bit-identical with glibc, where they were generated).
            assert!((got - want).abs() <= 1e-12 * want.max(1.0), "x[{i}]");
            assert!((f - (-got).exp()).abs() <= 1e-15, "f[{i}]");
        }
    }

    #[test]
    fn ziggurat_tables_close_and_exp1_moments() {
        let t = zig_tables();
        assert!((t.x[ZIG_LAYERS - 1] - 0.063_852_163_815_001_57).abs() < 1e-9);
        assert!(t.x.windows(2).all(|w| w[0] > w[1]));
        let mut r = stream(11, domain::EPOCH, &[]);
        let n = 400_000;
        let xs: Vec<f64> = (0..n).map(|_| exp1(&mut r)).collect();
        let mean = xs.iter().sum::<f64>() / f64::from(n);
        let var = xs.iter().map(|x| (x - mean) * (x - mean)).sum::<f64>() / f64::from(n);
        assert!((mean - 1.0).abs() < 0.01, "{mean}");
        assert!((var - 1.0).abs() < 0.02, "{var}");
        // P(X > 1) = e^-1, P(X > 5) = e^-5, P(X > R) = e^-R (the tail path).
        for (c, p) in [(1.0, (-1.0f64).exp()), (5.0, (-5.0f64).exp())] {
            let frac = xs.iter().filter(|&&x| x > c).count() as f64 / f64::from(n);
            assert!(
                (frac - p).abs() < 5.0 * (p / f64::from(n)).sqrt() + 1e-5,
                "{c} {frac} {p}"
            );
        }
        assert!(xs.iter().all(|&x| x >= 0.0 && x.is_finite()));
    }

    #[test]
    fn unit_interval() {
        let mut r = stream(7, domain::EPOCH, &[]);
        for _ in 0..10_000 {
            let u = open_closed_unit(&mut r);
            assert!(u > 0.0 && u <= 1.0);
        }
    }
}
