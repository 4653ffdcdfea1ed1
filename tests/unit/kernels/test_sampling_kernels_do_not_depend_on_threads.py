"""The sampling kernels release the GIL: threaded runs give the sequential results."""

from __future__ import annotations

import numpy as np

from curriculum_ds import kernels as K


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
