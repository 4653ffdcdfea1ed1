"""The report's mix panel: each phase's realised share in a rolling window inside the phase (not
cumulative from step 0), in the phase's proportion unit, with the target beside it.

From issue 24, item 5 (the trial read "man ~10%" off the cumulative panel of an exact anneal mix).
"""

from __future__ import annotations

import math

import pytest

from curriculum_ds.commands.report import PhaseSpan, RunReport, _share_panel
from curriculum_ds.commands.report_shares import (
    PhaseTarget,
    _target,
    read_targets,
    share_window,
    shares,
    target_segments,
)


def _row(step, phase, tokens, streams):
    return {"step": step, "phase": phase, "tokens": tokens, "streams": streams}


# phase 0: only "a"; phase 1 (tokens unit): a/b mixed 1:3 in tokens, 1:1 in samples
ROWS = [_row(s, 0, 10 * s, {"a": {"samples": 2, "tokens": 10}}) for s in (1, 2, 3)]
ROWS += [
    _row(4, 1, 40, {"a": {"samples": 1, "tokens": 1}, "b": {"samples": 1, "tokens": 9}}),
    _row(5, 1, 50, {"a": {"samples": 1, "tokens": 4}, "b": {"samples": 1, "tokens": 6}}),
    _row(6, 1, 60, {"a": {"samples": 1, "tokens": 2}, "b": {"samples": 1, "tokens": 8}}),
]
TARGETS = {0: PhaseTarget("samples", {"a": 1.0}), 1: PhaseTarget("tokens", {"a": 0.25, "b": 0.75})}


def test_shares_are_a_rolling_window_restarted_at_each_phase():
    out = shares(ROWS, TARGETS, window=2)
    xs, ys = out["a"]
    assert xs == [10, 20, 30, 40, 40, 50, 60]
    # phase 0: all "a"; a NaN break at phase 1's first step; then tokens over the last 2 steps
    assert ys[:3] == [1.0, 1.0, 1.0]
    assert math.isnan(ys[3])
    assert ys[4:] == pytest.approx([1 / 10, 5 / 20, 6 / 20])
    assert out["b"] == ([40, 50, 60], pytest.approx([9 / 10, 15 / 20, 14 / 20]))
    # not cumulative from step 0: phase 0's 30 tokens of "a" do not count in phase 1
    cumulative_a_at_6 = (30 + 7) / 60
    assert ys[-1] != pytest.approx(cumulative_a_at_6)


def test_a_samples_phase_counts_samples():
    targets = {**TARGETS, 1: PhaseTarget("samples", {"a": 0.5, "b": 0.5})}
    assert shares(ROWS, targets, window=3)["b"][1] == pytest.approx([0.5, 0.5, 0.5])


def test_targets_are_the_normalised_proportions_per_phase_span():
    phase = {
        "train_loader": {
            "proportion_unit": "tokens",
            "streams": [{"local": "/d/web", "proportion": 2}, {"local": "/d/code", "name": "c"}],
        }
    }
    assert _target(phase) == PhaseTarget("tokens", {})  # not every stream has a proportion
    phase["train_loader"]["streams"][1]["proportion"] = 6
    assert _target(phase) == PhaseTarget("tokens", {"web": 0.25, "c": 0.75})
    one = {"train_loader": {"streams": [{"local": "/d/web"}]}}
    assert _target(one) == PhaseTarget("samples", {"web": 1.0})
    spans = [PhaseSpan(0, "p0", 0, 30, 1, 3), PhaseSpan(1, "p1", 30, 60, 4, 6)]
    assert target_segments(spans, TARGETS) == {
        "a": [(0.0, 30.0, 1.0), (30.0, 60.0, 0.25)],
        "b": [(30.0, 60.0, 0.75)],
    }


def test_no_checkpoint_no_targets(tmp_path):
    assert read_targets(tmp_path) == {}
    assert share_window(10) == 4
    assert share_window(400) == 20
    assert share_window(10_000) == 64


def test_the_panel_draws_the_rolling_shares_and_the_targets(tmp_path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    spans = [PhaseSpan(0, "p0", 0, 30, 1, 3), PhaseSpan(1, "p1", 30, 60, 4, 6)]
    report = RunReport(tmp_path, ROWS, phases=spans, targets=TARGETS)  # type: ignore[arg-type]
    fig, ax = plt.subplots()
    _share_panel(ax, report, {"a": "C0", "b": "C1"})
    lines = {line.get_label(): line for line in ax.lines}
    expected = shares(ROWS, TARGETS, share_window(len(ROWS)))
    for name in ("a", "b"):
        xs, ys = expected[name]
        assert list(lines[name].get_xdata()) == xs
        assert list(lines[name].get_ydata()) == pytest.approx(ys, nan_ok=True)
    segments = {
        c.get_label(): [tuple(map(tuple, seg)) for seg in c.get_segments()] for c in ax.collections
    }
    assert segments["a target"] == [((0.0, 1.0), (30.0, 1.0))]
    assert segments["b target"] == [((30.0, 0.75), (60.0, 0.75))]
    assert "rolling 4 steps" in ax.get_title(loc="left")
    plt.close(fig)
