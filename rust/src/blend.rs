//! Stream blending of the phase loader: which stream each slot of a global batch comes from.
//!
//! Both rules are the largest-deficit rule of Megatron-LM's `build_blending_indices`, with no
//! RNG: in samples, slot `k` (counting from 1 over the phase) goes to the stream with the largest
//! `p_s * k - count_s`; in tokens, the next slot goes to the stream with the largest
//! `p_s * T - t_s` (`T` tokens placed so far, `t_s` those of stream `s`), and its tokens are those
//! of the stream's next sample. Ties go to the lowest stream index (numpy's `argmax`). The
//! arithmetic is `f64`, exactly as numpy computes it, so the order is byte-identical to the
//! Python loop it replaces.

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
    check_shares(shares, counts.len())?;
    let mut counts: Vec<f64> = counts.iter().map(|&c| c as f64).collect();
    let mut out = Vec::with_capacity(n);
    for j in 0..n as u64 {
        let k = (start + j + 1) as f64;
        let s = argmax(shares.len(), |s| shares[s] * k - counts[s]);
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
    check_shares(shares, tokens.len())?;
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
    let mut total: f64 = placed.iter().sum();
    let mut next = offsets[..num_streams].to_vec();
    let mut out = Vec::with_capacity(n);
    for slot in 0..n {
        let s = argmax(num_streams, |s| shares[s] * total - placed[s]);
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
    fn refuses_bad_arguments() {
        assert!(blend_samples(&[], &[], 0, 1).is_err());
        assert!(blend_samples(&[1.0], &[0, 0], 0, 1).is_err());
        assert!(blend_samples(&[f64::NAN], &[0], 0, 1).is_err());
        assert!(blend_tokens(&[1.0], &[0], &[3], &[0, 1], 2).is_err());
        assert!(blend_tokens(&[1.0], &[0], &[3], &[0, 2], 1).is_err());
        assert!(blend_tokens(&[1.0], &[0], &[-3], &[0, 1], 1).is_err());
    }
}
