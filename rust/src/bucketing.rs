//! Exact percentile bucketing: order-statistic edges and bucket assignment.
//!
//! With `s` the sorted finite window of length `N` and `B` buckets, edge `j` (`j = 1..B-1`) is
//! `s[ceil(j*N/B) - 1]`, and `bucket(v)` = number of edges `<= v`, which equals
//! `min(B-1, floor(rank(v) * B))` with `rank(v) = #{x in window : x <= v} / N` exactly (ties and
//! duplicate edges included), because `bucket(v) >= j  <=>  #{x <= v} >= ceil(j*N/B)  <=>
//! v >= s[ceil(j*N/B) - 1]`.
//!
//! Edges are found by a two-pass radix select (as in the perf notes of this project, and
//! classic MSD radix selection): values map to order-preserving unsigned keys (`-0.0` is first
//! normalised to `+0.0`); pass 1 builds a histogram of the top 16 key bits; a prefix scan locates
//! the bin that holds each target rank; pass 2 copies the keys of just those bins (a
//! branchless store, or AVX-512 compress with a bin bitmap in registers: `crate::avx512`); a
//! `select_nth_unstable` (or a sort, when one bin holds many targets) inside each bin finishes.
//! Cost `O(N + 2^16)`, worst case (all values in one bin) still `O(N log N)` at most.
//! Non-finite values (NaN, ±inf) occupy bins that no finite value shares, so they drop out of
//! the histogram without a branch.

use crate::error::{invalid_arg, Error, Result};
use rayon::prelude::*;

/// Number of histogram bins (top 16 bits of the order-preserving key).
pub const NUM_BINS: usize = 1 << 16;

/// The largest supported number of buckets.
pub const MAX_BUCKETS: usize = 1 << 16;

/// A float type the kernels accept (`f32` or `f64`).
///
/// Keys, their widening and every comparison of the kernels use integer operations only, so a
/// flushed-denormal floating-point mode (FTZ/DAZ, e.g. after `torch.set_flush_denormal(True)`)
/// does not turn subnormal values into zeros.
pub trait Float: Copy + Send + Sync + PartialOrd + 'static {
    /// The order-preserving unsigned key.
    type Key: Copy + Ord + Send + Sync + Default + 'static;
    /// The key of the value, `-0.0` mapped to `+0.0`'s; for non-NaN values the key order is the
    /// float order.
    fn key(self) -> Self::Key;
    /// Histogram bin (top 16 bits) of a key.
    fn bin(key: Self::Key) -> usize;
    /// The float with this key, widened to `f64` (exact).
    fn key_to_f64(key: Self::Key) -> f64;
    /// Bins that only non-finite values occupy: `[0, lo)` and `[hi, NUM_BINS)`.
    const FINITE_BINS: (usize, usize);
    /// A key `t` with `v >= e <=> key(v) >= t` for every non-NaN `v` of this type (the key of
    /// the smallest value of this type that is `>= e`). `e` must not be NaN.
    fn threshold_key(e: f64) -> Self::Key;
    /// Whether a key is a NaN's.
    fn key_is_nan(key: Self::Key) -> bool;
    /// Whether the value is NaN.
    fn is_nan_value(self) -> bool;
    /// Copy the keys of the values of `data` whose bin is in `bins` (ascending) into `out`, in
    /// data order; return how many. `out` has room for every match plus 16.
    fn collect_keys(data: &[Self], bins: &[usize], out: &mut [Self::Key]) -> usize {
        collect_keys_portable(data, bins, out)
    }
    /// A vector kernel for [`assign_buckets`]' count (see `compare_count`), when this CPU and
    /// type have one; `None` otherwise.
    fn count_le_vector(values: &[Self], thresholds: &[Self::Key], out: &mut [i64]) -> Option<bool> {
        let _ = (values, thresholds, out);
        None
    }
}

/// The `f32` with bits `bits` widened to `f64` exactly, by integer operations (a subnormal
/// stays itself even when the CPU flushes denormal inputs).
fn widen_f32_bits(bits: u32) -> f64 {
    let sign = u64::from(bits >> 31) << 63;
    let exponent = (bits >> 23) & 0xFF;
    let mantissa = u64::from(bits & 0x7F_FFFF);
    let wide = match exponent {
        0xFF => sign | 0x7FF0_0000_0000_0000 | (mantissa << 29),
        0 if mantissa == 0 => sign,
        0 => {
            // mantissa * 2^-149 with its top bit at position p: 1.f * 2^(p - 149)
            let p = 63 - u64::from(mantissa.leading_zeros());
            let fraction = (mantissa << (52 - p)) & 0x000F_FFFF_FFFF_FFFF;
            sign | ((p + 874) << 52) | fraction
        }
        _ => sign | ((u64::from(exponent) + 896) << 52) | (mantissa << 29),
    };
    f64::from_bits(wide)
}

impl Float for f32 {
    type Key = u32;
    #[inline]
    fn key(self) -> u32 {
        let bits = self.to_bits();
        let bits = if bits == 0x8000_0000 { 0 } else { bits };
        // Branchless: flip the sign bit of non-negatives, all bits of negatives.
        #[allow(
            clippy::cast_sign_loss,
            reason = "an arithmetic-shift mask, reinterpreted"
        )]
        let negative = ((bits as i32) >> 31) as u32;
        bits ^ (negative | 0x8000_0000)
    }
    #[inline]
    fn bin(key: u32) -> usize {
        (key >> 16) as usize
    }
    #[inline]
    fn key_to_f64(key: u32) -> f64 {
        let bits = if key & 0x8000_0000 == 0 {
            !key
        } else {
            key & 0x7FFF_FFFF
        };
        widen_f32_bits(bits)
    }
    // -inf has key 0x007F_FFFF (bin 0x7F); +inf has key 0xFF80_0000 (bin 0xFF80); NaNs are beyond.
    const FINITE_BINS: (usize, usize) = (0x0080, 0xFF80);
    fn threshold_key(e: f64) -> u32 {
        // The smallest key in [key(-inf), key(+inf)] whose value is >= e (+inf always is).
        let (mut lo, mut hi) = (0x007F_FFFF_u32, 0xFF80_0000_u32);
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            if Self::key_to_f64(mid) >= e {
                hi = mid;
            } else {
                lo = mid + 1;
            }
        }
        lo
    }
    #[inline]
    fn key_is_nan(key: u32) -> bool {
        !(0x007F_FFFF..=0xFF80_0000).contains(&key)
    }
    #[inline]
    fn is_nan_value(self) -> bool {
        self.is_nan()
    }
    fn collect_keys(data: &[f32], bins: &[usize], out: &mut [u32]) -> usize {
        #[cfg(target_arch = "x86_64")]
        {
            if bins[bins.len() - 1] - bins[0] < crate::avx512::COLLECT_SPAN
                && crate::simd::has_avx512_vbmi()
            {
                // SAFETY: the CPU has AVX-512 F/BW/VBMI (checked just above); the span and
                // room preconditions hold (span checked above, room per the trait contract).
                return unsafe { crate::avx512::collect_keys_f32(data, bins, out) };
            }
        }
        collect_keys_portable(data, bins, out)
    }
    fn count_le_vector(values: &[f32], thresholds: &[u32], out: &mut [i64]) -> Option<bool> {
        #[cfg(target_arch = "x86_64")]
        {
            if thresholds.len() <= 31 && crate::simd::has_avx512() {
                // SAFETY: the CPU has AVX-512 F (checked just above); lengths per the contract.
                return Some(unsafe { crate::avx512::count_le_f32(values, thresholds, out) });
            }
        }
        let _ = (values, thresholds, out);
        None
    }
}

impl Float for f64 {
    type Key = u64;
    #[inline]
    fn key(self) -> u64 {
        let bits = self.to_bits();
        let bits = if bits == 0x8000_0000_0000_0000 {
            0
        } else {
            bits
        };
        if bits & 0x8000_0000_0000_0000 == 0 {
            bits | 0x8000_0000_0000_0000
        } else {
            !bits
        }
    }
    #[inline]
    fn bin(key: u64) -> usize {
        #[allow(clippy::cast_possible_truncation, reason = "16-bit value")]
        let b = (key >> 48) as usize;
        b
    }
    #[inline]
    fn key_to_f64(key: u64) -> f64 {
        let bits = if key & 0x8000_0000_0000_0000 == 0 {
            !key
        } else {
            key & 0x7FFF_FFFF_FFFF_FFFF
        };
        f64::from_bits(bits)
    }
    // -inf: key 0x000F_FFFF_.. (bin 0x000F); +inf: key 0xFFF0_0000_.. (bin 0xFFF0).
    const FINITE_BINS: (usize, usize) = (0x0010, 0xFFF0);
    #[inline]
    fn threshold_key(e: f64) -> u64 {
        e.key() // e is itself an f64 (its -0.0 is +0.0's key, as for every value)
    }
    #[inline]
    fn key_is_nan(key: u64) -> bool {
        !(0x000F_FFFF_FFFF_FFFF..=0xFFF0_0000_0000_0000).contains(&key)
    }
    #[inline]
    fn is_nan_value(self) -> bool {
        self.is_nan()
    }
}

/// Check `1 <= num_buckets <= MAX_BUCKETS`.
///
/// # Errors
/// `InvalidArgument` when out of range.
pub fn check_num_buckets(num_buckets: usize) -> Result<()> {
    if (1..=MAX_BUCKETS).contains(&num_buckets) {
        Ok(())
    } else {
        Err(invalid_arg(
            "num_buckets",
            format!("must be in [1, {MAX_BUCKETS}], got {num_buckets}"),
        ))
    }
}

/// The 0-based target ranks `ceil(j*n/b) - 1`, `j = 1..b-1` (non-decreasing); `n >= 1`.
pub fn target_ranks(n: u64, num_buckets: usize) -> Vec<u64> {
    let b = num_buckets as u128;
    (1..b)
        .map(|j| {
            let num = j * u128::from(n);
            #[allow(clippy::cast_possible_truncation, reason = "<= n, a u64")]
            let c = num.div_ceil(b) as u64;
            c - 1
        })
        .collect()
}

/// A histogram of the top 16 key bits, plus the number of values it holds.
#[derive(Clone, Debug)]
pub struct KeyHistogram {
    /// Count per bin, `NUM_BINS` entries.
    pub counts: Vec<u32>,
}

impl Default for KeyHistogram {
    fn default() -> Self {
        Self::new()
    }
}

thread_local! {
    /// The counts of the last histogram [`KeyHistogram::recycle`]d on this thread.
    static SPARE_COUNTS: std::cell::Cell<Vec<u32>> = const { std::cell::Cell::new(Vec::new()) };
}

impl KeyHistogram {
    /// An empty histogram.
    pub fn new() -> Self {
        Self {
            counts: vec![0; NUM_BINS],
        }
    }

    /// An empty histogram, reusing this thread's recycled buffer when there is one: a fresh
    /// 256 KiB allocation is often a new mapping whose 64 pages fault in one by one (measured
    /// ~0.1 ms on the target VM, a sixth of `bucket_edges` at N = 1e6).
    fn reused() -> Self {
        let mut counts = SPARE_COUNTS.take();
        if counts.len() == NUM_BINS {
            counts.fill(0);
            Self { counts }
        } else {
            Self::new()
        }
    }

    /// Hand the buffer back for the next [`KeyHistogram::of_finite`] on this thread.
    pub fn recycle(self) {
        SPARE_COUNTS.set(self.counts);
    }

    /// Histogram of the finite values of `data`; returns it and the number of finite values.
    ///
    /// # Errors
    /// `InvalidArgument` when `data` has `2^32` values or more.
    #[inline(never)] // inlined into a caller, its block loop compiled ~30% slower (measured)
    pub fn of_finite<T: Float>(data: &[T]) -> Result<(Self, u64)> {
        if data.len() >= u32::MAX as usize {
            return Err(invalid_arg(
                "window",
                format!("length {} exceeds 2^32 - 1", data.len()),
            ));
        }
        let mut h = Self::reused();
        let chunk = crate::par::chunk_len(data.len(), BLOCK);
        if chunk < data.len() {
            // One histogram per chunk, summed: integer counts, so exact in any order.
            let parts: Vec<Vec<u32>> = crate::par::install(|| {
                data.par_chunks(chunk)
                    .map(|c| {
                        let mut counts = vec![0u32; NUM_BINS];
                        count_bins(c, &mut counts);
                        counts
                    })
                    .collect()
            });
            for part in &parts {
                for (c, &x) in h.counts.iter_mut().zip(part) {
                    *c += x;
                }
            }
        } else {
            count_bins(data, &mut h.counts);
        }
        let counts = &mut h.counts[..];
        let (lo, hi) = T::FINITE_BINS;
        for c in &mut counts[..lo] {
            *c = 0;
        }
        for c in &mut counts[hi..] {
            *c = 0;
        }
        let n: u64 = counts.iter().map(|&c| u64::from(c)).sum();
        Ok((h, n))
    }
}

/// Add the bin of every value of `data` to `counts` (`NUM_BINS` entries).
#[inline(never)] // inlined into a caller, its block loop compiled ~30% slower (measured)
fn count_bins<T: Float>(data: &[T], counts: &mut [u32]) {
    // Bins computed a block at a time (that loop vectorises), then counted. Back-to-back hits
    // on the same bin serialise on store forwarding (worst case all values equal, a few ns
    // per value); loss-like data rarely does that.
    let mut bins = [0u32; BLOCK];
    let mut blocks = data.chunks_exact(BLOCK);
    for block in &mut blocks {
        for (b, &v) in bins.iter_mut().zip(block) {
            #[allow(clippy::cast_possible_truncation, reason = "a 16-bit bin")]
            {
                *b = T::bin(v.key()) as u32;
            }
        }
        for &b in &bins {
            counts[b as usize] += 1;
        }
    }
    for &v in blocks.remainder() {
        counts[T::bin(v.key())] += 1;
    }
}

/// The keys of the values of `data` whose bin is in `bins`, in data order (one chunk of a
/// parallel gather: [`Float::collect_keys`] over sub-blocks, the buffer grown as keys arrive).
fn collect_chunk<T: Float>(data: &[T], bins: &[usize]) -> Vec<T::Key> {
    const SUB: usize = 1 << 16;
    let mut out: Vec<T::Key> = Vec::new();
    let mut count = 0usize;
    for sub in data.chunks(SUB) {
        out.resize(count + sub.len() + 16, T::Key::default());
        count += T::collect_keys(sub, bins, &mut out[count..]);
    }
    out.truncate(count);
    out
}

/// Exact edges from `data` (finite values are those in the histogram `hist`, `n` of them).
///
/// `data` may contain non-finite values only when `hist` left them out (their bins are never
/// targets). Returns `num_buckets - 1` edges.
///
/// # Errors
/// `WindowChanged` when `data` no longer matches `hist` (written by another thread meanwhile).
pub fn edges_from_histogram<T: Float>(
    data: &[T],
    hist: &KeyHistogram,
    n: u64,
    num_buckets: usize,
) -> Result<Vec<f64>> {
    let ranks = target_ranks(n, num_buckets);
    if ranks.is_empty() {
        return Ok(Vec::new());
    }
    // Locate the bin of each target rank ("slots": the distinct target bins, ascending) and the
    // target's rank among the keys of all slots (their bins' keys, concatenated in key order).
    let mut slot_bins: Vec<usize> = Vec::new();
    let mut slot_offsets: Vec<usize> = vec![0]; // start of each slot among the gathered keys
    let mut targets: Vec<(usize, usize)> = Vec::with_capacity(ranks.len()); // (slot, rank in slot)
    let mut cum: u64 = 0;
    let mut bin = 0usize;
    for &r in &ranks {
        while cum + u64::from(hist.counts[bin]) <= r {
            cum += u64::from(hist.counts[bin]);
            bin += 1;
        }
        if slot_bins.last() != Some(&bin) {
            slot_bins.push(bin);
            let end = slot_offsets[slot_offsets.len() - 1] + hist.counts[bin] as usize;
            slot_offsets.push(end);
        }
        targets.push((slot_bins.len() - 1, usize_of(r - cum)));
    }
    let total = slot_offsets[slot_offsets.len() - 1];
    // One pass over the data gathers the keys of the slot bins (in data order); the `+ 16` is
    // room for the vector kernels' full-width stores.
    let chunk = crate::par::chunk_len(data.len(), BLOCK);
    let gathered: Vec<T::Key> = if chunk < data.len() {
        // Each chunk gathers its own keys; concatenated in chunk order they are the keys of
        // the sequential pass, in the same order.
        let parts: Vec<Vec<T::Key>> = crate::par::install(|| {
            data.par_chunks(chunk)
                .map(|c| collect_chunk::<T>(c, &slot_bins))
                .collect()
        });
        if parts.iter().map(Vec::len).sum::<usize>() != total {
            return Err(Error::WindowChanged); // as below
        }
        let mut all = Vec::with_capacity(total);
        for part in parts {
            all.extend_from_slice(&part);
        }
        all
    } else {
        let mut gathered: Vec<T::Key> = vec![T::Key::default(); total + 16];
        let found = T::collect_keys(data, &slot_bins, &mut gathered);
        if found != total {
            // Only possible if the data changed between the passes (another thread writing it).
            return Err(Error::WindowChanged);
        }
        gathered.truncate(total);
        gathered
    };
    // Group by slot (a counting scatter over the few gathered keys), then select in each slot.
    let mut flat = if slot_bins.len() == 1 {
        gathered
    } else {
        let base = slot_bins[0];
        let mut slot_of = vec![0u16; slot_bins[slot_bins.len() - 1] - base + 1];
        for (s, &b) in slot_bins.iter().enumerate() {
            #[allow(clippy::cast_possible_truncation, reason = "at most 65535 slots")]
            {
                slot_of[b - base] = s as u16;
            }
        }
        let mut cursor = slot_offsets[..slot_bins.len()].to_vec();
        let mut grouped = vec![T::Key::default(); total];
        for &k in &gathered {
            let s = usize::from(slot_of[T::bin(k) - base]);
            let c = &mut cursor[s];
            if *c == slot_offsets[s + 1] {
                return Err(Error::WindowChanged); // as above: a bin got more keys than counted
            }
            grouped[*c] = k;
            *c += 1;
        }
        grouped
    };
    // Each slot's targets, then the selections (independent slots: in parallel when large).
    let mut jobs: Vec<(&mut [T::Key], Vec<usize>)> = Vec::with_capacity(slot_bins.len());
    let mut rest: &mut [T::Key] = &mut flat;
    let mut t = 0usize;
    for s in 0..slot_bins.len() {
        let (keys, tail) = rest.split_at_mut(slot_offsets[s + 1] - slot_offsets[s]);
        rest = tail;
        let first = t;
        while t < targets.len() && targets[t].0 == s {
            t += 1;
        }
        jobs.push((keys, targets[first..t].iter().map(|&(_, r)| r).collect()));
    }
    let select = |(keys, in_slot): (&mut [T::Key], Vec<usize>)| -> Vec<T::Key> {
        let mut found = vec![T::Key::default(); in_slot.len()];
        multi_select(keys, &in_slot, &mut found);
        found
    };
    let per_slot: Vec<Vec<T::Key>> = if jobs.len() > 1 && crate::par::chunk_len(total, 1) < total {
        crate::par::install(|| jobs.into_par_iter().map(select).collect())
    } else {
        jobs.into_iter().map(select).collect()
    };
    Ok(per_slot.into_iter().flatten().map(T::key_to_f64).collect())
}

/// Portable [`Float::collect_keys`]: keys computed in blocks (vectorised), then a branchless
/// store with a bin bitmap.
#[inline(always)]
fn collect_keys_portable<T: Float>(data: &[T], bins: &[usize], out: &mut [T::Key]) -> usize {
    let mut bitmap = vec![0u64; NUM_BINS / 64];
    for &b in bins {
        bitmap[b >> 6] |= 1 << (b & 63);
    }
    let last = out.len() - 1;
    let mut count = 0usize;
    let mut keys = [T::Key::default(); BLOCK];
    for block in data.chunks(BLOCK) {
        for (k, &v) in keys.iter_mut().zip(block) {
            *k = v.key();
        }
        for &k in &keys[..block.len()] {
            let b = T::bin(k);
            // Always store, advance only on a hit: no branch to mispredict.
            out[count.min(last)] = k;
            count += usize::from((bitmap[b >> 6] >> (b & 63)) & 1 == 1);
        }
    }
    count
}

/// The elements of ranks `ranks` (non-decreasing, each `< keys.len()`) of `keys`, into `out`.
///
/// Recursive multi-select: select the middle rank, recurse into the two sides with their ranks;
/// `O(n log t)` for `t` distinct ranks (each level is linear), instead of a full sort.
fn multi_select<K: Ord + Copy>(keys: &mut [K], ranks: &[usize], out: &mut [K]) {
    if ranks.is_empty() {
        return;
    }
    let r = ranks[ranks.len() / 2];
    let lo = ranks.partition_point(|&x| x < r);
    let hi = ranks.partition_point(|&x| x <= r);
    let (left, kth, right) = keys.select_nth_unstable(r);
    let kth = *kth;
    out[lo..hi].fill(kth);
    multi_select(left, &ranks[..lo], &mut out[..lo]);
    let right_ranks: Vec<usize> = ranks[hi..].iter().map(|&x| x - r - 1).collect();
    multi_select(right, &right_ranks, &mut out[hi..]);
}

#[inline]
fn usize_of(r: u64) -> usize {
    #[allow(
        clippy::cast_possible_truncation,
        reason = "a rank inside an in-memory slice"
    )]
    let u = r as usize;
    u
}

/// Exact percentile-bucket edges of the finite values of `window` (see the module docs).
///
/// Returns `num_buckets - 1` non-decreasing `f64` edges (empty for one bucket); `-0.0` never
/// appears (it is normalised to `+0.0`). Non-finite values are left out.
///
/// # Errors
/// `InvalidArgument` if `num_buckets` is outside `[1, 65536]`; `EmptyWindow` if `window` has no
/// finite value; `WindowChanged` if another thread wrote to `window` during the call.
pub fn bucket_edges<T: Float>(window: &[T], num_buckets: usize) -> Result<Vec<f64>> {
    check_num_buckets(num_buckets)?;
    let (hist, n) = KeyHistogram::of_finite(window)?;
    if n == 0 {
        return Err(Error::EmptyWindow { len: window.len() });
    }
    let edges = edges_from_histogram(window, &hist, n, num_buckets);
    hist.recycle();
    edges
}

/// Check that `edges` has no NaN and is non-decreasing.
///
/// # Errors
/// `InvalidArgument` naming the first bad index.
pub fn check_edges(edges: &[f64]) -> Result<()> {
    if let Some(i) = edges.iter().position(|e| e.is_nan()) {
        return Err(invalid_arg("edges", format!("edges[{i}] is NaN")));
    }
    if let Some(i) = edges.windows(2).position(|w| w[1] < w[0]) {
        return Err(invalid_arg(
            "edges",
            format!(
                "must be non-decreasing, but edges[{}] = {} > edges[{}] = {}",
                i,
                edges[i],
                i + 1,
                edges[i + 1]
            ),
        ));
    }
    Ok(())
}

/// What to do with a NaN value in [`assign_buckets`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NanPolicy {
    /// Refuse: `Error::NanValue` with the first NaN's index.
    Raise,
    /// Assign bucket `-1`.
    Omit,
}

/// Values per block of the compare-count loop (the accumulators stay in registers/L1).
const BLOCK: usize = 64;

/// The bucket of each value: the number of `edges <= v` (see the module docs).
///
/// `out` must have `values.len()` entries. NaN values get `-1` under `NanPolicy::Omit`.
///
/// # Errors
/// `InvalidArgument` if `edges` is not non-decreasing or holds NaN, or `out` has the wrong
/// length; `NanValue` under `NanPolicy::Raise` for the first NaN.
pub fn assign_buckets<T: Float>(
    values: &[T],
    edges: &[f64],
    nan_policy: NanPolicy,
    out: &mut [i64],
) -> Result<()> {
    check_edges(edges)?;
    if out.len() != values.len() {
        return Err(invalid_arg(
            "out",
            format!("length {} != values length {}", out.len(), values.len()),
        ));
    }
    let thresholds: Vec<T::Key> = edges.iter().map(|&e| T::threshold_key(e)).collect();
    let count = |values: &[T], out: &mut [i64]| -> bool {
        if let Some(any_nan) = T::count_le_vector(values, &thresholds, out) {
            any_nan
        } else if thresholds.len() <= 32 {
            compare_count_dispatch(values, &thresholds, out)
        } else {
            binary_search_count(values, &thresholds, out)
        }
    };
    // Per-element outputs: chunks of the values write their own part of `out`.
    let chunk = crate::par::chunk_len(values.len(), BLOCK);
    let any_nan = if chunk < values.len() {
        crate::par::install(|| {
            values
                .par_chunks(chunk)
                .zip(out.par_chunks_mut(chunk))
                .map(|(v, o)| count(v, o))
                .reduce(|| false, |a, b| a || b)
        })
    } else {
        count(values, out)
    };
    if any_nan {
        match nan_policy {
            NanPolicy::Raise => {
                let index = values.iter().position(|v| v.is_nan_value()).unwrap_or(0);
                return Err(Error::NanValue { index });
            }
            NanPolicy::Omit => {
                for (o, v) in out.iter_mut().zip(values) {
                    if v.is_nan_value() {
                        *o = -1;
                    }
                }
            }
        }
    }
    Ok(())
}

fn compare_count_dispatch<T: Float>(values: &[T], thresholds: &[T::Key], out: &mut [i64]) -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        if crate::simd::has_avx512() {
            // SAFETY: the CPU supports AVX-512F (checked just above).
            return unsafe { compare_count_avx512(values, thresholds, out) };
        }
        if crate::simd::has_x86_64_v3() {
            // SAFETY: the CPU supports AVX2 (checked just above).
            return unsafe { compare_count_avx2(values, thresholds, out) };
        }
    }
    compare_count(values, thresholds, out)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx2,bmi1,bmi2,fma,lzcnt,popcnt")]
fn compare_count_avx512<T: Float>(values: &[T], thresholds: &[T::Key], out: &mut [i64]) -> bool {
    compare_count(values, thresholds, out)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,bmi1,bmi2,fma,lzcnt,popcnt")]
fn compare_count_avx2<T: Float>(values: &[T], thresholds: &[T::Key], out: &mut [i64]) -> bool {
    compare_count(values, thresholds, out)
}

/// Branchless compare-count of keys, blocked so that it auto-vectorises over values; NaN values
/// count 0 (and are reported).
#[inline(always)]
fn compare_count<T: Float>(values: &[T], thresholds: &[T::Key], out: &mut [i64]) -> bool {
    let mut any_nan = false;
    let mut acc = [0u32; BLOCK];
    let mut keys = [T::Key::default(); BLOCK];
    for (vb, ob) in values.chunks(BLOCK).zip(out.chunks_mut(BLOCK)) {
        let keys = &mut keys[..vb.len()];
        let acc = &mut acc[..vb.len()];
        for (k, &v) in keys.iter_mut().zip(vb) {
            *k = v.key();
        }
        acc.fill(0);
        for &t in thresholds {
            for (a, &k) in acc.iter_mut().zip(keys.iter()) {
                *a += u32::from(k >= t);
            }
        }
        for ((o, &a), &k) in ob.iter_mut().zip(acc.iter()).zip(keys.iter()) {
            let nan = T::key_is_nan(k);
            any_nan |= nan;
            *o = if nan { 0 } else { i64::from(a) };
        }
    }
    any_nan
}

/// Branchless binary search for many edges: `O(log B)` per value; NaN values count 0.
fn binary_search_count<T: Float>(values: &[T], thresholds: &[T::Key], out: &mut [i64]) -> bool {
    let mut any_nan = false;
    for (o, &v) in out.iter_mut().zip(values) {
        let k = v.key();
        let nan = T::key_is_nan(k);
        any_nan |= nan;
        // partition_point: number of thresholds t with t <= k (thresholds are non-decreasing).
        let c = thresholds.partition_point(|&t| t <= k);
        *o = if nan { 0 } else { c as i64 };
    }
    any_nan
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

    fn oracle_edges(window: &[f64], b: usize) -> Vec<f64> {
        let mut s: Vec<f64> = window
            .iter()
            .copied()
            .filter(|v| v.is_finite())
            .map(|v| v + 0.0)
            .collect();
        s.sort_by(f64::total_cmp);
        target_ranks(s.len() as u64, b)
            .iter()
            .map(|&r| s[r as usize])
            .collect()
    }

    #[test]
    fn simple_edges() {
        let w: Vec<f32> = (0..10).map(|i| i as f32).collect();
        assert_eq!(bucket_edges(&w, 2).unwrap(), vec![4.0]);
        assert_eq!(bucket_edges(&w, 1).unwrap(), Vec::<f64>::new());
        assert_eq!(
            bucket_edges(&w, 10).unwrap(),
            (0..9).map(f64::from).collect::<Vec<_>>()
        );
    }

    #[test]
    fn errors() {
        assert_eq!(
            bucket_edges::<f32>(&[f32::NAN, f32::INFINITY], 4),
            Err(Error::EmptyWindow { len: 2 })
        );
        assert!(bucket_edges::<f32>(&[1.0], 0).is_err());
        assert!(bucket_edges::<f32>(&[1.0], MAX_BUCKETS + 1).is_err());
        let mut out = vec![0; 2];
        assert_eq!(
            assign_buckets(&[1.0f32, f32::NAN], &[0.5], NanPolicy::Raise, &mut out),
            Err(Error::NanValue { index: 1 })
        );
        assign_buckets(&[1.0f32, f32::NAN], &[0.5], NanPolicy::Omit, &mut out).unwrap();
        assert_eq!(out, vec![1, -1]);
        assert!(assign_buckets(&[1.0f32, 2.0], &[0.5, 0.1], NanPolicy::Omit, &mut out).is_err());
    }

    #[test]
    fn data_changed_between_the_passes_is_an_error_not_a_panic() {
        // What another thread writing the array during `bucket_edges` looks like: the data of
        // the gather pass no longer matches the histogram.
        fn check<T: Float + std::fmt::Debug>(of: impl Fn(f64) -> T) {
            let before: Vec<T> = (0..1000).map(|i| of(f64::from(i))).collect();
            let (hist, n) = KeyHistogram::of_finite(&before).unwrap();
            let edges = edges_from_histogram(&before, &hist, n, 4).unwrap();
            assert_eq!(edges, vec![249.0, 499.0, 749.0]);
            // More values in a target bin than counted (the total changes).
            let piled: Vec<T> = (0..1000).map(|_| of(499.0)).collect();
            assert_eq!(
                edges_from_histogram(&piled, &hist, n, 4),
                Err(Error::WindowChanged)
            );
            // Same total, but one value moved from one target bin to another.
            let mut moved = before.clone();
            moved[249] = of(749.0);
            assert_eq!(
                edges_from_histogram(&moved, &hist, n, 4),
                Err(Error::WindowChanged)
            );
        }
        check(|x| x as f32);
        check(|x| x);
    }

    #[test]
    fn negative_zero_and_ceil() {
        let w = [-0.0f32, 0.0, -0.0, 1.0];
        let e = bucket_edges(&w, 2).unwrap();
        assert_eq!(e[0].to_bits(), 0.0f64.to_bits());
        for e in [0.1f64, -0.1, 1e-40, -1e-40, 1e-46, 3e38, -3e38] {
            let t = f32::threshold_key(e);
            assert!(f32::key_to_f64(t) >= e, "{e}");
            assert!(f32::key_to_f64(t - 1) < e, "{e}");
        }
        assert_eq!(f32::threshold_key(-1e300), (-f32::MAX).key());
        assert_eq!(f32::threshold_key(1e300), f32::INFINITY.key());
        assert_eq!(
            f32::threshold_key(f64::NEG_INFINITY),
            f32::NEG_INFINITY.key()
        );
        assert_eq!(f32::key_to_f64(f32::threshold_key(0.0)), 0.0);
    }

    #[test]
    fn keys_and_widening_use_no_float_arithmetic() {
        // Every f32 class: the integer widening agrees with the FPU's (default mode here).
        for bits in [
            0u32,
            1,
            2,
            0x7F_FFFF,
            0x80_0000,
            0x3F80_0000,
            0x7F7F_FFFF,
            0x7F80_0000,
            0x8000_0000,
            0x8000_0001,
            0x807F_FFFF,
            0xFF7F_FFFF,
            0xFF80_0000,
        ] {
            let v = f32::from_bits(bits);
            assert_eq!(
                f32::key_to_f64(v.key()).to_bits(),
                f64::from(v + 0.0).to_bits()
            );
            assert!(!f32::key_is_nan(v.key()));
        }
        assert!(f32::key_is_nan(f32::NAN.key()) && f32::key_is_nan((-f32::NAN).key()));
        assert!(f64::key_is_nan(f64::NAN.key()) && f64::key_is_nan((-f64::NAN).key()));
        assert_eq!((-0.0f32).key(), 0.0f32.key());
        assert_eq!((-0.0f64).key(), 0.0f64.key());
    }

    proptest! {
        #[test]
        fn one_thread_and_many_threads_agree_bit_for_bit(
            w in prop::collection::vec(prop_oneof![
                -3.0f64..3.0, Just(0.0), Just(-0.0), Just(1.0), Just(f64::NAN),
                Just(f64::INFINITY), 1.0f64..1.001,
            ], 1..6000),
            b in 1usize..40,
            threads in 2usize..5,
        ) {
            let w32: Vec<f32> = w.iter().map(|&v| v as f32).collect();
            let run = |t: usize| crate::par::with_threads(t, || {
                let e32 = bucket_edges(&w32, b);
                let e64 = bucket_edges(&w, b);
                let mut o = vec![0i64; w32.len()];
                let edges = e32.clone().unwrap_or_default();
                let a = assign_buckets(&w32, &edges, NanPolicy::Omit, &mut o).map(|()| o);
                let bits = |e: Result<Vec<f64>>| e.map(|v| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>());
                (bits(e32), bits(e64), a)
            });
            prop_assert_eq!(run(1), run(threads));
        }
    }

    proptest! {
        #[test]
        fn edges_match_oracle_and_assign_is_exact(
            w in prop::collection::vec(prop_oneof![
                -3.0f64..3.0,
                Just(0.0), Just(-0.0), Just(1.0), Just(f64::NAN), Just(f64::INFINITY),
            ], 1..300),
            q in prop::collection::vec(prop_oneof![-4.0f64..4.0, Just(1.0), Just(-0.0)], 0..100),
            b in 1usize..40,
        ) {
            let w32: Vec<f32> = w.iter().map(|&v| v as f32).collect();
            let w64: Vec<f64> = w32.iter().map(|&v| f64::from(v)).collect();
            let finite = w64.iter().filter(|v| v.is_finite()).count();
            if finite == 0 {
                prop_assert!(bucket_edges(&w32, b).is_err());
                return Ok(());
            }
            let e32 = bucket_edges(&w32, b).unwrap();
            let e64 = bucket_edges(&w64, b).unwrap();
            let oracle = oracle_edges(&w64, b);
            prop_assert_eq!(&e32, &oracle);
            prop_assert_eq!(&e64, &oracle);
            prop_assert!(e32.windows(2).all(|p| p[0] <= p[1]));
            // Assignment: exactly one bucket in range, equal to the full-rank definition.
            let mut out = vec![0i64; w32.len()];
            assign_buckets(&w32, &e32, NanPolicy::Omit, &mut out).unwrap();
            let sorted: Vec<f64> = { let mut s: Vec<f64> = w64.iter().copied().filter(|v| v.is_finite()).collect(); s.sort_by(f64::total_cmp); s };
            let n = sorted.len();
            for (&v, &o) in w64.iter().zip(&out) {
                if v.is_nan() { prop_assert_eq!(o, -1); continue; }
                prop_assert!(o >= 0 && (o as usize) < b);
                if v.is_finite() {
                    let rank = sorted.iter().filter(|&&x| x <= v).count();
                    let expect = ((rank * b) / n).min(b - 1);
                    prop_assert_eq!(o as usize, expect);
                }
            }
            let q32: Vec<f32> = q.iter().map(|&v| v as f32).collect();
            let mut o2 = vec![0i64; q32.len()];
            assign_buckets(&q32, &e32, NanPolicy::Raise, &mut o2).unwrap();
            for (&v, &o) in q32.iter().zip(&o2) {
                let rank = sorted.iter().filter(|&&x| x <= f64::from(v)).count();
                prop_assert_eq!(o as usize, ((rank * b) / n).min(b - 1));
            }
        }
    }
}
