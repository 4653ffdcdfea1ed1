"""DoReMi's weights, their running mean and its scores match the reference's own update.

Reference: ``sangmichaelxie/doremi``, ``doremi/trainer.py``, ``DoReMiTrainer.update_domain_weights``
(the ``doremiv1`` step) and ``write_weights`` (the running mean ``avg_domain_weights``), at commit
7cde52d1848737aa967ecbdb9e643cf334de160d. The golden vectors (``tests/data/mixers/
doremi_golden.npz``) were made by ``tests/data/mixers/make_doremi_golden.py``, which compiles
those two methods from the reference's source and runs them with torch outside the project: 1,200
updates over K = 2, 5 and 17 streams, random per-sample losses and reference losses, random
subsets of the streams in each step (an absent stream keeps its last score), several η and ε.

Our documented variant: the excess loss is clipped per sample (our losses and the reference
model's are per-sample mean token losses), where the reference clips per token; the golden run
hands the reference one "token" per sample, so its rule and ours see the same numbers. The
float64 golden run is the reference's code with its two float32 casts made float64; the
verbatim float32 run is matched within float32 rounding.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from doremi_configs import doremi_dynamic

from curriculum_ds.dynamic.doremi import DoReMiReweighter, doremi_loss_weights
from curriculum_ds.dynamic.state import DoReMiState, parse_dynamic_state
from curriculum_ds.dynamic.update import PhaseView

GOLDEN = Path(__file__).parents[2] / "data" / "mixers" / "doremi_golden.npz"


def _sequences() -> list[dict[str, Any]]:
    z = np.load(GOLDEN)
    assert str(z["reference_commit"]) == "7cde52d1848737aa967ecbdb9e643cf334de160d"
    out = []
    for i in range(int(z["num_sequences"])):
        seq = {key.split("_", 1)[1]: z[key] for key in z.files if key.startswith(f"seq{i}_")}
        out.append(seq)
    return out


SEQUENCES = _sequences()


def _view(seq: dict[str, Any]) -> PhaseView:
    k = int(seq["k"])
    ref = seq["ref"].astype(np.float64)
    return PhaseView(
        phase_idx=0,
        stream_names=tuple(f"s{i}" for i in range(k)),
        proportions=seq["w0"],
        num_samples=(ref.shape[1],) * k,
        metrics=tuple({"ref_loss": ref[i]} for i in range(k)),
    )


def _reweighter(seq: dict[str, Any], apply: str | None = None) -> DoReMiReweighter:
    """DoReMi with the sequence's η, ε and initial score (ε = 0: ``apply: "loss"``, which the
    config requires for it; the weights are the same)."""
    if apply is None:
        apply = "loss" if float(seq["eps"]) == 0 else "sampling"
    cfg = doremi_dynamic(
        window=seq["streams"].shape[1],  # the window is one step: the reference's update
        eta=float(seq["eta"]),
        epsilon=float(seq["eps"]),
        initial_score=float(seq["score0"]),  # the reference's ln V
        apply=apply,
    )
    return DoReMiReweighter(cfg)


def _step(rw: DoReMiReweighter, seq: dict[str, Any], t: int) -> Any:
    batch = np.stack([seq["streams"][t], seq["idx"][t]], axis=1).astype(np.int64)
    rw.observe(batch, seq["losses"][t].astype(np.float64))
    update = rw.maybe_recompute(t + 1)
    assert update is not None
    assert update.record is not None
    return update


def test_the_golden_vectors_cover_a_thousand_updates_with_absent_streams():
    assert sum(len(s["w64"]) for s in SEQUENCES) >= 1000
    assert {int(s["k"]) for s in SEQUENCES} == {2, 5, 17}
    absent = sum(
        int((np.bincount(s["streams"][t], minlength=int(s["k"])) == 0).any())
        for s in SEQUENCES
        for t in range(len(s["streams"]))
    )
    assert absent > 300, absent


@pytest.mark.parametrize("i", range(len(SEQUENCES)))
def test_weights_average_and_scores_match_the_reference(i):
    seq = SEQUENCES[i]
    rw = _reweighter(seq)
    assert rw.start_phase(_view(seq), None).proportions is None
    worst = {"weights": 0.0, "average": 0.0, "scores": 0.0, "float32": 0.0}
    for t in range(len(seq["w64"])):
        update = _step(rw, seq, t)
        row = update.record
        weights = np.array(row["weights"])
        if rw.doremi.apply == "sampling":
            np.testing.assert_array_equal(update.proportions, weights)
        worst["weights"] = max(worst["weights"], np.abs(weights - seq["w64"][t]).max())
        worst["average"] = max(
            worst["average"], np.abs(np.array(row["average_weights"]) - seq["w64avg"][t]).max()
        )
        scores = np.array(row["scores"])
        worst["scores"] = max(worst["scores"], np.abs(scores - seq["w64s"][t]).max())
        worst["float32"] = max(worst["float32"], np.abs(weights - seq["w32"][t]).max())
        assert abs(sum(row["weights"]) - 1.0) <= 1e-12
        assert min(row["weights"]) >= float(seq["eps"]) / int(seq["k"]) * (1 - 1e-12)
    assert worst["weights"] <= 1e-9, worst
    assert worst["average"] <= 1e-9, worst
    assert worst["scores"] <= 1e-9, worst
    assert worst["float32"] <= 1e-5, worst  # the reference's own float32 buffers
    assert rw.num_updates == len(seq["w64"])


@pytest.mark.parametrize("apply", ["sampling", "loss"])
def test_a_resume_mid_sequence_restores_log_weights_scores_and_average_exactly(apply):
    seq = SEQUENCES[3]  # K = 5, ε = 0.05
    full = _reweighter(seq, apply)
    full.start_phase(_view(seq), None)
    rows = [_step(full, seq, t).record for t in range(60)]
    first = _reweighter(seq, apply)
    first.start_phase(_view(seq), None)
    for t in range(25):
        _step(first, seq, t)
    saved = parse_dynamic_state(first.state().to_dict())
    assert isinstance(saved, DoReMiState)
    resumed = _reweighter(seq, apply)
    start = resumed.start_phase(_view(seq), saved)
    if apply == "loss":  # the loader does not save its loss weights: the start gives them back
        expected = doremi_loss_weights(first.probs, seq["w0"])
        np.testing.assert_array_equal(start.loss_weights, expected)
    else:
        assert start.loss_weights is None
        assert start.proportions is None
    for attr in ("probs", "average", "last_scores"):
        assert getattr(resumed, attr).tobytes() == getattr(first, attr).tobytes()
    assert [_step(resumed, seq, t).record for t in range(25, 60)] == rows[25:]


def test_loss_mode_keeps_the_mix_and_weights_the_loss_by_w_over_the_proportions():
    seq = SEQUENCES[4]  # K = 5, non-uniform proportions
    rw = _reweighter(seq, "loss")
    start = rw.start_phase(_view(seq), None)
    np.testing.assert_allclose(start.loss_weights, np.full(5, 0.2), rtol=0, atol=1e-15)
    for t in range(40):
        update = _step(rw, seq, t)
        assert update.proportions is None
        np.testing.assert_allclose(update.record["weights"], seq["w64"][t], rtol=0, atol=1e-9)
        expected = seq["w64"][t] / seq["w0"] / (seq["w64"][t] / seq["w0"]).sum()
        np.testing.assert_allclose(update.loss_weights, expected, rtol=0, atol=1e-9)
        assert update.record["loss_weights"] == update.loss_weights.tolist()
        assert update.record["apply"] == "loss"


def test_an_empty_window_keeps_the_weights_and_counts_no_update():
    seq = SEQUENCES[0]
    rw = _reweighter(seq)
    rw.start_phase(_view(seq), None)
    batch = np.array([[0, 1], [1, 2]], dtype=np.int64)
    rw.observe(batch, np.array([np.nan, np.inf]))
    update = rw.maybe_recompute(1)
    assert update is not None
    assert update.proportions is None
    assert update.record["kept_previous"] is True
    assert update.record["num_non_finite"] == 2
    assert rw.num_updates == 0
    np.testing.assert_array_equal(update.record["average_weights"], seq["w0"])
