//! Weighted samplers: an alias table (with replacement), Efraimidis–Spirakis (without
//! replacement), Fisher–Yates epoch permutations and the per-bucket sampler.
//!
//! All randomness comes from [`crate::rng::stream`] keyed by explicit counters, so every output is
//! a pure function of `(seed, counters)` and never depends on a thread count.

use rand_core::Rng;
use rayon::prelude::*;

use crate::buf;
use crate::error::{invalid_arg, Error, Result};
use crate::rng::{domain, stream, uniform_below, Exp1Stream, Prng};

/// Draws per RNG stream: draw `t` of a `WeightedSampler` uses stream `(seed, t / CHUNK)`,
/// position `t % CHUNK` (exactly one `u64` per draw), so any draw can be reached without
/// replaying earlier chunks.
pub const CHUNK: u64 = 1024;

/// [`CHUNK`] as a slice length.
const CHUNK_LEN: usize = 1024;

/// Positions per RNG stream inside one bucket permutation of the `BucketSampler`.
pub const PERM_CHUNK: u64 = 1024;

/// Draws planned (and their table reads prefetched) ahead by `BucketSampler::sample`.
const AHEAD: usize = 64;

/// Largest number of categories (indices are stored as `u32`).
pub const MAX_CATEGORIES: usize = u32::MAX as usize;

/// Validate weights: every entry finite and `>= 0`. Returns `(sum, number of positive weights)`.
///
/// # Errors
/// `InvalidWeight` naming the first bad index; `InvalidArgument` when there are more than
/// `u32::MAX` weights.
pub fn check_weights(weights: &[f64]) -> Result<(f64, usize)> {
    if weights.len() > MAX_CATEGORIES {
        return Err(invalid_arg(
            "weights",
            format!(
                "{} weights exceed the limit {MAX_CATEGORIES}",
                weights.len()
            ),
        ));
    }
    let mut total = 0.0;
    let mut num_positive = 0usize;
    let mut bad = false;
    for &w in weights {
        bad |= !is_valid_weight(w);
        total += w;
        num_positive += usize::from(w > 0.0);
    }
    if bad {
        let index = weights
            .iter()
            .position(|&w| !is_valid_weight(w))
            .unwrap_or(0);
        return Err(Error::InvalidWeight {
            index,
            value: weights[index],
        });
    }
    Ok((total, num_positive))
}

/// Finite and `>= 0` (false for NaN).
#[inline]
fn is_valid_weight(w: f64) -> bool {
    (0.0..f64::INFINITY).contains(&w)
}

/// A Walker/Vose alias table with packed 8-byte entries: the high 32 bits of entry `i` are the
/// probability of keeping `i` (in units of `2^-32`), the low 32 bits its alias.
///
/// Build: Vose (1991), "A linear algorithm for generating random numbers with a given
/// distribution", IEEE TSE 17(9); see also K. Schwarz, "Darts, Dice, and Coins". Draw: one
/// `u64` `r`; column `i = floor(r * n / 2^64)`, coin = the next 32 bits of `r * n`; keep `i`
/// when coin < threshold, else take its alias. Full columns store `alias = i`, so they are
/// exact; zero-weight columns have threshold 0 and a positive-weight alias, so a zero weight is
/// never drawn.
#[derive(Clone, Debug)]
pub struct AliasTable {
    entries: Vec<u64>,
}

impl AliasTable {
    /// Build from non-negative weights.
    ///
    /// # Errors
    /// `ZeroTotalWeight` (also for an empty slice), `InvalidWeight`, `InvalidArgument` (more
    /// than `u32::MAX` weights).
    pub fn new(weights: &[f64]) -> Result<Self> {
        let (_, num_positive) = check_weights(weights)?;
        if num_positive == 0 {
            return Err(Error::ZeroTotalWeight { len: weights.len() });
        }
        let n = weights.len();
        // Normalise by the maximum first, so neither the sum (weights near f64::MAX) nor the
        // scale n / sum (subnormal weights) can overflow: w / max is in [0, 1], its sum in [1, n].
        // Large tables: the maximum and the scaled weights on the thread pool (a maximum and an
        // element-wise map are exact in any split); the sum stays one left-to-right pass, so the
        // table is bit-identical to a one-thread build.
        let chunk = crate::par::chunk_len(n, 1);
        let max = if chunk < n {
            crate::par::install(|| {
                weights
                    .par_chunks(chunk)
                    .map(|c| c.iter().copied().fold(0.0, f64::max))
                    .reduce(|| 0.0, f64::max)
            })
        } else {
            weights.iter().copied().fold(0.0, f64::max)
        };
        let total: f64 = weights.iter().map(|&w| w / max).sum();
        let scale = n as f64 / total;
        let mut p = buf::filled::<f64>(n);
        let scaled = |(out, w): (&mut [f64], &[f64])| {
            for (o, &w) in out.iter_mut().zip(w) {
                *o = (w / max) * scale;
            }
        };
        if chunk < n {
            crate::par::install(|| {
                p.par_chunks_mut(chunk)
                    .zip(weights.par_chunks(chunk))
                    .for_each(scaled);
            });
        } else {
            scaled((&mut p, weights));
        }
        let mut entries = buf::filled::<u64>(n);
        // Both Vose worklists share one buffer of n slots: the small stack grows from the front,
        // the large stack from the back (an index is on at most one of them), so the build needs
        // no reallocation and 4 bytes per weight.
        let mut stack = buf::filled::<u32>(n);
        let (mut num_small, mut num_large) = (0usize, 0usize);
        #[allow(clippy::cast_possible_truncation, reason = "n <= u32::MAX was checked")]
        for (i, &pi) in p.iter().enumerate() {
            if pi < 1.0 {
                stack[num_small] = i as u32;
                num_small += 1;
            } else {
                num_large += 1;
                stack[n - num_large] = i as u32;
            }
        }
        // A positive-weight column to alias stray zero-weight leftovers to: starts at the heaviest
        // weight, so it is positive even if rounding left the large list empty.
        #[allow(clippy::cast_possible_truncation, reason = "n <= u32::MAX was checked")]
        let mut last_large = weights.iter().position(|&w| w >= max).unwrap_or(0) as u32;
        while num_small > 0 && num_large > 0 {
            num_small -= 1;
            let s = stack[num_small];
            let l = stack[n - num_large];
            let ps = p[s as usize];
            entries[s as usize] = (threshold_of(ps) << 32) | u64::from(l);
            let pl = (p[l as usize] + ps) - 1.0;
            p[l as usize] = pl;
            last_large = l;
            if pl < 1.0 {
                num_large -= 1;
                stack[num_small] = l;
                num_small += 1;
            }
        }
        // Leftovers are full columns up to rounding error: keep themselves, except zero weights
        // (possible only through rounding), which point at a positive-weight column.
        for &i in stack[n - num_large..].iter().chain(&stack[..num_small]) {
            let alias = if weights[i as usize] > 0.0 {
                i
            } else {
                last_large
            };
            let thr = if alias == i { u64::from(u32::MAX) } else { 0 };
            entries[i as usize] = (thr << 32) | u64::from(alias);
        }
        Ok(Self { entries })
    }

    /// Number of categories.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether the table is empty (never true for a built table).
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// One draw from a 64-bit random word.
    #[inline(always)]
    fn pick(&self, r: u64) -> u32 {
        let m = u128::from(r) * self.entries.len() as u128;
        #[allow(
            clippy::cast_possible_truncation,
            reason = "index < len; coin is 32 bits"
        )]
        let (i, coin) = ((m >> 64) as usize, ((m as u64) >> 32) as u32);
        let e = self.entries[i];
        #[allow(clippy::cast_possible_truncation, reason = "unpacking the two halves")]
        let (thr, alias) = ((e >> 32) as u32, e as u32);
        #[allow(clippy::cast_possible_truncation, reason = "i < len <= u32::MAX")]
        std::hint::select_unpredictable(coin < thr, i as u32, alias)
    }

    /// [`Self::draw_block`] compiled for x86-64-v3 (AVX2, BMI2): about 2x faster in
    /// `examples/microbench.rs` on the project's 2-vCPU machine; same results.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2,bmi1,bmi2,fma,lzcnt,popcnt")]
    fn draw_block_v3(&self, rng: &mut Prng, out: &mut [i64]) {
        self.draw_block(rng, out);
    }

    /// Draw `out.len()` values from `rng`, one `u64` each, in order. Columns are computed a
    /// block ahead and their entries prefetched, so the random table reads overlap.
    #[inline(always)]
    fn draw_block(&self, rng: &mut Prng, out: &mut [i64]) {
        const AHEAD: usize = 64;
        let mut local = rng.clone(); // keeps the state in registers
        let entries = &self.entries[..];
        let n = entries.len() as u128;
        let mut cols = [0u64; AHEAD];
        for block in out.chunks_mut(AHEAD) {
            for c in cols.iter_mut().take(block.len()) {
                let m = u128::from(local.next_u64()) * n;
                // High word: column; top 32 bits of the low word: coin (see `pick`).
                #[allow(
                    clippy::cast_possible_truncation,
                    reason = "column < 2^32, coin 32 bits"
                )]
                {
                    *c = ((m >> 64) as u64) | (((m as u64) >> 32) << 32);
                }
                #[allow(clippy::cast_possible_truncation, reason = "column < 2^32")]
                prefetch(entries, (*c & 0xFFFF_FFFF) as usize);
            }
            for (o, &c) in block.iter_mut().zip(&cols) {
                #[allow(clippy::cast_possible_truncation, reason = "unpacking 32-bit halves")]
                let (i, coin) = ((c & 0xFFFF_FFFF) as u32, (c >> 32) as u32);
                let e = entries[i as usize];
                #[allow(clippy::cast_possible_truncation, reason = "unpacking 32-bit halves")]
                let (thr, alias) = ((e >> 32) as u32, e as u32);
                // Branchless select: the coin is random, a branch would mispredict half the time.
                *o = i64::from(std::hint::select_unpredictable(coin < thr, i, alias));
            }
        }
        *rng = local;
    }

    /// Fill `out` with draws `start .. start + out.len()` of the counter-based stream of `seed`.
    pub fn sample_into(&self, seed: u64, start: u64, out: &mut [i64]) {
        let mut t = start;
        let mut rest = out;
        while !rest.is_empty() {
            let chunk = t / CHUNK;
            let pos = t % CHUNK;
            let mut rng = stream(seed, domain::ALIAS, &[chunk]);
            for _ in 0..pos {
                rng.next_u64();
            }
            #[allow(clippy::cast_possible_truncation, reason = "<= CHUNK")]
            let take = ((CHUNK - pos) as usize).min(rest.len());
            let (head, tail) = rest.split_at_mut(take);
            #[cfg(target_arch = "x86_64")]
            if crate::simd::has_x86_64_v3() {
                // SAFETY: the CPU supports the x86-64-v3 features (checked just above).
                unsafe { self.draw_block_v3(&mut rng, head) };
            } else {
                self.draw_block(&mut rng, head);
            }
            #[cfg(not(target_arch = "x86_64"))]
            self.draw_block(&mut rng, head);
            rest = tail;
            t += take as u64;
        }
    }
}

/// Hint the CPU to load `v[i]` into cache (no effect on results).
#[inline(always)]
fn prefetch<T>(v: &[T], i: usize) {
    #[cfg(target_arch = "x86_64")]
    if let Some(p) = v.get(i) {
        // SAFETY: `_mm_prefetch` only hints the cache; the pointer comes from a valid reference.
        unsafe {
            std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(
                std::ptr::from_ref(p).cast::<i8>(),
            );
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (v, i);
}

#[inline]
fn threshold_of(p: f64) -> u64 {
    // p in [0, 1): floor(p * 2^32) fits in 32 bits; clamp guards rounding.
    #[allow(
        clippy::cast_possible_truncation,
        clippy::cast_sign_loss,
        reason = "clamped to [0, u32::MAX]"
    )]
    let t = (p * 4_294_967_296.0).clamp(0.0, f64::from(u32::MAX)) as u64;
    t
}

/// Weighted sampling with replacement from a fixed weight vector, counter-based.
#[derive(Clone, Debug)]
pub struct WeightedSampler {
    table: AliasTable,
    /// The seed.
    pub seed: u64,
    /// Draws taken so far (the counter of the next draw).
    pub num_draws: u64,
}

impl WeightedSampler {
    /// Build the alias table; see [`AliasTable::new`] for the errors.
    ///
    /// # Errors
    /// As [`AliasTable::new`].
    pub fn new(weights: &[f64], seed: u64) -> Result<Self> {
        Ok(Self {
            table: AliasTable::new(weights)?,
            seed,
            num_draws: 0,
        })
    }

    /// Number of categories.
    pub fn len(&self) -> usize {
        self.table.len()
    }

    /// Whether there are no categories (never true).
    pub fn is_empty(&self) -> bool {
        self.table.is_empty()
    }

    /// The next `k` draws (indices into the weights).
    ///
    /// # Errors
    /// `CounterExhausted` when `num_draws + k` would pass `u64::MAX`: the draw counter never
    /// wraps, since a wrapped counter would repeat the stream from draw 0. On error the sampler
    /// is unchanged.
    pub fn sample(&mut self, k: usize) -> Result<Vec<i64>> {
        let increment = k as u64; // usize is at most 64 bits
        let end = self
            .num_draws
            .checked_add(increment)
            .ok_or(Error::CounterExhausted {
                counter: "num_draws",
                value: self.num_draws,
                increment,
            })?;
        let mut out = buf::filled::<i64>(k);
        self.table.sample_into(self.seed, self.num_draws, &mut out);
        self.num_draws = end;
        Ok(out)
    }
}

/// `k` distinct indices drawn with probability proportional to `weights`, without replacement,
/// returned in ascending index order.
///
/// Efraimidis & Spirakis (2006), "Weighted random sampling with a reservoir", IPL 97(5): key
/// `E_i / w_i` with `E_i ~ Exp(1)` i.i.d., keep the `k` smallest keys. Key `i` comes from stream
/// `(seed, i / CHUNK)`; ties (probability ~0) go to the smaller index. `O(N)`.
///
/// # Errors
/// `InvalidWeight`; `NotEnoughPositiveWeights` if `k` exceeds the number of positive weights.
pub fn sample_without_replacement(weights: &[f64], k: usize, seed: u64) -> Result<Vec<i64>> {
    let (_, num_positive) = check_weights(weights)?;
    if k > num_positive {
        return Err(Error::NotEnoughPositiveWeights { k, num_positive });
    }
    if k == 0 {
        return Ok(Vec::new());
    }
    // Keys as f64 bits: keys are >= 0 (or +inf), so the bit order is the numeric order. Their
    // bits 62..47 (sign is 0) give a 2^16-bin histogram, 32 bins per octave, built in the same
    // pass; the k-th smallest key is then selected inside its bin only (radix select).
    let mut scratch = spare_keys::take(weights.len());
    let keys = &mut scratch[..weights.len()];
    let mut hist = vec![0u32; 1 << 16];
    #[cfg(target_arch = "x86_64")]
    if crate::simd::has_x86_64_v3() {
        // SAFETY: the CPU supports the x86-64-v3 features (checked just above).
        unsafe { es_keys_v3(weights, seed, keys, &mut hist) };
    } else {
        es_keys(weights, seed, keys, &mut hist);
    }
    #[cfg(not(target_arch = "x86_64"))]
    es_keys(weights, seed, keys, &mut hist);
    // Bin of the rank k-1 key and the rank inside it.
    let target = (k - 1) as u64;
    let mut cum = 0u64;
    let mut bin = 0usize;
    while cum + u64::from(hist[bin]) <= target {
        cum += u64::from(hist[bin]);
        bin += 1;
    }
    let mut in_bin: Vec<u64> = keys
        .iter()
        .copied()
        .filter(|&b| (b >> ES_SHIFT) as usize == bin)
        .collect();
    #[allow(
        clippy::cast_possible_truncation,
        reason = "rank inside an in-memory slice"
    )]
    let (_, kth, _) = in_bin.select_nth_unstable((target - cum) as usize);
    let threshold = *kth;
    #[allow(clippy::cast_possible_truncation, reason = "cum <= k - 1, a usize")]
    let num_less = cum as usize + in_bin.iter().filter(|&&x| x < threshold).count();
    let ties_left = k - num_less;
    let num_equal = in_bin.iter().filter(|&&x| x == threshold).count();
    drop(in_bin);
    let out = if ties_left == num_equal {
        // Usual case (no tie straddles the cut): exactly the keys <= threshold. Branchless
        // compaction: always write, advance only on a hit (one spare slot at the end).
        let mut out = buf::filled::<i64>(k + 1);
        let mut len = 0usize;
        for (i, &key) in keys.iter().enumerate() {
            out[len] = i as i64;
            len += usize::from(key <= threshold);
        }
        out.truncate(k);
        out
    } else {
        let mut ties_left = ties_left;
        let mut out = buf::with_capacity::<i64>(k);
        for (i, &key) in keys.iter().enumerate() {
            if key < threshold {
                out.push(i as i64);
            } else if key == threshold && ties_left > 0 {
                out.push(i as i64);
                ties_left -= 1;
            }
        }
        out
    };
    spare_keys::give(scratch);
    Ok(out)
}

/// A per-thread key buffer for [`sample_without_replacement`], kept between calls.
///
/// A fresh multi-MB buffer per call is page-faulted in again whenever the allocator has returned
/// the previous one to the OS (~500 faults, 1-2 ms of system time per 1e6 keys on the 2-vCPU
/// VM). Every key is overwritten before it is read, so reuse cannot change a result. Buffers up
/// to `MAX_KEPT` keys (64 MiB) are kept; larger ones are freed.
mod spare_keys {
    use crate::buf::Scratch;
    use std::cell::RefCell;

    const MAX_KEPT: usize = 8 << 20;

    thread_local! {
        static KEYS: RefCell<Option<Scratch<u64>>> = const { RefCell::new(None) };
    }

    /// A buffer of at least `len` keys.
    pub(super) fn take(len: usize) -> Scratch<u64> {
        match KEYS.with(|k| k.borrow_mut().take()) {
            Some(s) if s.len() >= len => s,
            _ => Scratch::filled(len, 0),
        }
    }

    /// Keep `s` for the next call on this thread (if not too large).
    pub(super) fn give(s: Scratch<u64>) {
        if s.len() <= MAX_KEPT {
            KEYS.with(|k| *k.borrow_mut() = Some(s));
        }
    }
}

/// Bit shift that maps an Efraimidis–Spirakis key (non-negative `f64` bits) to its histogram bin.
const ES_SHIFT: u32 = 47;

/// Efraimidis–Spirakis keys `Exp(1) / w` as `f64` bits (`+inf` for `w = 0`; a positive weight's
/// key is capped at `f64::MAX`), key `i` from stream `(seed, i / CHUNK)`, and their histogram.
#[inline(always)]
fn es_keys(weights: &[f64], seed: u64, keys: &mut [u64], hist: &mut [u32]) {
    let exp1 = Exp1Stream::new();
    for (c, (kc, wc)) in keys
        .chunks_mut(CHUNK_LEN)
        .zip(weights.chunks(CHUNK_LEN))
        .enumerate()
    {
        let mut rng = stream(seed, domain::WITHOUT_REPLACEMENT, &[c as u64]);
        for (kk, &w) in kc.iter_mut().zip(wc) {
            let e = exp1.sample(&mut rng);
            let key = if w > 0.0 {
                (e / w).min(f64::MAX)
            } else {
                f64::INFINITY
            };
            *kk = key.to_bits();
        }
    }
    // A separate pass: fused into the loop above, the increments cost ~4x more (measured).
    for &bits in keys.iter() {
        hist[(bits >> ES_SHIFT) as usize] += 1;
    }
}

/// [`es_keys`] compiled for x86-64-v3; same results.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,bmi1,bmi2,fma,lzcnt,popcnt")]
fn es_keys_v3(weights: &[f64], seed: u64, keys: &mut [u64], hist: &mut [u32]) {
    es_keys(weights, seed, keys, hist);
}

/// A uniformly random permutation of `0..n` (Fisher–Yates, Durstenfeld's in-place variant, with
/// Lemire's unbiased bounded integers) from stream `(seed, epoch)`.
pub fn epoch_permutation(n: usize, seed: u64, epoch: u64) -> Vec<i64> {
    let mut perm = buf::with_capacity::<i64>(n);
    perm.extend(0..n as i64);
    let mut rng = stream(seed, domain::EPOCH, &[epoch]);
    for i in (1..n).rev() {
        #[allow(clippy::cast_possible_truncation, reason = "< i + 1 <= n")]
        let j = uniform_below(&mut rng, i as u64 + 1) as usize;
        perm.swap(i, j);
    }
    perm
}

/// Pick a bucket by weight, then the next index of that bucket's own per-epoch permutation.
///
/// Bucket `b`'s permutation in its epoch `e` is the forward Fisher–Yates shuffle of its members
/// in index order, position `p` using stream `(seed, generation, b, e, p / PERM_CHUNK)`. It is
/// built lazily: each draw performs one swap, so a call costs `O(k)` and not `O(bucket size)`,
/// except for an `O(bucket size)` copy when a bucket starts a new epoch (amortised: once per
/// bucket-size draws from that bucket). The bucket of each draw of call `c` comes from stream
/// `(seed, generation, c)` through an alias table over the bucket probabilities.
#[derive(Clone, Debug)]
pub struct BucketSampler {
    num_buckets: usize,
    /// `N`, the length of the bucket assignment (excluded samples included); fixed for life.
    num_samples: usize,
    seed: u64,
    num_calls: u64,
    generation: u64,
    /// Members of every bucket, bucket by bucket, each in index order.
    members: Vec<u32>,
    /// `offsets[b]..offsets[b + 1]` is bucket `b` in `members` and `work`.
    offsets: Vec<usize>,
    /// The partially shuffled members of the current epoch of each bucket.
    work: Vec<u32>,
    cursors: Vec<u64>,
    epochs: Vec<u64>,
    /// The stream of each bucket's current position chunk (valid while `cursor % PERM_CHUNK != 0`).
    rngs: Vec<Prng>,
}

/// Counters of a [`BucketSampler`] (its whole state besides the bucket assignment).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BucketSamplerState {
    /// The seed.
    pub seed: u64,
    /// Calls of `sample` so far.
    pub num_calls: u64,
    /// Number of `set_buckets` calls so far.
    pub generation: u64,
    /// Position in each bucket's current permutation.
    pub cursors: Vec<u64>,
    /// Epoch of each bucket's permutation.
    pub epochs: Vec<u64>,
}

impl BucketSampler {
    /// Build from a bucket assignment (`-1` excludes a sample).
    ///
    /// # Errors
    /// `InvalidArgument` for `num_buckets` outside `[1, 65536]` or more than `u32::MAX`
    /// samples; `BucketIndexOutOfRange` for a bad entry.
    pub fn new(bucket_idx: &[i64], num_buckets: usize, seed: u64) -> Result<Self> {
        crate::bucketing::check_num_buckets(num_buckets)?;
        let mut s = Self {
            num_buckets,
            num_samples: bucket_idx.len(),
            seed,
            num_calls: 0,
            generation: 0,
            members: Vec::new(),
            offsets: Vec::new(),
            work: Vec::new(),
            cursors: vec![0; num_buckets],
            epochs: vec![0; num_buckets],
            rngs: vec![stream(seed, domain::BUCKET_PERM, &[]); num_buckets],
        };
        s.assign(bucket_idx)?;
        Ok(s)
    }

    fn assign(&mut self, bucket_idx: &[i64]) -> Result<()> {
        if bucket_idx.len() > MAX_CATEGORIES {
            return Err(invalid_arg(
                "bucket_idx",
                format!(
                    "{} samples exceed the limit {MAX_CATEGORIES}",
                    bucket_idx.len()
                ),
            ));
        }
        let b = self.num_buckets;
        let mut counts = vec![0usize; b + 1];
        for (index, &v) in bucket_idx.iter().enumerate() {
            #[allow(
                clippy::cast_sign_loss,
                clippy::cast_possible_truncation,
                reason = "range-checked first"
            )]
            if v >= 0 && (v as u64) < b as u64 {
                counts[v as usize + 1] += 1;
            } else if v != -1 {
                return Err(Error::BucketIndexOutOfRange {
                    index,
                    value: v,
                    num_buckets: b,
                });
            }
        }
        for i in 0..b {
            counts[i + 1] += counts[i];
        }
        let total = counts[b];
        let mut members = buf::filled::<u32>(total);
        let mut cursor = counts[..b].to_vec();
        #[allow(
            clippy::cast_sign_loss,
            clippy::cast_possible_truncation,
            reason = "validated above; index < u32::MAX"
        )]
        for (index, &v) in bucket_idx.iter().enumerate() {
            if v >= 0 {
                let c = &mut cursor[v as usize];
                members[*c] = index as u32;
                *c += 1;
            }
        }
        self.work.clone_from(&members);
        self.members = members;
        self.offsets = counts;
        self.cursors.fill(0);
        self.epochs.fill(0);
        Ok(())
    }

    /// Replace the bucket assignment of the same `N` samples: generation += 1, cursors and
    /// epochs reset.
    ///
    /// # Errors
    /// `SampleCountMismatch` if its length is not the `N` the sampler was built with;
    /// `BucketIndexOutOfRange` for a bad entry; `CounterExhausted` if `generation` is already
    /// `u64::MAX`. On error the sampler is unchanged.
    pub fn set_buckets(&mut self, bucket_idx: &[i64]) -> Result<()> {
        if bucket_idx.len() != self.num_samples {
            return Err(Error::SampleCountMismatch {
                got: bucket_idx.len(),
                expected: self.num_samples,
            });
        }
        let generation = self
            .generation
            .checked_add(1)
            .ok_or(Error::CounterExhausted {
                counter: "generation",
                value: self.generation,
                increment: 1,
            })?;
        let mut next = self.clone_shell();
        next.assign(bucket_idx)?;
        next.generation = generation;
        *self = next;
        Ok(())
    }

    fn clone_shell(&self) -> Self {
        Self {
            num_buckets: self.num_buckets,
            num_samples: self.num_samples,
            seed: self.seed,
            num_calls: self.num_calls,
            generation: self.generation,
            members: Vec::new(),
            offsets: Vec::new(),
            work: Vec::new(),
            cursors: vec![0; self.num_buckets],
            epochs: vec![0; self.num_buckets],
            rngs: self.rngs.clone(),
        }
    }

    /// Number of buckets.
    pub fn num_buckets(&self) -> usize {
        self.num_buckets
    }

    /// `N`, the number of samples the bucket assignment covers (excluded ones included).
    pub fn len(&self) -> usize {
        self.num_samples
    }

    /// Whether the sampler is over no sample at all.
    pub fn is_empty(&self) -> bool {
        self.num_samples == 0
    }

    /// Members per bucket.
    pub fn counts(&self) -> Vec<u64> {
        self.offsets
            .windows(2)
            .map(|w| (w[1] - w[0]) as u64)
            .collect()
    }

    /// The counters.
    pub fn state(&self) -> BucketSamplerState {
        BucketSamplerState {
            seed: self.seed,
            num_calls: self.num_calls,
            generation: self.generation,
            cursors: self.cursors.clone(),
            epochs: self.epochs.clone(),
        }
    }

    /// Restore counters saved by [`BucketSampler::state`] from a sampler built with the same
    /// bucket assignment. Replays each bucket's current epoch up to its cursor (`O(sum of
    /// cursors)`).
    ///
    /// # Errors
    /// `InvalidState` if the lengths differ from `num_buckets` or a cursor exceeds its bucket's
    /// size; on error the sampler is unchanged.
    pub fn load_state(&mut self, state: &BucketSamplerState) -> Result<()> {
        let b = self.num_buckets;
        if state.cursors.len() != b || state.epochs.len() != b {
            return Err(Error::InvalidState {
                reason: format!(
                    "cursors/epochs have lengths {}/{}, expected num_buckets = {b}",
                    state.cursors.len(),
                    state.epochs.len()
                ),
            });
        }
        for (bucket, &c) in state.cursors.iter().enumerate() {
            let size = (self.offsets[bucket + 1] - self.offsets[bucket]) as u64;
            if c > size {
                return Err(Error::InvalidState {
                    reason: format!("cursors[{bucket}] = {c} exceeds the bucket size {size}"),
                });
            }
        }
        self.seed = state.seed;
        self.num_calls = state.num_calls;
        self.generation = state.generation;
        self.epochs.clone_from(&state.epochs);
        for bucket in 0..b {
            let (lo, hi) = (self.offsets[bucket], self.offsets[bucket + 1]);
            self.work[lo..hi].copy_from_slice(&self.members[lo..hi]);
            self.cursors[bucket] = 0;
            for _ in 0..state.cursors[bucket] {
                self.step(bucket);
            }
        }
        Ok(())
    }

    /// Start the next epoch of `bucket` if its permutation is exhausted.
    #[inline]
    fn roll_epoch_if_exhausted(&mut self, bucket: usize) {
        let (lo, hi) = (self.offsets[bucket], self.offsets[bucket + 1]);
        if self.cursors[bucket] == (hi - lo) as u64 {
            self.epochs[bucket] += 1;
            self.cursors[bucket] = 0;
            self.work[lo..hi].copy_from_slice(&self.members[lo..hi]);
        }
    }

    /// Draw the swap partner of the next position of `bucket` (forward Fisher–Yates) and advance
    /// its cursor; returns the absolute positions `(p, j)`. The swap itself is applied by the
    /// caller, in order. The bucket must be non-empty and not exhausted.
    #[inline]
    fn plan(&mut self, bucket: usize) -> (usize, usize) {
        let lo = self.offsets[bucket];
        let size = (self.offsets[bucket + 1] - lo) as u64;
        let pos = self.cursors[bucket];
        if pos.is_multiple_of(PERM_CHUNK) {
            self.rngs[bucket] = stream(
                self.seed,
                domain::BUCKET_PERM,
                &[
                    self.generation,
                    bucket as u64,
                    self.epochs[bucket],
                    pos / PERM_CHUNK,
                ],
            );
        }
        let j = pos + uniform_below(&mut self.rngs[bucket], size - pos);
        self.cursors[bucket] = pos + 1;
        #[allow(
            clippy::cast_possible_truncation,
            reason = "positions inside an in-memory slice"
        )]
        (lo + pos as usize, lo + j as usize)
    }

    /// Advance bucket `bucket` by one position of its permutation and return the index there.
    /// The bucket must be non-empty.
    #[inline]
    fn step(&mut self, bucket: usize) -> u32 {
        self.roll_epoch_if_exhausted(bucket);
        let (p, j) = self.plan(bucket);
        self.work.swap(p, j);
        self.work[p]
    }

    /// `k` indices: each draw picks a bucket with probability proportional to `probs` (empty
    /// buckets' mass is renormalised away), then takes that bucket's next index.
    ///
    /// # Errors
    /// `InvalidArgument` if `probs.len() != num_buckets`; `InvalidWeight` for a negative, NaN or
    /// infinite entry; `NoMassOnNonEmptyBuckets` when no non-empty bucket has positive mass;
    /// `CounterExhausted` if `num_calls` is already `u64::MAX` (a restored state can hold it).
    /// On error the sampler is unchanged.
    pub fn sample(&mut self, probs: &[f64], k: usize) -> Result<Vec<i64>> {
        if probs.len() != self.num_buckets {
            return Err(invalid_arg(
                "probs",
                format!("length {} != num_buckets {}", probs.len(), self.num_buckets),
            ));
        }
        check_weights(probs)?;
        let masked: Vec<f64> = probs
            .iter()
            .enumerate()
            .map(|(b, &p)| {
                if self.offsets[b + 1] > self.offsets[b] {
                    p
                } else {
                    0.0
                }
            })
            .collect();
        let table = match AliasTable::new(&masked) {
            Ok(t) => t,
            Err(Error::ZeroTotalWeight { .. }) => return Err(Error::NoMassOnNonEmptyBuckets),
            Err(e) => return Err(e),
        };
        let num_calls = self
            .num_calls
            .checked_add(1)
            .ok_or(Error::CounterExhausted {
                counter: "num_calls",
                value: self.num_calls,
                increment: 1,
            })?;
        let mut rng = stream(
            self.seed,
            domain::BUCKET_CHOICE,
            &[self.generation, self.num_calls],
        );
        self.num_calls = num_calls;
        // Plan up to AHEAD draws (bucket choice, swap partner: these need no table reads) and
        // prefetch their partners, then apply the swaps in order. The result is exactly the
        // sequential algorithm's; the random reads of a block just overlap. An epoch roll waits
        // until the swaps planned before it are applied.
        let mut out = buf::filled::<i64>(k);
        let mut planned = [(0usize, 0usize); AHEAD];
        let mut pending: Option<usize> = None;
        let mut done = 0;
        while done < k {
            let mut len = 0;
            while len < AHEAD && done + len < k {
                let bucket = match pending.take() {
                    Some(b) => b,
                    None => table.pick(rng.next_u64()) as usize,
                };
                let exhausted = self.cursors[bucket]
                    == (self.offsets[bucket + 1] - self.offsets[bucket]) as u64;
                if exhausted {
                    if len > 0 {
                        pending = Some(bucket);
                        break;
                    }
                    self.roll_epoch_if_exhausted(bucket);
                }
                let (p, j) = self.plan(bucket);
                prefetch(&self.work, j);
                planned[len] = (p, j);
                len += 1;
            }
            for (o, &(p, j)) in out[done..done + len].iter_mut().zip(&planned[..len]) {
                self.work.swap(p, j);
                *o = i64::from(self.work[p]);
            }
            done += len;
        }
        Ok(out)
    }
}

#[cfg(test)]
#[allow(
    clippy::cast_possible_truncation,
    clippy::cast_sign_loss,
    clippy::float_cmp,
    reason = "test oracles: small known-range values, exact float expectations"
)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn golden_weighted_sampler_seed_1234() {
        let w: Vec<f64> = (1..=10).map(f64::from).collect();
        let mut s = WeightedSampler::new(&w, 1234).unwrap();
        let got = s.sample(16).unwrap();
        assert_eq!(got, GOLDEN_WEIGHTED);
    }

    #[test]
    fn golden_bucket_sampler_seed_1234() {
        let idx: Vec<i64> = (0..100).map(|i| i % 4).collect();
        let mut s = BucketSampler::new(&idx, 4, 1234).unwrap();
        let got = s.sample(&[0.1, 0.2, 0.3, 0.4], 16).unwrap();
        assert_eq!(got, GOLDEN_BUCKET);
    }

    #[test]
    fn golden_without_replacement_and_permutation_seed_1234() {
        let w: Vec<f64> = (1..=20).map(f64::from).collect();
        let got = sample_without_replacement(&w, 5, 1234).unwrap();
        let perm = epoch_permutation(10, 1234, 0);
        // Pinned like the draws below: a change alters users' subsets and epoch orders.
        assert_eq!(got, vec![9, 12, 14, 16, 18]);
        assert_eq!(perm, vec![9, 2, 0, 8, 4, 7, 3, 1, 6, 5]);
    }

    /// First 16 draws of seed 1234 over weights 1..=10. A change here changes every user's
    /// data order: only with a deliberate, documented version bump.
    const GOLDEN_WEIGHTED: [i64; 16] = [6, 7, 5, 3, 6, 4, 7, 7, 4, 8, 4, 7, 8, 7, 4, 8];
    /// First 16 draws of seed 1234, 100 samples in buckets `i % 4`, probs 0.1..0.4.
    const GOLDEN_BUCKET: [i64; 16] = [68, 75, 29, 91, 81, 10, 35, 99, 2, 11, 30, 4, 62, 38, 64, 78];

    #[test]
    fn weight_errors() {
        assert_eq!(
            AliasTable::new(&[]).unwrap_err(),
            Error::ZeroTotalWeight { len: 0 }
        );
        assert_eq!(
            AliasTable::new(&[0.0, 0.0]).unwrap_err(),
            Error::ZeroTotalWeight { len: 2 }
        );
        assert!(matches!(
            AliasTable::new(&[1.0, -1.0]).unwrap_err(),
            Error::InvalidWeight { index: 1, .. }
        ));
        assert!(matches!(
            AliasTable::new(&[1.0, f64::NAN]).unwrap_err(),
            Error::InvalidWeight { index: 1, .. }
        ));
        assert!(matches!(
            AliasTable::new(&[f64::INFINITY]).unwrap_err(),
            Error::InvalidWeight { index: 0, .. }
        ));
        assert!(matches!(
            sample_without_replacement(&[1.0, 0.0], 2, 0).unwrap_err(),
            Error::NotEnoughPositiveWeights {
                k: 2,
                num_positive: 1
            }
        ));
    }

    #[test]
    fn single_positive_weight_and_huge_weights() {
        let mut w = vec![0.0; 1000];
        w[999] = 1.0;
        let mut s = WeightedSampler::new(&w, 5).unwrap();
        assert!(s.sample(1000).unwrap().iter().all(|&i| i == 999));
        let mut s = WeightedSampler::new(&[f64::MAX, f64::MAX, 0.0], 5).unwrap();
        let d = s.sample(1000).unwrap();
        assert!(d.iter().all(|&i| i < 2));
        assert!(d.contains(&0) && d.contains(&1));
    }

    #[test]
    fn frequencies_follow_weights() {
        let w = [1.0, 2.0, 3.0, 4.0, 0.0];
        let mut s = WeightedSampler::new(&w, 9).unwrap();
        let n = 200_000;
        let mut c = [0usize; 5];
        for i in s.sample(n).unwrap() {
            c[i as usize] += 1;
        }
        for (i, &wi) in w.iter().enumerate() {
            let expect = n as f64 * wi / 10.0;
            assert!(
                (c[i] as f64 - expect).abs() <= 5.0 * expect.sqrt() + 1.0,
                "{c:?}"
            );
        }
    }

    #[test]
    fn bucket_sampler_epochs_cover_every_sample_once() {
        let idx: Vec<i64> = (0..1000).map(|i| if i % 7 == 0 { -1 } else { 0 }).collect();
        let mut s = BucketSampler::new(&idx, 1, 3).unwrap();
        let members = idx.iter().filter(|&&v| v == 0).count();
        for _ in 0..3 {
            let mut got = s.sample(&[1.0], members).unwrap();
            got.sort_unstable();
            let want: Vec<i64> = (0..1000).filter(|i| i % 7 != 0).collect();
            assert_eq!(got, want);
        }
        assert_eq!(s.state().epochs, vec![2]);
    }

    #[test]
    fn bucket_sampler_errors() {
        assert!(matches!(
            BucketSampler::new(&[0, 5], 2, 0).unwrap_err(),
            Error::BucketIndexOutOfRange {
                index: 1,
                value: 5,
                ..
            }
        ));
        let mut s = BucketSampler::new(&[0, 0, -1], 2, 0).unwrap();
        assert_eq!(
            s.sample(&[0.0, 1.0], 1).unwrap_err(),
            Error::NoMassOnNonEmptyBuckets
        );
        assert!(s.sample(&[1.0], 1).is_err());
        assert!(s.sample(&[1.0, -1.0], 1).is_err());
        assert_eq!(s.sample(&[0.5, 0.5], 3).unwrap().len(), 3);
    }

    #[test]
    fn weighted_sampler_counter_never_wraps() {
        let w: Vec<f64> = (1..=10).map(f64::from).collect();
        let mut s = WeightedSampler::new(&w, 1234).unwrap();
        s.num_draws = u64::MAX - 3;
        let last = s.sample(3).unwrap();
        assert_eq!(s.num_draws, u64::MAX);
        // Counter-based: the same draws one at a time.
        let mut t = WeightedSampler::new(&w, 1234).unwrap();
        t.num_draws = u64::MAX - 3;
        let one_by_one: Vec<i64> = (0..3).flat_map(|_| t.sample(1).unwrap()).collect();
        assert_eq!(one_by_one, last);
        let err = s.sample(1).unwrap_err();
        assert_eq!(
            err.to_string(),
            format!(
                "num_draws = {} + 1 would pass the counter's limit 2**64 - 1; the sampler \
                 cannot number more",
                u64::MAX
            )
        );
        assert_eq!(s.num_draws, u64::MAX);
        assert_eq!(s.sample(0).unwrap(), Vec::<i64>::new());
        s.num_draws = u64::MAX - 1;
        assert!(s.sample(2).is_err());
        assert_eq!(s.num_draws, u64::MAX - 1);
    }

    #[test]
    fn bucket_sampler_set_buckets_keeps_the_number_of_samples() {
        let idx: Vec<i64> = (0..100).map(|i| i % 3).collect();
        let probs = [0.2, 0.3, 0.5];
        let mut s = BucketSampler::new(&idx, 3, 1).unwrap();
        let mut twin = s.clone();
        s.sample(&probs, 50).unwrap();
        twin.sample(&probs, 50).unwrap();
        let before = s.state();
        for wrong in [0usize, 99, 101] {
            let err = s.set_buckets(&vec![0; wrong]).unwrap_err();
            assert_eq!(
                err.to_string(),
                format!(
                    "bucket_idx: length {wrong}, but the sampler is over 100 samples \
                     (set_buckets re-buckets the same samples; build a new sampler for another \
                     set)"
                )
            );
        }
        assert_eq!(s.state(), before);
        assert_eq!(s.len(), 100);
        assert_eq!(s.counts(), vec![34, 33, 33]);
        assert_eq!(
            s.sample(&probs, 80).unwrap(),
            twin.sample(&probs, 80).unwrap()
        );
        s.set_buckets(&vec![1; 100]).unwrap();
        assert_eq!(s.counts(), vec![0, 100, 0]);
        assert_eq!(s.state().generation, 1);
    }

    #[test]
    fn bucket_sampler_counters_never_wrap() {
        let idx: Vec<i64> = (0..10).map(|i| i % 2).collect();
        let mut s = BucketSampler::new(&idx, 2, 1).unwrap();
        let mut st = s.state();
        st.num_calls = u64::MAX;
        s.load_state(&st).unwrap();
        assert_eq!(
            s.sample(&[1.0, 1.0], 4).unwrap_err(),
            Error::CounterExhausted {
                counter: "num_calls",
                value: u64::MAX,
                increment: 1
            }
        );
        assert_eq!(s.state(), st);
        st.num_calls = 0;
        st.generation = u64::MAX;
        s.load_state(&st).unwrap();
        assert_eq!(
            s.set_buckets(&idx).unwrap_err(),
            Error::CounterExhausted {
                counter: "generation",
                value: u64::MAX,
                increment: 1
            }
        );
        assert_eq!(s.state(), st);
    }

    proptest! {
        #[test]
        fn alias_table_agrees_between_thread_counts(
            w in prop::collection::vec(prop_oneof![0.0f64..10.0, Just(0.0), Just(1e-300), Just(1e300)], 1..5000),
            threads in 2usize..5,
        ) {
            prop_assume!(w.iter().any(|&x| x > 0.0));
            let one = crate::par::with_threads(1, || AliasTable::new(&w)).unwrap();
            let many = crate::par::with_threads(threads, || AliasTable::new(&w)).unwrap();
            prop_assert_eq!(one.entries, many.entries);
        }

        #[test]
        fn weighted_counter_based(w in prop::collection::vec(0.0f64..10.0, 1..50), seed: u64,
                                  a in 0usize..3000, b in 0usize..3000) {
            prop_assume!(w.iter().any(|&x| x > 0.0));
            let mut s1 = WeightedSampler::new(&w, seed).unwrap();
            let mut x = s1.sample(a).unwrap();
            x.extend(s1.sample(b).unwrap());
            let mut s2 = WeightedSampler::new(&w, seed).unwrap();
            let y = s2.sample(a + b).unwrap();
            prop_assert_eq!(&x, &y);
            prop_assert!(x.iter().all(|&i| i >= 0 && (i as usize) < w.len() && w[i as usize] > 0.0));
        }

        #[test]
        fn without_replacement_distinct(w in prop::collection::vec(prop_oneof![0.0f64..10.0, Just(0.0)], 1..300),
                                        seed: u64, frac in 0.0f64..=1.0) {
            let pos = w.iter().filter(|&&x| x > 0.0).count();
            let k = (pos as f64 * frac) as usize;
            let got = sample_without_replacement(&w, k, seed).unwrap();
            prop_assert_eq!(got.len(), k);
            prop_assert!(got.windows(2).all(|p| p[0] < p[1]));
            prop_assert!(got.iter().all(|&i| w[i as usize] > 0.0));
            prop_assert_eq!(got, sample_without_replacement(&w, k, seed).unwrap());
        }

        #[test]
        fn permutation_is_permutation(n in 0usize..500, seed: u64, epoch: u64) {
            let mut p = epoch_permutation(n, seed, epoch);
            prop_assert_eq!(&p, &epoch_permutation(n, seed, epoch));
            p.sort_unstable();
            prop_assert_eq!(p, (0..n as i64).collect::<Vec<_>>());
        }

        #[test]
        fn bucket_sampler_resume(idx in prop::collection::vec(-1i64..4, 1..200), seed: u64,
                                 k1 in 0usize..300, k2 in 0usize..300, probs in prop::collection::vec(0.0f64..1.0, 4)) {
            prop_assume!(probs.iter().enumerate().any(|(b, &p)| p > 0.0 && idx.contains(&(b as i64))));
            let mut a = BucketSampler::new(&idx, 4, seed).unwrap();
            let first = a.sample(&probs, k1).unwrap();
            prop_assert!(first.iter().all(|&i| idx[i as usize] >= 0 && probs[idx[i as usize] as usize] > 0.0));
            let st = a.state();
            let cont = a.sample(&probs, k2).unwrap();
            let mut b = BucketSampler::new(&idx, 4, 0).unwrap();
            b.load_state(&st).unwrap();
            prop_assert_eq!(cont, b.sample(&probs, k2).unwrap());
        }
    }
}
