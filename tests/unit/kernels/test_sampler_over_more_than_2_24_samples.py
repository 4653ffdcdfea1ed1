"""Case C07 (../shared/cases/README.md): an index sampler over more than 2^24 samples."""

from __future__ import annotations

import numpy as np
import pytest

from curriculum_ds import kernels as K
from curriculum_ds.errors import SamplingError

N = 20_000_000
TORCH_LIMIT = 2**24  # 16,777,216: torch.multinomial refuses more categories


def test_single_nonzero_weight_at_the_last_index() -> None:
    weights = np.zeros(N)
    weights[N - 1] = 1.0
    sampler = K.WeightedSampler(weights, seed=7)
    draws = sampler.sample(100)
    assert draws.shape == (100,)
    assert (draws == 19_999_999).all()


def test_equal_weights_reach_beyond_two_to_the_24() -> None:
    sampler = K.WeightedSampler(np.ones(N), seed=2024)
    draws = sampler.sample(10_000)
    assert ((draws >= 0) & (draws < N)).all()
    beyond = int((draws >= TORCH_LIMIT).sum())
    # Expected 10,000 * (N - 2^24) / N = 1611.4; [1428, 1795] is about +-4.6 sigma.
    assert 1428 <= beyond <= 1795, beyond


@pytest.mark.parametrize(
    ("bad_index", "bad_value", "match"),
    [
        (19_999_998, -1.0, r"weight at index 19999998 is -1"),
        (17_000_000, np.nan, r"weight at index 17000000 is NaN"),
        (0, np.inf, r"weight at index 0 is inf"),
    ],
)
def test_bad_weight_fails_at_construction(bad_index: int, bad_value: float, match: str) -> None:
    weights = np.ones(N)
    weights[bad_index] = bad_value
    with pytest.raises(SamplingError, match=match):
        K.WeightedSampler(weights, seed=0)


def test_all_zero_weights_fail_at_construction() -> None:
    with pytest.raises(SamplingError, match=r"all 20000000 weights are zero"):
        K.WeightedSampler(np.zeros(N), seed=0)


def test_bucket_sampler_beyond_two_to_the_24() -> None:
    idx = np.zeros(N, dtype=np.int64)
    idx[: N // 2] = -1
    sampler = K.BucketSampler(idx, 1, seed=3)
    draws = sampler.sample(np.ones(1), 10_000)
    assert ((draws >= N // 2) & (draws < N)).all()
    assert np.unique(draws).size == draws.size
    assert (draws >= TORCH_LIMIT).any()
