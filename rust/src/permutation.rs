//! A keyed bijection over `[0, n)` for any `u64` `n`, computed per index (never materialised).
//!
//! Order version 2 of the phase loader (`curriculum.order_version: 2`) takes each stream's order
//! within an epoch from an [`IndexShuffle`]: position `i` of epoch `e` of stream `s` is sample
//! `IndexShuffle::new(n, seed, s, e).permute(i)`. The state a loader keeps is then a cursor per
//! stream, whatever `n` (Grain's `index_shuffle`, Levanter's block-deterministic order).
//!
//! The bijection is an unbalanced Feistel network over the `b`-bit integers, `b` the bits of
//! `n - 1` (the next power of two `2^b >= n`), with [`ROUNDS`] rounds: round `r` splits `x` into a
//! right part of `w_r` bits and a left part of `b - w_r` bits and maps `(L, R)` to
//! `(R, L ^ F_r(R))`, the widths alternating between `floor(b / 2)` and `ceil(b / 2)`. The round
//! function is `F_r(R) = splitmix64_mix(R ^ k_r)` cut to the left part's width; the round keys come
//! from `(seed, stream, epoch)` by the same `SplitMix64` chain as [`crate::rng::stream`] (domain
//! [`crate::rng::domain::INDEX_SHUFFLE`]). A value that lands in `[n, 2^b)` is encrypted again
//! (cycle-walking, Black & Rogaway 2002): as `2^b < 2n`, under two rounds of the network on
//! average. [`IndexShuffle::inverse`] runs the rounds backwards and walks the cycle the other way.
//! Pure; every index is a `u64`.

use crate::error::{invalid_arg, Result};
use crate::rng::{domain, splitmix64_mix};

/// Rounds of the Feistel network.
pub const ROUNDS: usize = 6;

const GOLDEN: u64 = 0x9E37_79B9_7F4A_7C15;

/// The keyed bijection of `[0, n)` for `(seed, stream, epoch)`; see the module docs.
#[derive(Clone, Debug)]
pub struct IndexShuffle {
    n: u64,
    bits: u32,
    keys: [u64; ROUNDS],
}

#[inline]
fn mask(width: u32) -> u64 {
    // width <= 32 always (half of at most 64 bits, rounded up)
    (1u64 << width) - 1
}

impl IndexShuffle {
    /// The bijection of `[0, n)` keyed by `(seed, stream, epoch)`. `n = 0` has no index.
    pub fn new(n: u64, seed: u64, stream: u64, epoch: u64) -> Self {
        let bits = if n <= 1 {
            0
        } else {
            64 - (n - 1).leading_zeros()
        };
        let mut h = splitmix64_mix(seed ^ domain::INDEX_SHUFFLE);
        h = splitmix64_mix(h ^ stream).wrapping_add(GOLDEN);
        h = splitmix64_mix(h ^ epoch).wrapping_add(GOLDEN);
        let mut keys = [0u64; ROUNDS];
        for (r, key) in keys.iter_mut().enumerate() {
            *key = splitmix64_mix(h.wrapping_add((r as u64 + 1).wrapping_mul(GOLDEN)));
        }
        Self { n, bits, keys }
    }

    /// The size `n` of the domain.
    pub fn len(&self) -> u64 {
        self.n
    }

    /// Whether the domain is empty (`n = 0`).
    pub fn is_empty(&self) -> bool {
        self.n == 0
    }

    /// Width of round `r`'s right part.
    #[inline]
    fn right_width(&self, r: usize) -> u32 {
        if r.is_multiple_of(2) {
            self.bits / 2
        } else {
            self.bits - self.bits / 2
        }
    }

    #[inline]
    fn encrypt(&self, mut x: u64) -> u64 {
        for (r, &key) in self.keys.iter().enumerate() {
            let w = self.right_width(r);
            let a = self.bits - w;
            let right = x & mask(w);
            let left = x >> w;
            x = (right << a) | (left ^ (splitmix64_mix(right ^ key) & mask(a)));
        }
        x
    }

    #[inline]
    fn decrypt(&self, mut x: u64) -> u64 {
        for (r, &key) in self.keys.iter().enumerate().rev() {
            let w = self.right_width(r);
            let a = self.bits - w;
            let right = x >> a;
            let left = (x & mask(a)) ^ (splitmix64_mix(right ^ key) & mask(a));
            x = (left << w) | right;
        }
        x
    }

    /// The image of position `i`, in `[0, n)`.
    ///
    /// # Errors
    /// `InvalidArgument` when `i >= n`.
    pub fn permute(&self, i: u64) -> Result<u64> {
        self.check(i, "i")?;
        Ok(self.permute_unchecked(i))
    }

    /// The position whose image is `j`: `permute(inverse(j)) == j`.
    ///
    /// # Errors
    /// `InvalidArgument` when `j >= n`.
    pub fn inverse(&self, j: u64) -> Result<u64> {
        self.check(j, "j")?;
        let mut x = self.decrypt(j);
        while x >= self.n {
            x = self.decrypt(x);
        }
        Ok(x)
    }

    /// [`permute`](Self::permute) for `i < n` (the caller checked it).
    #[inline]
    pub fn permute_unchecked(&self, i: u64) -> u64 {
        debug_assert!(i < self.n);
        let mut x = self.encrypt(i);
        while x >= self.n {
            x = self.encrypt(x);
        }
        x
    }

    fn check(&self, i: u64, name: &'static str) -> Result<()> {
        if i >= self.n {
            return Err(invalid_arg(
                name,
                format!("{name} = {i} is not in [0, {})", self.n),
            ));
        }
        Ok(())
    }
}

/// The samples of a run of slots, each stream walking its own epochs of [`IndexShuffle`]s.
///
/// Slot `t` goes to stream `s = streams[t]`; it is that stream's draw number `c` (counting
/// `cursors[s]` draws before the call, then the earlier slots of the call), and its sample is
/// `IndexShuffle::new(sizes[s], seeds[s], s, c / sizes[s]).permute(c % sizes[s])`. `cursors` is
/// not changed (add the returned streams' counts).
///
/// # Errors
/// `InvalidArgument` for lengths that differ, a stream out of range or with no sample.
pub fn stream_order(
    streams: &[i64],
    cursors: &[u64],
    sizes: &[u64],
    seeds: &[u64],
) -> Result<Vec<u64>> {
    let num_streams = sizes.len();
    if cursors.len() != num_streams || seeds.len() != num_streams {
        return Err(invalid_arg(
            "cursors",
            format!(
                "{} cursors and {} seeds for {num_streams} streams",
                cursors.len(),
                seeds.len()
            ),
        ));
    }
    let mut cursors = cursors.to_vec();
    let mut out = Vec::with_capacity(streams.len());
    for (t, &stream) in streams.iter().enumerate() {
        let s = usize::try_from(stream)
            .ok()
            .filter(|&s| s < num_streams && sizes[s] > 0)
            .ok_or_else(|| {
                invalid_arg(
                    "streams",
                    format!("streams[{t}] = {stream} is not a stream with samples"),
                )
            })?;
        let (n, c) = (sizes[s], cursors[s]);
        cursors[s] = c.wrapping_add(1);
        let shuffle = IndexShuffle::new(n, seeds[s], s as u64, c / n);
        out.push(shuffle.permute_unchecked(c % n));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn is_bijection(n: u64, seed: u64, epoch: u64) -> bool {
        let p = IndexShuffle::new(n, seed, 3, epoch);
        let mut hit = vec![false; usize::try_from(n).unwrap_or(0)];
        for i in 0..n {
            let j = p.permute_unchecked(i);
            let Ok(slot) = usize::try_from(j) else {
                return false;
            };
            if j >= n || hit[slot] || p.inverse(j) != Ok(i) {
                return false;
            }
            hit[slot] = true;
        }
        true
    }

    #[test]
    fn small_domains_are_bijections() {
        for n in 0..=70 {
            assert!(is_bijection(n, 7, 0), "n = {n}");
        }
        assert!(is_bijection(1 << 16, 1, 2));
        assert!(is_bijection((1 << 16) + 1, 1, 2));
    }

    #[test]
    fn out_of_range_is_refused() {
        let p = IndexShuffle::new(10, 1, 0, 0);
        assert!(p.permute(10).is_err());
        assert!(p.inverse(10).is_err());
        assert!(IndexShuffle::new(0, 1, 0, 0).permute(0).is_err());
    }

    #[test]
    fn keys_separate_streams_and_epochs() {
        let order = |stream, epoch| -> Vec<u64> {
            let p = IndexShuffle::new(1000, 5, stream, epoch);
            (0..1000).map(|i| p.permute_unchecked(i)).collect()
        };
        assert_ne!(order(0, 0), order(0, 1));
        assert_ne!(order(0, 0), order(1, 0));
        assert_eq!(order(2, 3), order(2, 3));
    }

    #[test]
    fn the_largest_domain_round_trips() {
        let p = IndexShuffle::new(u64::MAX, 9, 0, 0);
        for i in [0, 1, u64::MAX - 1, 1 << 63, 12_345_678_901_234] {
            let j = p.permute_unchecked(i);
            assert!(j < u64::MAX);
            assert_eq!(p.inverse(j), Ok(i));
        }
    }

    #[test]
    fn stream_order_walks_epochs() {
        let sizes = [3u64, 5];
        let streams = [0i64, 1, 0, 0, 0, 1, 0, 0];
        let out = stream_order(&streams, &[0, 0], &sizes, &[11, 12]).unwrap_or_default();
        let first: Vec<u64> = (0..3)
            .map(|i| IndexShuffle::new(3, 11, 0, 0).permute_unchecked(i))
            .collect();
        let second: Vec<u64> = (0..3)
            .map(|i| IndexShuffle::new(3, 11, 0, 1).permute_unchecked(i))
            .collect();
        assert_eq!(
            [out[0], out[2], out[3], out[4], out[6], out[7]],
            [first[0], first[1], first[2], second[0], second[1], second[2]]
        );
        // resuming from the cursors gives the rest
        let tail = stream_order(&streams[4..], &[3, 1], &sizes, &[11, 12]).unwrap_or_default();
        assert_eq!(tail, out[4..].to_vec());
        assert!(stream_order(&[2], &[0, 0], &sizes, &[1, 2]).is_err());
        assert!(stream_order(&[0], &[0], &sizes, &[1, 2]).is_err());
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(24))]
        #[test]
        fn drawn_domains_are_bijections(n in 0u64..20_000, seed in any::<u64>(), epoch in any::<u64>()) {
            prop_assert!(is_bijection(n, seed, epoch));
        }

        #[test]
        fn inverse_round_trips_at_any_size(
            n in 1u64..=u64::MAX,
            seed in any::<u64>(),
            picks in proptest::collection::vec(any::<u64>(), 1..64),
        ) {
            let p = IndexShuffle::new(n, seed, 1, 2);
            for pick in picks {
                let i = pick % n;
                let j = p.permute(i);
                prop_assert!(j.is_ok());
                let j = j.unwrap_or(u64::MAX);
                prop_assert!(j < n);
                prop_assert_eq!(p.inverse(j), Ok(i));
            }
        }
    }
}
