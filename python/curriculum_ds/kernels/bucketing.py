"""Exact percentile bucketing: ``bucket_edges``, ``assign_buckets`` and the ``RollingWindow``.

Wrappers of ``rust/src/bucketing.rs`` and ``rust/src/window.rs``; see :mod:`curriculum_ds.kernels`
for the conventions (no copies, GIL released, typed errors).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from curriculum_ds import _native
from curriculum_ds.kernels._args import NanPolicy, float64_array, floats_array, int_arg, one_d

__all__ = ["RollingWindow", "assign_buckets", "bucket_edges"]


def bucket_edges(window: ArrayLike, num_buckets: int) -> NDArray[np.float64]:
    """Exact percentile-bucket edges: order statistics of the finite values of ``window``.

    With ``s`` the sorted finite values of ``window`` (length ``N``) and ``B = num_buckets``,
    edge ``j`` (``j = 1 .. B-1``) is ``s[ceil(j * N / B) - 1]``. Then
    ``assign_buckets(v, edges)`` equals ``min(B - 1, floor(rank(v) * B))`` with
    ``rank(v) = #{x in window : x <= v} / N`` exactly. These are order statistics, not the
    interpolated quantiles of ``np.quantile``.

    Algorithm: two-pass radix select, ``O(N)``: a 2^16-bin histogram of order-preserving keys
    locates the bin of each target rank; a second pass gathers the keys of just those bins
    (AVX-512 compress when available), and a selection inside each bin finishes.

    Args:
        window: 1-D array of shape ``(N,)``, float32 or float64 (other real dtypes are
            converted to float64). NaN and ±inf are left out; ``-0.0`` counts as ``+0.0``.
        num_buckets: ``B``, in ``[1, 65536]``.

    Returns:
        float64 array of shape ``(B - 1,)``, non-decreasing; empty for ``B = 1``. Values are
        elements of ``window`` widened exactly to float64 (``-0.0`` returned as ``+0.0``).

    Raises:
        BucketingError: ``window`` has no finite value.
        ValueError: ``num_buckets`` outside ``[1, 65536]``; ``window`` not 1-D.
        TypeError: non-numeric dtype.

    Deterministic; no randomness.
    """
    return _native.bucket_edges(floats_array(window, "window"), int_arg(num_buckets, "num_buckets"))


def assign_buckets(
    values: ArrayLike, edges: ArrayLike, *, nan_policy: NanPolicy = "raise"
) -> NDArray[np.int64]:
    """Bucket index of each value: the number of ``edges`` that are ``<= value``.

    Equals ``np.searchsorted(edges, values, side="right")``; with edges from
    :func:`bucket_edges` of a window it is the exact full-rank bucket
    ``min(B - 1, floor(rank(v) * B))`` (ties, duplicate edges and ``-0.0``/``+0.0`` included;
    ``±inf`` go to the first/last bucket). Algorithm: float32 values with up to 31 edges on an
    AVX-512 CPU use a branchless binary search with the edges held in vector registers (16
    values per step); otherwise a vectorised compare-count up to 32 edges, a binary search
    beyond. Every path gives the same result.

    Args:
        values: 1-D array of shape ``(M,)``, float32 or float64 (other real dtypes become
            float64).
        edges: 1-D non-decreasing array of shape ``(B - 1,)`` without NaN (float64).
        nan_policy: ``"raise"`` refuses a NaN value with :class:`BucketingError` naming its
            index; ``"omit"`` assigns it ``-1``.

    Returns:
        int64 array of shape ``(M,)`` with values in ``[0, B - 1]`` (or ``-1`` for NaN under
        ``"omit"``).

    Raises:
        BucketingError: a value is NaN and ``nan_policy="raise"``.
        ValueError: ``edges`` decreasing somewhere or NaN; unknown ``nan_policy``; not 1-D.
        TypeError: non-numeric dtype.

    Deterministic; no randomness.
    """
    if nan_policy not in ("raise", "omit"):
        raise ValueError(f'nan_policy must be "raise" or "omit", got {nan_policy!r}')
    return _native.assign_buckets(
        floats_array(values, "values"), float64_array(edges, "edges"), nan_policy
    )


class RollingWindow:
    """The last ``capacity`` finite values (e.g. per-sample losses), with exact edges on demand.

    A float32 ring buffer plus an exactly maintained 2^16-bin histogram of order-preserving
    keys: a push costs a few ns per value (evict + insert, no sort), and :meth:`edges` needs one
    pass over the window (radix select) instead of a sort.

    Values are stored as float32 (float64 input is rounded to nearest); ``-0.0`` is stored as
    ``+0.0``. Non-finite values (NaN, ±inf, and float64 values beyond the float32 range) are
    skipped and counted in :attr:`num_non_finite`.

    Args:
        capacity: maximum number of values kept, in ``[1, 10_000_000]``.

    Raises:
        ValueError: ``capacity`` out of range.
    """

    def __init__(self, capacity: int) -> None:
        self._native = _native.RollingWindow(int_arg(capacity, "capacity"))

    def push(self, values: ArrayLike) -> None:
        """Append values in order, evicting the oldest beyond :attr:`capacity`.

        Args:
            values: 1-D array of shape ``(K,)``, float32 or float64 (other real dtypes are
                converted to float64 first). Non-finite entries are skipped and counted.

        Raises:
            TypeError: non-numeric dtype.
            ValueError: not 1-D.
        """
        self._native.push(floats_array(values, "values"))

    def edges(self, num_buckets: int) -> NDArray[np.float64]:
        """Exact edges of the current contents; same definition as :func:`bucket_edges`.

        Args:
            num_buckets: ``B`` in ``[1, 65536]``.

        Returns:
            float64 array of shape ``(B - 1,)``, non-decreasing.

        Raises:
            BucketingError: the window is empty.
            ValueError: ``num_buckets`` out of range.
        """
        return self._native.edges(int_arg(num_buckets, "num_buckets"))

    def values(self) -> NDArray[np.float32]:
        """A float32 copy of the contents, shape ``(len(self),)``, oldest first."""
        return self._native.values()

    def __len__(self) -> int:
        return len(self._native)

    @property
    def capacity(self) -> int:
        """Maximum number of values kept."""
        return self._native.capacity

    @property
    def num_non_finite(self) -> int:
        """Number of non-finite values skipped by :meth:`push` (restored by state dicts)."""
        return self._native.num_non_finite

    def state_dict(self) -> dict[str, Any]:
        """Checkpointable state: plain ints and a numpy array.

        Returns:
            ``{"capacity": int, "values": float32 array (oldest first), "num_non_finite": int}``.
        """
        return {
            "capacity": self.capacity,
            "values": self.values(),
            "num_non_finite": self.num_non_finite,
        }

    @classmethod
    def from_state_dict(cls, state: Mapping[str, Any]) -> RollingWindow:
        """Rebuild a window saved by :meth:`state_dict` (same contents, order and edges).

        Raises:
            ValueError: a key is missing, ``values`` is longer than ``capacity`` or holds a
                non-finite value.
            TypeError: ``values`` has a non-numeric dtype.
        """
        for key in ("capacity", "values", "num_non_finite"):
            if key not in state:
                raise ValueError(f"RollingWindow state is missing the key {key!r}")
        values = np.asarray(state["values"])
        one_d(values, "values")
        if values.dtype.kind not in "biuf":
            raise TypeError(f"values must have a real numeric dtype, got {values.dtype}")
        self = cls.__new__(cls)
        self._native = _native.RollingWindow.from_parts(
            int_arg(state["capacity"], "capacity"),
            np.ascontiguousarray(values, dtype=np.float32),
            int_arg(state["num_non_finite"], "num_non_finite"),
        )
        return self

    def __repr__(self) -> str:
        return f"RollingWindow(capacity={self.capacity}, len={len(self)})"
