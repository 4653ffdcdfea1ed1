"""``curriculum-ds curve`` on a ``dynamic.unit: "streams"`` run: weights by stream name.

Two phases with different streams ("mix": docstrings/code/noise, "anneal": code/prose), a
learnability phase whose first recompute kept the previous weights.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import matplotlib.image as mpimg
import matplotlib.pyplot as plt
import pytest
from click.testing import CliRunner
from stream_history import ANNEAL, MIX, WEIGHTS, history_row

from curriculum_ds.cli import main
from curriculum_ds.commands.curve import figure, load_curve, render_table
from curriculum_ds.commands.stream_weights import (
    KEPT_NOTE,
    STREAMS_PHASE_START_NOTE,
    final_weights,
    weight_lines,
)
from curriculum_ds.errors import DataError


def streams_run(run_dir: Path) -> Path:
    run_dir.mkdir(parents=True)
    metrics = [
        {"step": s, "phase": int(s > 20), "phase_name": ["mix", "anneal"][s > 20], "loss": 1.0}
        for s in range(1, 46)
    ]
    rows = [history_row(s) for s in WEIGHTS]
    (run_dir / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in metrics))
    (run_dir / "curriculum_history.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return run_dir


def test_the_table_has_a_column_per_stream_name_across_phases(tmp_path: Path) -> None:
    curve = load_curve(streams_run(tmp_path / "run"))
    assert curve.unit == "streams"
    lines = render_table(curve).splitlines()
    assert lines[0] == (
        "stream weights (signal loss → learnability; 3 → 2 streams; 4 recomputes, floor 0.05, "
        "temperature 0.5)"
    )
    assert lines[1].split() == ["step", "phase", "docstrings", "code", "noise", "prose"]
    body = [ln.split() for ln in lines[3:7]]
    assert body == [
        ["10", "mix", "0.210", "0.240", "0.550", "-"],
        ["20", "mix", "0.300", "0.300", "0.400", "-"],
        ["30", "anneal", "-", "0.500", "-", "0.500", "*"],  # kept the previous weights
        ["40", "anneal", "-", "0.350", "-", "0.650"],
    ]
    assert lines[7] == "phases: mix from step 1, anneal from step 21"
    assert lines[8:] == [KEPT_NOTE, STREAMS_PHASE_START_NOTE]


def test_the_figure_draws_a_line_per_stream_and_phase_with_names_in_the_legend(
    tmp_path: Path,
) -> None:
    fig = figure(load_curve(streams_run(tmp_path / "run")))
    ax = fig.axes[0]
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    assert legend[:4] == ["docstrings", "code", "noise", "prose"]  # "code" once, both phases
    assert "kept previous weights" in legend
    assert "stream weights" in ax.get_title()
    assert "signal loss → learnability" in ax.get_title()
    steps = {}
    for line in ax.lines:
        label = line.get_label()
        if not label.startswith("_") and label in MIX + ANNEAL:
            steps[label] = (list(line.get_xdata()), list(line.get_ydata()))
    # a weight holds from its recompute to its phase's end (step 20 + 0.5: the boundary)
    assert steps["docstrings"] == ([10.0, 20.0, 20.5], [0.21, 0.3, 0.3])
    assert steps["prose"] == ([30.0, 40.0, 45.0], [0.5, 0.65, 0.65])
    step_lines = [ln for ln in ax.lines if ln.get_drawstyle() == "steps-post"]
    assert len(step_lines) == 5  # docstrings, code, noise in "mix"; code, prose in "anneal"
    open_marks = [
        ln for ln in ax.lines if ln.get_markerfacecolor() == "white" and len(ln.get_xdata())
    ]
    assert sorted(float(x) for ln in open_marks for x in ln.get_xdata()) == [30.0, 30.0]
    plt.close(fig)


def test_the_curve_command_writes_the_streams_png(tmp_path: Path) -> None:
    run = streams_run(tmp_path / "run")
    png = tmp_path / "w.png"
    result = CliRunner().invoke(main, ["curve", str(run), "--png", str(png)])
    assert result.exit_code == 0, result.output
    assert result.output.startswith("stream weights (signal loss")
    image = mpimg.imread(png)
    assert image.shape[:2] == (550, 1100)
    assert image[..., :3].std() > 0.05


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"streams": ["code"]}, "streams does not name each of its weights"),
        ({"weights": [0.2, None, 0.8]}, "weight of stream 'code' is None; stream weights must"),
    ],
)
def test_a_bad_streams_row_is_refused_naming_it(
    tmp_path: Path, change: dict[str, Any], message: str
) -> None:
    run = streams_run(tmp_path / "run")
    path = run / "curriculum_history.jsonl"
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    rows[1].update(change)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    with pytest.raises(DataError, match=rf"line 2 \(step 20\): .*{message}"):
        load_curve(run)


def test_weight_lines_and_the_summary_line() -> None:
    rows = [history_row(s) for s in WEIGHTS]
    lines = weight_lines(rows)
    assert [(ln.label, ln.phase, ln.steps) for ln in lines] == [
        ("docstrings", 0, [10, 20]),
        ("code", 0, [10, 20]),
        ("noise", 0, [10, 20]),
        ("code", 1, [30, 40]),
        ("prose", 1, [30, 40]),
    ]
    assert lines[3].kept == [True, False]
    assert final_weights(rows, 1) == (
        "  stream weights   code 0.350, prose 0.650 (step 40, signal learnability)"
    )
    assert final_weights(rows, 2) is None
    bucket = {"step": 5, "phase": 0, "weights": [0.5, 0.5]}
    assert [ln.label for ln in weight_lines([bucket])] == ["b0", "b1"]
    assert final_weights([bucket], 0) is None


def _bucket_row(step: int, phase: int) -> dict[str, Any]:
    """A bucket row (4 buckets) as ``BucketReweighter`` writes it."""
    return {
        "step": step,
        "phase": phase,
        "phase_name": ["mix", "anneal"][phase],
        "unit": "buckets",
        "signal": "loss",
        "window_size": 64,
        "num_non_finite": 0,
        "temperature": 0.5,
        "floor": 0.05,
        "weights": [0.1, 0.2, 0.3, 0.4],
        "scores": [1.0, 2.0, 3.0, 4.0],
        "edges": [1.0, 2.0, 3.0],
        "bucket_counts": [16, 16, 16, 16],
    }


@pytest.mark.parametrize("first", ["buckets", "streams"])
def test_a_unit_changed_at_a_phase_boundary_shows_buckets_beside_streams(
    tmp_path: Path, first: str
) -> None:
    """The resume rules let ``dynamic.unit`` change at a phase boundary: such a history has
    bucket rows and stream rows; the bucket weights are the columns b0..b3 (was a bare
    ``zip() argument 2 is longer than argument 1``)."""
    run = streams_run(tmp_path / "run")
    rows = [history_row(s) for s in WEIGHTS]
    if first == "buckets":
        rows[:2] = [_bucket_row(10, 0), _bucket_row(20, 0)]
    else:
        rows[2:] = [_bucket_row(30, 1), _bucket_row(40, 1)]
    (run / "curriculum_history.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    result = CliRunner().invoke(main, ["curve", str(run)])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    buckets = ["b0", "b1", "b2", "b3"]
    names = [*buckets, "code", "prose"] if first == "buckets" else [*MIX, *buckets]
    assert lines[1].split() == ["step", "phase", *names]
    bucket_row = lines[3] if first == "buckets" else lines[5]
    assert bucket_row.split()[2:] == (
        ["0.100", "0.200", "0.300", "0.400", "-", "-"]
        if first == "buckets"
        else ["-", "-", "-", "0.100", "0.200", "0.300", "0.400"]
    )
    assert (run / "curriculum_curve.png").is_file()
