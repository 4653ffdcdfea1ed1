"""Mixtures drawn around a prior (RegMix's knobs) lie on the simplex, follow the prior, and a
swarm's mixture i is a function of (seed, i) only: adding runs never changes the earlier ones."""

from __future__ import annotations

import numpy as np

from curriculum_ds.mixopt.candidates import DirichletKnobs, dirichlet_mixtures, swarm_mixture

PRIOR = np.array([0.7, 0.2, 0.05, 0.05])


def test_draws_are_on_the_simplex_and_follow_the_prior() -> None:
    knobs = DirichletKnobs()
    draws = dirichlet_mixtures(PRIOR, 20_000, np.random.default_rng(0), knobs)
    np.testing.assert_allclose(draws.sum(axis=1), 1.0, atol=1e-12)
    assert not np.isnan(draws).any()
    assert ((draws == 0) | (draws >= knobs.zero_below)).all()
    tempered = PRIOR**0.5 / (PRIOR**0.5).sum()
    np.testing.assert_allclose(draws.mean(axis=0), tempered, atol=0.01)
    # low concentrations give sparse mixes: some draws leave streams out
    assert (draws == 0).any(axis=1).mean() > 0.2


def test_swarm_mixture_depends_on_seed_and_index_only() -> None:
    knobs = DirichletKnobs(temperature=1.0, min_concentration=1.0, max_concentration=10.0)
    first = [swarm_mixture(PRIOR, 7, i, knobs) for i in range(4)]
    again = [swarm_mixture(PRIOR, 7, i, knobs) for i in (3, 2, 1, 0, 4, 5)]
    for i in range(4):
        np.testing.assert_array_equal(first[i], again[3 - i])
    assert not np.array_equal(swarm_mixture(PRIOR, 8, 0, knobs), first[0])
