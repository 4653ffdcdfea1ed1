//! AVX-512 kernels for `f32` bucketing, picked at run time (see [`crate::simd`]).
//!
//! Each kernel computes exactly what its portable counterpart in [`crate::bucketing`] computes;
//! the tests compare both on the same data. Callers check the CPU features first.
#![cfg(target_arch = "x86_64")]
#![allow(
    clippy::cast_possible_truncation,
    clippy::cast_sign_loss,
    reason = "lane counts and bin numbers are small non-negative integers"
)]
#![allow(
    clippy::cast_ptr_alignment,
    reason = "every vector load and store here is the unaligned (`loadu`/`storeu`) kind"
)]

use std::arch::x86_64::{
    __m512, __m512i, _mm512_add_epi32, _mm512_and_si512, _mm512_castps_si512,
    _mm512_castsi512_si256, _mm512_cmp_ps_mask, _mm512_cmpeq_epi32_mask, _mm512_cmpge_epu32_mask,
    _mm512_cmplt_epu32_mask, _mm512_cvtepu32_epi64, _mm512_extracti64x4_epi64, _mm512_loadu_ps,
    _mm512_loadu_si512, _mm512_mask_add_epi32, _mm512_mask_mov_epi32, _mm512_mask_storeu_epi64,
    _mm512_mask_test_epi32_mask, _mm512_maskz_compress_epi32, _mm512_maskz_loadu_ps,
    _mm512_maskz_mov_epi32, _mm512_or_si512, _mm512_permutex2var_epi32, _mm512_permutex2var_epi8,
    _mm512_permutexvar_epi32, _mm512_set1_epi32, _mm512_setzero_si512, _mm512_srai_epi32,
    _mm512_srli_epi32, _mm512_srlv_epi32, _mm512_storeu_si512, _mm512_sub_epi32, _mm512_xor_si512,
    _CMP_UNORD_Q,
};

/// Lanes per vector.
const LANES: usize = 16;

/// The most target bins [`collect_keys_f32`] handles: its bin bitmap spans 1024 bins.
pub const COLLECT_SPAN: usize = 1024;

/// Order-preserving keys of 16 values (`-0.0` as `+0.0`, by integer operations: a flushed-
/// denormal mode changes nothing); the same map as `<f32 as Float>::key`.
#[inline]
#[target_feature(enable = "avx512f")]
fn keys(v: __m512) -> __m512i {
    let bits = _mm512_castps_si512(v);
    let min = _mm512_set1_epi32(i32::MIN);
    let bits = _mm512_mask_mov_epi32(
        bits,
        _mm512_cmpeq_epi32_mask(bits, min),
        _mm512_setzero_si512(),
    );
    let sign = _mm512_srai_epi32::<31>(bits);
    _mm512_xor_si512(bits, _mm512_or_si512(sign, min))
}

/// Tail mask of the last `rest` (< 16) lanes.
#[inline]
fn tail_mask(rest: usize) -> u16 {
    ((1u32 << rest) - 1) as u16
}

/// Copy the keys of the values whose bin (top 16 key bits) is in `bins` into `out`, in data
/// order; return how many.
///
/// `bins` is sorted, non-empty, and spans fewer than [`COLLECT_SPAN`] bins
/// (`bins[last] - bins[0] < 1024`); `out` should have room for every match plus 16 (each step
/// stores a full vector): beyond that, matches are counted but not stored. Needs AVX-512 F, BW
/// and VBMI.
#[target_feature(enable = "avx512f,avx512bw,avx512vbmi,popcnt")]
pub fn collect_keys_f32(data: &[f32], bins: &[usize], out: &mut [u32]) -> usize {
    let base = bins[0];
    let mut bitmap = [0u8; COLLECT_SPAN / 8];
    for &b in bins {
        let i = b - base;
        bitmap[i >> 3] |= 1 << (i & 7);
    }
    // SAFETY: `bitmap` has 128 bytes: two unaligned 64-byte loads.
    let (lo, hi) = unsafe {
        (
            _mm512_loadu_si512(bitmap.as_ptr().cast::<__m512i>()),
            _mm512_loadu_si512(bitmap.as_ptr().add(64).cast::<__m512i>()),
        )
    };
    let base_v = _mm512_set1_epi32(base as i32);
    let span = _mm512_set1_epi32(COLLECT_SPAN as i32);
    let seven = _mm512_set1_epi32(7);
    let one = _mm512_set1_epi32(1);
    let mut count = 0usize;
    let step = |v: __m512, lane_mask: u16, count: &mut usize, out: &mut [u32]| {
        let k = keys(v);
        let idx = _mm512_sub_epi32(_mm512_srli_epi32::<16>(k), base_v);
        let in_span = _mm512_cmplt_epu32_mask(idx, span) & lane_mask;
        // Byte idx/8 of the bitmap lands in the low byte of each lane; shift out bit idx%8.
        let byte = _mm512_permutex2var_epi8(lo, _mm512_srli_epi32::<3>(idx), hi);
        let bit = _mm512_srlv_epi32(byte, _mm512_and_si512(idx, seven));
        let hit = _mm512_mask_test_epi32_mask(in_span, bit, one);
        if *count + LANES > out.len() {
            // More matches than the caller counted: the data changed under us (another thread
            // writing the array). Stop storing; the caller sees a count past `out.len() - 16`.
            *count += hit.count_ones() as usize;
            return;
        }
        // SAFETY: `out[count..count + 16]` is in bounds (checked just above).
        unsafe {
            _mm512_storeu_si512(
                out.as_mut_ptr().add(*count).cast::<__m512i>(),
                _mm512_maskz_compress_epi32(hit, k),
            );
        }
        *count += hit.count_ones() as usize;
    };
    let mut chunks = data.chunks_exact(LANES);
    for chunk in &mut chunks {
        // SAFETY: `chunk` has 16 values.
        let v = unsafe { _mm512_loadu_ps(chunk.as_ptr()) };
        step(v, u16::MAX, &mut count, out);
    }
    let rest = chunks.remainder();
    if !rest.is_empty() {
        let m = tail_mask(rest.len());
        // SAFETY: the masked load reads only the `rest.len()` valid values.
        let v = unsafe { _mm512_maskz_loadu_ps(m, rest.as_ptr()) };
        step(v, m, &mut count, out);
    }
    count
}

/// For each value, the number of threshold keys that are `<= key(v)` (NaN counts none), as
/// `i64`; returns whether any value is NaN.
///
/// Branchless binary search with the thresholds held in registers (permute lookups), on keys:
/// integer compares, unaffected by a flushed-denormal mode. `thresholds` is non-decreasing, at
/// most 31 long (keys of non-NaN values); `out.len() == values.len()`. Needs AVX-512 F.
#[target_feature(enable = "avx512f")]
pub fn count_le_f32(values: &[f32], thresholds: &[u32], out: &mut [i64]) -> bool {
    assert!(thresholds.len() <= 31 && out.len() == values.len());
    // Padding above every non-NaN key, so padded slots are never counted (NaN lanes are zeroed).
    let mut table = [u32::MAX; 32];
    table[..thresholds.len()].copy_from_slice(thresholds);
    // SAFETY: `table` has 32 keys: two unaligned 16-lane loads.
    let (lo, hi) = unsafe {
        (
            _mm512_loadu_si512(table.as_ptr().cast::<__m512i>()),
            _mm512_loadu_si512(table.as_ptr().add(16).cast::<__m512i>()),
        )
    };
    let wide = thresholds.len() > 15;
    // pos = #{thresholds <= key}: test slot pos + s - 1 for s = 16 (wide only), 8, 4, 2, 1.
    let count = |v: __m512| -> (__m512i, __m512i, u16) {
        // Keys without the -0.0 normalisation: a threshold key is never +0.0's (it is the
        // smallest key of a value >= the edge, so -0.0's when that value is zero), hence -0.0
        // and +0.0 compare alike against every threshold.
        let bits = _mm512_castps_si512(v);
        let flip = _mm512_or_si512(_mm512_srai_epi32::<31>(bits), _mm512_set1_epi32(i32::MIN));
        let k = _mm512_xor_si512(bits, flip);
        let mut pos = _mm512_setzero_si512();
        if wide {
            let t = _mm512_permutex2var_epi32(lo, _mm512_set1_epi32(15), hi);
            let ge = _mm512_cmpge_epu32_mask(k, t);
            pos = _mm512_mask_add_epi32(pos, ge, pos, _mm512_set1_epi32(16));
        }
        for s in [8, 4, 2, 1] {
            let idx = _mm512_add_epi32(pos, _mm512_set1_epi32(s - 1));
            let t = if wide {
                _mm512_permutex2var_epi32(lo, idx, hi)
            } else {
                _mm512_permutexvar_epi32(idx, lo)
            };
            let ge = _mm512_cmpge_epu32_mask(k, t);
            pos = _mm512_mask_add_epi32(pos, ge, pos, _mm512_set1_epi32(s));
        }
        // NaN is no denormal: the float compare is exact in every mode. Positive NaNs' keys lie
        // above every threshold: zero their count.
        let nan = _mm512_cmp_ps_mask::<_CMP_UNORD_Q>(v, v);
        let pos = _mm512_maskz_mov_epi32(!nan, pos);
        (
            _mm512_cvtepu32_epi64(_mm512_castsi512_si256(pos)),
            _mm512_cvtepu32_epi64(_mm512_extracti64x4_epi64::<1>(pos)),
            nan,
        )
    };
    // The last (< 16) values, with masked loads and stores.
    let masked = |i: usize, len: usize, out: &mut [i64]| -> u16 {
        let m = tail_mask(len);
        let (v, o) = (values[i..i + len].as_ptr(), out[i..i + len].as_mut_ptr());
        // SAFETY: the masked load reads and the masked stores write only the `len` lanes that
        // are in bounds (sliced just above).
        unsafe {
            let v = _mm512_maskz_loadu_ps(m, v);
            let (low, high, nan) = count(v);
            _mm512_mask_storeu_epi64(o, m as u8, low);
            _mm512_mask_storeu_epi64(o.add(8), (m >> 8) as u8, high);
            nan & m
        }
    };
    let n = values.len();
    let mut nan_mask = 0u16;
    let mut i = 0usize;
    while i + LANES <= n {
        // SAFETY: `values[i..i + 16]` and `out[i..i + 16]` are in bounds (loop condition).
        unsafe {
            let v = _mm512_loadu_ps(values.as_ptr().add(i));
            let (low, high, nan) = count(v);
            let o = out.as_mut_ptr().add(i);
            _mm512_storeu_si512(o.cast::<__m512i>(), low);
            _mm512_storeu_si512(o.add(8).cast::<__m512i>(), high);
            nan_mask |= nan;
        }
        i += LANES;
    }
    if i < n {
        nan_mask |= masked(i, n - i, out);
    }
    nan_mask != 0
}

#[cfg(test)]
#[allow(
    clippy::float_cmp,
    reason = "exact comparisons against a scalar oracle are the point"
)]
mod tests {
    use super::*;
    use crate::bucketing::Float;
    use crate::simd;

    /// Values with ties, both zeros, infinities, NaN and a wide range of magnitudes.
    fn data(len: usize, seed: u64) -> Vec<f32> {
        let mut state = seed | 1;
        (0..len)
            .map(|_| {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                match state % 16 {
                    0 => 0.0,
                    1 => -0.0,
                    2 => 1.0,
                    3 => f32::INFINITY,
                    4 => f32::NEG_INFINITY,
                    5 if seed.is_multiple_of(3) => f32::NAN,
                    _ => {
                        let unit = (state >> 40) as f32 / (1u64 << 24) as f32;
                        (unit * 8.0 - 4.0).exp2() * if state.is_multiple_of(5) { -1.0 } else { 1.0 }
                    }
                }
            })
            .collect()
    }

    #[test]
    fn count_le_matches_scalar_count() {
        if !simd::has_avx512() {
            eprintln!("no AVX-512 on this CPU: the kernel is never selected here");
            return;
        }
        for len in (0..70).chain([1000, 4099]) {
            let values = data(len, len as u64 * 7 + 3);
            for num_thresholds in [0, 1, 2, 7, 15, 16, 30, 31] {
                let mut thresholds: Vec<f32> = data(num_thresholds, 99 + num_thresholds as u64)
                    .into_iter()
                    .filter(|t| !t.is_nan())
                    .collect();
                thresholds.sort_by(f32::total_cmp);
                let keys: Vec<u32> = thresholds
                    .iter()
                    .map(|&t| f32::threshold_key(f64::from(t)))
                    .collect();
                let mut out = vec![-7i64; len];
                // SAFETY: AVX-512 F checked above.
                let any_nan = unsafe { count_le_f32(&values, &keys, &mut out) };
                assert_eq!(any_nan, values.iter().any(|v| v.is_nan()));
                for (&v, &o) in values.iter().zip(&out) {
                    let expect = thresholds.iter().filter(|&&t| v >= t).count();
                    assert_eq!(o, expect as i64, "v={v} thresholds={thresholds:?}");
                }
            }
        }
    }

    #[test]
    fn collect_keys_matches_scalar_filter() {
        if !simd::has_avx512_vbmi() {
            eprintln!("no AVX-512 VBMI on this CPU: the kernel is never selected here");
            return;
        }
        for len in (0..70).chain([1000, 4099]) {
            let values = data(len, len as u64 + 11);
            let all_bins: Vec<usize> = values
                .iter()
                .map(|v| <f32 as Float>::bin(v.key()))
                .collect();
            // Target sets: each present bin alone, and a few bins inside a 1024-bin span.
            let mut sets: Vec<Vec<usize>> = all_bins.iter().take(5).map(|&b| vec![b]).collect();
            if let Some(&b) = all_bins.first() {
                let lo = b.saturating_sub(500);
                let mut set: Vec<usize> = all_bins
                    .iter()
                    .copied()
                    .filter(|&x| x >= lo && x < lo + COLLECT_SPAN)
                    .collect();
                set.sort_unstable();
                set.dedup();
                set.push(lo + COLLECT_SPAN - 1); // the span's last bin, present or not
                set.dedup();
                sets.push(set);
            }
            for bins in sets {
                let expect: Vec<u32> = values
                    .iter()
                    .map(|v| v.key())
                    .filter(|&k| bins.contains(&<f32 as Float>::bin(k)))
                    .collect();
                let mut out = vec![0u32; expect.len() + LANES];
                // SAFETY: AVX-512 VBMI checked above; span < 1024 and room by construction.
                let found = unsafe { collect_keys_f32(&values, &bins, &mut out) };
                assert_eq!(&out[..found], &expect[..]);
            }
        }
    }
}
