"""sample_without_replacement (distinct, weighted) and epoch_permutation (a uniform shuffle)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sampler_stats import _WEIGHTS, _chi_square_ok

from curriculum_ds import kernels as K
from curriculum_ds.errors import SamplingError

# ---------------------------------------------------------------- without replacement


@settings(max_examples=100, deadline=None)
@given(weights=_WEIGHTS, seed=st.integers(0, 2**64 - 1), frac=st.floats(0, 1))
def test_without_replacement_properties(weights: np.ndarray, seed: int, frac: float) -> None:
    num_positive = int((weights > 0).sum())
    k = int(num_positive * frac)
    got = K.sample_without_replacement(weights, k, seed)
    assert got.dtype == np.int64
    assert got.shape == (k,)
    assert (np.diff(got) > 0).all(), "distinct, ascending index order"
    assert (weights[got] > 0).all()
    np.testing.assert_array_equal(got, K.sample_without_replacement(weights, k, seed))


def test_without_replacement_inclusion_frequencies() -> None:
    # k=1 is a single weighted draw: inclusion frequency = w / sum(w).
    weights = np.array([1.0, 2.0, 3.0, 4.0, 0.0])
    counts = np.zeros(5)
    n = 20_000
    for seed in range(n):
        counts[K.sample_without_replacement(weights, 1, seed)] += 1
    assert _chi_square_ok(counts, weights / weights.sum(), n)
    # Heavier weights are included more often when k=2.
    incl = np.zeros(5)
    for seed in range(5000):
        incl[K.sample_without_replacement(weights, 2, seed)] += 1
    assert incl[0] < incl[1] < incl[2] < incl[3]
    assert incl[4] == 0


def test_without_replacement_errors() -> None:
    with pytest.raises(SamplingError, match="cannot draw k=3 distinct indices: only 2 weights"):
        K.sample_without_replacement(np.array([1.0, 0.0, 2.0]), 3, 0)
    with pytest.raises(SamplingError, match="weight at index 0 is -1"):
        K.sample_without_replacement(np.array([-1.0, 1.0]), 1, 0)
    with pytest.raises(ValueError, match="k must be >= 0"):
        K.sample_without_replacement(np.ones(3), -1, 0)
    assert K.sample_without_replacement(np.zeros(3), 0, 0).shape == (0,)


# ---------------------------------------------------------------- epoch_permutation


@settings(max_examples=50, deadline=None)
@given(n=st.integers(0, 2000), seed=st.integers(0, 2**64 - 1), epoch=st.integers(0, 2**64 - 1))
def test_epoch_permutation(n: int, seed: int, epoch: int) -> None:
    p = K.epoch_permutation(n, seed, epoch)
    assert p.dtype == np.int64
    np.testing.assert_array_equal(np.sort(p), np.arange(n))
    np.testing.assert_array_equal(p, K.epoch_permutation(n, seed, epoch))


def test_epoch_permutation_epochs_differ_and_are_uniform() -> None:
    assert not np.array_equal(K.epoch_permutation(100, 1, 0), K.epoch_permutation(100, 1, 1))
    # Position of element 0 over many epochs is uniform over 5 slots.
    pos = np.array([int(np.argmax(K.epoch_permutation(5, 9, e) == 0)) for e in range(5000)])
    assert _chi_square_ok(np.bincount(pos, minlength=5), np.full(5, 0.2), 5000)
    with pytest.raises(ValueError, match="n must be >= 0"):
        K.epoch_permutation(-1, 0, 0)
