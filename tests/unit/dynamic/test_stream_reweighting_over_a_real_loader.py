"""``dynamic.unit: "streams"``: stream weights from the window's signals, applied to a real loader.

The rolling window by stream, the excess-loss and learnability signals, the weights of a
recompute, the loader following new proportions in either proportion unit, and a resume from
the saved states drawing what the uninterrupted run draws.

From issue 20 (items 1 and 2).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from helpers import make_dataset, ragged_docs
from loader_runs import NOISE, mix_phase, reference_streams, resumed

from curriculum_ds.config import DynamicConfig, PhaseConfig
from curriculum_ds.core.loader import PhaseLoader
from curriculum_ds.dynamic import MixtureUpdate, StreamReweighter, make_reweighter, mixture_probs
from curriculum_ds.dynamic.signals import excess_losses, learnability_scores
from curriculum_ds.dynamic.window import StreamWindow
from curriculum_ds.errors import ConfigError


# ------------------------------------------------------------------------------- the window
def test_window_keeps_the_last_values_and_their_streams_and_counts_non_finite():
    window = StreamWindow(5)
    window.push(np.array([1.0, np.nan, 2.0]), np.array([0, 1, 1]))
    window.push(np.array([3.0, 4.0, np.inf, 5.0, 6.0]), np.array([2, 0, 1, 2, 2]))
    values, streams = window.ordered()
    np.testing.assert_array_equal(values, [2.0, 3.0, 4.0, 5.0, 6.0])
    np.testing.assert_array_equal(streams, [1, 2, 0, 2, 2])
    assert window.num_non_finite == 2
    counts, means = window.stream_means(4)
    np.testing.assert_array_equal(counts, [1, 1, 3, 0])
    np.testing.assert_array_equal(means[:3], [4.0, 2.0, (3.0 + 5.0 + 6.0) / 3])
    assert np.isnan(means[3])


def test_window_rebuilt_from_its_state_gives_bit_identical_means_after_more_pushes():
    rng = np.random.default_rng(0)
    a = StreamWindow(37)
    for _ in range(5):  # wrapped around: the oldest value is in the middle of the ring
        a.push(rng.random(11) * 7, rng.integers(0, 3, 11))
    b = StreamWindow.from_state_dict(a.state_dict())
    for _ in range(4):
        values, streams = rng.random(9) * 7, rng.integers(0, 3, 9)
        a.push(values, streams)
        b.push(values, streams)
        assert a.stream_means(3)[1].tobytes() == b.stream_means(3)[1].tobytes()
    assert a.state_dict()["values"].tolist() == b.state_dict()["values"].tolist()


def test_window_state_with_more_values_than_capacity_is_refused():
    state = {"capacity": 2, "values": [1.0, 2.0, 3.0], "streams": [0, 0, 0], "num_non_finite": 0}
    with pytest.raises(ValueError, match="3 values and 3 streams for a capacity of 2"):
        StreamWindow.from_state_dict(state)


# ------------------------------------------------------------------------------ the signals
def test_excess_loss_is_loss_minus_reference_clipped_at_zero_nan_kept():
    batch = np.array([[0, 1], [1, 0], [0, 0], [1, 2]])
    reference = [np.array([2.0, 1.0]), np.array([3.0, 9.0, 0.5])]
    losses = np.array([1.5, 2.0, 2.5, np.nan])
    out = excess_losses(batch, losses, reference)
    np.testing.assert_array_equal(out[:3], [0.5, 0.0, 0.5])  # 2.0 - 3.0 clipped to 0
    assert np.isnan(out[3])


def test_excess_of_an_infinite_loss_is_left_out_never_clipped_to_zero():
    """Case C06 over excess_loss: a -inf loss minus its reference, clipped at 0, was a finite 0
    that entered the window; any non-finite loss stays out of it (NaN), +inf as -inf."""
    batch = np.array([[0, 0], [0, 1], [0, 0]])
    out = excess_losses(batch, np.array([-np.inf, np.inf, 2.5]), [np.array([2.0, 1.0])])
    assert np.isnan(out[:2]).all()
    assert out[2] == 0.5
    window = StreamWindow(4)
    window.push(out, batch[:, 0])
    assert (len(window), window.num_non_finite) == (1, 2)


def test_learnability_is_the_relative_drop_and_fills_unknown_streams():
    then = np.array([4.0, 2.0, np.nan, 0.0])
    now = np.array([3.0, 1.9, 1.0, 1.0])
    scores = learnability_scores(then, now)
    np.testing.assert_allclose(scores[:2], [0.25, 0.05])
    np.testing.assert_allclose(scores[2:], [0.15, 0.15])  # unknown then, or 0: the others' mean
    np.testing.assert_array_equal(learnability_scores(np.full(2, np.nan), now[:2]), [0.0, 0.0])


# ----------------------------------------------------------------- a reweighter and a loader
@pytest.fixture(scope="module")
def streams(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    return reference_streams(tmp_path_factory.mktemp("streams"))


def _phase(streams: list[Path], unit: str = "samples") -> PhaseConfig:
    return mix_phase(streams, unit=unit)


def _losses(batch: np.ndarray, step: int) -> np.ndarray:
    """Text losses fall with the step (learnable), noise stays at 4.5 nats."""
    text = 3.0 / (1.0 + 0.1 * step) + 1.0 + 0.01 * (batch[:, 1] % 5)
    return np.where(batch[:, 0] == NOISE, 4.5, text)


def _run(
    streams: list[Path],
    dynamic: dict[str, Any],
    *,
    steps: int,
    unit: str = "samples",
    resume_at: int | None = None,
) -> tuple[list[np.ndarray], list[dict[str, Any]], PhaseLoader]:
    cfg = DynamicConfig(enabled=True, unit="streams", **dynamic)
    phase = _phase(streams, unit)
    loader = PhaseLoader(phase, 0, seed=3, num_buckets=1)
    reweighter = make_reweighter(cfg)
    assert isinstance(reweighter, StreamReweighter)
    assert reweighter.start_phase(loader.view(), None) == MixtureUpdate()  # the phase's mix
    batches, records = [], []
    for step in range(1, steps + 1):
        if step == resume_at:  # a new process: both rebuilt from their saved states
            loader, reweighter, _ = resumed(phase, cfg, loader, reweighter)
        batch = loader.next_global_batch(10)
        batches.append(batch)
        reweighter.observe(batch, _losses(batch, step))
        update = reweighter.maybe_recompute(step)
        if update is not None:
            assert update.buckets is None
            assert update.bucket_probs is None
            loader.apply(update)
            records.append(update.record)
    return batches, records, loader


def test_loss_signal_gives_the_noise_stream_the_largest_weight(streams):
    _, records, loader = _run(
        streams, {"window": 40, "recompute_every_n_steps": 4, "temperature": 0.5, "floor": 0.05},
        steps=24,
    )  # fmt: skip
    last = records[-1]
    assert (last["unit"], last["signal"]) == ("streams", "loss")
    assert last["streams"] == ["text_a", "text_b", "noise"]
    assert int(np.argmax(last["weights"])) == NOISE
    np.testing.assert_allclose(
        last["weights"], mixture_probs(last["scores"], temperature=0.5, floor=0.05), rtol=0
    )
    assert sum(last["stream_counts"]) == last["window_size"] == 40
    np.testing.assert_array_equal(loader.stream_weights, last["weights"])
    loader.close()


def test_excess_loss_signal_gives_the_noise_stream_the_smallest_weight(streams):
    _, records, loader = _run(
        streams,
        {"signal": "excess_loss", "reference_metric": "ref_loss", "window": 40,
         "recompute_every_n_steps": 4, "temperature": 0.5, "floor": 0.05},
        steps=24,
    )  # fmt: skip
    last = records[-1]
    assert last["signal"] == "excess_loss"
    assert int(np.argmin(last["weights"])) == NOISE
    assert last["scores"][NOISE] == pytest.approx(0.5)  # 4.5 - 4.0
    loader.close()


def test_learnability_keeps_the_proportions_first_then_favours_falling_losses(streams):
    _, records, loader = _run(
        streams,
        {"signal": "learnability", "learnability_horizon": 2, "window": 20,
         "recompute_every_n_steps": 2, "temperature": 0.05, "floor": 0.05},
        steps=12,
    )  # fmt: skip
    first = records[0]
    assert first["kept_previous"] is True
    assert first["scores"] is None
    np.testing.assert_allclose(first["weights"], [0.4, 0.4, 0.2])  # the phase's proportions
    assert len(first["mean_losses"]) == 3
    last = records[-1]
    assert "kept_previous" not in last
    assert last["scores"][NOISE] == pytest.approx(0.0)  # its loss does not fall
    assert int(np.argmin(last["weights"])) == NOISE
    loader.close()


@pytest.mark.parametrize("unit", ["samples", "tokens"])
def test_the_loader_follows_the_new_weights_from_the_recompute_on(streams, unit):
    dynamic = {"window": 40, "recompute_every_n_steps": 4, "temperature": 0.5, "floor": 0.05}
    batches, records, loader = _run(streams, dynamic, steps=30, unit=unit)
    # after the first recompute (step 4) the draws track the integral of the step-wise weights
    assert [r["window_size"] > 0 for r in records] == [True] * 7  # steps 4, 8, ..., 28
    weights_at = {4 * (i + 1): np.array(r["weights"]) for i, r in enumerate(records)}
    target = np.zeros(3)
    counted = np.zeros(3)
    current = None
    for step, batch in enumerate(batches, start=1):
        if step > 4:
            per_stream = (
                np.bincount(batch[:, 0], minlength=3)
                if unit == "samples"
                else loader.stream_tokens(batch).astype(np.float64)
            )
            counted += per_stream
            target += current * per_stream.sum()
        current = weights_at.get(step, current)
    largest = 1.0 if unit == "samples" else 64.0  # one sample, or one sample's tokens
    assert np.abs(counted - target).max() <= largest + 1e-9
    loader.close()


@pytest.mark.parametrize(
    ("dynamic", "unit"),
    [
        ({"signal": "loss"}, "samples"),
        ({"signal": "excess_loss", "reference_metric": "ref_loss"}, "tokens"),
        ({"signal": "learnability", "learnability_horizon": 2}, "samples"),
    ],
)
def test_resume_from_the_saved_states_draws_what_the_uninterrupted_run_draws(
    streams, dynamic, unit
):
    common = {"window": 30, "recompute_every_n_steps": 3, "temperature": 0.1, "floor": 0.05}
    a_batches, a_records, a = _run(streams, {**common, **dynamic}, steps=20, unit=unit)
    b_batches, b_records, b = _run(
        streams, {**common, **dynamic}, steps=20, unit=unit, resume_at=11
    )
    assert [x.tolist() for x in b_batches] == [x.tolist() for x in a_batches]
    assert b_records == a_records
    a.close()
    b.close()


def test_a_stream_without_the_reference_column_is_refused_naming_it(streams, tmp_path):
    plain = make_dataset(tmp_path, "plain", ragged_docs(20, seed=9))
    phase = _phase([streams[0], streams[1], plain])
    loader = PhaseLoader(phase, 0, seed=3, num_buckets=1)
    cfg = DynamicConfig(
        enabled=True, unit="streams", signal="excess_loss", reference_metric="ref_loss"
    )
    with pytest.raises(
        ConfigError,
        match=r"^curriculum.dynamic.reference_metric: stream 'plain' has no metric column "
        r"'ref_loss' \(has: compression_ratio, num_tokens, token_entropy\)$",
    ):
        make_reweighter(cfg).start_phase(loader.view(), None)
    loader.close()


def test_stream_weights_of_another_shape_are_refused_by_the_loader(streams):
    loader = PhaseLoader(_phase(streams), 0, seed=3, num_buckets=1)
    with pytest.raises(ValueError, match=r"do not fit a phase of 3 stream\(s\)"):
        loader.set_proportions(np.array([0.5, 0.5]))
    with pytest.raises(ValueError, match=r"do not fit a phase of 3 stream\(s\)"):
        loader.set_proportions(np.array([0.5, 0.5, 0.0]))
    loader.close()


@pytest.mark.parametrize("signal", ["loss", "excess_loss", "learnability"])
def test_c06_an_all_non_finite_window_keeps_the_phase_proportions_over_streams(streams, signal):
    """Case C06 against ``unit: "streams"``: steps whose losses are all NaN or ±inf (samples
    without a loss-bearing token) leave the window empty; each recompute keeps the phase's own
    proportions (``kept_previous``), hands the loader nothing, and counts every value left out;
    then one finite step gives finite weights with the floor held."""
    keys: dict[str, Any] = {"signal": signal, "window": 8, "recompute_every_n_steps": 1}
    if signal == "excess_loss":
        keys["reference_metric"] = "ref_loss"
    cfg = DynamicConfig(enabled=True, unit="streams", floor=0.1, **keys)
    loader = PhaseLoader(_phase(streams), 0, seed=3, num_buckets=1)
    reweighter = make_reweighter(cfg)
    reweighter.start_phase(loader.view(), None)
    bad = np.resize([np.nan, np.inf, -np.inf], 10)
    for step in (1, 2):
        batch = loader.next_global_batch(10)
        reweighter.observe(batch, bad)
        update = reweighter.maybe_recompute(step)
        assert update is not None
        assert update.proportions is None
        assert update.record["kept_previous"] is True
        assert update.record["weights"] == [0.4, 0.4, 0.2]
        assert update.record["num_non_finite"] == 10 * step
    for step in (3, 4):  # learnability compares two recomputes with losses
        batch = loader.next_global_batch(10)
        reweighter.observe(batch, _losses(batch, step))
        update = reweighter.maybe_recompute(step)
    assert update is not None
    assert update.proportions is not None
    weights = np.asarray(update.record["weights"])
    assert np.isfinite(weights).all()
    assert (weights >= 0.1).all()
    assert abs(weights.sum() - 1) <= 1e-12
    loader.close()
