//! The only file that uses pyo3/numpy: conversion, GIL release and error mapping.
//!
//! Arrays come in as borrowed read-only slices (no copy) and go out with `into_pyarray` (the
//! `Vec` becomes the array's buffer). Every kernel runs with the GIL released through
//! [`detach`], which also maps [`Error`] to Python in one exhaustive `match`.

use numpy::{IntoPyArray, PyArray1, PyArrayMethods, PyReadonlyArray1, PyUntypedArrayMethods};
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyInt;

use crate::blend;
use crate::bucketing::{self, NanPolicy};
use crate::error::Error;
use crate::permutation::{self, IndexShuffle};
use crate::sampling::{self, BucketSamplerState};
use crate::window;

pyo3::import_exception!(curriculum_ds.errors, BucketingError);
pyo3::import_exception!(curriculum_ds.errors, DownloadError);
pyo3::import_exception!(curriculum_ds.errors, SamplingError);

/// The one mapping from kernel errors to Python exceptions.
fn to_py(e: &Error) -> PyErr {
    let msg = e.to_string();
    match e {
        Error::EmptyWindow { .. } | Error::NanValue { .. } | Error::WindowChanged => {
            BucketingError::new_err(msg)
        }
        Error::InvalidArgument { .. } | Error::InvalidState { .. } => PyValueError::new_err(msg),
        Error::InvalidWeight { .. }
        | Error::ZeroTotalWeight { .. }
        | Error::NotEnoughPositiveWeights { .. }
        | Error::BucketIndexOutOfRange { .. }
        | Error::NoMassOnNonEmptyBuckets
        | Error::SampleCountMismatch { .. }
        | Error::CounterExhausted { .. } => SamplingError::new_err(msg),
        Error::ShardChanged { .. } => DownloadError::new_err(msg),
    }
}

/// Run a kernel with the GIL released and convert its error.
fn detach<T, F>(py: Python<'_>, f: F) -> PyResult<T>
where
    T: Send,
    F: FnOnce() -> crate::Result<T> + Send,
{
    py.detach(f).map_err(|e| to_py(&e))
}

/// A borrowed 1-D float array of either supported dtype.
enum Floats<'py> {
    F32(PyReadonlyArray1<'py, f32>),
    F64(PyReadonlyArray1<'py, f64>),
}

fn dtype_name(obj: &Bound<'_, PyAny>) -> String {
    obj.getattr("dtype")
        .map_or_else(|_| obj.get_type().to_string(), |d| d.to_string())
}

fn floats<'py>(obj: &Bound<'py, PyAny>, name: &str) -> PyResult<Floats<'py>> {
    if let Ok(a) = obj.cast::<PyArray1<f32>>() {
        Ok(Floats::F32(a.readonly()))
    } else if let Ok(a) = obj.cast::<PyArray1<f64>>() {
        Ok(Floats::F64(a.readonly()))
    } else {
        Err(PyTypeError::new_err(format!(
            "{name} must be a 1-D float32 or float64 numpy array, got {}",
            dtype_name(obj)
        )))
    }
}

fn typed<'py, T: numpy::Element>(
    obj: &Bound<'py, PyAny>,
    name: &str,
    dtype: &str,
) -> PyResult<PyReadonlyArray1<'py, T>> {
    obj.cast::<PyArray1<T>>()
        .map(PyArrayMethods::readonly)
        .map_err(|_| {
            PyTypeError::new_err(format!(
                "{name} must be a 1-D {dtype} numpy array, got {}",
                dtype_name(obj)
            ))
        })
}

fn slice<'a, T: numpy::Element>(a: &'a PyReadonlyArray1<'_, T>, name: &str) -> PyResult<&'a [T]> {
    a.as_slice().map_err(|_| {
        PyValueError::new_err(format!(
            "{name} must be C-contiguous (use np.ascontiguousarray), got strides {:?}",
            a.strides()
        ))
    })
}

/// A non-negative count argument.
fn count(v: i64, name: &str) -> PyResult<usize> {
    usize::try_from(v).map_err(|_| PyValueError::new_err(format!("{name} must be >= 0, got {v}")))
}

/// A seed or counter: a Python int in `[0, 2^64)`.
fn u64_arg(obj: &Bound<'_, PyAny>, name: &str) -> PyResult<u64> {
    if !obj.is_instance_of::<PyInt>() {
        return Err(PyTypeError::new_err(format!(
            "{name} must be an int, got {}",
            obj.get_type()
        )));
    }
    obj.extract::<u64>()
        .map_err(|_| PyValueError::new_err(format!("{name} must be in [0, 2**64), got {obj}")))
}

fn u64s(a: &[i64], name: &str) -> PyResult<Vec<u64>> {
    a.iter()
        .enumerate()
        .map(|(i, &v)| {
            u64::try_from(v)
                .map_err(|_| PyValueError::new_err(format!("{name}[{i}] = {v} must be >= 0")))
        })
        .collect()
}

fn to_i64(v: &[u64]) -> Vec<i64> {
    v.iter()
        .map(|&x| i64::try_from(x).unwrap_or(i64::MAX))
        .collect()
}

/// Exact percentile-bucket edges (see `curriculum_ds.kernels.bucket_edges`).
#[pyfunction]
fn bucket_edges<'py>(
    py: Python<'py>,
    window: &Bound<'py, PyAny>,
    num_buckets: i64,
) -> PyResult<Bound<'py, PyArray1<f64>>> {
    let b = count(num_buckets, "num_buckets")?;
    let edges = match floats(window, "window")? {
        Floats::F32(a) => {
            let s = slice(&a, "window")?;
            detach(py, || bucketing::bucket_edges(s, b))?
        }
        Floats::F64(a) => {
            let s = slice(&a, "window")?;
            detach(py, || bucketing::bucket_edges(s, b))?
        }
    };
    Ok(edges.into_pyarray(py))
}

/// Bucket of each value (see `curriculum_ds.kernels.assign_buckets`).
#[pyfunction]
#[pyo3(signature = (values, edges, nan_policy = "raise"))]
fn assign_buckets<'py>(
    py: Python<'py>,
    values: &Bound<'py, PyAny>,
    edges: &Bound<'py, PyAny>,
    nan_policy: &str,
) -> PyResult<Bound<'py, PyArray1<i64>>> {
    let policy = match nan_policy {
        "raise" => NanPolicy::Raise,
        "omit" => NanPolicy::Omit,
        other => {
            return Err(PyValueError::new_err(format!(
                "nan_policy must be \"raise\" or \"omit\", got {other:?}"
            )))
        }
    };
    let e = typed::<f64>(edges, "edges", "float64")?;
    let e = slice(&e, "edges")?;
    let out = match floats(values, "values")? {
        Floats::F32(a) => {
            let s = slice(&a, "values")?;
            detach(py, || {
                let mut out = crate::buf::filled::<i64>(s.len());
                bucketing::assign_buckets(s, e, policy, &mut out).map(|()| out)
            })?
        }
        Floats::F64(a) => {
            let s = slice(&a, "values")?;
            detach(py, || {
                let mut out = crate::buf::filled::<i64>(s.len());
                bucketing::assign_buckets(s, e, policy, &mut out).map(|()| out)
            })?
        }
    };
    Ok(out.into_pyarray(py))
}

/// Efraimidis–Spirakis weighted sampling without replacement.
#[pyfunction]
fn sample_without_replacement<'py>(
    py: Python<'py>,
    weights: &Bound<'py, PyAny>,
    k: i64,
    seed: &Bound<'py, PyAny>,
) -> PyResult<Bound<'py, PyArray1<i64>>> {
    let w = typed::<f64>(weights, "weights", "float64")?;
    let w = slice(&w, "weights")?;
    let k = count(k, "k")?;
    let seed = u64_arg(seed, "seed")?;
    let out = detach(py, || sampling::sample_without_replacement(w, k, seed))?;
    Ok(out.into_pyarray(py))
}

/// Stream of each of the next `n` slots, largest deficit in samples (see `rust/src/blend.rs`).
/// `base`: float64 targets at the call's start (a ramp), None for the plain rule.
#[pyfunction]
#[pyo3(signature = (proportions, counts, start, n, base=None))]
fn blend_samples<'py>(
    py: Python<'py>,
    proportions: &Bound<'py, PyAny>,
    counts: &Bound<'py, PyAny>,
    start: &Bound<'py, PyAny>,
    n: i64,
    base: Option<&Bound<'py, PyAny>>,
) -> PyResult<Bound<'py, PyArray1<i64>>> {
    let p = typed::<f64>(proportions, "proportions", "float64")?;
    let p = slice(&p, "proportions")?;
    let c = typed::<i64>(counts, "counts", "int64")?;
    let c = slice(&c, "counts")?;
    let start = u64_arg(start, "start")?;
    let n = count(n, "n")?;
    let b = base
        .map(|b| typed::<f64>(b, "base", "float64"))
        .transpose()?;
    let b = b.as_ref().map(|b| slice(b, "base")).transpose()?;
    Ok(detach(py, || blend::blend_samples_from(p, b, c, start, n))?.into_pyarray(py))
}

/// Stream of each of the next `n` slots, largest deficit in tokens (see `rust/src/blend.rs`).
/// `base`: float64 targets at the call's start (a ramp), None for the plain rule.
#[pyfunction]
#[pyo3(signature = (proportions, tokens, lengths, offsets, n, base=None))]
fn blend_tokens<'py>(
    py: Python<'py>,
    proportions: &Bound<'py, PyAny>,
    tokens: &Bound<'py, PyAny>,
    lengths: &Bound<'py, PyAny>,
    offsets: &Bound<'py, PyAny>,
    n: i64,
    base: Option<&Bound<'py, PyAny>>,
) -> PyResult<Bound<'py, PyArray1<i64>>> {
    let shares = typed::<f64>(proportions, "proportions", "float64")?;
    let shares = slice(&shares, "proportions")?;
    let placed = typed::<i64>(tokens, "tokens", "int64")?;
    let placed = slice(&placed, "tokens")?;
    let next = typed::<i64>(lengths, "lengths", "int64")?;
    let next = slice(&next, "lengths")?;
    let bounds = typed::<i64>(offsets, "offsets", "int64")?;
    let bounds: Vec<usize> = u64s(slice(&bounds, "offsets")?, "offsets")?
        .into_iter()
        .map(|v| usize::try_from(v).unwrap_or(usize::MAX))
        .collect();
    let n = count(n, "n")?;
    let b = base
        .map(|b| typed::<f64>(b, "base", "float64"))
        .transpose()?;
    let b = b.as_ref().map(|b| slice(b, "base")).transpose()?;
    Ok(detach(py, || {
        blend::blend_tokens_from(shares, b, placed, next, &bounds, n)
    })?
    .into_pyarray(py))
}

/// Fisher–Yates permutation of `0..n` from `(seed, epoch)`.
#[pyfunction]
fn epoch_permutation<'py>(
    py: Python<'py>,
    n: i64,
    seed: &Bound<'py, PyAny>,
    epoch: &Bound<'py, PyAny>,
) -> PyResult<Bound<'py, PyArray1<i64>>> {
    let n = count(n, "n")?;
    let seed = u64_arg(seed, "seed")?;
    let epoch = u64_arg(epoch, "epoch")?;
    let out = detach(py, || Ok(sampling::epoch_permutation(n, seed, epoch)))?;
    Ok(out.into_pyarray(py))
}

/// The keyed bijection of `[0, n)` (see `rust/src/permutation.rs`); every index a `u64`.
#[pyclass(name = "IndexShuffle", module = "curriculum_ds._native", frozen)]
struct PyIndexShuffle {
    inner: IndexShuffle,
}

#[pymethods]
impl PyIndexShuffle {
    #[new]
    fn new(
        n: &Bound<'_, PyAny>,
        seed: &Bound<'_, PyAny>,
        stream: &Bound<'_, PyAny>,
        epoch: &Bound<'_, PyAny>,
    ) -> PyResult<Self> {
        let inner = IndexShuffle::new(
            u64_arg(n, "n")?,
            u64_arg(seed, "seed")?,
            u64_arg(stream, "stream")?,
            u64_arg(epoch, "epoch")?,
        );
        Ok(Self { inner })
    }

    fn permute(&self, i: &Bound<'_, PyAny>) -> PyResult<u64> {
        self.inner.permute(u64_arg(i, "i")?).map_err(|e| to_py(&e))
    }

    fn inverse(&self, j: &Bound<'_, PyAny>) -> PyResult<u64> {
        self.inner.inverse(u64_arg(j, "j")?).map_err(|e| to_py(&e))
    }

    /// The images of positions `start .. start + count` (each below `n` and `2^63`), int64.
    fn permute_range<'py>(
        &self,
        py: Python<'py>,
        start: &Bound<'py, PyAny>,
        count: i64,
    ) -> PyResult<Bound<'py, PyArray1<i64>>> {
        let start = u64_arg(start, "start")?;
        let count = u64::try_from(count)
            .map_err(|_| PyValueError::new_err(format!("count must be >= 0, got {count}")))?;
        let n = self.inner.len();
        if start.checked_add(count).is_none_or(|end| end > n) || n > 1 << 63 {
            return Err(PyValueError::new_err(format!(
                "positions {start} + {count} do not fit [0, {n}) within int64"
            )));
        }
        let inner = &self.inner;
        let out: Vec<i64> = detach(py, || {
            Ok((start..start + count)
                .map(|i| inner.permute_unchecked(i) as i64)
                .collect())
        })?;
        Ok(out.into_pyarray(py))
    }

    fn __len__(&self) -> usize {
        usize::try_from(self.inner.len()).unwrap_or(usize::MAX)
    }
}

/// The samples of a run of slots over the streams' per-epoch `IndexShuffle`s (order version 2).
#[pyfunction]
fn stream_order<'py>(
    py: Python<'py>,
    streams: &Bound<'py, PyAny>,
    cursors: &Bound<'py, PyAny>,
    sizes: &Bound<'py, PyAny>,
    seeds: &Bound<'py, PyAny>,
) -> PyResult<Bound<'py, PyArray1<i64>>> {
    let streams = typed::<i64>(streams, "streams", "int64")?;
    let streams = slice(&streams, "streams")?;
    let cursors = typed::<i64>(cursors, "cursors", "int64")?;
    let cursors = u64s(slice(&cursors, "cursors")?, "cursors")?;
    let sizes = typed::<i64>(sizes, "sizes", "int64")?;
    let sizes = u64s(slice(&sizes, "sizes")?, "sizes")?;
    let seeds = typed::<i64>(seeds, "seeds", "int64")?;
    let seeds = u64s(slice(&seeds, "seeds")?, "seeds")?;
    let out = detach(py, || {
        permutation::stream_order(streams, &cursors, &sizes, &seeds)
    })?;
    // every sample index is below its stream's size, itself an int64
    Ok(to_i64(&out).into_pyarray(py))
}

/// Ring buffer of the last `capacity` finite losses with an exact key histogram.
#[pyclass(name = "RollingWindow", module = "curriculum_ds._native")]
struct PyRollingWindow {
    inner: window::RollingWindow,
}

#[pymethods]
impl PyRollingWindow {
    #[new]
    fn new(capacity: i64) -> PyResult<Self> {
        let c = count(capacity, "capacity")?;
        window::RollingWindow::new(c)
            .map(|inner| Self { inner })
            .map_err(|e| to_py(&e))
    }

    /// Rebuild from `(capacity, values oldest first, num_non_finite)`.
    #[staticmethod]
    fn from_parts(
        py: Python<'_>,
        capacity: i64,
        values: &Bound<'_, PyAny>,
        num_non_finite: i64,
    ) -> PyResult<Self> {
        let c = count(capacity, "capacity")?;
        let nf = count(num_non_finite, "num_non_finite")? as u64;
        let v = typed::<f32>(values, "values", "float32")?;
        let s = slice(&v, "values")?;
        let inner = detach(py, || window::RollingWindow::from_parts(c, s, nf))?;
        Ok(Self { inner })
    }

    fn push(&mut self, py: Python<'_>, values: &Bound<'_, PyAny>) -> PyResult<()> {
        let inner = &mut self.inner;
        match floats(values, "values")? {
            Floats::F32(a) => {
                let s = slice(&a, "values")?;
                detach(py, || {
                    inner.push(s);
                    Ok(())
                })
            }
            Floats::F64(a) => {
                let s = slice(&a, "values")?;
                detach(py, || {
                    inner.push(s);
                    Ok(())
                })
            }
        }
    }

    fn edges<'py>(&self, py: Python<'py>, num_buckets: i64) -> PyResult<Bound<'py, PyArray1<f64>>> {
        let b = count(num_buckets, "num_buckets")?;
        let inner = &self.inner;
        Ok(detach(py, || inner.edges(b))?.into_pyarray(py))
    }

    fn values<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyArray1<f32>>> {
        let inner = &self.inner;
        Ok(detach(py, || Ok(inner.values()))?.into_pyarray(py))
    }

    fn __len__(&self) -> usize {
        self.inner.len()
    }

    #[getter]
    fn capacity(&self) -> usize {
        self.inner.capacity()
    }

    #[getter]
    fn num_non_finite(&self) -> u64 {
        self.inner.num_non_finite()
    }
}

/// Alias-table sampler with replacement, counter-based.
#[pyclass(name = "WeightedSampler", module = "curriculum_ds._native")]
struct PyWeightedSampler {
    inner: sampling::WeightedSampler,
}

#[pymethods]
impl PyWeightedSampler {
    #[new]
    fn new(py: Python<'_>, weights: &Bound<'_, PyAny>, seed: &Bound<'_, PyAny>) -> PyResult<Self> {
        let w = typed::<f64>(weights, "weights", "float64")?;
        let w = slice(&w, "weights")?;
        let seed = u64_arg(seed, "seed")?;
        let inner = detach(py, || sampling::WeightedSampler::new(w, seed))?;
        Ok(Self { inner })
    }

    fn sample<'py>(&mut self, py: Python<'py>, k: i64) -> PyResult<Bound<'py, PyArray1<i64>>> {
        let k = count(k, "k")?;
        let inner = &mut self.inner;
        Ok(detach(py, || inner.sample(k))?.into_pyarray(py))
    }

    #[getter]
    fn seed(&self) -> u64 {
        self.inner.seed
    }

    #[setter]
    fn set_seed(&mut self, value: &Bound<'_, PyAny>) -> PyResult<()> {
        self.inner.seed = u64_arg(value, "seed")?;
        Ok(())
    }

    #[getter]
    fn num_draws(&self) -> u64 {
        self.inner.num_draws
    }

    #[setter]
    fn set_num_draws(&mut self, value: &Bound<'_, PyAny>) -> PyResult<()> {
        self.inner.num_draws = u64_arg(value, "num_draws")?;
        Ok(())
    }

    fn __len__(&self) -> usize {
        self.inner.len()
    }
}

/// Per-bucket epoch permutations, buckets picked by weight.
#[pyclass(name = "BucketSampler", module = "curriculum_ds._native")]
struct PyBucketSampler {
    inner: sampling::BucketSampler,
}

#[pymethods]
impl PyBucketSampler {
    #[new]
    fn new(
        py: Python<'_>,
        bucket_idx: &Bound<'_, PyAny>,
        num_buckets: i64,
        seed: &Bound<'_, PyAny>,
    ) -> PyResult<Self> {
        let idx = typed::<i64>(bucket_idx, "bucket_idx", "int64")?;
        let idx = slice(&idx, "bucket_idx")?;
        let b = count(num_buckets, "num_buckets")?;
        let seed = u64_arg(seed, "seed")?;
        let inner = detach(py, || sampling::BucketSampler::new(idx, b, seed))?;
        Ok(Self { inner })
    }

    fn sample<'py>(
        &mut self,
        py: Python<'py>,
        probs: &Bound<'py, PyAny>,
        k: i64,
    ) -> PyResult<Bound<'py, PyArray1<i64>>> {
        let p = typed::<f64>(probs, "probs", "float64")?;
        let p = slice(&p, "probs")?;
        let k = count(k, "k")?;
        let inner = &mut self.inner;
        Ok(detach(py, || inner.sample(p, k))?.into_pyarray(py))
    }

    fn set_buckets(&mut self, py: Python<'_>, bucket_idx: &Bound<'_, PyAny>) -> PyResult<()> {
        let idx = typed::<i64>(bucket_idx, "bucket_idx", "int64")?;
        let idx = slice(&idx, "bucket_idx")?;
        let inner = &mut self.inner;
        detach(py, || inner.set_buckets(idx))
    }

    /// `N`, the number of samples of the bucket assignment (excluded ones included).
    fn __len__(&self) -> usize {
        self.inner.len()
    }

    fn counts<'py>(&self, py: Python<'py>) -> Bound<'py, PyArray1<i64>> {
        to_i64(&self.inner.counts()).into_pyarray(py)
    }

    #[getter]
    fn num_buckets(&self) -> usize {
        self.inner.num_buckets()
    }

    /// `(seed, num_calls, generation, cursors, epochs)`.
    #[allow(
        clippy::type_complexity,
        reason = "a plain tuple is the Python-facing shape"
    )]
    fn state<'py>(
        &self,
        py: Python<'py>,
    ) -> (
        u64,
        u64,
        u64,
        Bound<'py, PyArray1<i64>>,
        Bound<'py, PyArray1<i64>>,
    ) {
        let s = self.inner.state();
        (
            s.seed,
            s.num_calls,
            s.generation,
            to_i64(&s.cursors).into_pyarray(py),
            to_i64(&s.epochs).into_pyarray(py),
        )
    }

    fn load_state(
        &mut self,
        py: Python<'_>,
        seed: &Bound<'_, PyAny>,
        num_calls: &Bound<'_, PyAny>,
        generation: &Bound<'_, PyAny>,
        cursors: &Bound<'_, PyAny>,
        epochs: &Bound<'_, PyAny>,
    ) -> PyResult<()> {
        let c = typed::<i64>(cursors, "cursors", "int64")?;
        let e = typed::<i64>(epochs, "epochs", "int64")?;
        let state = BucketSamplerState {
            seed: u64_arg(seed, "seed")?,
            num_calls: u64_arg(num_calls, "num_calls")?,
            generation: u64_arg(generation, "generation")?,
            cursors: u64s(slice(&c, "cursors")?, "cursors")?,
            epochs: u64s(slice(&e, "epochs")?, "epochs")?,
        };
        let inner = &mut self.inner;
        detach(py, || inner.load_state(&state))
    }
}

/// The number of threads the kernels use (see `curriculum_ds.kernels.num_threads`).
#[pyfunction]
fn num_threads() -> usize {
    crate::par::num_threads()
}

/// Use `threads` threads from now on; `0`: the count from the environment again.
#[pyfunction]
fn set_num_threads(py: Python<'_>, threads: i64) -> PyResult<()> {
    let t = count(threads, "threads")?;
    py.detach(|| crate::par::set_num_threads(t));
    Ok(())
}

/// Memory-mapped MDS shards of a phase's streams (see `curriculum_ds.data.bulk`).
#[pyclass(name = "MdsShards", module = "curriculum_ds._native", frozen)]
struct PyMdsShards {
    inner: crate::mds::Shards,
}

/// One stream's shards for `MdsShards`: its name, paths, sizes, sample counts, and its layout.
type StreamSpec = (
    String,
    Vec<String>,
    Vec<i64>,
    Vec<u32>,
    Vec<i64>,
    usize,
    usize,
    bool,
);

/// A bulk read's outcome: `Ok(None)` when streaming must read these samples instead.
fn bulk_read(read: Result<(), crate::mds::MdsError>) -> crate::Result<Option<()>> {
    match read {
        Ok(()) => Ok(Some(())),
        Err(crate::mds::MdsError::Changed(e)) => Err(e),
        Err(crate::mds::MdsError::Missing { .. } | crate::mds::MdsError::Malformed { .. }) => {
            Ok(None)
        }
    }
}

#[pymethods]
impl PyMdsShards {
    /// `streams[s] = (name, paths, bytes, num_samples, column_sizes, column, itemsize,
    /// fixed_shape)`: each file's size as `index.json` records it (`-1`: not recorded), column
    /// sizes in bytes, `-1` for a column with a size header.
    #[new]
    fn new(streams: Vec<StreamSpec>) -> PyResult<Self> {
        let mut specs = Vec::with_capacity(streams.len());
        for (name, paths, bytes, counts, sizes, column, itemsize, fixed_shape) in streams {
            if paths.len() != counts.len()
                || paths.len() != bytes.len()
                || column >= sizes.len()
                || ![1, 2, 4, 8].contains(&itemsize)
            {
                return Err(PyValueError::new_err("inconsistent MDS stream layout"));
            }
            let files = paths
                .into_iter()
                .zip(bytes)
                .zip(counts)
                .map(|((path, bytes), num_samples)| crate::mds::ShardFile {
                    path: path.into(),
                    num_samples,
                    bytes: u64::try_from(bytes).ok(),
                })
                .collect();
            let sizes = sizes.iter().map(|&s| u32::try_from(s).ok()).collect();
            let layout = crate::mds::Layout {
                sizes,
                column,
                itemsize,
                fixed_shape,
            };
            specs.push((name, files, layout));
        }
        Ok(Self {
            inner: crate::mds::Shards::new(specs),
        })
    }

    /// The column of each `(stream, sample)` pair of the flat int64 `pairs`, cut to `limit`
    /// values: `(bytes, lengths)`, or `None` when streaming must read them (see `mds.rs`);
    /// `DownloadError` when a shard file changed on disk while the run was reading it.
    #[allow(
        clippy::type_complexity,
        reason = "a plain tuple is the Python-facing shape"
    )]
    fn gather<'py>(
        &self,
        py: Python<'py>,
        pairs: &Bound<'py, PyAny>,
        limit: i64,
    ) -> PyResult<Option<(Bound<'py, PyArray1<u8>>, Bound<'py, PyArray1<i64>>)>> {
        let a = typed::<i64>(pairs, "pairs", "int64")?;
        let p = slice(&a, "pairs")?;
        let limit = count(limit, "limit")?;
        let inner = &self.inner;
        let read = detach(py, || {
            let (mut out, mut lengths) = (Vec::new(), Vec::with_capacity(p.len() / 2));
            let done = bulk_read(inner.gather(p, limit, &mut out, &mut lengths))?;
            Ok(done.map(|()| (out, lengths)))
        })?;
        Ok(read.map(|(out, lengths)| (out.into_pyarray(py), lengths.into_pyarray(py))))
    }

    /// `gather` then right-padding into int64 `(input_ids, attention_mask, labels, seq_len)`
    /// (flat, `rows × seq_len`), integers of `itemsize` bytes widened as numpy casts them;
    /// `None` and `DownloadError` as `gather`.
    #[allow(
        clippy::type_complexity,
        reason = "a plain tuple is the Python-facing shape"
    )]
    fn gather_padded<'py>(
        &self,
        py: Python<'py>,
        pairs: &Bound<'py, PyAny>,
        limit: i64,
        signed: bool,
        ignore_index: i64,
    ) -> PyResult<
        Option<(
            Bound<'py, PyArray1<i64>>,
            Bound<'py, PyArray1<i64>>,
            Bound<'py, PyArray1<i64>>,
            usize,
        )>,
    > {
        let a = typed::<i64>(pairs, "pairs", "int64")?;
        let p = slice(&a, "pairs")?;
        let limit = count(limit, "limit")?;
        let inner = &self.inner;
        let read = detach(py, || {
            let (mut out, mut lengths) = (Vec::new(), Vec::with_capacity(p.len() / 2));
            if bulk_read(inner.gather(p, limit, &mut out, &mut lengths))?.is_none() {
                return Ok(None);
            }
            let Ok(itemsize) = inner.itemsize(p) else {
                return Ok(None);
            };
            Ok(Some(crate::mds::collate(
                &out,
                &lengths,
                itemsize,
                signed,
                ignore_index,
            )))
        })?;
        Ok(read.map(|r| {
            (
                r.input_ids.into_pyarray(py),
                r.attention_mask.into_pyarray(py),
                r.labels.into_pyarray(py),
                r.seq_len,
            )
        }))
    }

    /// Forget every mapping (after a cached shard was removed).
    fn unmap_all(&self) {
        self.inner.unmap_all();
    }
}

#[pymodule]
#[pyo3(name = "_native")]
fn native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add_function(wrap_pyfunction!(bucket_edges, m)?)?;
    m.add_function(wrap_pyfunction!(assign_buckets, m)?)?;
    m.add_function(wrap_pyfunction!(sample_without_replacement, m)?)?;
    m.add_function(wrap_pyfunction!(epoch_permutation, m)?)?;
    m.add_function(wrap_pyfunction!(blend_samples, m)?)?;
    m.add_function(wrap_pyfunction!(blend_tokens, m)?)?;
    m.add_function(wrap_pyfunction!(stream_order, m)?)?;
    m.add_function(wrap_pyfunction!(num_threads, m)?)?;
    m.add_function(wrap_pyfunction!(set_num_threads, m)?)?;
    m.add_class::<PyMdsShards>()?;
    m.add_class::<PyRollingWindow>()?;
    m.add_class::<PyWeightedSampler>()?;
    m.add_class::<PyBucketSampler>()?;
    m.add_class::<PyIndexShuffle>()?;
    Ok(())
}
