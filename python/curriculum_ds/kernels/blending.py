"""Stream blending: the stream of each slot of a global batch, by largest deficit.

Wrappers of ``rust/src/blend.rs``; see :mod:`curriculum_ds.kernels` for the conventions. Both
rules are Megatron-LM's ``build_blending_indices`` (no RNG; ties go to the lowest stream index)
in ``float64``, byte-identical to the numpy loop ``argmax(p * k - counts)`` per slot.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from numpy.typing import ArrayLike, NDArray

from curriculum_ds import _native
from curriculum_ds.kernels._args import count_arg, float64_array, int64_array, u64_arg

__all__ = ["blend_samples", "blend_tokens"]


def blend_samples(
    proportions: ArrayLike,
    counts: ArrayLike,
    start: int,
    n: int,
    *,
    base: ArrayLike | None = None,
) -> NDArray[np.int64]:
    """The streams of the next ``n`` slots, the proportions counted in samples.

    Slot ``k`` of the phase (counting from 1) goes to the stream with the largest
    ``proportions[s] * k - counts[s]``; at every prefix each stream is within one slot of its
    share.

    Args:
        proportions: float64 ``(S,)``, finite, ``>= 0``, normally summing to 1.
        counts: int64 ``(S,)``, slots each stream got among the first ``start``.
        start: slots already placed in the phase, ``>= 0``.
        n: slots to place, ``>= 0``.
        base: float64 ``(S,)``, finite, or None: each stream's target before this call (a
            moving mix, the integral of its step-wise share); slot ``k`` then goes to the largest
            ``base[s] + proportions[s] * k - counts[s]`` (pass ``start = 0``).

    Returns:
        int64 ``(n,)`` stream indices in ``[0, S)``; ``counts`` is not changed.

    Raises:
        ValueError: no stream, lengths differ, a bad proportion or ``base``, ``start``/``n`` out
            of range.
    """
    return _native.blend_samples(
        float64_array(proportions, "proportions"),
        int64_array(counts, "counts"),
        u64_arg(start, "start"),
        count_arg(n, "n"),
        None if base is None else float64_array(base, "base"),
    )


def blend_tokens(
    proportions: ArrayLike,
    tokens: ArrayLike,
    next_lengths: Sequence[ArrayLike],
    n: int,
    *,
    base: ArrayLike | None = None,
) -> NDArray[np.int64]:
    """The streams of the next ``n`` slots, the proportions counted in tokens.

    The next slot goes to the stream with the largest ``proportions[s] * T - tokens[s]`` (``T``
    the tokens placed so far over all streams) and takes that stream's next sample, whose
    ``next_lengths[s][i]`` tokens are then added. A stream is never more than one of its samples
    above its share; with two streams neither is further than one sample from it.

    Args:
        proportions: float64 ``(S,)``, finite, ``>= 0``, normally summing to 1.
        tokens: int64 ``(S,)``, tokens placed so far per stream.
        next_lengths: per stream, int64 ``(m_s,)`` tokens (``>= 0``) of its next samples, in
            order; ``m_s`` must cover every slot the stream may get (``m_s >= n`` is safe).
        n: slots to place, ``>= 0``.
        base: float64 ``(S,)``, finite, or None: each stream's target before this call (a
            moving mix, the integral of its step-wise share in tokens); the next slot then goes
            to the largest ``base[s] + proportions[s] * x - tokens[s]``, ``x`` the tokens this
            call placed so far.

    Returns:
        int64 ``(n,)`` stream indices; the ``i``-th slot of stream ``s`` is its ``i``-th next
        sample.

    Raises:
        ValueError: no stream, lengths differ, a bad proportion or ``base``, a negative length,
            or a stream running out of next samples.
    """
    arrays = [int64_array(a, f"next_lengths[{s}]") for s, a in enumerate(next_lengths)]
    offsets = np.zeros(len(arrays) + 1, dtype=np.int64)
    np.cumsum([a.size for a in arrays], out=offsets[1:])
    lengths = np.concatenate(arrays) if arrays else np.zeros(0, dtype=np.int64)
    return _native.blend_tokens(
        float64_array(proportions, "proportions"),
        int64_array(tokens, "tokens"),
        lengths,
        offsets,
        count_arg(n, "n"),
        None if base is None else float64_array(base, "base"),
    )
