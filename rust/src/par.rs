//! The kernels' thread pool: how many threads, and when an input is large enough to split.
//!
//! Large inputs (at least [`PAR_THRESHOLD`] elements) are cut into one contiguous chunk per
//! thread; each chunk is processed by the same sequential code as a small input, and the chunk
//! results are combined exactly (integer histogram sums, keys concatenated in data order,
//! per-element outputs written in place, a maximum), so every result is bit-identical whatever
//! the thread count. The pool is a `rayon` pool of [`num_threads`] threads, built on first use.
//!
//! The thread count comes from the rank's CPU share: `CURRICULUM_DS_NUM_THREADS`, else
//! `OMP_NUM_THREADS` (its first entry), else the CPUs this process may run on
//! (`std::thread::available_parallelism`, which honours the affinity mask and cgroup quota).
//! `curriculum-ds launch` sets `OMP_NUM_THREADS=1` for CPU ranks, so two ranks never share a core.

use std::sync::{Arc, Mutex};

/// Inputs below this many elements run on the calling thread (a fork-join costs ~10-50 µs).
/// Lower under `cargo test`, so that the property tests' small inputs take the parallel path.
pub const PAR_THRESHOLD: usize = if cfg!(test) { 1 << 10 } else { 1 << 20 };

/// The current pool: `(threads, pool)`; `None` until first use or after [`set_num_threads`].
static POOL: Mutex<Option<(usize, Option<Arc<rayon::ThreadPool>>)>> = Mutex::new(None);

/// The thread count from the environment (see the module docs); at least 1.
pub fn threads_from_env() -> usize {
    let parse = |name: &str| -> Option<usize> {
        let value = std::env::var(name).ok()?;
        let first = value.split(',').next()?.trim().parse::<usize>().ok()?;
        (first >= 1).then_some(first)
    };
    parse("CURRICULUM_DS_NUM_THREADS")
        .or_else(|| parse("OMP_NUM_THREADS"))
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, usize::from))
}

fn build(threads: usize) -> Option<Arc<rayon::ThreadPool>> {
    if threads <= 1 {
        return None;
    }
    rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .thread_name(|i| format!("curriculum-ds-kernel-{i}"))
        .build()
        .ok()
        .map(Arc::new)
}

type Pool = (usize, Option<Arc<rayon::ThreadPool>>);

thread_local! {
    /// A per-thread override of the pool, for [`with_threads`].
    static OVERRIDE: std::cell::RefCell<Option<Pool>> = const { std::cell::RefCell::new(None) };
}

/// Run `f` with the kernels called from this thread using `threads` threads (tests compare
/// thread counts this way without touching the process-wide setting).
pub fn with_threads<R>(threads: usize, f: impl FnOnce() -> R) -> R {
    let pool = build(threads);
    let entry = (if pool.is_some() { threads } else { 1 }, pool);
    let previous = OVERRIDE.with(|o| o.replace(Some(entry)));
    let result = f();
    OVERRIDE.with(|o| *o.borrow_mut() = previous);
    result
}

fn current() -> Pool {
    if let Some(p) = OVERRIDE.with(|o| o.borrow().clone()) {
        return p;
    }
    let mut guard = POOL
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    guard
        .get_or_insert_with(|| {
            let threads = threads_from_env();
            let pool = build(threads);
            // A pool that could not start its threads runs everything on the caller.
            (if pool.is_some() { threads } else { 1 }, pool)
        })
        .clone()
}

/// The number of threads the kernels use.
pub fn num_threads() -> usize {
    current().0
}

/// Use `threads` threads from now on (`0`: the count from the environment again).
pub fn set_num_threads(threads: usize) {
    let threads = if threads == 0 {
        threads_from_env()
    } else {
        threads
    };
    let pool = build(threads);
    let mut guard = POOL
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    *guard = Some((if pool.is_some() { threads } else { 1 }, pool));
}

/// The chunk length for `len` elements: `len` itself (one chunk, no pool) below the threshold or
/// with one thread, else `ceil(len / threads)` rounded up to a multiple of `align`.
pub fn chunk_len(len: usize, align: usize) -> usize {
    let threads = num_threads();
    if len < PAR_THRESHOLD || threads <= 1 {
        return len.max(1);
    }
    len.div_ceil(threads).next_multiple_of(align.max(1)).max(1)
}

/// Run `f` inside the pool (so its `rayon` calls use the pool's threads), or on the caller with
/// one thread. Call [`chunk_len`] before, on the calling thread (the override of
/// [`with_threads`] is per thread).
pub fn install<R: Send>(f: impl FnOnce() -> R + Send) -> R {
    match current().1 {
        Some(pool) => pool.install(f),
        None => f(),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn chunks_cover_the_input() {
        super::set_num_threads(3);
        assert_eq!(super::num_threads(), 3);
        assert_eq!(super::chunk_len(10, 64), 10);
        let n = super::PAR_THRESHOLD + 5;
        let c = super::chunk_len(n, 64);
        assert!(c.is_multiple_of(64) && c * 3 >= n && c < n);
        super::set_num_threads(1);
        assert_eq!(super::chunk_len(n, 64), n);
        super::set_num_threads(0);
        assert!(super::num_threads() >= 1);
        assert_eq!(super::with_threads(2, super::num_threads), 2);
    }
}
