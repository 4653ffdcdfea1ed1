"""The proposal's constraints hold: the repetition cap, the minimum weight, and the KL pull to
the prior (the proposal's KL never grows with its weight, over one candidate set); constraints no
mixture satisfies are refused in one line naming which."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from mixopt_swarms import synthetic_swarm

from curriculum_ds.errors import ConfigError
from curriculum_ds.mixopt import Constraints, FitOptions, SearchSettings, fit_swarm
from curriculum_ds.mixopt.constraints import Bounds, into_bounds, mixture_bounds

# eval0 falls with stream 0's share, eval1 rises with it: the optimum of their mean is at
# w0 = 0.2 (-4·e^(1.6 - 4·w0) + 4·e^(4·w0) = 0); streams 1 and 2 are neutral.
INTERCEPT = np.array([1.6, 0.0])
COEF = np.array([[-4.0, 0.0, 0.0], [4.0, 0.0, 0.0]])
TARGET_TOKENS = 1e5
TOKENS = np.array([1000.0, 1e9, 1e9])  # stream 0 at w0 = 0.2 would be read 20 times
SEARCH = SearchSettings(num_candidates=4000, top_k=32, bootstrap=0)


def _propose(constraints: Constraints, prior: np.ndarray | None = None, coef: np.ndarray = COEF):
    swarm = synthetic_swarm(INTERCEPT, coef)
    options = FitOptions(prior=prior, tokens=TOKENS, constraints=constraints, search=SEARCH)
    return fit_swarm(swarm, options).proposal


def test_max_repetition_caps_a_small_stream() -> None:
    free = _propose(Constraints())
    assert free.mixture[0] * TARGET_TOKENS / TOKENS[0] == pytest.approx(
        20.0, rel=2e-3
    )  # ridge shrinks a little
    capped = _propose(Constraints(max_repetition=4, target_tokens=TARGET_TOKENS))
    passes = capped.mixture * TARGET_TOKENS / TOKENS
    assert passes[0] <= 4.0 + 1e-9
    assert passes[0] == pytest.approx(4.0, rel=1e-6)  # the cap binds: more of it is better
    assert capped.mixture.sum() == pytest.approx(1.0, abs=1e-12)


def test_min_weight_is_honoured() -> None:
    # a fourth stream that raises both losses: without a floor it gets nothing
    coef = np.hstack([COEF, [[1.0], [1.0]]])
    tokens = np.append(TOKENS, 1e9)
    swarm = synthetic_swarm(INTERCEPT, coef)
    free = fit_swarm(swarm, FitOptions(tokens=tokens, search=SEARCH)).proposal
    assert free.mixture[3] < 0.05
    floored = fit_swarm(
        swarm, FitOptions(tokens=tokens, constraints=Constraints(min_weight=0.1), search=SEARCH)
    ).proposal
    assert floored.mixture.min() >= 0.1 - 1e-12
    assert floored.mixture[3] == pytest.approx(0.1, abs=1e-6)


def test_kl_to_prior_never_grows_with_its_weight() -> None:
    prior = np.array([0.05, 0.6, 0.35])
    kls = [
        _propose(Constraints(kl_to_prior=weight), prior=prior).kl_to_prior
        for weight in (0.0, 0.01, 0.1, 0.5, 1.0, 5.0, 50.0)
    ]
    assert all(later <= earlier + 1e-6 for earlier, later in itertools.pairwise(kls))
    assert kls[0] > 0.1
    assert kls[-1] < 1e-3


@pytest.mark.parametrize(
    ("constraints", "tokens", "message"),
    [
        (Constraints(min_weight=0.4), None, r"min_weight: 0\.4 × 3 streams = 1\.2 > 1"),
        (
            Constraints(max_repetition=1, target_tokens=1e9),
            np.array([1e8, 1e8, 1e8]),
            r"max_repetition: 1\.0 passes over every stream cover 0\.3 of target_tokens",
        ),
        (
            Constraints(max_repetition=1, target_tokens=1e9, min_weight=0.2),
            np.array([1e8, 1e9, 1e9]),
            r"stream 's0''s repetition cap allows at most 0\.1 of the mix, below min_weight 0\.2",
        ),
        (Constraints(max_repetition=4), np.ones(3), r"max_repetition needs constraints\.target"),
        (Constraints(max_repetition=4, target_tokens=10), None, r"needs each stream's token"),
    ],
)
def test_unsatisfiable_constraints_are_refused(constraints, tokens, message) -> None:
    with pytest.raises(ConfigError, match=message) as info:
        mixture_bounds(constraints, ("s0", "s1", "s2"), tokens)
    assert "\n" not in str(info.value)


def test_into_bounds_maps_mixtures_inside_the_box() -> None:
    rng = np.random.default_rng(3)
    mixtures = rng.dirichlet(np.full(4, 0.3), size=500)
    bounds = Bounds(np.array([0.05, 0.0, 0.1, 0.0]), np.array([0.2, 0.9, 1.0, 0.3]))
    mapped = into_bounds(mixtures, bounds)
    np.testing.assert_allclose(mapped.sum(axis=1), 1.0, atol=1e-12)
    assert (mapped >= bounds.lower - 1e-12).all()
    assert (mapped <= bounds.upper + 1e-12).all()
