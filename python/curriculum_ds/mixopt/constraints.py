"""The proposal's constraints: a repetition cap per stream, a least weight, a KL pull to the prior.

Each constraint but the KL term is a box on the mixture ``w`` (on the simplex):

- ``min_weight``: ``w_j >= min_weight`` for every stream;
- ``max_repetition`` with ``target_tokens`` and each stream's token count ``tokens_j``: the target
  run reads ``w_j · target_tokens`` tokens of stream ``j``, at most ``max_repetition`` passes over
  it, so ``w_j <= max_repetition · tokens_j / target_tokens`` (Olmix's repetition cap).

:func:`mixture_bounds` turns them into per-stream bounds and refuses, in one line naming the
constraint, bounds that no mixture satisfies; :func:`into_bounds` maps any mixture into them.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from curriculum_ds.errors import ConfigError

__all__ = ["Bounds", "Constraints", "into_bounds", "mixture_bounds"]


class Constraints(BaseModel):
    """What the proposed mixture must satisfy (``mixopt fit``'s options; unknown keys refused)."""

    model_config = ConfigDict(
        extra="forbid", frozen=True, strict=True, allow_inf_nan=False, use_attribute_docstrings=True
    )

    max_repetition: float | None = Field(default=None, gt=0)
    """Passes over its tokens the target run may make of each stream; needs token counts and
    ``target_tokens``. ``None``: no cap."""
    target_tokens: float | None = Field(default=None, gt=0)
    """The target run's training tokens (global), for ``max_repetition``."""
    min_weight: float = Field(default=0.0, ge=0, lt=1)
    """The least share of every stream in the proposal."""
    kl_to_prior: float = Field(default=0.0, ge=0)
    """Weight of ``KL(w || prior)`` (nats) added to the predicted target; 0: none."""


@dataclass(frozen=True)
class Bounds:
    """Per-stream bounds of the proposal's shares: ``lower <= w <= upper``, float64 ``(streams,)``.

    Attributes:
        lower: the least share per stream.
        upper: the largest share per stream.
    """

    lower: np.ndarray
    upper: np.ndarray


def mixture_bounds(
    constraints: Constraints, streams: tuple[str, ...], tokens: np.ndarray | None
) -> Bounds:
    """The box the constraints put the mixture in, checked to meet the simplex.

    Args:
        constraints: the proposal's constraints.
        streams: the mixture's stream names (for messages).
        tokens: float64 ``(streams,)`` token counts, or ``None`` (then no repetition cap).

    Raises:
        ConfigError: ``max_repetition`` without ``target_tokens`` or without token counts, or
            bounds no mixture satisfies (one line naming which constraint and the sums).
    """
    count = len(streams)
    lower = np.full(count, constraints.min_weight)
    upper = np.ones(count)
    if constraints.max_repetition is not None:
        if constraints.target_tokens is None:
            raise ConfigError("constraints.max_repetition needs constraints.target_tokens")
        if tokens is None:
            raise ConfigError(
                "constraints.max_repetition needs each stream's token count (--tokens)"
            )
        cap = constraints.max_repetition * tokens / constraints.target_tokens
        upper = np.minimum(upper, cap)
    if lower.sum() > 1.0 + 1e-12:
        raise ConfigError(
            f"constraints.min_weight: {constraints.min_weight} × {count} streams = "
            f"{lower.sum():.6g} > 1; no mixture satisfies it"
        )
    below = np.flatnonzero(upper < lower)
    if below.size:
        j = int(below[0])
        raise ConfigError(
            f"constraints: stream {streams[j]!r}'s repetition cap allows at most {upper[j]:.6g} of "
            f"the mix, below min_weight {constraints.min_weight}; no mixture satisfies both"
        )
    if upper.sum() < 1.0 - 1e-12:
        raise ConfigError(
            f"constraints.max_repetition: {constraints.max_repetition} passes over every stream "
            f"cover {upper.sum():.6g} of target_tokens {constraints.target_tokens:.6g} (< 1); no "
            "mixture satisfies it"
        )
    return Bounds(lower, upper)


def into_bounds(mixtures: np.ndarray, bounds: Bounds) -> np.ndarray:
    """Map mixtures into the box: shift onto ``lower``, then cap at ``upper`` by water-filling.

    Each row becomes ``lower + (1 - Σ lower) · w``; a share above its cap is set to the cap and
    the excess shared among the uncapped streams in proportion to their shares (or their room,
    where those are 0), repeated until none is above (at most one round per stream).

    Args:
        mixtures: float64 ``(rows, streams)``, rows on the simplex.
        bounds: from :func:`mixture_bounds` (feasible).

    Returns:
        float64 ``(rows, streams)``: rows on the simplex within the bounds; deterministic.
    """
    lower, upper = bounds.lower, bounds.upper
    w = lower + (1.0 - lower.sum()) * mixtures
    for _ in range(w.shape[1]):
        over = w > upper
        if not over.any():
            break
        w = np.where(over, upper, w)
        capped = w >= upper
        excess = 1.0 - w.sum(axis=1, keepdims=True)
        share = np.where(capped, 0.0, w - lower)
        room = np.where(capped, 0.0, upper - w)
        basis = np.where(share.sum(axis=1, keepdims=True) > 0, share, room)
        total = basis.sum(axis=1, keepdims=True)
        w = w + excess * np.divide(basis, total, out=np.zeros_like(basis), where=total > 0)
    return np.clip(w, lower, upper)
