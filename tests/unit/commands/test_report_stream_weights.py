"""``curriculum-ds report`` on a ``dynamic.unit: "streams"`` run: the re-weighting panel shows
the stream weights by name, in each stream's colour, and the summary their final values."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
from click.testing import CliRunner
from matplotlib.colors import to_rgba
from stream_history import ANNEAL, MIX, WEIGHTS, history_row

from curriculum_ds.cli import main
from curriculum_ds.commands.report import _probs_panel, load_report, summary


def streams_run(run_dir: Path) -> Path:
    """Two phases of 20 steps, 100 tokens a step, with the curve test's history."""
    run_dir.mkdir(parents=True)
    metrics: list[dict[str, Any]] = []
    for step in range(1, 41):
        phase = int(step > 20)
        names = [MIX, ANNEAL][phase]
        metrics.append(
            {
                "step": step,
                "phase": phase,
                "phase_name": ["mix", "anneal"][phase],
                "tokens": 100 * step,
                "step_tokens": 100,
                "loss": 3.0,
                "lr": 1e-3,
                "streams": {
                    n: {"samples": 1, "tokens": 100 // len(names), "loss": 3.0} for n in names
                },
            }
        )
    rows = [history_row(s) for s in WEIGHTS if s <= 40]
    (run_dir / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in metrics))
    (run_dir / "curriculum_history.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return run_dir


def test_the_panel_draws_stream_weights_by_name_in_the_streams_colours(tmp_path: Path) -> None:
    report = load_report(streams_run(tmp_path / "run"))
    colors = {"docstrings": "C0", "code": "C1", "noise": "C2", "prose": "C3"}
    fig, ax = plt.subplots()
    _probs_panel(ax, report, colors)
    title = ax.get_title(loc="left")
    assert title == "stream weights (dynamic re-weighting, signal loss → learnability)"
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    assert legend == ["docstrings", "code", "noise", "prose", "kept previous weights"]
    lines = [ln for ln in ax.lines if ln.get_drawstyle() == "steps-post"]
    by_label = {ln.get_label(): ln for ln in lines}
    # x = tokens after the recompute step; each line ends at its phase's end (2000, 4000 tokens)
    assert list(by_label["noise"].get_xdata()) == [1000.0, 2000.0, 2000.0]
    assert list(by_label["noise"].get_ydata()) == [0.55, 0.4, 0.4]
    assert list(by_label["prose"].get_xdata()) == [3000.0, 4000.0, 4000.0]
    code = [ln for ln in lines if to_rgba(ln.get_color()) == to_rgba("C1")]
    assert [list(ln.get_ydata()) for ln in code] == [[0.24, 0.3, 0.3], [0.5, 0.35, 0.35]]
    plt.close(fig)


def test_the_summary_gives_each_phases_final_stream_weights(tmp_path: Path) -> None:
    text = summary(load_report(streams_run(tmp_path / "run")))
    mix, anneal = text.split('phase 1 "anneal"')
    assert (
        "stream weights   docstrings 0.300, code 0.300, noise 0.400 (step 20, signal loss)" in mix
    )
    assert "stream weights   code 0.350, prose 0.650 (step 40, signal learnability)" in anneal


def test_the_report_command_draws_a_streams_run(tmp_path: Path) -> None:
    run = streams_run(tmp_path / "run")
    result = CliRunner().invoke(main, ["report", str(run)])
    assert result.exit_code == 0, result.output
    assert "stream weights   code 0.350, prose 0.650" in result.output
    assert (run / "report.png").stat().st_size > 20_000


def test_a_bucket_run_keeps_its_bucket_panel(tmp_path: Path) -> None:
    run = streams_run(tmp_path / "run")
    rows = [{"step": s, "phase": int(s > 20), "weights": [0.25, 0.75]} for s in (10, 30)]
    (run / "curriculum_history.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    report = load_report(run)
    fig, ax = plt.subplots()
    _probs_panel(ax, report, {})
    assert ax.get_title(loc="left") == "bucket probabilities (dynamic re-weighting; 0 = easiest)"
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["bucket 1", "bucket 0"]
    assert "stream weights" not in summary(report)
    plt.close(fig)
