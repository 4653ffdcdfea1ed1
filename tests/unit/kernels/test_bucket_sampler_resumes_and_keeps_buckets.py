"""BucketSampler: epoch shuffles within buckets, resume, set_buckets, refused states."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from sampler_stats import _chi_square_ok

from curriculum_ds import kernels as K
from curriculum_ds.errors import SamplingError


def test_bucket_sampler_single_bucket_is_epoch_shuffle() -> None:
    idx = np.zeros(1000, dtype=np.int64)
    idx[::7] = -1
    s = K.BucketSampler(idx, 1, 5)
    members = np.flatnonzero(idx == 0)
    epochs = [s.sample(np.ones(1), members.size) for _ in range(3)]
    for e in epochs:
        np.testing.assert_array_equal(np.sort(e), members)
    assert not np.array_equal(epochs[0], epochs[1])
    np.testing.assert_array_equal(s.state_dict()["epochs"], [2])
    # Mid-epoch call boundaries do not matter for the within-bucket order.
    s2 = K.BucketSampler(idx, 1, 5)
    chunks = np.concatenate([s2.sample(np.ones(1), n) for n in (1, 10, 300, members.size - 311)])
    np.testing.assert_array_equal(chunks, epochs[0])


@settings(max_examples=60, deadline=None)
@given(
    idx=hnp.arrays(np.int64, st.integers(1, 300), elements=st.integers(-1, 5)),
    probs=hnp.arrays(np.float64, 6, elements=st.floats(0, 1)),
    seed=st.integers(0, 2**64 - 1),
    k1=st.integers(0, 400),
    k2=st.integers(0, 400),
)
def test_bucket_sampler_resume_and_ranges(
    idx: np.ndarray, probs: np.ndarray, seed: int, k1: int, k2: int
) -> None:
    counts = np.bincount(idx[idx >= 0], minlength=6)
    if not (probs[counts > 0] > 0).any():
        with pytest.raises(SamplingError, match="all probability mass is on empty buckets"):
            K.BucketSampler(idx, 6, seed).sample(probs, 1)
        return
    a = K.BucketSampler(idx, 6, seed)
    np.testing.assert_array_equal(a.counts(), counts)
    first = a.sample(probs, k1)
    assert ((first >= 0) & (first < idx.size)).all()
    assert (idx[first] >= 0).all()
    assert (probs[idx[first]] > 0).all()
    state = a.state_dict()
    cont = a.sample(probs, k2)
    b = K.BucketSampler(idx, 6, 0)
    b.load_state_dict(state)
    np.testing.assert_array_equal(b.sample(probs, k2), cont)
    c = K.BucketSampler(idx, 6, seed)
    np.testing.assert_array_equal(c.sample(probs, k1), first)


def test_bucket_sampler_no_repeats_within_bucket_epoch_and_frequencies() -> None:
    rng = np.random.default_rng(0)
    idx = rng.integers(0, 4, size=20_000)
    s = K.BucketSampler(idx, 4, 11)
    probs = np.array([0.1, 0.2, 0.3, 0.4])
    draws = s.sample(probs, 4000)
    for b in range(4):
        mine = draws[idx[draws] == b]
        assert np.unique(mine).size == mine.size
    counts = np.bincount(idx[draws], minlength=4)
    assert _chi_square_ok(counts, probs, 4000)


def test_bucket_sampler_set_buckets_bumps_generation() -> None:
    idx = np.arange(100) % 3
    s = K.BucketSampler(idx, 3, 1)
    s.sample(np.ones(3), 50)
    s.set_buckets(np.arange(100) % 2)
    st_ = s.state_dict()
    assert st_["generation"] == 1
    assert st_["num_calls"] == 1
    np.testing.assert_array_equal(st_["cursors"], 0)
    np.testing.assert_array_equal(s.counts(), [50, 50, 0])
    out = s.sample(np.array([1.0, 1.0, 5.0]), 30)  # bucket 2 is empty: mass renormalised away
    assert out.shape == (30,)
    bad = np.arange(100) % 2
    bad[2] = 7
    with pytest.raises(SamplingError, match=r"bucket_idx\[2\] = 7 is out of range"):
        s.set_buckets(bad)
    np.testing.assert_array_equal(s.counts(), [50, 50, 0])  # unchanged


def test_bucket_sampler_golden_seed_1234() -> None:
    s = K.BucketSampler(np.arange(100) % 4, 4, 1234)
    got = s.sample(np.array([0.1, 0.2, 0.3, 0.4]), 16)
    np.testing.assert_array_equal(
        got, [68, 75, 29, 91, 81, 10, 35, 99, 2, 11, 30, 4, 62, 38, 64, 78]
    )


def test_bucket_sampler_errors() -> None:
    with pytest.raises(
        SamplingError, match=r"bucket_idx\[1\] = 3 is out of range; expected -1 or 0..3"
    ):
        K.BucketSampler(np.array([0, 3]), 3, 0)
    with pytest.raises(SamplingError, match=r"bucket_idx\[0\] = -2"):
        K.BucketSampler(np.array([-2]), 3, 0)
    with pytest.raises(TypeError, match="bucket_idx must have an integer dtype"):
        K.BucketSampler(np.array([0.0]), 3, 0)
    with pytest.raises(ValueError, match=r"num_buckets: must be in \[1, 65536\], got 0"):
        K.BucketSampler(np.array([0]), 0, 0)
    s = K.BucketSampler(np.array([0, 1, -1]), 2, 0)
    with pytest.raises(ValueError, match="probs: length 3 != num_buckets 2"):
        s.sample(np.ones(3), 1)
    with pytest.raises(SamplingError, match="weight at index 1 is NaN"):
        s.sample(np.array([1.0, np.nan]), 1)
    with pytest.raises(SamplingError, match="all probability mass is on empty buckets"):
        K.BucketSampler(np.array([0, 0]), 2, 0).sample(np.array([0.0, 1.0]), 1)
    state = s.state_dict()
    state["cursors"] = np.array([2, 0])
    with pytest.raises(ValueError, match=r"cursors\[0\] = 2 exceeds the bucket size 1"):
        s.load_state_dict(state)
    state["cursors"] = np.array([0])
    with pytest.raises(ValueError, match="cursors/epochs have lengths 1/2"):
        s.load_state_dict(state)
    state["cursors"] = np.array([-1, 0])
    with pytest.raises(ValueError, match=r"cursors\[0\] = -1 must be >= 0"):
        s.load_state_dict(state)
    with pytest.raises(ValueError, match="missing the key 'epochs'"):
        s.load_state_dict({"seed": 0, "num_calls": 0, "generation": 0, "cursors": np.zeros(2)})


# ---------------------------------------------------------------- contracts of state changes


def test_bucket_sampler_set_buckets_refuses_another_length_and_keeps_its_state() -> None:
    """The sampler is over a fixed set of N samples: set_buckets must keep N."""
    idx = np.arange(100) % 3
    probs = np.array([0.2, 0.3, 0.5])
    s = K.BucketSampler(idx, 3, 1)
    twin = K.BucketSampler(idx, 3, 1)  # never sees the refused calls
    np.testing.assert_array_equal(s.sample(probs, 50), twin.sample(probs, 50))
    before = s.state_dict()
    for wrong in (99, 101, 0):
        with pytest.raises(
            SamplingError,
            match=rf"^bucket_idx: length {wrong}, but the sampler is over 100 samples \(set_bu",
        ):
            s.set_buckets(np.zeros(wrong, dtype=np.int64))
    after = s.state_dict()
    assert len(s) == 100
    np.testing.assert_array_equal(s.counts(), [34, 33, 33])
    assert (after["seed"], after["num_calls"], after["generation"]) == (1, 1, 0)
    np.testing.assert_array_equal(after["cursors"], before["cursors"])
    np.testing.assert_array_equal(after["epochs"], before["epochs"])
    assert int(np.sum(after["cursors"])) == 50
    # the continuation is the one of a sampler that never saw the refused calls
    np.testing.assert_array_equal(s.sample(probs, 80), twin.sample(probs, 80))
    # the same length is still accepted (here: 100 samples, 2 of them excluded)
    new = np.arange(100) % 2
    new[[0, 1]] = -1
    s.set_buckets(new)
    assert len(s) == 100
    assert s.state_dict()["generation"] == 1
    np.testing.assert_array_equal(s.counts(), [49, 49, 0])


@pytest.mark.parametrize(
    ("key", "value"),
    [("seed", 2**64), ("num_calls", -1), ("generation", 2**70), ("cursors", [0, 99])],
)
def test_bucket_sampler_refused_state_changes_nothing(key, value):
    idx = np.array([0, 1, 0, 1, 1], dtype=np.int64)
    s = K.BucketSampler(idx, 2, seed=3)
    s.sample(np.array([1.0, 1.0]), 3)
    before = s.state_dict()
    bad = dict(before, seed=11, num_calls=5, generation=2)
    bad[key] = np.array(value, dtype=np.int64) if key == "cursors" else value
    with pytest.raises((ValueError, SamplingError), match=key):
        s.load_state_dict(bad)
    after = s.state_dict()
    assert {k: after[k] for k in ("seed", "num_calls", "generation")} == {
        k: before[k] for k in ("seed", "num_calls", "generation")
    }
    np.testing.assert_array_equal(after["cursors"], before["cursors"])
    np.testing.assert_array_equal(after["epochs"], before["epochs"])
