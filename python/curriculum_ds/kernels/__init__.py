"""Typed wrappers over the Rust kernels: bucketing, rolling window, samplers, blending, shuffles.

The index shuffle (:class:`IndexShuffle`, :func:`stream_order`) is order version 2's.

Each wrapper normalises dtype and contiguity once (``np.ascontiguousarray``) and calls the native
module ``curriculum_ds._native``, which borrows the array without copying and runs with the GIL
released. Errors are the classes of :mod:`curriculum_ds.errors` (a
:class:`~curriculum_ds.errors.BucketingError` or :class:`~curriculum_ds.errors.SamplingError`),
``TypeError`` for a wrong dtype and ``ValueError`` for a bad argument.

Determinism: every random output is a pure function of the explicit ``seed`` and counters
(xoshiro256++ streams from ``rand_xoshiro`` 0.8.2, derived by a fixed SplitMix64 mixing; see
``rust/src/rng.rs``). No process-global RNG (``random``, ``np.random``, ``torch``) is read or
advanced, and no result depends on a thread count: inputs of 2^20 elements or more run on a
thread pool (:func:`num_threads`, from ``CURRICULUM_DS_NUM_THREADS``, else ``OMP_NUM_THREADS``,
else the CPUs this process may use) whose chunks combine exactly (``rust/src/par.rs``).
"""

from curriculum_ds import _native
from curriculum_ds.kernels.blending import blend_samples, blend_tokens
from curriculum_ds.kernels.bucketing import RollingWindow, assign_buckets, bucket_edges
from curriculum_ds.kernels.permutation import IndexShuffle, stream_order
from curriculum_ds.kernels.sampling import (
    BucketSampler,
    WeightedSampler,
    epoch_permutation,
    sample_without_replacement,
)


def num_threads() -> int:
    """The number of threads the kernels use on large inputs (at least 1)."""
    return _native.num_threads()


def set_num_threads(threads: int) -> None:
    """Use ``threads`` threads from now on; ``0``: the count from the environment again.

    Raises:
        ValueError: ``threads`` is negative.
    """
    _native.set_num_threads(int(threads))


__all__ = [
    "BucketSampler",
    "IndexShuffle",
    "RollingWindow",
    "WeightedSampler",
    "assign_buckets",
    "blend_samples",
    "blend_tokens",
    "bucket_edges",
    "epoch_permutation",
    "num_threads",
    "sample_without_replacement",
    "set_num_threads",
    "stream_order",
]
