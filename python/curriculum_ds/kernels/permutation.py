"""Order version 2: a keyed bijection over ``[0, n)`` and the streams' orders it gives.

:class:`IndexShuffle` is the bijection of one stream's epoch (a Feistel network with
cycle-walking, computed per index: O(1) memory for any ``n < 2**64``); :func:`stream_order` the
samples of a run of slots, each stream walking its own epochs of them from a cursor.

Wrappers of ``rust/src/permutation.rs``; see :mod:`curriculum_ds.kernels` for the conventions.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike, NDArray

from curriculum_ds import _native
from curriculum_ds.kernels._args import count_arg, int64_array, u64_arg

__all__ = ["IndexShuffle", "stream_order"]


class IndexShuffle:
    """The bijection of ``[0, n)`` keyed by ``(seed, stream, epoch)``; every index a ``u64``.

    Position ``i`` maps to :meth:`permute` ``(i)``; :meth:`inverse` undoes it. Nothing is stored
    but ``n`` and six round keys, whatever ``n`` (up to ``2**64 - 1``).

    Args:
        n: the domain's size, in ``[0, 2**64)``.
        seed, stream, epoch: ints in ``[0, 2**64)``, the key.

    Raises:
        ValueError: an argument out of range. TypeError: not an int.
    """

    def __init__(self, n: int, seed: int, stream: int, epoch: int) -> None:
        self._native = _native.IndexShuffle(
            u64_arg(n, "n"),
            u64_arg(seed, "seed"),
            u64_arg(stream, "stream"),
            u64_arg(epoch, "epoch"),
        )

    def permute(self, i: int) -> int:
        """The image of position ``i`` in ``[0, n)``. Raises ValueError if ``i >= n``."""
        return self._native.permute(u64_arg(i, "i"))

    def inverse(self, j: int) -> int:
        """The position whose image is ``j``. Raises ValueError if ``j >= n``."""
        return self._native.inverse(u64_arg(j, "j"))

    def permute_range(self, start: int, count: int) -> NDArray[np.int64]:
        """The images of positions ``start .. start + count - 1``, int64 ``(count,)``.

        Raises:
            ValueError: the positions pass ``n``, or ``n`` passes ``2**63`` (int64 output).
        """
        return self._native.permute_range(u64_arg(start, "start"), count_arg(count, "count"))

    def __len__(self) -> int:
        return len(self._native)


def stream_order(
    streams: ArrayLike, cursors: ArrayLike, sizes: ArrayLike, seeds: ArrayLike
) -> NDArray[np.int64]:
    """The sample of each slot, every stream walking its epochs of :class:`IndexShuffle`.

    Slot ``t`` is draw number ``c`` of stream ``s = streams[t]`` (``cursors[s]`` draws before
    the call, then this call's earlier slots of ``s``); its sample is
    ``IndexShuffle(sizes[s], seeds[s], s, c // sizes[s]).permute(c % sizes[s])``.

    Args:
        streams: int64 ``(k,)`` stream of each slot.
        cursors: int64 ``(S,)``, ``>= 0``: draws of each stream before this call (not changed).
        sizes: int64 ``(S,)``, ``>= 0``: each stream's samples.
        seeds: int64 ``(S,)``, ``>= 0``: each stream's seed.

    Returns:
        int64 ``(k,)`` sample indices, each in ``[0, sizes[streams[t]])``.

    Raises:
        ValueError: lengths differ, a negative entry, a stream out of range or with no sample.
    """
    return _native.stream_order(
        int64_array(streams, "streams"),
        int64_array(cursors, "cursors"),
        int64_array(sizes, "sizes"),
        int64_array(seeds, "seeds"),
    )
