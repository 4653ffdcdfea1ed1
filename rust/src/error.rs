//! The one error type of the kernels; `py.rs` maps each variant to a Python exception.

use std::fmt;

/// Every way a kernel can refuse its input. Messages name the offending value or index.
#[derive(Debug, Clone, PartialEq)]
pub enum Error {
    /// The window holds no finite value, so no order statistic exists (`BucketingError`).
    EmptyWindow {
        /// Length of the window, non-finite values included.
        len: usize,
    },
    /// The window changed while its edges were computed: another thread wrote to the array
    /// (`BucketingError`).
    WindowChanged,
    /// A value to bucket is NaN and the policy is to refuse it (`BucketingError`).
    NanValue {
        /// Index of the first NaN.
        index: usize,
    },
    /// An argument is out of its documented range (`ValueError`).
    InvalidArgument {
        /// Name of the argument.
        name: &'static str,
        /// What is wrong with it, including the value.
        reason: String,
    },
    /// A weight or probability is negative, NaN or infinite (`SamplingError`).
    InvalidWeight {
        /// Index of the first bad weight.
        index: usize,
        /// The bad weight.
        value: f64,
    },
    /// No weight is positive (`SamplingError`).
    ZeroTotalWeight {
        /// Number of weights.
        len: usize,
    },
    /// More distinct indices were requested than there are positive weights (`SamplingError`).
    NotEnoughPositiveWeights {
        /// Requested number of indices.
        k: usize,
        /// Number of positive weights.
        num_positive: usize,
    },
    /// A bucket index is neither -1 nor in `[0, num_buckets)` (`SamplingError`).
    BucketIndexOutOfRange {
        /// Position of the bad entry.
        index: usize,
        /// The bad bucket index.
        value: i64,
        /// The number of buckets.
        num_buckets: usize,
    },
    /// Every bucket with positive probability is empty (`SamplingError`).
    NoMassOnNonEmptyBuckets,
    /// A new bucket assignment is not over the sampler's samples (`SamplingError`).
    SampleCountMismatch {
        /// Length of the new assignment.
        got: usize,
        /// The sampler's number of samples `N`.
        expected: usize,
    },
    /// A sampler counter would pass `2^64 - 1` (`SamplingError`); the sampler is unchanged.
    CounterExhausted {
        /// The counter (`num_draws`, `num_calls`, `generation`).
        counter: &'static str,
        /// Its value.
        value: u64,
        /// The increment that would pass the limit.
        increment: u64,
    },
    /// A saved state does not fit this object (`ValueError`).
    InvalidState {
        /// What does not fit, including the values.
        reason: String,
    },
    /// A memory-mapped MDS shard changed on disk while the run was reading it
    /// (`DownloadError`: a verdict of the rank that read it).
    ShardChanged {
        /// The stream's name.
        stream: String,
        /// The shard file.
        path: String,
        /// How it changed (sizes, a rewrite).
        reason: String,
    },
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::EmptyWindow { len } => write!(
                f,
                "window has no finite value (length {len}); cannot compute bucket edges"
            ),
            Error::WindowChanged => write!(
                f,
                "window changed while its edges were computed (another thread wrote to the \
                 array); no edges returned"
            ),
            Error::NanValue { index } => write!(
                f,
                "value at index {index} is NaN; pass nan_policy=\"omit\" to assign it -1"
            ),
            Error::InvalidArgument { name, reason } => write!(f, "{name}: {reason}"),
            Error::InvalidWeight { index, value } => write!(
                f,
                "weight at index {index} is {value}; weights must be finite and >= 0"
            ),
            Error::ZeroTotalWeight { len } => {
                write!(
                    f,
                    "all {len} weights are zero; at least one must be positive"
                )
            }
            Error::NotEnoughPositiveWeights { k, num_positive } => write!(
                f,
                "cannot draw k={k} distinct indices: only {num_positive} weights are positive"
            ),
            Error::BucketIndexOutOfRange {
                index,
                value,
                num_buckets,
            } => write!(
                f,
                "bucket_idx[{index}] = {value} is out of range; expected -1 or 0..{num_buckets}"
            ),
            Error::NoMassOnNonEmptyBuckets => write!(
                f,
                "all probability mass is on empty buckets; no index can be drawn"
            ),
            Error::SampleCountMismatch { got, expected } => write!(
                f,
                "bucket_idx: length {got}, but the sampler is over {expected} samples \
                 (set_buckets re-buckets the same samples; build a new sampler for another set)"
            ),
            Error::CounterExhausted {
                counter,
                value,
                increment,
            } => write!(
                f,
                "{counter} = {value} + {increment} would pass the counter's limit 2**64 - 1; \
                 the sampler cannot number more"
            ),
            Error::InvalidState { reason } => write!(f, "invalid state: {reason}"),
            Error::ShardChanged {
                stream,
                path,
                reason,
            } => write!(
                f,
                "stream '{stream}': shard {path} changed while the run was reading it ({reason}); \
                 restore it and resume with --resume auto"
            ),
        }
    }
}

impl std::error::Error for Error {}

/// Shorthand for `Error::InvalidArgument`.
pub(crate) fn invalid_arg(name: &'static str, reason: impl Into<String>) -> Error {
    Error::InvalidArgument {
        name,
        reason: reason.into(),
    }
}

/// Result alias of the kernels.
pub type Result<T> = std::result::Result<T, Error>;
