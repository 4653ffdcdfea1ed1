"""Bucketing and rolling window kernels against numpy / deque oracles."""

from __future__ import annotations

import math
from collections import deque

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from curriculum_ds import kernels as K
from curriculum_ds.errors import BucketingError, CurriculumError

# Heavy ties, signed zeros, infinities and NaN mixed with ordinary values.
_SPECIAL = st.sampled_from([0.0, -0.0, 1.0, -1.0, 2.5, math.inf, -math.inf, math.nan])
_VALUE = st.one_of(_SPECIAL, st.floats(-1e6, 1e6, width=32))


def _windows(dtype: type) -> st.SearchStrategy[np.ndarray]:
    return hnp.arrays(dtype, st.integers(1, 300), elements=_VALUE)


def oracle_edges(window: np.ndarray, num_buckets: int) -> np.ndarray:
    s = np.sort(window[np.isfinite(window)].astype(np.float64)) + 0.0
    n = s.size
    return np.array(
        [s[-(-j * n // num_buckets) - 1] for j in range(1, num_buckets)], dtype=np.float64
    )


def full_rank_bucket(window: np.ndarray, values: np.ndarray, num_buckets: int) -> np.ndarray:
    s = np.sort(window[np.isfinite(window)].astype(np.float64))
    rank = np.searchsorted(s, values.astype(np.float64), side="right")
    return np.minimum(num_buckets - 1, rank * num_buckets // s.size)


@settings(max_examples=300, deadline=None)
@given(
    window=st.one_of(_windows(np.float32), _windows(np.float64)),
    num_buckets=st.integers(1, 40),
)
def test_edges_are_order_statistics(window: np.ndarray, num_buckets: int) -> None:
    if not np.isfinite(window).any():
        with pytest.raises(BucketingError, match="no finite value"):
            K.bucket_edges(window, num_buckets)
        return
    edges = K.bucket_edges(window, num_buckets)
    assert edges.dtype == np.float64
    assert edges.shape == (num_buckets - 1,)
    np.testing.assert_array_equal(edges, oracle_edges(window, num_buckets))
    assert not np.signbit(edges[edges == 0]).any(), "-0.0 must be normalised to +0.0"
    assert (np.diff(edges) >= 0).all()


@settings(max_examples=300, deadline=None)
@given(
    window=st.one_of(_windows(np.float32), _windows(np.float64)),
    queries=hnp.arrays(np.float32, st.integers(0, 200), elements=_VALUE),
    num_buckets=st.integers(1, 70),
)
def test_assign_matches_searchsorted_and_full_rank(
    window: np.ndarray, queries: np.ndarray, num_buckets: int
) -> None:
    if not np.isfinite(window).any():
        return
    edges = K.bucket_edges(window, num_buckets)
    for values in (window, queries, queries.astype(np.float64)):
        got = K.assign_buckets(values, edges, nan_policy="omit")
        assert got.dtype == np.int64
        nan = np.isnan(values)
        np.testing.assert_array_equal(got[nan], -1)
        want = np.searchsorted(edges, values[~nan].astype(np.float64), side="right")
        np.testing.assert_array_equal(got[~nan], want)
        # Each finite value lands in exactly one bucket, the one of its exact rank.
        fin = np.isfinite(values)
        np.testing.assert_array_equal(got[fin], full_rank_bucket(window, values[fin], num_buckets))
        assert ((got[~nan] >= 0) & (got[~nan] < num_buckets)).all()


@settings(max_examples=200, deadline=None)
@given(
    edges=hnp.arrays(np.float64, st.integers(0, 50), elements=_SPECIAL.filter(math.isfinite)),
    values=hnp.arrays(np.float32, st.integers(0, 100), elements=_VALUE.filter(math.isfinite)),
)
def test_assign_with_duplicate_arbitrary_edges(edges: np.ndarray, values: np.ndarray) -> None:
    edges = np.sort(edges)
    got = K.assign_buckets(values, edges)
    np.testing.assert_array_equal(
        got, np.searchsorted(edges, values.astype(np.float64), side="right")
    )


def test_assign_f32_values_against_non_f32_edges() -> None:
    # An f64 edge between two f32 values: comparison must be exact, not rounded.
    edges = np.array([0.1, 1 / 3], dtype=np.float64)
    values = np.array([np.float32(0.1), np.nextafter(np.float32(0.1), np.float32(1))], np.float32)
    want = np.searchsorted(edges, values.astype(np.float64), side="right")
    np.testing.assert_array_equal(K.assign_buckets(values, edges), want)


def test_large_random_matches_numpy() -> None:
    rng = np.random.default_rng(0)
    window = rng.lognormal(size=200_000).astype(np.float32)
    window[::1000] = 1.0  # ties
    queries = rng.lognormal(size=100_000).astype(np.float32)
    for b in (2, 10, 16, 64, 1000):
        edges = K.bucket_edges(window, b)
        np.testing.assert_array_equal(edges, oracle_edges(window, b))
        np.testing.assert_array_equal(
            K.assign_buckets(queries, edges), full_rank_bucket(window, queries, b)
        )


def test_all_equal_window() -> None:
    window = np.full(10_001, 3.0, dtype=np.float32)
    np.testing.assert_array_equal(K.bucket_edges(window, 8), np.full(7, 3.0))
    np.testing.assert_array_equal(K.assign_buckets(window[:3], K.bucket_edges(window, 8)), 7)


def test_one_bucket_and_non_finite_left_out() -> None:
    assert K.bucket_edges(np.array([1.0, 2.0]), 1).shape == (0,)
    w = np.array([np.nan, 1.0, np.inf, 2.0, -np.inf, 3.0], dtype=np.float32)
    np.testing.assert_array_equal(K.bucket_edges(w, 3), [1.0, 2.0])


def test_bucketing_errors() -> None:
    with pytest.raises(BucketingError, match=r"no finite value \(length 2\)"):
        K.bucket_edges(np.array([np.nan, np.inf]), 4)
    with pytest.raises(BucketingError, match=r"length 0"):
        K.bucket_edges(np.array([], dtype=np.float32), 4)
    with pytest.raises(ValueError, match=r"num_buckets: must be in \[1, 65536\], got 0"):
        K.bucket_edges(np.array([1.0]), 0)
    with pytest.raises(ValueError, match="num_buckets must be >= 0"):
        K.bucket_edges(np.array([1.0]), -3)
    with pytest.raises(ValueError, match="65537"):
        K.bucket_edges(np.array([1.0]), 65537)
    with pytest.raises(TypeError, match="window must have a real numeric dtype"):
        K.bucket_edges(np.array(["a"]), 2)
    with pytest.raises(ValueError, match="must be 1-D"):
        K.bucket_edges(np.ones((2, 2)), 2)
    with pytest.raises(BucketingError, match="value at index 2 is NaN") as info:
        K.assign_buckets(np.array([0.0, 1.0, np.nan, np.nan]), np.array([0.5]))
    assert isinstance(info.value, CurriculumError)
    with pytest.raises(ValueError, match=r"non-decreasing, but edges\[0\] = 2 > edges\[1\] = 1"):
        K.assign_buckets(np.array([0.0]), np.array([2.0, 1.0]))
    with pytest.raises(ValueError, match=r"edges\[1\] is NaN"):
        K.assign_buckets(np.array([0.0]), np.array([2.0, np.nan]))
    with pytest.raises(ValueError, match="nan_policy"):
        K.assign_buckets(np.array([0.0]), np.array([2.0]), nan_policy="drop")  # type: ignore[arg-type]


def test_non_contiguous_and_int_inputs_are_normalised() -> None:
    w = np.arange(20, dtype=np.float32)[::2]
    np.testing.assert_array_equal(K.bucket_edges(w, 2), oracle_edges(w, 2))
    np.testing.assert_array_equal(K.bucket_edges(np.arange(10), 2), [4.0])


# ---------------------------------------------------------------- rolling window


@settings(max_examples=150, deadline=None)
@given(
    capacity=st.integers(1, 60),
    batches=st.lists(
        st.one_of(
            hnp.arrays(np.float32, st.integers(0, 90), elements=_VALUE),
            hnp.arrays(np.float64, st.integers(0, 90), elements=_VALUE),
        ),
        min_size=1,
        max_size=6,
    ),
    num_buckets=st.integers(1, 20),
)
def test_rolling_window_matches_deque(
    capacity: int, batches: list[np.ndarray], num_buckets: int
) -> None:
    win = K.RollingWindow(capacity)
    oracle: deque[np.float32] = deque(maxlen=capacity)
    non_finite = 0
    for batch in batches:
        win.push(batch)
        for v in batch.astype(np.float32):
            if np.isfinite(v):
                oracle.append(v + np.float32(0.0))
            else:
                non_finite += 1
        want = np.array(oracle, dtype=np.float32)
        got = win.values()
        assert got.dtype == np.float32
        np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))
        assert len(win) == len(oracle)
        assert win.num_non_finite == non_finite
        if len(oracle):
            edges = win.edges(num_buckets)
            np.testing.assert_array_equal(edges, oracle_edges(want, num_buckets))
            restored = K.RollingWindow.from_state_dict(win.state_dict())
            np.testing.assert_array_equal(restored.edges(num_buckets), edges)
            np.testing.assert_array_equal(restored.values(), got)
            assert restored.num_non_finite == win.num_non_finite
            assert restored.capacity == capacity


def test_rolling_window_large_eviction() -> None:
    rng = np.random.default_rng(1)
    win = K.RollingWindow(100_000)
    data = rng.lognormal(size=350_000).astype(np.float32)
    for i in range(0, data.size, 4096):
        win.push(data[i : i + 4096])
    np.testing.assert_array_equal(win.values(), data[-100_000:])
    np.testing.assert_array_equal(win.edges(16), oracle_edges(data[-100_000:], 16))
    win.push(data)  # one batch longer than the capacity
    np.testing.assert_array_equal(win.values(), data[-100_000:])


def test_rolling_window_state_dict_is_plain() -> None:
    win = K.RollingWindow(5)
    win.push(np.array([1.0, np.nan, 2.0]))
    state = win.state_dict()
    assert set(state) == {"capacity", "values", "num_non_finite"}
    assert isinstance(state["capacity"], int)
    assert isinstance(state["num_non_finite"], int)
    assert isinstance(state["values"], np.ndarray)
    assert state["values"].dtype == np.float32
    assert state["num_non_finite"] == 1


def test_rolling_window_errors() -> None:
    with pytest.raises(ValueError, match=r"capacity: must be in \[1, 10000000\], got 0"):
        K.RollingWindow(0)
    with pytest.raises(ValueError, match="10000001"):
        K.RollingWindow(10_000_001)
    with pytest.raises(BucketingError, match="no finite value"):
        K.RollingWindow(3).edges(2)
    with pytest.raises(TypeError, match="values must have a real numeric dtype"):
        K.RollingWindow(3).push(np.array(["x"]))
    with pytest.raises(ValueError, match="missing the key 'values'"):
        K.RollingWindow.from_state_dict({"capacity": 3, "num_non_finite": 0})
    with pytest.raises(ValueError, match="more than capacity 2"):
        K.RollingWindow.from_state_dict(
            {"capacity": 2, "values": np.ones(3, np.float32), "num_non_finite": 0}
        )
    with pytest.raises(ValueError, match=r"values\[1\] = NaN is not finite"):
        K.RollingWindow.from_state_dict(
            {"capacity": 2, "values": np.array([1, np.nan], np.float32), "num_non_finite": 0}
        )
    with pytest.raises(TypeError, match="capacity must be an int"):
        K.RollingWindow(2.5)  # type: ignore[arg-type]


def test_subnormals_keep_their_order_when_the_cpu_flushes_denormals():
    """Breaker finding: after ``torch.set_flush_denormal(True)`` (FTZ/DAZ), subnormal float32
    values compared as zeros (all-zero edges, wrong buckets). The kernels compare integer keys,
    so the results are those of the default mode."""
    import torch

    window = np.array([3, 1, 2, 0, 5, 0x3F800000], dtype=np.uint32).view(np.float32)
    edges = np.array([2e-45, 4e-45])
    expect_edges = K.bucket_edges(window, 6)
    expect_buckets = np.searchsorted(edges, window.astype(np.float64), side="right")
    np.testing.assert_array_equal(expect_edges, np.sort(window.astype(np.float64))[:5])
    assert (expect_edges[1:] > 0).all()
    rolling = K.RollingWindow(16)
    assert torch.set_flush_denormal(True), "this CPU cannot flush denormals"
    try:
        got_edges = K.bucket_edges(window, 6)
        got_buckets = K.assign_buckets(window, edges)
        rolling.push(window)
        got_rolling = rolling.edges(6)
        flushed = torch.tensor([1e-45], dtype=torch.float32) * 1.0
        assert flushed.item() == 0.0  # the mode is really on
    finally:
        torch.set_flush_denormal(False)
    np.testing.assert_array_equal(got_edges, expect_edges)
    np.testing.assert_array_equal(got_buckets, expect_buckets)
    np.testing.assert_array_equal(got_rolling, expect_edges)
