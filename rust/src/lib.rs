//! curriculum_ds core: exact percentile bucketing, the rolling window and weighted samplers.
//!
//! Pure Rust over slices; only `py.rs` (feature `python`) touches pyo3/numpy.

#[cfg(feature = "python")]
mod py;
