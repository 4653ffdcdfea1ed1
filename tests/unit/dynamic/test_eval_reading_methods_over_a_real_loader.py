"""Aioli and Skill-it over a real loader: probe rounds, held-out losses, a resume mid-probe.

The caller's part is played here as ``Curriculum`` plays it (``plugin/completion.py``): after
every step ``observe``, then the method's own evaluation when ``probe_due`` (synthetic held-out
losses that fall with the tokens a stream has had), then ``maybe_recompute``, whose update the
loader applies. A run rebuilt from the saved states mid-probe (the state through its saved
form) draws the uninterrupted run's batches and writes its history.

From issue 33 (items 4 and 5).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from helpers import make_dataset, ragged_docs
from loader_runs import mix_phase, resumed, started

from curriculum_ds.config import DynamicConfig, PhaseConfig
from curriculum_ds.core.loader import PhaseLoader
from curriculum_ds.dynamic import (
    AioliReweighter,
    ProbingReweighter,
    SkillitReweighter,
    make_reweighter,
)
from curriculum_ds.dynamic.aioli_rule import probe_mixture, probe_order
from curriculum_ds.dynamic.skillit_rule import initial_weights

NAMES = ("text_a", "text_b", "noise")
NOISE = 2


@pytest.fixture(scope="module")
def streams(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    root = tmp_path_factory.mktemp("streams")
    return [
        make_dataset(root, name, ragged_docs(80, seed=i, min_len=8, max_len=60))
        for i, name in enumerate(NAMES)
    ]


def _phase(streams: list[Path]) -> PhaseConfig:
    return mix_phase(streams, names=NAMES)


def _held_out(loader: PhaseLoader) -> dict[str, float]:
    """Text streams learn from their own samples (and a little from each other); noise never."""
    seen = loader.stream_counts.astype(np.float64)
    text = 4.0 - 0.01 * seen[:2] - 0.002 * seen[:2][::-1]
    return {"text_a": float(text[0]), "text_b": float(text[1]), "noise": 4.5}


def _run(
    streams: list[Path], dynamic: dict[str, Any], *, steps: int, resume_at: int | None = None
) -> tuple[list[np.ndarray], list[dict[str, Any]], list[int], PhaseLoader, ProbingReweighter]:
    cfg = DynamicConfig(enabled=True, unit="streams", **dynamic)
    phase = _phase(streams)
    loader, method = started(phase, cfg)
    assert isinstance(method, ProbingReweighter)
    batches, records, probed = [], [], []
    for step in range(1, steps + 1):
        if step == resume_at:  # a new process: both rebuilt from their saved forms
            loader, method, _ = resumed(phase, cfg, loader, method)
            assert isinstance(method, ProbingReweighter)
        batch = loader.next_global_batch(10)
        batches.append(batch)
        method.observe(batch, np.full(len(batch), 3.0))
        if method.probe_due(step):
            probed.append(step)
            method.observe_probe(step, _held_out(loader))
        update = method.maybe_recompute(step)
        if update is not None:
            loader.apply(update)
            if update.record is not None:
                records.append(update.record)
    return batches, records, probed, loader, method


AIOLI = {
    "method": "aioli",
    "recompute_every_n_steps": 10,
    "aioli": {"lp_rounds": 1, "probe_steps": 2, "eta": 0.5, "ema": 0.1},
}


def test_an_aioli_round_probes_each_stream_then_weights_the_learnable_ones(streams):
    batches, records, probed, loader, method = _run(streams, AIOLI, steps=38)
    assert isinstance(method, AioliReweighter)
    # rounds after steps 10, 20, 30: an evaluation, then one after each of the 3 probes
    assert probed == [10, 12, 14, 16, 20, 22, 24, 26, 30, 32, 34, 36]
    order = probe_order(3, 0, 0, 3, 1)  # seed 3, phase 0, round 0
    for i, stream in enumerate(order):  # the probes' batches lean toward their stream
        counts = np.bincount(np.concatenate([b[:, 0] for b in batches[10 + 2 * i : 12 + 2 * i]]),
                             minlength=3)  # fmt: skip
        assert int(np.argmax(counts)) == stream, (i, counts)
        assert counts[stream] == pytest.approx(20 * 0.625, abs=1.5)
    assert [r["method"] for r in records] == ["aioli"] * 3
    assert all(r["probe_steps"] == 6 for r in records)
    last = records[-1]
    assert last["streams"] == list(NAMES)
    assert int(np.argmin(last["weights"])) == NOISE  # its loss never drops
    np.testing.assert_array_equal(loader.stream_weights, last["weights"])
    a = np.array(last["interaction"])
    np.testing.assert_allclose(last["scores"], a.sum(axis=0), rtol=0, atol=0)
    w = np.array([0.4, 0.4, 0.2]) * np.exp(0.5 * a.sum(axis=0))
    np.testing.assert_allclose(last["weights"], w / w.sum(), rtol=1e-15)
    loader.close()


def test_a_probe_holds_its_mixture_and_the_round_weights_follow_it(streams):
    method = make_reweighter(DynamicConfig(enabled=True, unit="streams", **AIOLI))
    loader = PhaseLoader(_phase(streams), 0, seed=3, num_buckets=1)
    method.start_phase(loader.view(), None)
    assert isinstance(method, AioliReweighter)
    assert not method.probe_due(9)
    assert method.probe_due(10)
    method.observe_probe(10, _held_out(loader))
    update = method.maybe_recompute(10)
    assert update is not None
    assert update.hold_steps == 2
    assert update.record is None  # a probe writes no history row
    first = int(probe_order(3, 0, 0, 3, 1)[0])
    np.testing.assert_array_equal(update.proportions, probe_mixture(3, first, 0.625))
    assert method.maybe_recompute(11) is None
    assert not method.probe_due(11)
    assert method.probe_due(12)
    loader.close()


@pytest.mark.parametrize("resume_at", [11, 14, 21])
def test_aioli_resumed_mid_probe_draws_and_writes_what_the_uninterrupted_run_does(
    streams, resume_at
):
    a_batches, a_records, a_probed, a_loader, a = _run(streams, AIOLI, steps=32)
    b_batches, b_records, b_probed, b_loader, b = _run(
        streams, AIOLI, steps=32, resume_at=resume_at
    )
    assert [x.tolist() for x in b_batches] == [x.tolist() for x in a_batches]
    assert b_records == a_records
    assert b_probed == a_probed
    assert b.state().to_dict().keys() == a.state().to_dict().keys()
    assert json.dumps(b.state().to_dict(), default=np.ndarray.tolist) == json.dumps(
        a.state().to_dict(), default=np.ndarray.tolist
    )
    a_loader.close()
    b_loader.close()


SKILLIT = {
    "method": "skillit",
    "recompute_every_n_steps": 4,
    "skillit": {"eta": 0.5, "window": 3, "graph": [[1, 0.5, 0], [0, 1, 0], [0, 0, 1]]},
}


def test_skillit_starts_at_its_initial_mixture_and_weights_the_windows_losses(streams):
    batches, records, probed, loader, method = _run(streams, SKILLIT, steps=24)
    assert isinstance(method, SkillitReweighter)
    assert probed == [4, 8, 12, 16, 20, 24]
    graph = np.array(SKILLIT["skillit"]["graph"], dtype=np.float64)
    first = initial_weights(np.array([0.4, 0.4, 0.2]), graph, 0.5)
    shares = np.bincount(np.concatenate([b[:, 0] for b in batches[:4]]), minlength=3) / 40
    np.testing.assert_allclose(shares, first, atol=0.03)
    assert [r["window_size"] for r in records] == [1, 2, 3, 3, 3, 3]
    last = records[-1]
    evals = [records[i]["eval_losses"] for i in (3, 4, 5)]
    summed = np.sum(evals, axis=0)
    np.testing.assert_allclose(last["scores"], graph @ summed, rtol=1e-15)
    w = np.array([0.4, 0.4, 0.2]) * np.exp(0.5 * graph @ summed)
    np.testing.assert_allclose(last["weights"], w / w.sum(), rtol=1e-15)
    # the graph's edge text_a → text_b adds half of text_b's loss to text_a's score
    assert last["weights"][0] > last["weights"][1]
    loader.close()


def test_skillit_resumed_draws_and_writes_what_the_uninterrupted_run_does(streams):
    a_batches, a_records, _, a_loader, _ = _run(streams, SKILLIT, steps=20)
    b_batches, b_records, _, b_loader, _ = _run(streams, SKILLIT, steps=20, resume_at=10)
    assert [x.tolist() for x in b_batches] == [x.tolist() for x in a_batches]
    assert b_records == a_records
    a_loader.close()
    b_loader.close()


def test_a_phase_of_one_stream_is_left_alone(streams):
    phase = PhaseConfig.model_validate(
        {"name": "one", "duration": "1000tok",
         "train_loader": {"streams": [{"local": str(streams[0]), "proportion": 1.0}],
                          "max_seq_len": 64}}
    )  # fmt: skip
    for dynamic in (AIOLI, SKILLIT):
        loader = PhaseLoader(phase, 0, seed=3, num_buckets=1)
        method = make_reweighter(DynamicConfig(enabled=True, unit="streams", **dynamic))
        assert isinstance(method, ProbingReweighter)
        assert method.start_phase(loader.view(), None).proportions is None
        assert not any(method.probe_due(s) for s in range(1, 50))
        assert all(method.maybe_recompute(s) is None for s in range(1, 50))
        loader.close()
