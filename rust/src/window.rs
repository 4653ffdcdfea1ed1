//! The rolling window: a ring buffer of the last `capacity` finite values plus an exactly
//! maintained histogram of their keys, so exact edges need one pass and no sort.

use crate::bucketing::{check_num_buckets, edges_from_histogram, Float, KeyHistogram};
use crate::error::{invalid_arg, Error, Result};

/// The largest supported capacity.
pub const MAX_CAPACITY: usize = 10_000_000;

/// Fixed-capacity FIFO of finite `f32` values with an exact key histogram.
///
/// Values are stored as `f32` (an `f64` input is rounded to nearest), `-0.0` as `+0.0`;
/// non-finite inputs are skipped and counted in `num_non_finite`.
#[derive(Clone, Debug)]
pub struct RollingWindow {
    capacity: usize,
    /// Ring storage; `buf.len() < capacity` until the window first fills.
    buf: Vec<f32>,
    /// Index of the oldest value once full (the next slot to overwrite).
    head: usize,
    hist: KeyHistogram,
    num_non_finite: u64,
}

impl RollingWindow {
    /// An empty window.
    ///
    /// # Errors
    /// `InvalidArgument` if `capacity` is outside `[1, 10_000_000]`.
    pub fn new(capacity: usize) -> Result<Self> {
        if !(1..=MAX_CAPACITY).contains(&capacity) {
            return Err(invalid_arg(
                "capacity",
                format!("must be in [1, {MAX_CAPACITY}], got {capacity}"),
            ));
        }
        Ok(Self {
            capacity,
            buf: Vec::new(),
            head: 0,
            hist: KeyHistogram::new(),
            num_non_finite: 0,
        })
    }

    /// The capacity.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Number of values held.
    pub fn len(&self) -> usize {
        self.buf.len()
    }

    /// Whether the window is empty.
    pub fn is_empty(&self) -> bool {
        self.buf.is_empty()
    }

    /// Number of non-finite values skipped by `push` since construction.
    pub fn num_non_finite(&self) -> u64 {
        self.num_non_finite
    }

    /// Append the finite values of `values` in order, evicting the oldest beyond capacity.
    pub fn push<T: Float + ToF32>(&mut self, values: &[T]) {
        // Only the last `capacity` finite values can survive; skip the rest cheaply.
        let mut start = 0;
        let mut kept = 0usize;
        if values.len() > self.capacity {
            for (i, v) in values.iter().enumerate().rev() {
                if v.to_f32_finite().is_some() {
                    kept += 1;
                    if kept == self.capacity {
                        start = i;
                        break;
                    }
                }
            }
        }
        let skipped_nf = values[..start]
            .iter()
            .filter(|v| v.to_f32_finite().is_none())
            .count();
        self.num_non_finite += skipped_nf as u64;
        let counts = &mut self.hist.counts[..];
        let cap = self.capacity;
        for &v in &values[start..] {
            let Some(x) = v.to_f32_finite() else {
                self.num_non_finite += 1;
                continue;
            };
            // -0.0 stored as +0.0, by its bits (no float arithmetic: a flushed-denormal mode
            // would turn a subnormal into 0)
            let x = if x.to_bits() == 0x8000_0000 { 0.0 } else { x };
            let k = <f32 as Float>::bin(x.key());
            if self.buf.len() < cap {
                self.buf.push(x);
            } else {
                let old = std::mem::replace(&mut self.buf[self.head], x);
                counts[<f32 as Float>::bin(old.key())] -= 1;
                self.head += 1;
                if self.head == cap {
                    self.head = 0;
                }
            }
            counts[k] += 1;
        }
    }

    /// Exact edges of the current contents (same definition as `bucket_edges`).
    ///
    /// # Errors
    /// `InvalidArgument` for a bad `num_buckets`; `EmptyWindow` when the window is empty.
    pub fn edges(&self, num_buckets: usize) -> Result<Vec<f64>> {
        check_num_buckets(num_buckets)?;
        if self.buf.is_empty() {
            return Err(Error::EmptyWindow { len: 0 });
        }
        edges_from_histogram(&self.buf, &self.hist, self.buf.len() as u64, num_buckets)
    }

    /// The values, oldest first.
    pub fn values(&self) -> Vec<f32> {
        if self.buf.len() < self.capacity {
            let mut v = crate::buf::with_capacity(self.buf.len());
            v.extend_from_slice(&self.buf);
            return v;
        }
        let mut v = crate::buf::with_capacity(self.buf.len());
        v.extend_from_slice(&self.buf[self.head..]);
        v.extend_from_slice(&self.buf[..self.head]);
        v
    }

    /// Rebuild from saved parts (`values` oldest first).
    ///
    /// # Errors
    /// `InvalidArgument` for a bad capacity; `InvalidState` if `values` is longer than
    /// `capacity` or holds a non-finite value.
    pub fn from_parts(capacity: usize, values: &[f32], num_non_finite: u64) -> Result<Self> {
        let mut w = Self::new(capacity)?;
        if values.len() > capacity {
            return Err(Error::InvalidState {
                reason: format!(
                    "values has {} entries, more than capacity {capacity}",
                    values.len()
                ),
            });
        }
        if let Some(i) = values.iter().position(|v| !v.is_finite()) {
            return Err(Error::InvalidState {
                reason: format!("values[{i}] = {} is not finite", values[i]),
            });
        }
        w.push(values);
        w.num_non_finite = num_non_finite;
        Ok(w)
    }
}

/// Conversion of a pushed value to a finite `f32`.
pub trait ToF32: Copy {
    /// `Some(f32)` for a finite value (an `f64` is rounded; one that overflows `f32` is treated
    /// as non-finite), `None` otherwise.
    fn to_f32_finite(self) -> Option<f32>;
}

impl ToF32 for f32 {
    #[inline]
    fn to_f32_finite(self) -> Option<f32> {
        self.is_finite().then_some(self)
    }
}

impl ToF32 for f64 {
    #[inline]
    fn to_f32_finite(self) -> Option<f32> {
        #[allow(
            clippy::cast_possible_truncation,
            reason = "the window stores f32 by design"
        )]
        let x = self as f32;
        x.is_finite().then_some(x)
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
    use crate::bucketing::bucket_edges;
    use proptest::prelude::*;
    use std::collections::VecDeque;

    #[test]
    fn basic() {
        let mut w = RollingWindow::new(3).unwrap();
        w.push(&[1.0f32, f32::NAN, 2.0, 3.0, 4.0]);
        assert_eq!(w.values(), vec![2.0, 3.0, 4.0]);
        assert_eq!(w.num_non_finite(), 1);
        assert_eq!(w.edges(3).unwrap(), vec![2.0, 3.0]);
        assert!(RollingWindow::new(0).is_err());
        assert!(RollingWindow::new(MAX_CAPACITY + 1).is_err());
        assert!(RollingWindow::new(2).unwrap().edges(2).is_err());
    }

    proptest! {
        #[test]
        fn edges_agree_between_thread_counts(
            values in prop::collection::vec(prop_oneof![-5.0f32..5.0, Just(1.0f32)], 1..5000),
            cap in 1usize..5000,
            b in 1usize..20,
            threads in 2usize..5,
        ) {
            let mut w = RollingWindow::new(cap).unwrap();
            w.push(values.as_slice());
            let one = crate::par::with_threads(1, || w.edges(b)).unwrap();
            let many = crate::par::with_threads(threads, || w.edges(b)).unwrap();
            prop_assert_eq!(one.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                            many.iter().map(|v| v.to_bits()).collect::<Vec<_>>());
        }
    }

    proptest! {
        #[test]
        fn matches_deque_oracle(
            cap in 1usize..50,
            batches in prop::collection::vec(prop::collection::vec(prop_oneof![
                -5.0f64..5.0, Just(f64::NAN), Just(-0.0), Just(1.0)], 0..80), 1..6),
            b in 1usize..20,
        ) {
            let mut w = RollingWindow::new(cap).unwrap();
            let mut oracle: VecDeque<f32> = VecDeque::new();
            let mut nf = 0u64;
            for batch in &batches {
                w.push(batch.as_slice());
                for &v in batch {
                    if v.is_finite() {
                        oracle.push_back(v as f32 + 0.0);
                        if oracle.len() > cap { oracle.pop_front(); }
                    } else { nf += 1; }
                }
                let got = w.values();
                let want: Vec<f32> = oracle.iter().copied().collect();
                prop_assert_eq!(got.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                                want.iter().map(|v| v.to_bits()).collect::<Vec<_>>());
                prop_assert_eq!(w.num_non_finite(), nf);
                if !want.is_empty() {
                    prop_assert_eq!(w.edges(b).unwrap(), bucket_edges(&want, b).unwrap());
                    let r = RollingWindow::from_parts(cap, &got, nf).unwrap();
                    prop_assert_eq!(r.edges(b).unwrap(), w.edges(b).unwrap());
                }
            }
        }
    }
}
