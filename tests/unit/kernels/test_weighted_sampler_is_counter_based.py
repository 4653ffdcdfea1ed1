"""WeightedSampler: counter-based draws that follow the weights; refused states change nothing."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sampler_stats import _WEIGHTS, _chi_square_ok

from curriculum_ds import kernels as K
from curriculum_ds.errors import SamplingError


@settings(max_examples=100, deadline=None)
@given(
    weights=_WEIGHTS, seed=st.integers(0, 2**64 - 1), a=st.integers(0, 3000), b=st.integers(0, 3000)
)
def test_weighted_sampler_is_counter_based(weights: np.ndarray, seed: int, a: int, b: int) -> None:
    if not (weights > 0).any():
        with pytest.raises(SamplingError, match="are zero"):
            K.WeightedSampler(weights, seed)
        return
    s1 = K.WeightedSampler(weights, seed)
    first = s1.sample(a)
    state = s1.state_dict()
    second = s1.sample(b)
    fresh = K.WeightedSampler(weights, seed).sample(a + b)
    np.testing.assert_array_equal(np.concatenate([first, second]), fresh)
    assert fresh.dtype == np.int64
    assert fresh.shape == (a + b,)
    assert ((fresh >= 0) & (fresh < weights.size)).all()
    assert (weights[fresh] > 0).all()
    s2 = K.WeightedSampler(weights, 0)
    s2.load_state_dict(state)
    np.testing.assert_array_equal(s2.sample(b), second)
    assert s1.num_draws == a + b


def test_weighted_frequencies_follow_weights() -> None:
    rng = np.random.default_rng(3)
    weights = rng.uniform(0, 1, size=50)
    weights[[3, 17]] = 0.0
    n = 400_000
    draws = K.WeightedSampler(weights, 42).sample(n)
    counts = np.bincount(draws, minlength=weights.size)
    assert _chi_square_ok(counts, weights / weights.sum(), n)


def test_weighted_sampler_different_seeds_differ() -> None:
    w = np.ones(1000)
    assert not np.array_equal(
        K.WeightedSampler(w, 1).sample(100), K.WeightedSampler(w, 2).sample(100)
    )


def test_weighted_sampler_golden_seed_1234() -> None:
    # Same values as the Rust golden test (rust/src/sampling.rs).
    got = K.WeightedSampler(np.arange(1.0, 11.0), 1234).sample(16)
    np.testing.assert_array_equal(got, [6, 7, 5, 3, 6, 4, 7, 7, 4, 8, 4, 7, 8, 7, 4, 8])


@pytest.mark.parametrize(
    ("weights", "match"),
    [
        (np.array([1.0, -0.5]), r"weight at index 1 is -0.5; weights must be finite and >= 0"),
        (np.array([1.0, 2.0, np.nan]), r"weight at index 2 is NaN"),
        (np.array([np.inf, 1.0]), r"weight at index 0 is inf"),
        (np.zeros(4), r"all 4 weights are zero"),
        (np.zeros(0), r"all 0 weights are zero"),
    ],
)
def test_weighted_sampler_bad_weights(weights: np.ndarray, match: str) -> None:
    with pytest.raises(SamplingError, match=match):
        K.WeightedSampler(weights, 0)


def test_weighted_sampler_argument_errors() -> None:
    with pytest.raises(TypeError, match="weights must have a real numeric dtype"):
        K.WeightedSampler(np.array(["a", "b"]), 0)
    with pytest.raises(TypeError, match="weights must have a real numeric dtype"):
        K.WeightedSampler(np.array([1 + 1j]), 0)
    with pytest.raises(ValueError, match=r"seed must be in \[0, 2\*\*64\)"):
        K.WeightedSampler(np.ones(3), -1)
    with pytest.raises(ValueError, match="k must be >= 0"):
        K.WeightedSampler(np.ones(3), 0).sample(-1)
    with pytest.raises(ValueError, match="missing the key 'num_draws'"):
        K.WeightedSampler(np.ones(3), 0).load_state_dict({"seed": 1})


def test_weighted_sampler_integer_weights_are_accepted() -> None:
    s = K.WeightedSampler(np.array([0, 0, 5], dtype=np.int32), 7)
    assert (s.sample(100) == 2).all()
    assert len(s) == 3


# ---------------------------------------------------------------- contracts of state changes


def test_weighted_sampler_refuses_a_draw_past_the_counter_limit() -> None:
    """num_draws is a u64 counter: a draw that would pass 2**64 - 1 is refused, not wrapped."""
    weights = np.arange(1.0, 11.0)
    limit = 2**64 - 1
    s = K.WeightedSampler(weights, 1234)
    s.load_state_dict({"seed": 1234, "num_draws": limit - 3})
    last = s.sample(3)  # draws limit-3, limit-2, limit-1: the counter reaches limit exactly
    assert s.num_draws == limit
    assert last.shape == (3,)
    assert ((last >= 0) & (last < 10)).all()
    # counter-based: the same three draws one by one from the restored state
    one_by_one = K.WeightedSampler(weights, 1234)
    one_by_one.load_state_dict({"seed": 1234, "num_draws": limit - 3})
    np.testing.assert_array_equal(np.concatenate([one_by_one.sample(1) for _ in range(3)]), last)
    for k in (1, 1000):
        with pytest.raises(
            SamplingError,
            match=rf"^num_draws = {limit} \+ {k} would pass the counter's limit "
            r"2\*\*64 - 1; the sampler cannot number more$",
        ):
            s.sample(k)
        assert s.state_dict() == {"seed": 1234, "num_draws": limit}  # unchanged
    assert s.sample(0).shape == (0,)
    assert s.num_draws == limit
    near = K.WeightedSampler(weights, 1234)
    near.load_state_dict({"seed": 1234, "num_draws": limit - 5})
    with pytest.raises(SamplingError, match=rf"num_draws = {limit - 5} \+ 6 would pass"):
        near.sample(6)
    assert near.num_draws == limit - 5
    assert near.sample(5).shape == (5,)
    assert near.num_draws == limit


@pytest.mark.parametrize(
    "bad",
    [
        {"seed": 99, "num_draws": 2**64},
        {"seed": 99, "num_draws": -1},
        {"seed": 99, "num_draws": "3"},
        {"seed": 2**64, "num_draws": 5},
    ],
)
def test_weighted_sampler_refused_state_changes_nothing(bad):
    s = K.WeightedSampler(np.array([1.0, 2.0, 3.0]), seed=7)
    s.sample(3)
    before = s.state_dict()
    with pytest.raises((ValueError, TypeError), match=r"seed|num_draws"):
        s.load_state_dict(bad)
    assert s.state_dict() == before
    fresh = K.WeightedSampler(np.array([1.0, 2.0, 3.0]), seed=7)
    fresh.sample(3)
    np.testing.assert_array_equal(s.sample(10), fresh.sample(10))


def test_u64_seeds_keep_their_full_range():
    assert K.WeightedSampler(np.ones(2), seed=2**64 - 1).seed == 2**64 - 1
    assert K.epoch_permutation(3, 2**64 - 1, np.uint64(2**64 - 1)).shape == (3,)
    with pytest.raises(ValueError, match=r"seed must be in \[0, 2\*\*64\), got -1"):
        K.epoch_permutation(3, -1, 0)
