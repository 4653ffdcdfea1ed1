"""The curriculum_ds exception hierarchy.

Every error the package raises on purpose derives from :class:`CurriculumError`, so a caller can
catch them all at once; the CLI turns one into a single clean line and exit code 1. The Rust
extension raises the classes below (it imports them from this module, polars-style), so a kernel
error is an ordinary, picklable Python exception, never a ``PanicException``.
"""

from __future__ import annotations

__all__ = [
    "BucketingError",
    "CheckpointError",
    "ConfigError",
    "CurriculumError",
    "DataError",
    "DownloadError",
    "NonFiniteLossError",
    "ResumeError",
    "SamplingError",
    "StepError",
    "UnsafeCheckpointError",
]


class CurriculumError(Exception):
    """Base class of every error curriculum_ds raises on purpose."""


class BucketingError(CurriculumError):
    """Percentile bucketing failed: empty window, NaN value, bad number of buckets."""


class SamplingError(CurriculumError):
    """A sampler was given bad weights (negative, NaN, all zero) or a bad size."""


class ConfigError(CurriculumError):
    """The ``curriculum`` section (or the ds_config around it) is invalid.

    The message has one line per problem (at most 20, then a count of the rest), each starting
    with the JSON path of the offending field, e.g. ``curriculum.schedule[1] ("mix").duration:
    ...`` or ``zero_optimization.stage: ...``.
    """


class ResumeError(CurriculumError):
    """A checkpoint cannot be resumed under the current schedule (names the phase and field)."""


class UnsafeCheckpointError(ResumeError):
    """A checkpoint file needs a pickle global outside the allow-list: reading it could run code.

    Names the file and the global (:mod:`curriculum_ds.checkpoint.safe_load`); nothing has
    unpickled the file, and DeepSpeed never opens it.
    """


class CheckpointError(CurriculumError):
    """DeepSpeed could not write a checkpoint (names the tag folder; ``latest`` did not move)."""


class DataError(CurriculumError):
    """Input data is missing, unreadable or malformed (names the file and the problem)."""


class DownloadError(DataError):
    """A sample could not be read during training: its shard failed to download (or to verify).

    Or its shard file changed on disk while the run was reading it (truncated or rewritten in
    place). Unlike the other errors, a verdict of one rank only (each rank reads its own
    samples); names the stream, its remote and the cause.
    """


class StepError(CurriculumError):
    """A training loop used a step out of order.

    ``finish()`` before every micro-batch went backward, a micro-batch sent backward twice, a step
    drawn before the previous one finished, a checkpoint taken mid-step, or iteration past the end
    of the schedule.
    """


class NonFiniteLossError(CurriculumError):
    """Too many optimizer steps in a row had a NaN/inf loss (``max_consecutive_nonfinite``).

    None of those steps updated the model; the last checkpoint written stays ``latest``.
    """
