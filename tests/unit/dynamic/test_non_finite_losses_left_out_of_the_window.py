"""Case C06 (../shared/cases/README.md): non-finite losses in the difficulty window.

Window [1, 2, 3, 4, NaN] with 4 buckets: the NaN is left out and counted, the edges are those of
[1, 2, 3, 4]; never a NaN edge or weight, and the weights sum to 1. +inf is treated like NaN. An
empty or all-NaN window (start-up, right after a phase swap) does not crash and keeps the previous
weights (uniform at the start).
"""

from __future__ import annotations

import numpy as np
import pytest
from helpers import make_dataset, ragged_docs, recompute

from curriculum_ds.config import DynamicConfig, PhaseConfig
from curriculum_ds.core.loader import PhaseLoader
from curriculum_ds.dynamic import BucketReweighter, bucket_probs, bucket_scores
from curriculum_ds.kernels import RollingWindow, bucket_edges

FINITE = [1.0, 2.0, 3.0, 4.0]
BAD = [float("nan"), float("inf"), float("-inf")]


@pytest.fixture(autouse=True)
def _no_token_reader(no_token_reader):
    """Loaders without a streaming reader in this module (see ``conftest.no_token_reader``)."""


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    return make_dataset(tmp_path_factory.mktemp("c06"), "docs", ragged_docs(40, seed=5))


def _loader(dataset, phase_idx=0) -> PhaseLoader:
    phase = PhaseConfig.model_validate(
        {
            "name": f"p{phase_idx}",
            "duration": "1000tok",
            "train_loader": {"streams": [{"local": str(dataset)}], "max_seq_len": 64},
        }
    )
    return PhaseLoader(phase, phase_idx, seed=11, num_buckets=4)


def _reweighter() -> BucketReweighter:
    cfg = DynamicConfig(
        enabled=True,
        num_buckets=4,
        window=100,
        recompute_every_n_steps=1,
        temperature=1.0,
        floor=0.05,
    )
    return BucketReweighter(cfg)


def _expected_for_finite():
    edges = bucket_edges(np.array(FINITE), 4)
    scores, counts = bucket_scores(np.array(FINITE, dtype=np.float32), edges, 4)
    return edges, scores, counts, bucket_probs(scores, temperature=1.0, floor=0.05)


@pytest.mark.parametrize("bad", BAD, ids=["nan", "+inf", "-inf"])
def test_window_leaves_out_and_counts_non_finite(bad):
    window = RollingWindow(10)
    window.push(np.array([*FINITE, bad]))
    assert len(window) == 4
    assert window.num_non_finite == 1
    np.testing.assert_array_equal(window.values(), FINITE)
    np.testing.assert_array_equal(window.edges(4), bucket_edges(np.array(FINITE), 4))
    np.testing.assert_array_equal(bucket_edges(np.array([*FINITE, bad]), 4), [1.0, 2.0, 3.0])


@pytest.mark.parametrize("bad", BAD, ids=["nan", "+inf", "-inf"])
def test_reweighter_recompute_with_a_non_finite_loss(dataset, bad):
    loader = _loader(dataset)
    dyn = _reweighter()
    loader.apply(dyn.start_phase(loader.view(), None))
    batch = np.stack([np.zeros(5, np.int64), np.arange(5, dtype=np.int64)], axis=1)
    dyn.observe(batch, np.array([*FINITE, bad]))
    rec = recompute(dyn, 1, loader)
    edges, scores, counts, probs = _expected_for_finite()
    assert rec["num_non_finite"] == 1
    assert rec["window_size"] == 4
    assert rec["edges"] == edges.tolist() == [1.0, 2.0, 3.0]
    assert rec["bucket_counts"] == counts.tolist()
    np.testing.assert_array_equal(rec["scores"], scores)
    np.testing.assert_array_equal(rec["weights"], probs)
    weights = np.array(rec["weights"])
    assert np.all(np.isfinite(weights))
    assert np.all(np.isfinite(rec["edges"]))
    assert abs(weights.sum() - 1) <= 1e-12
    assert weights.min() >= 0.05
    # the sample whose loss was not finite stays unseen: it keeps its static bucket
    assert np.isnan(dyn.last_loss[0][4])
    assert dyn.buckets[0][4] == dyn.static_buckets[0][4]
    np.testing.assert_array_equal(dyn.buckets[0][:4], np.searchsorted(edges, FINITE, side="right"))
    # the sampler still draws (never an excluded index, never a crash)
    drawn = loader.next_global_batch(64, dyn.probs)
    assert drawn[:, 1].min() >= 0
    assert drawn[:, 1].max() < 40


def test_empty_and_all_nan_window_at_start_keeps_uniform(dataset):
    loader = _loader(dataset)
    dyn = _reweighter()
    loader.apply(dyn.start_phase(loader.view(), None))
    rec = recompute(dyn, 1, loader)  # nothing observed yet
    assert rec["kept_previous"] is True
    assert rec["weights"] == [0.25] * 4
    assert rec["window_size"] == 0
    batch = loader.next_global_batch(8, dyn.probs)
    dyn.observe(batch, np.full(8, np.nan))
    rec = recompute(dyn, 2, loader)
    assert rec["kept_previous"] is True
    assert rec["weights"] == [0.25] * 4
    assert rec["num_non_finite"] == 8
    assert "edges" not in rec
    assert dyn.edges is None


def test_all_nan_window_after_a_phase_swap_keeps_the_previous_weights(dataset):
    loader = _loader(dataset)
    dyn = _reweighter()
    loader.apply(dyn.start_phase(loader.view(), None))
    batch = np.stack([np.zeros(5, np.int64), np.arange(5, dtype=np.int64)], axis=1)
    dyn.observe(batch, np.array([*FINITE, np.nan]))
    recompute(dyn, 1, loader)
    previous = dyn.probs.copy()
    assert not np.allclose(previous, 0.25)

    swapped = _loader(dataset, phase_idx=1)
    swapped.apply(dyn.start_phase(swapped.view(), None))
    assert len(dyn.window) == 0
    assert dyn.window.num_non_finite == 0
    for step in (2, 3):
        batch = swapped.next_global_batch(8, dyn.probs)
        dyn.observe(batch, np.full(8, np.inf))
        rec = recompute(dyn, step, swapped)
        assert rec["kept_previous"] is True
        np.testing.assert_array_equal(rec["weights"], previous)
    np.testing.assert_array_equal(dyn.probs, previous)


def test_bucket_scores_never_nan():
    # only finite values reach bucket_scores (the window filters); an empty window is refused
    with pytest.raises(ValueError, match="no value"):
        bucket_scores(np.array([], dtype=np.float32), np.array([1.0, 2.0, 3.0]), 4)
    scores, _ = bucket_scores(np.array([7.0, 7.0, 7.0], dtype=np.float32), np.array([7.0] * 3), 4)
    assert np.all(np.isfinite(scores))
    np.testing.assert_array_equal(scores, [7.0] * 4)
