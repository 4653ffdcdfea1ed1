"""Case C01, sampler part (../shared/cases/README.md): resuming continues the stream.

Weighted sampler over 10,000 non-uniform weights, seed 1234, global batch 16. Run A draws b1..b5
and saves its state after b3; run B (a fresh sampler) loads it and draws two batches, which must
equal b4 and b5 (not b1, b2). Neither sampling nor loading touches the process-global RNGs.
"""

from __future__ import annotations

import pickle
import random

import numpy as np
import torch

from curriculum_ds import kernels as K

NUM_SAMPLES = 10_000
SEED = 1234
BATCH = 16


def _weights() -> np.ndarray:
    # Non-uniform, deterministic, and not from any global RNG.
    i = np.arange(NUM_SAMPLES, dtype=np.float64)
    return 1.0 + (i % 97) * np.sqrt(i + 1.0)


def _global_rng_draws() -> tuple[float, float, float]:
    np.random.seed(0)  # noqa: NPY002 - the global RNG is exactly what this case checks
    random.seed(0)
    torch.manual_seed(0)
    return (np.random.rand(), random.random(), float(torch.rand(1)))  # noqa: NPY002


def test_resume_continues_the_stream() -> None:
    run_a = K.WeightedSampler(_weights(), SEED)
    b1, b2, b3 = (run_a.sample(BATCH) for _ in range(3))
    checkpoint = pickle.dumps(run_a.state_dict())  # plain ints: survives any serialisation
    b4, b5 = run_a.sample(BATCH), run_a.sample(BATCH)

    run_b = K.WeightedSampler(_weights(), SEED)
    run_b.load_state_dict(pickle.loads(checkpoint))
    c4, c5 = run_b.sample(BATCH), run_b.sample(BATCH)
    np.testing.assert_array_equal(c4, b4)
    np.testing.assert_array_equal(c5, b5)
    assert not np.array_equal(c4, b1)
    assert not np.array_equal(c5, b2)
    assert run_b.state_dict() == {"seed": SEED, "num_draws": 5 * BATCH}
    assert all(b.dtype == np.int64 and b.shape == (BATCH,) for b in (b1, b2, b3, b4, b5))


def test_global_rngs_untouched() -> None:
    reference = _global_rng_draws()
    assert reference[0] == 0.5488135039273248

    np.random.seed(0)  # noqa: NPY002
    random.seed(0)
    torch.manual_seed(0)
    sampler = K.WeightedSampler(_weights(), SEED)
    sampler.sample(BATCH)
    state = sampler.state_dict()
    fresh = K.WeightedSampler(_weights(), SEED)
    fresh.load_state_dict(state)
    fresh.sample(BATCH)
    K.sample_without_replacement(_weights(), BATCH, SEED)
    K.epoch_permutation(100, SEED, 0)
    bucket = K.BucketSampler(np.arange(NUM_SAMPLES) % 4, 4, SEED)
    bucket.sample(np.ones(4), BATCH)
    bucket.load_state_dict(bucket.state_dict())
    after = (np.random.rand(), random.random(), float(torch.rand(1)))  # noqa: NPY002
    assert after == reference
