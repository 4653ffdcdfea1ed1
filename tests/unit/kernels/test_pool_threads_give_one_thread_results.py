"""Issue 23 item 3: large inputs run on the kernels' thread pool, bit-identical to one thread.

Inputs of 2^20 values or more are split over :func:`curriculum_ds.kernels.num_threads` threads
(``rust/src/par.rs``); the Rust property tests cover small inputs with a lowered threshold, these
cover the shipped threshold: edges + assignment, the rolling window's edges and the alias table.
"""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from curriculum_ds import kernels as K

N = (1 << 20) + 4099  # above the pool's threshold, not a multiple of the chunk alignment


def _values(seed: int, ties: bool, nan_share: float) -> np.ndarray:
    rng = np.random.default_rng(seed)
    v = rng.lognormal(0.0, 1.0, N).astype(np.float32)
    if ties:
        v = np.round(v, 1)  # many equal values: edges land on ties
    v[rng.random(N) < nan_share] = np.nan
    return v


def _under(threads: int, job):  # type: ignore[no-untyped-def]
    K.set_num_threads(threads)
    try:
        return job()
    finally:
        K.set_num_threads(0)


@settings(max_examples=4, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    ties=st.booleans(),
    nan_share=st.sampled_from([0.0, 0.01]),
    buckets=st.sampled_from([2, 16, 100]),
    threads=st.integers(2, 4),
)
def test_edges_assignment_window_and_alias_table_match_one_thread(
    seed: int, ties: bool, nan_share: float, buckets: int, threads: int
) -> None:
    values = _values(seed, ties, nan_share)
    weights = np.abs(values.astype(np.float64))
    weights[np.isnan(weights)] = 0.0

    def job() -> list[np.ndarray]:
        edges = K.bucket_edges(values, buckets)
        window = K.RollingWindow(N - 1000)
        window.push(values)
        return [
            edges,
            K.bucket_edges(values.astype(np.float64), buckets),
            K.assign_buckets(values, edges, nan_policy="omit"),
            window.edges(buckets),
            K.WeightedSampler(weights, seed).sample(10_000),
        ]

    one = _under(1, job)
    many = _under(threads, job)
    assert K.num_threads() >= 1
    for a, b in zip(one, many, strict=True):
        assert a.dtype == b.dtype
        assert a.tobytes() == b.tobytes()


def test_the_thread_count_comes_from_the_environment(monkeypatch) -> None:
    import subprocess
    import sys

    code = "from curriculum_ds import kernels as K; print(K.num_threads())"
    for env, want in (({"OMP_NUM_THREADS": "1"}, "1"), ({"CURRICULUM_DS_NUM_THREADS": "3"}, "3")):
        out = subprocess.run(
            [sys.executable, "-c", code],
            env={**__import__("os").environ, **env},
            capture_output=True,
            text=True,
            check=True,
        )
        assert out.stdout.strip() == want
