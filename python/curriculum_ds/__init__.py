"""curriculum_ds: curriculum learning for LLM training on DeepSpeed.

Phase schedules of datamixes, token-weighted loss under gradient accumulation / data parallelism /
ZeRO, dynamic bucket re-weighting, and a Rust core for exact percentile bucketing and weighted
index sampling. The numeric kernels are re-exported here from the private native module.
"""

from curriculum_ds._native import __version__
from curriculum_ds.errors import (
    BucketingError,
    ConfigError,
    CurriculumError,
    DataError,
    ResumeError,
    SamplingError,
)
from curriculum_ds.kernels import (
    BucketSampler,
    RollingWindow,
    WeightedSampler,
    assign_buckets,
    bucket_edges,
    epoch_permutation,
    sample_without_replacement,
)

__all__ = [
    "BucketSampler",
    "BucketingError",
    "ConfigError",
    "CurriculumError",
    "DataError",
    "ResumeError",
    "RollingWindow",
    "SamplingError",
    "WeightedSampler",
    "__version__",
    "assign_buckets",
    "bucket_edges",
    "epoch_permutation",
    "sample_without_replacement",
]
