"""A saved phase loader state, checked and parsed before the loader takes any of it.

:meth:`PhaseLoader.load_state_dict <curriculum_ds.core.loader.PhaseLoader.load_state_dict>` calls
:func:`parse_loader_state`, which reads every counter of a ``PhaseLoader.state_dict`` and checks
it against the phase (its number of streams, their sizes, its ``proportion_unit``, whether its mix
moves) and hands back a :class:`LoaderCounters`; nothing of the loader changes unless all of it
fits. Pure.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

__all__ = ["LoaderCounters", "parse_loader_state"]


@dataclass(frozen=True, kw_only=True)
class LoaderCounters:
    """The counters of a saved loader state, checked against the phase.

    Attributes:
        num_samples: samples drawn in the phase (global), ≥ 0.
        stream_counts: int64 ``(num_streams,)`` slots per stream, summing to ``num_samples``.
        placed_tokens: int64 ``(num_streams,)`` tokens placed per stream (zeros for "samples").
        pending: per stream, int64 sample indices drawn but not placed (empty for "samples").
        targets: float64 ``(num_streams,)`` the integral of the moving target (zeros when the
            mix neither moves nor follows stream weights).
        stream_weights: float64 ``(num_streams,)`` the proportions set by re-weighting over
            streams, or None.
        samplers: per stream, the sampler's saved state (checked by the sampler's kernel).
        hold: a temporary mixture in progress: (draws left under it, the stream weights after
            it or None for the phase's ramp), or None.
    """

    num_samples: int
    stream_counts: npt.NDArray[np.int64]
    placed_tokens: npt.NDArray[np.int64]
    pending: list[npt.NDArray[np.int64]]
    targets: npt.NDArray[np.float64]
    stream_weights: npt.NDArray[np.float64] | None
    samplers: list[dict[str, Any]]
    hold: tuple[int, npt.NDArray[np.float64] | None] | None = None


def parse_loader_state(
    state: dict[str, Any], *, proportion_unit: str, moving_mix: bool, stream_sizes: Sequence[int]
) -> LoaderCounters:
    """Check a ``PhaseLoader.state_dict`` against the phase and parse its counters.

    A state without ``proportion_unit`` (all checkpoints before it existed) is a ``"samples"``
    one.

    Args:
        state: the saved state.
        proportion_unit: the phase's ``"samples"`` or ``"tokens"``.
        moving_mix: whether a proportion of the phase is a ramp (``targets`` is then required).
        stream_sizes: each stream's number of samples.

    Raises:
        ValueError: the counters do not fit this phase's streams (their number, or a count that
            is negative or does not add up to the samples drawn, a pending sample out of range,
            a stream weight not > 0) or its ``proportion_unit`` is not this phase's.
        KeyError: a key is missing.
    """
    saved_unit = state.get("proportion_unit", "samples")
    if saved_unit != proportion_unit:
        raise ValueError(
            f"loader state counts its proportions in {saved_unit!r}, this phase in "
            f"{proportion_unit!r}"
        )
    num_streams = len(stream_sizes)
    placed_tokens, pending = _token_state(state, proportion_unit, stream_sizes)
    targets = np.zeros(num_streams, dtype=np.float64)
    weights = state.get("stream_weights")
    if weights is not None:
        weights = np.asarray(weights, dtype=np.float64)
        if weights.shape != (num_streams,) or not (weights > 0).all():
            raise ValueError(
                f"loader state stream weights {weights.tolist()} do not fit a phase of "
                f"{num_streams} stream(s)"
            )
    if moving_mix or weights is not None:
        targets = np.asarray(state["targets"], dtype=np.float64)
        if targets.shape != (num_streams,) or not np.isfinite(targets).all():
            raise ValueError(
                f"loader state targets {targets.tolist()} do not fit a phase of "
                f"{num_streams} stream(s)"
            )
    num_samples = int(state["num_samples"])
    stream_counts = np.asarray(state["stream_counts"], dtype=np.int64)
    samplers = list(state["samplers"])
    if stream_counts.shape != (num_streams,) or len(samplers) != num_streams:
        raise ValueError(
            f"loader state has {stream_counts.size} stream counts and {len(samplers)} sampler "
            f"states for a phase of {num_streams} stream(s)"
        )
    if num_samples < 0 or (stream_counts < 0).any() or stream_counts.sum() != num_samples:
        raise ValueError(
            f"loader state counts {stream_counts.tolist()} do not add up to its "
            f"{num_samples} samples drawn"
        )
    return LoaderCounters(
        hold=_hold(state.get("hold"), num_streams),
        num_samples=num_samples,
        stream_counts=stream_counts,
        placed_tokens=placed_tokens,
        pending=pending,
        targets=targets,
        stream_weights=weights,
        samplers=samplers,
    )


def _hold(
    hold: dict[str, Any] | None, num_streams: int
) -> tuple[int, npt.NDArray[np.float64] | None] | None:
    """A saved temporary mixture, checked: ``(draws left ≥ 0, weights after it or None)``."""
    if hold is None:
        return None
    steps, after = int(hold["steps"]), hold.get("weights")
    weights = None if after is None else np.asarray(after, dtype=np.float64)
    if steps < 0 or (
        weights is not None and (weights.shape != (num_streams,) or not (weights > 0).all())
    ):
        raise ValueError(
            f"loader state hold {hold} does not fit a phase of {num_streams} stream(s)"
        )
    return steps, weights


def _token_state(
    state: dict[str, Any], proportion_unit: str, stream_sizes: Sequence[int]
) -> tuple[npt.NDArray[np.int64], list[npt.NDArray[np.int64]]]:
    """``stream_tokens`` and ``pending`` of a saved state, checked (zeros for "samples")."""
    num_streams = len(stream_sizes)
    if proportion_unit != "tokens":
        return np.zeros(num_streams, dtype=np.int64), [
            np.zeros(0, dtype=np.int64) for _ in stream_sizes
        ]
    stream_tokens = np.asarray(state["stream_tokens"], dtype=np.int64)
    pending = [np.asarray(p, dtype=np.int64).reshape(-1) for p in state["pending"]]
    if stream_tokens.shape != (num_streams,) or len(pending) != num_streams:
        raise ValueError(
            f"loader state has {stream_tokens.size} token counts and {len(pending)} pending "
            f"lists for a phase of {num_streams} stream(s)"
        )
    if (stream_tokens < 0).any():
        raise ValueError(f"loader state token counts {stream_tokens.tolist()} are negative")
    for stream, (indices, size) in enumerate(zip(pending, stream_sizes, strict=True)):
        if indices.size and not (indices.min() >= 0 and indices.max() < size):
            raise ValueError(
                f"loader state pending samples of stream {stream} are not in [0, {size})"
            )
    return stream_tokens, pending
