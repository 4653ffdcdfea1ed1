"""Weighted index sampling: alias tables, without replacement, epoch permutations, buckets.

``WeightedSampler`` (alias-table draws), ``sample_without_replacement`` (Efraimidis–Spirakis),
``epoch_permutation`` and the per-bucket ``BucketSampler``.

Wrappers of ``rust/src/sampling.rs``; see :mod:`curriculum_ds.kernels` for the conventions.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from curriculum_ds import _native
from curriculum_ds.kernels._args import count_arg, float64_array, int64_array, int_arg, u64_arg

__all__ = ["BucketSampler", "WeightedSampler", "epoch_permutation", "sample_without_replacement"]


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
        self._native = _native.WeightedSampler(
            float64_array(weights, "weights"), u64_arg(seed, "seed")
        )

    def sample(self, k: int) -> NDArray[np.int64]:
        """The next ``k`` draws: int64 array of shape ``(k,)`` with values in ``[0, N)``.

        Advances :attr:`num_draws` by ``k``.

        Raises:
            SamplingError: ``num_draws + k`` would pass ``2**64 - 1`` (a restored state can be
                that close); the sampler is then unchanged.
            ValueError: ``k < 0``.
        """
        return self._native.sample(count_arg(k, "k"))

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
        seed = u64_arg(state["seed"], "seed")
        num_draws = u64_arg(state["num_draws"], "num_draws")
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
        float64_array(weights, "weights"), count_arg(k, "k"), u64_arg(seed, "seed")
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
    return _native.epoch_permutation(
        count_arg(n, "n"), u64_arg(seed, "seed"), u64_arg(epoch, "epoch")
    )


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
            int64_array(bucket_idx, "bucket_idx"),
            int_arg(num_buckets, "num_buckets"),
            u64_arg(seed, "seed"),
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
        return self._native.sample(float64_array(probs, "probs"), count_arg(k, "k"))

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
        self._native.set_buckets(int64_array(bucket_idx, "bucket_idx"))

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
            u64_arg(state["seed"], "seed"),
            u64_arg(state["num_calls"], "num_calls"),
            u64_arg(state["generation"], "generation"),
            int64_array(state["cursors"], "cursors"),
            int64_array(state["epochs"], "epochs"),
        )

    def __repr__(self) -> str:
        return f"BucketSampler(num_buckets={self.num_buckets}, counts={self.counts().tolist()})"
