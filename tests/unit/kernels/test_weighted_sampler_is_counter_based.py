"""WeightedSampler, sample_without_replacement, epoch_permutation and BucketSampler."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from curriculum_ds import kernels as K
from curriculum_ds.errors import SamplingError

_WEIGHTS = hnp.arrays(
    np.float64,
    st.integers(1, 200),
    elements=st.one_of(st.just(0.0), st.floats(0.0, 1e3), st.sampled_from([1e-300, 1e300])),
)


def _chi_square_ok(counts: np.ndarray, probs: np.ndarray, n: int) -> bool:
    """Generous goodness-of-fit bound (a fixed seed makes the test deterministic)."""
    mask = probs > 0
    assert counts[~mask].sum() == 0, "a zero-weight index was drawn"
    expected = probs[mask] * n
    chi2 = float((((counts[mask] - expected) ** 2) / expected).sum())
    dof = int(mask.sum()) - 1
    return chi2 < dof + 8 * np.sqrt(2 * max(dof, 1)) + 10


# ---------------------------------------------------------------- WeightedSampler


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


# ---------------------------------------------------------------- BucketSampler


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


def test_results_do_not_depend_on_threads() -> None:
    # The kernels release the GIL; running them from several Python threads at once gives the
    # same results as running them one after another.
    from concurrent.futures import ThreadPoolExecutor

    weights = np.random.default_rng(5).uniform(0.0, 1.0, 50_000)

    def job(seed: int) -> tuple[np.ndarray, ...]:
        return (
            K.WeightedSampler(weights, seed).sample(5000),
            K.sample_without_replacement(weights, 1000, seed),
            K.epoch_permutation(10_000, seed, 3),
            K.BucketSampler(np.arange(10_000) % 5, 5, seed).sample(np.ones(5), 2000),
        )

    sequential = [job(seed) for seed in range(8)]
    with ThreadPoolExecutor(max_workers=4) as pool:
        threaded = list(pool.map(job, range(8)))
    for a, b in zip(sequential, threaded, strict=True):
        for x, y in zip(a, b, strict=True):
            np.testing.assert_array_equal(x, y)


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


def test_u64_seeds_keep_their_full_range():
    assert K.WeightedSampler(np.ones(2), seed=2**64 - 1).seed == 2**64 - 1
    assert K.epoch_permutation(3, 2**64 - 1, np.uint64(2**64 - 1)).shape == (3,)
    with pytest.raises(ValueError, match=r"seed must be in \[0, 2\*\*64\), got -1"):
        K.epoch_permutation(3, -1, 0)
