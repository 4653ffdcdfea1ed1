//! `curriculum_ds` core: exact percentile bucketing, the rolling window and weighted samplers.
//!
//! Pure Rust over slices; only `py.rs` (feature `python`) touches pyo3/numpy, so `cargo test`
//! needs no Python. Every kernel is deterministic from explicit seeds and counters
//! (see [`rng`]); large inputs run on a thread pool ([`par`]) whose chunks combine exactly, so
//! no result depends on a thread count.

#[cfg(target_arch = "x86_64")]
mod avx512;
pub mod blend;
pub mod bucketing;
pub mod buf;
pub mod error;
pub mod mds;
pub mod par;
pub mod permutation;
pub mod rng;
pub mod sampling;
pub mod sigbus;
mod simd;
pub mod window;
mod zig_tables;

#[cfg(feature = "python")]
mod py;

pub use error::{Error, Result};
