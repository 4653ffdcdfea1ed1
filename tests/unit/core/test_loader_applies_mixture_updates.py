"""``PhaseLoader.apply``: the one place a re-weighting's update reaches the loader.

Over two real prepared streams: bucket assignments and probabilities, stream proportions, loss
weights, and a temporary mixture held for a number of draws (a probe round), which gives back
the mixture of before and resumes exactly from a state saved in the middle of it (through JSON
and the checkpoint's typed loader state).
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from helpers import make_dataset, ragged_docs

from curriculum_ds.config import PhaseConfig
from curriculum_ds.core.loader import PhaseLoader
from curriculum_ds.core.loader_state import LoaderState
from curriculum_ds.dynamic import MixtureUpdate

GBS = 10


@pytest.fixture(scope="module")
def datasets(tmp_path_factory):
    root = tmp_path_factory.mktemp("apply")
    return (
        make_dataset(root, "a", ragged_docs(80, seed=1, min_len=6, max_len=30)),
        make_dataset(root, "b", ragged_docs(60, seed=2, min_len=6, max_len=30)),
    )


def _loader(datasets, *, unit: str = "samples", num_buckets: int = 1, ramp: bool = False):
    proportions = ([[0.0, 0.8], [1.0, 0.2]], [[0.0, 0.2], [1.0, 0.8]]) if ramp else (0.5, 0.5)
    streams = [
        {"local": str(p), "proportion": w} for p, w in zip(datasets, proportions, strict=True)
    ]
    loader = {"streams": streams, "max_seq_len": 32, "proportion_unit": unit}
    phase = PhaseConfig.model_validate({"name": "p", "duration": "1ep", "train_loader": loader})
    return PhaseLoader(phase, 0, seed=4, num_buckets=num_buckets)


def _counts(batch: np.ndarray) -> list[int]:
    return np.bincount(batch[:, 0], minlength=2).tolist()


def test_a_temporary_mixture_holds_for_its_draws_then_the_phase_mix_comes_back(datasets):
    loader = _loader(datasets)
    assert _counts(loader.next_global_batch(GBS)) == [5, 5]
    loader.apply(MixtureUpdate(proportions=np.array([0.9, 0.1]), hold_steps=2))
    assert _counts(loader.next_global_batch(GBS)) == [9, 1]
    assert _counts(loader.next_global_batch(GBS)) == [9, 1]
    assert loader.hold == (0, pytest.approx([0.5, 0.5]))
    # the phase's own shares again, for what is drawn from now on (no catching up on the probe)
    for _ in range(3):
        assert _counts(loader.next_global_batch(GBS)) == [5, 5]
    assert loader.hold is None
    np.testing.assert_array_equal(loader.stream_weights, [0.5, 0.5])


def test_a_temporary_mixture_gives_back_the_last_recompute_weights(datasets):
    loader = _loader(datasets)
    loader.apply(MixtureUpdate(proportions=np.array([0.3, 0.7])))
    assert _counts(loader.next_global_batch(GBS)) == [3, 7]
    loader.apply(MixtureUpdate(proportions=np.array([0.1, 0.9]), hold_steps=1))
    assert _counts(loader.next_global_batch(GBS)) == [1, 9]
    assert _counts(loader.next_global_batch(GBS)) == [3, 7]


def test_a_temporary_mixture_over_a_ramp_gives_the_ramp_back(datasets):
    held, plain = _loader(datasets, ramp=True), _loader(datasets, ramp=True)
    held.apply(MixtureUpdate(proportions=np.array([0.5, 0.5]), hold_steps=1))
    held.next_global_batch(GBS, fraction=0.0)
    plain.next_global_batch(GBS, fraction=0.0)
    held.next_global_batch(GBS, fraction=0.25)
    plain.next_global_batch(GBS, fraction=0.25)
    assert held.stream_weights is None
    np.testing.assert_allclose(held.proportions, [0.65, 0.35])  # the ramp's, again
    np.testing.assert_array_equal(held.proportions, plain.proportions)


@pytest.mark.parametrize("unit", ["samples", "tokens"])
def test_a_state_saved_inside_a_temporary_mixture_resumes_exactly(datasets, unit):
    straight = _loader(datasets, unit=unit)
    straight.apply(MixtureUpdate(proportions=np.array([0.8, 0.2]), hold_steps=3))
    for _ in range(2):
        straight.next_global_batch(GBS)
    saved = straight.state_dict()
    assert saved["hold"] == {"steps": 1, "weights": [0.5, 0.5]}
    typed = LoaderState.from_dict(json.loads(json.dumps(saved))).to_dict()
    assert typed == saved
    resumed = _loader(datasets, unit=unit)
    resumed.load_state_dict(typed)
    for _ in range(4):
        np.testing.assert_array_equal(
            resumed.next_global_batch(GBS), straight.next_global_batch(GBS)
        )
    assert "hold" not in straight.state_dict()


def test_a_saved_hold_that_does_not_fit_is_refused(datasets):
    loader = _loader(datasets)
    loader.apply(MixtureUpdate(proportions=np.array([0.8, 0.2])))  # stream weights need targets
    state = {**loader.state_dict(), "hold": {"steps": 1, "weights": [0.5, 0.3, 0.2]}}
    with pytest.raises(ValueError, match=r"loader state hold .* does not fit a phase of 2 stream"):
        _loader(datasets).load_state_dict(state)


def test_bucket_updates_and_loss_weights_reach_the_samplers_and_the_step(datasets):
    loader = _loader(datasets, num_buckets=2)
    np.testing.assert_array_equal(loader.bucket_probs, [0.5, 0.5])
    only_odd = [np.arange(info.num_samples) % 2 for info in loader.infos]
    loader.apply(MixtureUpdate(buckets=only_odd, bucket_probs=np.array([0.0, 1.0])))
    batch = loader.next_global_batch(GBS)
    assert (batch[:, 1] % 2 == 1).all()  # every draw from bucket 1
    loader.apply(MixtureUpdate(loss_weights=np.array([2.0, 0.0])))
    np.testing.assert_array_equal(loader.loss_weights, [2.0, 0.0])
    with pytest.raises(ValueError, match=r"loss weights \[-1.0, 1.0\] do not fit"):
        loader.apply(MixtureUpdate(loss_weights=np.array([-1.0, 1.0])))
    with pytest.raises(ValueError, match=r"bucket probabilities \[1.0\] for 2"):
        loader.apply(MixtureUpdate(bucket_probs=np.array([1.0])))
