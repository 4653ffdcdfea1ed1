//! Component timings of the kernels (not a test):
//! `cargo run --release --example microbench [N] [name filter]`.
//!
//! Prints the fastest of 15 runs per component (the least disturbed by other processes).
#![allow(
    clippy::print_stdout,
    clippy::cast_possible_truncation,
    clippy::cast_sign_loss,
    reason = "a timing harness: prints results, casts known-range values"
)]

use curriculum_ds::bucketing::{self, NanPolicy};
use curriculum_ds::sampling;
use std::hint::black_box;
use std::time::Instant;

fn time<T>(name: &str, per: usize, mut f: impl FnMut() -> T) {
    if let Some(filter) = std::env::args().nth(2) {
        if !name.contains(filter.as_str()) {
            return;
        }
    }
    black_box(f());
    let mut best = f64::INFINITY;
    for _ in 0..15 {
        let t0 = Instant::now();
        black_box(f());
        best = best.min(t0.elapsed().as_secs_f64());
    }
    println!(
        "{name:<40} {:>9.3} ms {:>8.2} ns/el",
        best * 1e3,
        best * 1e9 / per as f64
    );
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let size: usize = match std::env::args().nth(1) {
        Some(text) => text.parse::<f64>()? as usize,
        None => 1_000_000,
    };
    let mut state = 0x1234_5678_9abc_def0_u64;
    let mut unit = || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        (state >> 11) as f64 / (1u64 << 53) as f64
    };
    // lognormal(0, 1) by Box-Muller, as in curriculum-ds bench
    let mut lognormal = || {
        let radius = (-2.0 * unit().max(f64::MIN_POSITIVE).ln()).sqrt();
        (radius * (std::f64::consts::TAU * unit()).cos()).exp() as f32
    };
    let window: Vec<f32> = (0..size).map(|_| lognormal()).collect();
    let queries: Vec<f32> = (0..size).map(|_| lognormal()).collect();
    let weights: Vec<f64> = (0..size).map(|_| 0.01 + unit()).collect();
    let draws = 1_000_000;

    // Warm the CPU up (clock, page tables) before the first timed kernel: measured, the first
    // case otherwise reads ~20% slow.
    for _ in 0..20 {
        black_box(bucketing::bucket_edges(&window, 16)?);
    }
    time("bucket_edges B=16", size, || {
        bucketing::bucket_edges(&window, 16)
    });
    let edges = bucketing::bucket_edges(&window, 16)?;
    let mut out = vec![0i64; size];
    time("assign B=16 (preallocated out)", size, || {
        bucketing::assign_buckets(&queries, &edges, NanPolicy::Raise, &mut out)
    });
    time("histogram only", size, || {
        bucketing::KeyHistogram::of_finite(&window)
    });
    let mut window_full = curriculum_ds::window::RollingWindow::new(size)?;
    window_full.push(&window);
    time("RollingWindow edges B=16", size, || window_full.edges(16));
    let (hist, finite) = bucketing::KeyHistogram::of_finite(&window)?;
    time("edges_from_histogram B=16", size, || {
        bucketing::edges_from_histogram(&window, &hist, finite, 16)
    });
    time("alias build", size, || {
        sampling::WeightedSampler::new(&weights, 0)
    });
    let mut sampler = sampling::WeightedSampler::new(&weights, 0)?;
    time("alias 1e6 draws", draws, || sampler.sample(draws));
    let table = sampling::AliasTable::new(&weights)?;
    let mut preallocated = vec![0i64; draws];
    time("alias 1e6 draws, preallocated", draws, || {
        table.sample_into(0, 0, &mut preallocated);
    });
    let k = size.min(draws);
    time("without replacement k=min(n,1e6)", k, || {
        sampling::sample_without_replacement(&weights, k, 0)
    });
    time("window push 256 x 4096", 256 * 4096, || {
        for batch in queries.chunks(4096).take(256) {
            window_full.push(batch);
        }
    });
    time("epoch_permutation", size, || {
        sampling::epoch_permutation(size, 0, 0)
    });
    Ok(())
}
