"""Mixtures drawn from a Dirichlet around a prior, with RegMix's knobs.

RegMix (``mixture_config/synthesize_mixture.py``) draws each mixture from
``Dirichlet(strength · normalise(prior ** temperature))``, with ``strength`` log-uniform in a
range, then sets shares below a threshold to 0 and renormalises: low strengths give sparse mixes
(a few streams), high ones mixes close to the tempered prior. The same draws serve the proposal's
candidate search.
"""

from __future__ import annotations

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

__all__ = ["DirichletKnobs", "dirichlet_mixtures", "swarm_mixture"]


class DirichletKnobs(BaseModel):
    """How mixtures are drawn around a prior (RegMix's knobs)."""

    model_config = ConfigDict(
        extra="forbid", frozen=True, strict=True, allow_inf_nan=False, use_attribute_docstrings=True
    )

    temperature: float = Field(default=0.5, gt=0)
    """Exponent applied to the prior before normalising (< 1 flattens it toward uniform)."""
    min_concentration: float = Field(default=0.1, gt=0)
    """Lower end of the log-uniform range of the Dirichlet's total concentration."""
    max_concentration: float = Field(default=5.0, gt=0)
    """Upper end of that range (≥ ``min_concentration``)."""
    zero_below: float = Field(default=1e-3, ge=0, lt=1)
    """Shares below this are set to 0 before renormalising (the largest, ≥ 1/streams, stays)."""


def dirichlet_mixtures(
    prior: np.ndarray, count: int, rng: np.random.Generator, knobs: DirichletKnobs
) -> np.ndarray:
    """Draw ``count`` mixtures around ``prior``.

    Args:
        prior: float64 ``(streams,)``, > 0 (normalised here).
        count: number of mixtures, ≥ 0.
        rng: the generator drawn from (the result is a function of its state).
        knobs: temperature, concentration range, zero threshold.

    Returns:
        float64 ``(count, streams)``, each row on the simplex.
    """
    tempered = prior**knobs.temperature
    tempered = tempered / tempered.sum()
    low = np.log(knobs.min_concentration)
    high = np.log(max(knobs.max_concentration, knobs.min_concentration))
    strength = np.exp(rng.uniform(low, high, size=(count, 1)))
    # numpy's Dirichlet underflows to NaN rows for tiny alphas: draw the gammas directly
    gammas = rng.standard_gamma(strength * tempered, size=(count, prior.size))
    top = gammas.argmax(axis=1)
    rows = np.arange(count)
    gammas[rows, top] = np.maximum(gammas[rows, top], np.finfo(np.float64).tiny)
    mixtures = gammas / gammas.sum(axis=1, keepdims=True)
    mixtures[mixtures < knobs.zero_below] = 0.0
    return mixtures / mixtures.sum(axis=1, keepdims=True)


def swarm_mixture(prior: np.ndarray, seed: int, index: int, knobs: DirichletKnobs) -> np.ndarray:
    """Mixture ``index`` of a swarm: a function of ``(seed, index)`` only.

    Drawn by :func:`dirichlet_mixtures` from a generator seeded with ``[seed, index]``, so adding
    runs to a swarm never changes the earlier ones' mixtures.

    Args:
        prior: float64 ``(streams,)``, > 0.
        seed: the swarm's seed, ≥ 0.
        index: the run's index in the swarm, ≥ 0.
        knobs: temperature, concentration range, zero threshold.

    Returns:
        float64 ``(streams,)`` on the simplex.
    """
    rng = np.random.default_rng([seed, index])
    return dirichlet_mixtures(prior, 1, rng, knobs)[0]
