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
    target_ramps,
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
    # a saved phase, as the checkpoint's curriculum state holds it, read through PhaseConfig
    phase = {
        "name": "p",
        "duration": "100tok",
        "train_loader": {
            "proportion_unit": "tokens",
            "streams": [{"local": "/d/web", "proportion": 2}, {"local": "/d/code", "name": "c"}],
        },
    }
    assert _target(phase) == PhaseTarget("tokens", {})  # not every stream has a proportion
    phase["train_loader"]["streams"][1]["proportion"] = 6
    assert _target(phase) == PhaseTarget("tokens", {"web": 0.25, "c": 0.75})
    one = {"name": "p", "duration": "1ep", "train_loader": {"streams": [{"local": "/d/web"}]}}
    assert _target(one) == PhaseTarget("samples", {"web": 1.0})
    assert _target({"train_loader": {"streams": [{"local": "/d/web"}]}}) is None  # no phase
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


# issue 22: a phase whose proportions ramp has a moving target, drawn along the ramp
RAMP_PHASE = {
    "name": "ramp",
    "duration": "1ep",
    "train_loader": {
        "proportion_unit": "tokens",
        "streams": [
            {"local": "/d/a", "proportion": [[0.0, 0.9], [0.5, 0.9], [1.0, 0.1]]},
            {"local": "/d/b", "proportion": [[0.0, 0.1], [0.5, 0.1], [1.0, 0.9]]},
        ],
    },
}


def test_a_ramp_phase_targets_the_normalised_ramp():
    target = _target(RAMP_PHASE)
    assert target.unit == "tokens"
    assert target.tokens is None
    assert _target({**RAMP_PHASE, "duration": "2000tok"}).tokens == 2000
    assert target.proportions == {}
    assert set(target.ramps) == {"a", "b"}
    for name, shares_ in (("a", [0.9, 0.9, 0.1]), ("b", [0.1, 0.1, 0.9])):
        assert [f for f, _ in target.ramps[name]] == [0.0, 0.5, 1.0]
        assert [s for _, s in target.ramps[name]] == pytest.approx(shares_)


def test_a_ramp_whose_total_moves_is_sampled_between_its_points():
    phase = {
        "name": "p",
        "duration": "1ep",
        "train_loader": {
            "streams": [
                {"local": "/d/a", "proportion": 1.0},
                {"local": "/d/b", "proportion": [[0, 0], [1, 3]]},
            ]
        },
    }
    target = _target(phase)
    fractions = [f for f, _ in target.ramps["b"]]
    assert (fractions[0], fractions[-1]) == (0.0, 1.0)
    assert len(fractions) > 3
    for f, share in target.ramps["b"]:  # 3f / (1 + 3f), not a straight line from 0 to 0.75
        assert share == pytest.approx(3 * f / (1 + 3 * f))
    assert [
        a + b for (_, a), (_, b) in zip(target.ramps["a"], target.ramps["b"], strict=True)
    ] == pytest.approx([1.0] * len(fractions))


def test_the_panel_draws_a_ramp_target_along_its_phase(tmp_path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    targets = {0: TARGETS[0], 1: _target(RAMP_PHASE)}
    rows = ROWS[:3] + [
        {**r, "streams": {"a": r["streams"]["a"], "b": r["streams"]["b"]}} for r in ROWS[3:]
    ]
    spans = [PhaseSpan(0, "p0", 0, 30, 1, 3), PhaseSpan(1, "p1", 30, 60, 4, 6)]
    report = RunReport(tmp_path, rows, phases=spans, targets=targets)  # type: ignore[arg-type]
    fig, ax = plt.subplots()
    _share_panel(ax, report, {"a": "C0", "b": "C1"})
    dashed = {line.get_label(): line for line in ax.lines if line.get_linestyle() == "--"}
    assert list(dashed["b target"].get_xdata()) == [30.0, 45.0, 60.0]  # an "ep" phase: its span
    assert list(dashed["b target"].get_ydata()) == pytest.approx([0.1, 0.1, 0.9])
    # "a" has a level in phase 0 (hlines) and a ramp in phase 1: one legend entry
    a_ramp = [
        line for line in ax.lines if line.get_linestyle() == "--" and line.get_color() == "C0"
    ]
    assert list(a_ramp[0].get_ydata()) == pytest.approx([0.9, 0.9, 0.1])
    segments = {c.get_label(): c.get_segments() for c in ax.collections}
    assert [tuple(map(tuple, s)) for s in segments["a target"]] == [((0.0, 1.0), (30.0, 1.0))]
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert labels.count("a target") == 1
    plt.close(fig)


def test_a_token_phase_ramp_is_drawn_over_its_duration_not_its_overshoot():
    """A ramp's fraction is the consumed share of the phase's duration: a phase of 20 tokens
    that ended at 30 (overshoot) has its ramp's end at 20 tokens from its start."""
    targets = {1: _target({**RAMP_PHASE, "duration": "20tok"})}
    spans = [PhaseSpan(1, "p1", 30, 60, 4, 6)]
    assert target_ramps(spans, targets)["b"] == [
        ([30.0, 40.0, 50.0], pytest.approx([0.1, 0.1, 0.9]))
    ]
