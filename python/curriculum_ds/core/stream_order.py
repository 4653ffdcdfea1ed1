"""Each stream's order of samples within a phase, in the run's order version.

A phase loader draws the next samples of a stream from one of two orders, chosen once per run
(``curriculum.order_version``) and kept by its checkpoints:

* **version 1** (:class:`BucketOrder`): a :class:`~curriculum_ds.kernels.BucketSampler` per
  stream, a Fisher–Yates shuffle per epoch (per bucket with dynamic re-weighting over buckets)
  built from an int64 bucket of every sample: memory O(samples) per rank, at most 2^32 - 1 samples
  per stream. Its state is each sampler's counters.
* **version 2** (:class:`PermutedOrder`): draw ``c`` of stream ``s`` is position ``c mod n_s`` of
  the :class:`~curriculum_ds.kernels.IndexShuffle` of epoch ``c // n_s``, computed per index and
  never materialised: memory O(streams), 64-bit indices. Its state is one cursor per stream (the
  draws so far), so the order is a pure function of (seed, phase, counters). No buckets: the
  bucket unit stays on version 1.

Both hand out the samples of a run of slots (:meth:`take`) or a stream's next ``k`` (:meth:`next`)
and save/restore their counters as one plain dict per stream.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from curriculum_ds.kernels import BucketSampler, stream_order

__all__ = [
    "ORDER_VERSIONS",
    "BucketOrder",
    "PermutedOrder",
    "StreamOrder",
    "derive_seed",
    "make_order",
]

ORDER_VERSIONS = (1, 2)
"""The order versions this curriculum_ds draws (``curriculum.order_version``)."""

Ints = npt.NDArray[np.int64]


class BucketOrder:
    """Order version 1: a :class:`~curriculum_ds.kernels.BucketSampler` per stream.

    Args:
        sizes: each stream's number of samples.
        num_buckets: buckets of every sampler (1 without re-weighting over buckets).
        seeds: each stream's seed.
    """

    version = 1

    def __init__(self, sizes: Sequence[int], num_buckets: int, seeds: Sequence[int]) -> None:
        self.samplers = [
            BucketSampler(np.zeros(n, dtype=np.int64), num_buckets, seed)
            for n, seed in zip(sizes, seeds, strict=True)
        ]

    def take(self, stream_of_slot: Ints, probs: npt.NDArray[np.float64]) -> Ints:
        """The sample of each slot, each stream's in the order of its slots."""
        out = np.empty(len(stream_of_slot), dtype=np.int64)
        for stream, sampler in enumerate(self.samplers):
            slots = np.flatnonzero(stream_of_slot == stream)
            if len(slots):
                out[slots] = sampler.sample(probs, len(slots))
        return out

    def next(self, stream: int, k: int, probs: npt.NDArray[np.float64]) -> Ints:
        """Stream ``stream``'s next ``k`` samples."""
        return self.samplers[stream].sample(probs, k)

    def set_buckets(self, buckets: Sequence[Ints]) -> None:
        """Each stream's new bucket assignment (``BucketSampler.set_buckets``)."""
        for sampler, b in zip(self.samplers, buckets, strict=True):
            sampler.set_buckets(b)

    def state(self) -> tuple[dict[str, Any], ...]:
        """Each sampler's counters, plain ints and lists."""
        return tuple(
            {k: v.tolist() if isinstance(v, np.ndarray) else v for k, v in s.state_dict().items()}
            for s in self.samplers
        )

    def restore(self, saved: Sequence[dict[str, Any]]) -> None:
        """Each sampler's counters back (``BucketSampler.load_state_dict``)."""
        for sampler, state in zip(self.samplers, saved, strict=True):
            sampler.load_state_dict(
                {k: np.asarray(v) if isinstance(v, list) else v for k, v in state.items()}
            )


class PermutedOrder:
    """Order version 2: each stream's epochs of :class:`~curriculum_ds.kernels.IndexShuffle`.

    Args:
        sizes: each stream's number of samples (any up to 2^63 - 1).
        seeds: each stream's seed (in [0, 2^63)).

    Memory: three int64 per stream, whatever the sizes.
    """

    version = 2

    def __init__(self, sizes: Sequence[int], seeds: Sequence[int]) -> None:
        self.sizes = np.array(sizes, dtype=np.int64)
        self.seeds = np.array(seeds, dtype=np.int64)
        self.cursors = np.zeros(len(self.sizes), dtype=np.int64)

    def take(self, stream_of_slot: Ints, probs: npt.NDArray[np.float64] | None = None) -> Ints:
        """The sample of each slot; each stream's cursor advances by its slots."""
        out = stream_order(stream_of_slot, self.cursors, self.sizes, self.seeds)
        self.cursors += np.bincount(stream_of_slot, minlength=len(self.sizes))
        return out

    def next(self, stream: int, k: int, probs: npt.NDArray[np.float64] | None = None) -> Ints:
        """Stream ``stream``'s next ``k`` samples."""
        return self.take(np.full(k, stream, dtype=np.int64))

    def set_buckets(self, buckets: Sequence[Ints]) -> None:
        """Refused: version 2 has no buckets (a bucket-unit run keeps version 1)."""
        raise ValueError("order version 2 has no buckets (the bucket unit draws in version 1)")

    def state(self) -> tuple[dict[str, Any], ...]:
        """``{"cursor": draws so far}`` per stream."""
        return tuple({"cursor": int(c)} for c in self.cursors)

    def restore(self, saved: Sequence[dict[str, Any]]) -> None:
        """The cursors back.

        Raises:
            ValueError: a stream's state is not ``{"cursor": int >= 0}``; nothing changes.
        """
        cursors = []
        for stream, state in enumerate(saved):
            cursor = state.get("cursor") if isinstance(state, dict) else None
            if set(state) != {"cursor"} or not isinstance(cursor, int) or cursor < 0:
                raise ValueError(
                    f"order version 2 state of stream {stream} is not {{'cursor': int >= 0}}: "
                    f"{state!r}"
                )
            cursors.append(cursor)
        self.cursors = np.array(cursors, dtype=np.int64)


StreamOrder = BucketOrder | PermutedOrder


def derive_seed(*parts: int) -> int:
    """Mix integers into one 63-bit seed (blake2b; stable across Python versions and platforms)."""
    digest = hashlib.blake2b(
        b"".join(int(p).to_bytes(16, "little", signed=True) for p in parts), digest_size=8
    ).digest()
    return int.from_bytes(digest, "little") >> 1


def make_order(
    version: int | None, sizes: Sequence[int], num_buckets: int, *, seed: int, phase_idx: int
) -> StreamOrder:
    """The streams' order in ``version`` (None: 2, or 1 with buckets) for a phase of a run.

    Stream ``s``'s seed is ``derive_seed(seed, phase_idx, s)`` in either version.

    Raises:
        ValueError: version 2 with more than one bucket, or an unknown version.
    """
    version = version or (1 if num_buckets > 1 else 2)
    seeds = [derive_seed(seed, phase_idx, s) for s in range(len(sizes))]
    if version == 1:
        return BucketOrder(sizes, num_buckets, seeds)
    if version == 2 and num_buckets == 1:
        return PermutedOrder(sizes, seeds)
    raise ValueError(f"order version {version} with {num_buckets} bucket(s) is not drawable")
