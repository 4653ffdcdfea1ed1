"""curriculum_ds: curriculum learning for LLM training on DeepSpeed.

Phase schedules of datamixes, token-weighted loss under gradient accumulation / data parallelism /
ZeRO, dynamic bucket re-weighting, and a Rust core for exact percentile bucketing and weighted
index sampling. The numeric kernels are re-exported here from the private native module.

The plugin API (``initialize``, ``attach``, ``deepspeed_config``, ``Curriculum``, ``Step``,
``MicroBatch``) and ``RunDir`` (a loop's bookkeeping: :mod:`curriculum_ds.run_dir`) are loaded on
first use, so that ``import curriculum_ds`` (the CLI, the kernels)
does not import torch and DeepSpeed.
"""

from typing import TYPE_CHECKING, Any

from curriculum_ds._native import __version__
from curriculum_ds.errors import (
    BucketingError,
    CheckpointError,
    ConfigError,
    CurriculumError,
    DataError,
    DownloadError,
    NonFiniteLossError,
    ResumeError,
    SamplingError,
    StepError,
    UnsafeCheckpointError,
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

if TYPE_CHECKING:
    from curriculum_ds.plugin import (
        Curriculum,
        MicroBatch,
        Step,
        attach,
        deepspeed_config,
        initialize,
    )
    from curriculum_ds.run_dir import RunDir

_PLUGIN = frozenset(
    {"Curriculum", "MicroBatch", "Step", "attach", "deepspeed_config", "initialize"}
)


def __dir__() -> list[str]:
    return sorted(__all__)


def __getattr__(name: str) -> Any:
    if name in _PLUGIN:
        from curriculum_ds import plugin

        return getattr(plugin, name)
    if name == "RunDir":
        from curriculum_ds.run_dir import RunDir

        return RunDir
    raise AttributeError(f"module 'curriculum_ds' has no attribute {name!r}")


__all__ = [
    "BucketSampler",
    "BucketingError",
    "CheckpointError",
    "ConfigError",
    "Curriculum",
    "CurriculumError",
    "DataError",
    "DownloadError",
    "MicroBatch",
    "NonFiniteLossError",
    "ResumeError",
    "RollingWindow",
    "RunDir",
    "SamplingError",
    "Step",
    "StepError",
    "UnsafeCheckpointError",
    "WeightedSampler",
    "__version__",
    "assign_buckets",
    "attach",
    "bucket_edges",
    "deepspeed_config",
    "epoch_permutation",
    "initialize",
    "sample_without_replacement",
]
