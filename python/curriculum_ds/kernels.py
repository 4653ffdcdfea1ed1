"""Typed wrappers over the Rust kernels: exact percentile bucketing, the rolling window, samplers.

Each wrapper normalises dtype and contiguity once (``np.ascontiguousarray``) and calls the native
module ``curriculum_ds._native``, which borrows the array without copying and runs with the GIL
released. Errors are the classes of :mod:`curriculum_ds.errors` (a
:class:`~curriculum_ds.errors.BucketingError` or :class:`~curriculum_ds.errors.SamplingError`),
``TypeError`` for a wrong dtype and ``ValueError`` for a bad argument.

Determinism: every random output is a pure function of the explicit ``seed`` and counters
(xoshiro256++ streams from ``rand_xoshiro`` 0.8.2, derived by a fixed SplitMix64 mixing; see
``rust/src/rng.rs``). No process-global RNG (``random``, ``np.random``, ``torch``) is read or
advanced, and no result depends on a thread count (the kernels are single-threaded).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any, Literal

import numpy as np
from numpy.typing import ArrayLike, NDArray

from curriculum_ds import _native

__all__ = [
    "BucketSampler",
    "RollingWindow",
    "WeightedSampler",
    "assign_buckets",
    "bucket_edges",
    "epoch_permutation",
    "sample_without_replacement",
]

NanPolicy = Literal["raise", "omit"]


def _one_d(arr: np.ndarray, name: str) -> None:
    if arr.ndim != 1:
        raise ValueError(f"{name} must be 1-D, got shape {arr.shape}")


def _floats(x: ArrayLike, name: str) -> NDArray[np.float32] | NDArray[np.float64]:
    """float32/float64 stay as they are; other real numeric dtypes become float64."""
    arr = np.asarray(x)
    _one_d(arr, name)
    if arr.dtype == np.float32 or arr.dtype == np.float64:
        return np.ascontiguousarray(arr)
    if arr.dtype.kind in "biuf":
        return np.ascontiguousarray(arr, dtype=np.float64)
    raise TypeError(f"{name} must have a real numeric dtype (float32/float64), got {arr.dtype}")


def _float64(x: ArrayLike, name: str) -> NDArray[np.float64]:
    arr = np.asarray(x)
    _one_d(arr, name)
    if arr.dtype.kind not in "biuf":
        raise TypeError(f"{name} must have a real numeric dtype, got {arr.dtype}")
    return np.ascontiguousarray(arr, dtype=np.float64)


def _int64(x: ArrayLike, name: str) -> NDArray[np.int64]:
    arr = np.asarray(x)
    _one_d(arr, name)
    if arr.dtype.kind not in "iu":
        raise TypeError(f"{name} must have an integer dtype, got {arr.dtype}")
    if arr.dtype.kind == "u" and arr.size and int(arr.max()) > np.iinfo(np.int64).max:
        raise ValueError(f"{name} has values beyond the int64 range")
    return np.ascontiguousarray(arr, dtype=np.int64)


_I64_MIN, _I64_MAX = -(2**63), 2**63 - 1
_U64_MAX = 2**64 - 1


def _int(x: object, name: str) -> int:
    """An int argument the native module takes as an int64 (a length, count or index).

    A Python int beyond the int64 range is refused here with a ValueError naming the argument
    (the native conversion would raise OverflowError); the kernel checks the documented range.
    """
    if isinstance(x, bool) or not isinstance(x, (int, np.integer)):
        raise TypeError(f"{name} must be an int, got {type(x).__name__}")
    n = int(x)
    if not _I64_MIN <= n <= _I64_MAX:
        raise ValueError(f"{name} = {n} is out of range (beyond the int64 range)")
    return n


def _u64(x: object, name: str) -> int:
    """A seed or counter: an int in ``[0, 2**64)`` (ValueError naming the argument otherwise)."""
    if isinstance(x, bool) or not isinstance(x, (int, np.integer)):
        raise TypeError(f"{name} must be an int, got {type(x).__name__}")
    n = int(x)
    if not 0 <= n <= _U64_MAX:
        raise ValueError(f"{name} must be in [0, 2**64), got {n}")
    return n


def _physical_memory_bytes() -> int:
    try:
        return int(os.sysconf("SC_PHYS_PAGES")) * int(os.sysconf("SC_PAGE_SIZE"))
    except (ValueError, OSError, AttributeError):  # not POSIX: no guard beyond the kernel's own
        return 1 << 62


def _count(x: object, name: str, *, bytes_per_item: int = 8) -> int:
    """An output length: an int whose int64 result must fit in this machine's memory.

    A Rust allocation that fails aborts the process (no exception can be caught), so a length
    that cannot possibly be allocated is refused here with a ValueError instead.
    """
    n = _int(x, name)
    limit = _physical_memory_bytes()
    if n > 0 and n * bytes_per_item > limit:
        raise ValueError(
            f"{name} = {n} would need {n * bytes_per_item / 2**30:.1f} GiB, more than this "
            f"machine's {limit / 2**30:.1f} GiB of memory"
        )
    return n


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
    return _native.bucket_edges(_floats(window, "window"), _int(num_buckets, "num_buckets"))


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
    return _native.assign_buckets(_floats(values, "values"), _float64(edges, "edges"), nan_policy)


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
        self._native = _native.RollingWindow(_int(capacity, "capacity"))

    def push(self, values: ArrayLike) -> None:
        """Append values in order, evicting the oldest beyond :attr:`capacity`.

        Args:
            values: 1-D array of shape ``(K,)``, float32 or float64 (other real dtypes are
                converted to float64 first). Non-finite entries are skipped and counted.

        Raises:
            TypeError: non-numeric dtype.
            ValueError: not 1-D.
        """
        self._native.push(_floats(values, "values"))

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
        return self._native.edges(_int(num_buckets, "num_buckets"))

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
        _one_d(values, "values")
        if values.dtype.kind not in "biuf":
            raise TypeError(f"values must have a real numeric dtype, got {values.dtype}")
        self = cls.__new__(cls)
        self._native = _native.RollingWindow.from_parts(
            _int(state["capacity"], "capacity"),
            np.ascontiguousarray(values, dtype=np.float32),
            _int(state["num_non_finite"], "num_non_finite"),
        )
        return self

    def __repr__(self) -> str:
        return f"RollingWindow(capacity={self.capacity}, len={len(self)})"


class WeightedSampler:
    """Weighted sampling with replacement over ``N`` fixed weights (alias method).

    Walker/Vose alias table (Vose 1991, IEEE TSE 17(9)) with packed 8-byte entries; each draw is
    one 64-bit random word and one table lookup, ``O(1)``; the build is ``O(N)``. ``N`` may
    exceed 2^24 (up to 2^32 - 1), unlike ``torch.multinomial``.

    Counter-based determinism: draw number ``t`` (counting from 0 over the sampler's life) comes
    from the stream ``(seed, t // 1024)``, so ``sample(3)`` then ``sample(2)`` equals
    ``sample(5)`` of a fresh sampler, and :meth:`state_dict` is just ``(seed, num_draws)``.
    The counter is a ``u64`` that never wraps: draws are numbered ``0 .. 2**64 - 2``.

    Args:
        weights: 1-D array of shape ``(N,)``, finite, ``>= 0``, not all zero (float64; other
            real dtypes are converted).
        seed: int in ``[0, 2**64)``.

    Raises:
        SamplingError: a weight is negative, NaN or infinite (names the index), all are zero,
            or ``weights`` is empty.
        TypeError: non-numeric dtype.
        ValueError: not 1-D, seed out of range.
    """

    def __init__(self, weights: ArrayLike, seed: int) -> None:
        self._native = _native.WeightedSampler(_float64(weights, "weights"), _u64(seed, "seed"))

    def sample(self, k: int) -> NDArray[np.int64]:
        """The next ``k`` draws: int64 array of shape ``(k,)`` with values in ``[0, N)``.

        Advances :attr:`num_draws` by ``k``.

        Raises:
            SamplingError: ``num_draws + k`` would pass ``2**64 - 1`` (a restored state can be
                that close); the sampler is then unchanged.
            ValueError: ``k < 0``.
        """
        return self._native.sample(_count(k, "k"))

    @property
    def num_draws(self) -> int:
        """Number of draws taken so far (the counter of the next draw)."""
        return self._native.num_draws

    @property
    def seed(self) -> int:
        """The seed."""
        return self._native.seed

    def __len__(self) -> int:
        return len(self._native)

    def state_dict(self) -> dict[str, int]:
        """``{"seed": int, "num_draws": int}`` (not the weights, which the caller owns)."""
        return {"seed": self.seed, "num_draws": self.num_draws}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Continue exactly where the sampler that saved ``state`` stopped.

        The sampler must have been built from the same weights.

        Raises:
            ValueError: a key is missing or a value is out of range; the sampler is then
                unchanged.
            TypeError: a value is not an int.
        """
        for key in ("seed", "num_draws"):
            if key not in state:
                raise ValueError(f"WeightedSampler state is missing the key {key!r}")
        # both values are checked before either is assigned: a refused state changes nothing
        seed = _u64(state["seed"], "seed")
        num_draws = _u64(state["num_draws"], "num_draws")
        self._native.seed = seed
        self._native.num_draws = num_draws

    def __repr__(self) -> str:
        return f"WeightedSampler(n={len(self)}, seed={self.seed}, num_draws={self.num_draws})"


def sample_without_replacement(weights: ArrayLike, k: int, seed: int) -> NDArray[np.int64]:
    """``k`` distinct indices, drawn with probabilities proportional to ``weights``.

    Efraimidis & Spirakis (2006, IPL 97(5)): key ``E_i / w_i`` with ``E_i ~ Exp(1)``, keep the
    ``k`` smallest keys (equivalent in distribution to ``k`` successive weighted draws without
    replacement). ``O(N)`` with a linear-time selection.

    Args:
        weights: 1-D array of shape ``(N,)``, finite and ``>= 0`` (float64; other real dtypes
            are converted). Zero weights are never drawn.
        k: number of indices, ``0 <= k <=`` number of positive weights.
        seed: int in ``[0, 2**64)``.

    Returns:
        int64 array of shape ``(k,)``, distinct indices **in ascending index order** (a subset;
        permute it, e.g. with :func:`epoch_permutation`, if an order is needed).

    Raises:
        SamplingError: a weight is negative, NaN or infinite; ``k`` exceeds the number of
            positive weights.
        ValueError: ``k < 0``; not 1-D. TypeError: non-numeric dtype.

    Deterministic in ``(weights, k, seed)``: Exp(1) comes from a ziggurat with fixed tables;
    only its rare (~1%) rejection and tail steps call ``exp``/``ln``, so another libm could, in
    principle, change a selection (never observed; the golden test pins seed 1234).
    """
    return _native.sample_without_replacement(
        _float64(weights, "weights"), _count(k, "k"), _u64(seed, "seed")
    )


def epoch_permutation(n: int, seed: int, epoch: int) -> NDArray[np.int64]:
    """A uniformly random permutation of ``0 .. n-1`` from ``(seed, epoch)``.

    Fisher–Yates (Durstenfeld) with Lemire's unbiased bounded integers; every rank computing it
    with the same ``(seed, epoch)`` gets the same order (mosaicml-streaming style).

    Args:
        n: length, ``>= 0``.
        seed: int in ``[0, 2**64)``.
        epoch: int in ``[0, 2**64)``.

    Returns:
        int64 array of shape ``(n,)``.

    Raises:
        ValueError: ``n < 0`` or seed/epoch out of range.
    """
    return _native.epoch_permutation(_count(n, "n"), _u64(seed, "seed"), _u64(epoch, "epoch"))


class BucketSampler:
    """Pick a bucket by weight, then the next index of that bucket's own per-epoch permutation.

    The DeepSpeed data-sampler scheme (shuffle each difficulty cluster, pick clusters by weight,
    consume sequentially, reshuffle an exhausted cluster) made online and exactly resumable.
    Bucket ``b``'s permutation in its epoch ``e`` is the Fisher–Yates shuffle of its members in
    index order, seeded from ``(seed, generation, b, e)``; it is built lazily, one swap per draw,
    so a call costs ``O(k)``; the only ``O(bucket size)`` work is a copy when a bucket starts a
    new epoch, once per bucket-size draws from it (amortised ``O(1)`` per draw). The bucket of
    each draw of call ``c`` comes from the stream ``(seed, generation, c)``. With
    ``num_buckets=1`` this is a plain epoch-by-epoch shuffle: every non-excluded sample exactly
    once per epoch.

    Args:
        bucket_idx: int64 array of shape ``(N,)`` with values in ``[0, num_buckets)``, or ``-1``
            to exclude a sample (e.g. :func:`assign_buckets` with ``nan_policy="omit"``).
            ``N`` may exceed 2^24 (up to 2^32 - 1) and is fixed for the sampler's life
            (``len(sampler)``): :meth:`set_buckets` re-buckets the same ``N`` samples.
        num_buckets: ``B`` in ``[1, 65536]``.
        seed: int in ``[0, 2**64)``.

    Raises:
        SamplingError: an entry of ``bucket_idx`` is out of range (names the index).
        ValueError: ``num_buckets`` out of range; not 1-D.
        TypeError: ``bucket_idx`` not of an integer dtype.
    """

    def __init__(self, bucket_idx: ArrayLike, num_buckets: int, seed: int) -> None:
        self._native = _native.BucketSampler(
            _int64(bucket_idx, "bucket_idx"), _int(num_buckets, "num_buckets"), _u64(seed, "seed")
        )

    def sample(self, probs: ArrayLike, k: int) -> NDArray[np.int64]:
        """Draw ``k`` sample indices.

        Args:
            probs: float64 array of shape ``(num_buckets,)``, finite, ``>= 0`` (need not sum to
                1). Mass on empty buckets is renormalised away.
            k: number of indices, ``>= 0``.

        Returns:
            int64 array of shape ``(k,)`` with indices into ``bucket_idx`` (never an excluded
            one). Within a bucket and epoch no index repeats.

        Raises:
            SamplingError: a probability is negative, NaN or infinite, or all mass is on empty
                buckets; a restored ``num_calls`` of ``2**64 - 1`` (no further call can be
                numbered). The sampler is then unchanged.
            ValueError: wrong length of ``probs``; ``k < 0``.
        """
        return self._native.sample(_float64(probs, "probs"), _count(k, "k"))

    def set_buckets(self, bucket_idx: ArrayLike) -> None:
        """Re-bucket the same ``N`` samples: ``generation += 1``, cursors and epochs reset to 0.

        Args:
            bucket_idx: int64 array of shape ``(N,)``, ``N = len(self)``, entries as for the
                constructor.

        Raises:
            SamplingError: the length is not ``N`` (names both lengths), an entry is out of
                range (names its index), or ``generation`` is ``2**64 - 1``; the sampler is then
                unchanged.
            ValueError: not 1-D. TypeError: not of an integer dtype.
        """
        self._native.set_buckets(_int64(bucket_idx, "bucket_idx"))

    def __len__(self) -> int:
        """``N``, the number of samples of the bucket assignment (excluded ones included)."""
        return len(self._native)

    def counts(self) -> NDArray[np.int64]:
        """Members per bucket, int64 array of shape ``(num_buckets,)``."""
        return self._native.counts()

    @property
    def num_buckets(self) -> int:
        """Number of buckets."""
        return self._native.num_buckets

    def state_dict(self) -> dict[str, Any]:
        """Counters only: ``{seed, num_calls, generation, cursors, epochs}``.

        ``cursors`` and ``epochs`` are int64 arrays of shape ``(num_buckets,)``. The bucket
        assignment itself is not included: rebuild the sampler with the same ``bucket_idx``.
        """
        seed, num_calls, generation, cursors, epochs = self._native.state()
        return {
            "seed": seed,
            "num_calls": num_calls,
            "generation": generation,
            "cursors": cursors,
            "epochs": epochs,
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore counters saved by :meth:`state_dict`; the continuation is then identical.

        The sampler must hold the same bucket assignment as the one that saved ``state``.
        Replays each bucket's current epoch up to its cursor (``O(sum of cursors)``).

        Raises:
            ValueError: a key is missing, lengths differ from ``num_buckets``, a cursor exceeds
                its bucket's size or a counter is out of range; the sampler is then unchanged.
        """
        for key in ("seed", "num_calls", "generation", "cursors", "epochs"):
            if key not in state:
                raise ValueError(f"BucketSampler state is missing the key {key!r}")
        # every value is converted and checked here, then handed over in one native call that
        # validates against the bucket assignment before it assigns: a refused state changes
        # nothing
        self._native.load_state(
            _u64(state["seed"], "seed"),
            _u64(state["num_calls"], "num_calls"),
            _u64(state["generation"], "generation"),
            _int64(state["cursors"], "cursors"),
            _int64(state["epochs"], "epochs"),
        )

    def __repr__(self) -> str:
        return f"BucketSampler(num_buckets={self.num_buckets}, counts={self.counts().tolist()})"
