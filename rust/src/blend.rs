//! Stream blending of the phase loader: which stream each slot of a global batch comes from.
//!
//! Both rules are the largest-deficit rule of Megatron-LM's `build_blending_indices`, with no
//! RNG: in samples, slot `k` (counting from 1 over the phase) goes to the stream with the largest
//! `p_s * k - count_s`; in tokens, the next slot goes to the stream with the largest
//! `p_s * T - t_s` (`T` tokens placed so far, `t_s` those of stream `s`), and its tokens are those
//! of the stream's next sample. Ties go to the lowest stream index (numpy's `argmax`). The
//! arithmetic is `f64`, exactly as numpy computes it, so the order is byte-identical to the
//! Python loop it replaces.
//!
//! A phase whose proportions move (a ramp) passes each stream's `base`: its target at the start
//! of the call, the integral of its moving share so far. The deficit is then
//! `base_s + p_s * x - placed_s`, `x` the slots (samples) or tokens placed by this call, so the
//! realised counts track the integral of the step-wise target, not its current value.

use crate::error::{invalid_arg, Result};

/// Index of the first largest deficit (`np.argmax` over `deficit(s)`, `s in 0..n`).
#[inline]
fn argmax(n: usize, deficit: impl Fn(usize) -> f64) -> usize {
    let mut best = 0;
    let mut best_value = deficit(0);
    for s in 1..n {
        let value = deficit(s);
        if value > best_value {
            best = s;
            best_value = value;
        }
    }
    best
}

fn check_base(base: Option<&[f64]>, num_streams: usize) -> Result<()> {
    if let Some(base) = base {
        if base.len() != num_streams {
            return Err(invalid_arg(
                "base",
                format!("{} targets for {num_streams} streams", base.len()),
            ));
        }
        if let Some(s) = base.iter().position(|b| !b.is_finite()) {
            return Err(invalid_arg(
                "base",
                format!("base[{s}] = {} must be finite", base[s]),
            ));
        }
    }
    Ok(())
}

fn check_shares(shares: &[f64], counters: usize) -> Result<()> {
    if shares.is_empty() {
        return Err(invalid_arg("proportions", "no stream"));
    }
    if counters != shares.len() {
        return Err(invalid_arg(
            "counts",
            format!("{counters} counters for {} streams", shares.len()),
        ));
    }
    if let Some((s, &p)) = shares
        .iter()
        .enumerate()
        .find(|(_, p)| !(p.is_finite() && **p >= 0.0))
    {
        return Err(invalid_arg(
            "proportions",
            format!("proportions[{s}] = {p} must be finite and >= 0"),
        ));
    }
    Ok(())
}

/// The stream of each of the next `n` slots, counted in samples.
///
/// `counts[s]` is the number of slots stream `s` got among the phase's first `start` slots.
/// Returns `n` stream indices; `counts` is not changed (add the returned streams' counts).
///
/// # Errors
/// `InvalidArgument` for no stream, a length mismatch or a negative/non-finite proportion.
pub fn blend_samples(shares: &[f64], counts: &[i64], start: u64, n: usize) -> Result<Vec<i64>> {
    blend_samples_from(shares, None, counts, start, n)
}

/// [`blend_samples`] from per-stream targets: slot `j` of the call (from 1) goes to the stream
/// with the largest `base[s] + shares[s] * (start + j) - counts[s]`; `base` None is all zeros
/// (exactly [`blend_samples`]). A ramp passes `start = 0` and the targets at the step's start.
///
/// # Errors
/// As [`blend_samples`], and `InvalidArgument` for a `base` of another length or not finite.
pub fn blend_samples_from(
    shares: &[f64],
    base: Option<&[f64]>,
    counts: &[i64],
    start: u64,
    n: usize,
) -> Result<Vec<i64>> {
    check_shares(shares, counts.len())?;
    check_base(base, shares.len())?;
    let mut counts: Vec<f64> = counts.iter().map(|&c| c as f64).collect();
    let mut out = Vec::with_capacity(n);
    for j in 0..n as u64 {
        let k = (start + j + 1) as f64;
        let s = match base {
            None => argmax(shares.len(), |s| shares[s] * k - counts[s]),
            Some(b) => argmax(shares.len(), |s| b[s] + shares[s] * k - counts[s]),
        };
        counts[s] += 1.0;
        out.push(s as i64);
    }
    Ok(out)
}

/// The stream of each of the next `n` slots, counted in tokens.
///
/// `tokens[s]` is the number of tokens stream `s` placed so far in the phase; stream `s`'s next
/// samples have `lengths[offsets[s]..offsets[s + 1]]` tokens, in order. Returns `n` stream
/// indices; the `i`-th slot of stream `s` takes its `i`-th next sample.
///
/// # Errors
/// `InvalidArgument` for no stream, a length mismatch, a negative/non-finite proportion, bad
/// offsets, a negative length, or a stream whose next samples run out before the `n` slots do.
pub fn blend_tokens(
    shares: &[f64],
    tokens: &[i64],
    lengths: &[i64],
    offsets: &[usize],
    n: usize,
) -> Result<Vec<i64>> {
    blend_tokens_from(shares, None, tokens, lengths, offsets, n)
}

/// [`blend_tokens`] from per-stream targets: with `base`, the next slot goes to the stream with
/// the largest `base[s] + shares[s] * x - tokens[s]`, `x` the tokens this call placed so far
/// (from 0); `base` None is [`blend_tokens`] (`x` counts from the tokens already placed).
///
/// # Errors
/// As [`blend_tokens`], and `InvalidArgument` for a `base` of another length or not finite.
pub fn blend_tokens_from(
    shares: &[f64],
    base: Option<&[f64]>,
    tokens: &[i64],
    lengths: &[i64],
    offsets: &[usize],
    n: usize,
) -> Result<Vec<i64>> {
    check_shares(shares, tokens.len())?;
    check_base(base, shares.len())?;
    let num_streams = shares.len();
    if offsets.len() != num_streams + 1
        || offsets[0] != 0
        || offsets.windows(2).any(|w| w[0] > w[1])
        || offsets[num_streams] != lengths.len()
    {
        return Err(invalid_arg(
            "offsets",
            format!(
                "must rise from 0 to {} over {} entries",
                lengths.len(),
                num_streams + 1
            ),
        ));
    }
    if let Some(i) = lengths.iter().position(|&l| l < 0) {
        return Err(invalid_arg(
            "lengths",
            format!("lengths[{i}] = {} is negative", lengths[i]),
        ));
    }
    let mut placed: Vec<f64> = tokens.iter().map(|&t| t as f64).collect();
    let mut total: f64 = if base.is_some() {
        0.0
    } else {
        placed.iter().sum()
    };
    let mut next = offsets[..num_streams].to_vec();
    let mut out = Vec::with_capacity(n);
    for slot in 0..n {
        let s = match base {
            None => argmax(num_streams, |s| shares[s] * total - placed[s]),
            Some(b) => argmax(num_streams, |s| b[s] + shares[s] * total - placed[s]),
        };
        if next[s] == offsets[s + 1] {
            return Err(invalid_arg(
                "lengths",
                format!("stream {s} has no next sample left for slot {slot} of {n}"),
            ));
        }
        let len = lengths[next[s]] as f64;
        next[s] += 1;
        placed[s] += len;
        total += len;
        out.push(s as i64);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The Python loop `blend_samples` replaces.
    fn reference(shares: &[f64], counts: &[i64], start: u64, n: usize) -> Vec<i64> {
        let mut placed = counts.to_vec();
        (0..n as u64)
            .map(|slot| {
                let k = (start + slot + 1) as f64;
                let best = argmax(shares.len(), |s| shares[s] * k - placed[s] as f64);
                placed[best] += 1;
                best as i64
            })
            .collect()
    }

    #[test]
    fn samples_follow_the_deficit_rule_and_split_anywhere() {
        let p = [0.5, 0.3, 0.2];
        let all = blend_samples(&p, &[0, 0, 0], 0, 100).unwrap();
        assert_eq!(all, reference(&p, &[0, 0, 0], 0, 100));
        assert_eq!(&all[..4], &[0, 1, 2, 0]);
        let first = blend_samples(&p, &[0, 0, 0], 0, 37).unwrap();
        let mut counts = [0i64; 3];
        for (s, count) in counts.iter_mut().enumerate() {
            *count = first.iter().filter(|&&f| f == s as i64).count() as i64;
        }
        let rest = blend_samples(&p, &counts, 37, 63).unwrap();
        assert_eq!([first, rest].concat(), all);
    }

    #[test]
    fn tokens_stay_within_one_sample_of_the_shares() {
        let p = [0.5, 0.5];
        let lengths: Vec<i64> = [vec![10; 200], vec![100; 200]].concat();
        let streams = blend_tokens(&p, &[0, 0], &lengths, &[0, 200, 400], 200).unwrap();
        let mut placed = [0i64; 2];
        for &s in &streams {
            if s == 0 {
                placed[0] += 10;
            } else {
                placed[1] += 100;
            }
            let total = (placed[0] + placed[1]) as f64;
            for (s, &t) in placed.iter().enumerate() {
                assert!((t as f64 - p[s] * total).abs() <= 100.0);
            }
        }
        assert_eq!(streams[0], 0);
    }

    #[test]
    fn a_zero_base_is_the_plain_rule() {
        let p = [0.5, 0.3, 0.2];
        let plain = blend_samples(&p, &[0, 0, 0], 0, 50).unwrap();
        let from = blend_samples_from(&p, Some(&[0.0; 3]), &[0, 0, 0], 0, 50).unwrap();
        assert_eq!(plain, from);
        let lengths: Vec<i64> = (0..150).map(|i| 1 + i % 7).collect();
        let offsets = [0, 50, 100, 150];
        let plain = blend_tokens(&p, &[0, 0, 0], &lengths, &offsets, 50).unwrap();
        let from =
            blend_tokens_from(&p, Some(&[0.0; 3]), &[0, 0, 0], &lengths, &offsets, 50).unwrap();
        assert_eq!(plain, from);
    }

    #[test]
    fn a_share_of_one_in_a_thousand_is_honoured() {
        let p = [0.6, 0.399, 0.001];
        let n = 100_000;
        let streams = blend_samples(&p, &[0, 0, 0], 0, n).unwrap();
        let rare = streams.iter().filter(|&&s| s == 2).count() as f64;
        assert!((rare / n as f64 - 0.001).abs() <= 0.0005, "{rare}");
        // in tokens, lengths 10x apart, the rare stream the long one
        let lengths: Vec<i64> = [vec![10; n], vec![100; n], vec![100; n]].concat();
        let streams = blend_tokens(&p, &[0, 0, 0], &lengths, &[0, n, 2 * n, 3 * n], n).unwrap();
        let mut placed = [0f64; 3];
        for &s in &streams {
            placed[usize::try_from(s).unwrap()] += if s == 0 { 10.0 } else { 100.0 };
        }
        let share = placed[2] / placed.iter().sum::<f64>();
        assert!((share - 0.001).abs() <= 0.0005, "{share}");
    }

    #[test]
    fn a_moving_target_is_tracked_from_its_base() {
        // two streams ramping 0.9 -> 0.1 over 100 calls of 10 slots: counts stay within one
        // sample of the integral of the step-wise target
        let mut counts = [0i64; 2];
        let mut target = [0f64; 2];
        for step in 0..100 {
            let a = 0.9 - 0.8 * f64::from(step) / 100.0;
            let p = [a, 1.0 - a];
            let streams = blend_samples_from(&p, Some(&target), &counts, 0, 10).unwrap();
            for &s in &streams {
                counts[usize::try_from(s).unwrap()] += 1;
            }
            for s in 0..2 {
                target[s] += p[s] * 10.0;
                assert!((counts[s] as f64 - target[s]).abs() <= 1.0);
            }
        }
    }

    #[test]
    fn refuses_bad_arguments() {
        assert!(blend_samples_from(&[1.0], Some(&[0.0, 0.0]), &[0], 0, 1).is_err());
        assert!(blend_samples_from(&[1.0], Some(&[f64::NAN]), &[0], 0, 1).is_err());
        assert!(blend_samples(&[], &[], 0, 1).is_err());
        assert!(blend_samples(&[1.0], &[0, 0], 0, 1).is_err());
        assert!(blend_samples(&[f64::NAN], &[0], 0, 1).is_err());
        assert!(blend_tokens(&[1.0], &[0], &[3], &[0, 1], 2).is_err());
        assert!(blend_tokens(&[1.0], &[0], &[3], &[0, 2], 1).is_err());
        assert!(blend_tokens(&[1.0], &[0], &[-3], &[0, 1], 1).is_err());
    }
}
