"""``curriculum-ds report``: the per-phase summary and the picture, on synthetic run folders."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from helpers import one_error_line

from curriculum_ds.cli import main
from curriculum_ds.commands.report import FINAL_STEPS, load_report, render_report, summary
from curriculum_ds.errors import DataError


def _write(path: Path, rows: list[dict[str, Any]]) -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def synthetic_run(run_dir: Path, *, streams: bool = True, evals: bool = True) -> Path:
    """Two phases: "short" (40 steps, one stream) then "mix" (60 steps, web/code 30/70)."""
    run_dir.mkdir(parents=True)
    metrics, history, eval_rows = [], [], []
    tokens = 0
    for step in range(1, 101):
        phase = 0 if step <= 40 else 1
        split = {"web": 1000} if phase == 0 else {"web": 300, "code": 700}
        tokens += 1000
        losses = {"web": 3.0 * math.exp(-step / 50) + 1.0, "code": 2.5 * math.exp(-step / 80) + 1.5}
        row: dict[str, Any] = {
            "step": step,
            "phase": phase,
            "phase_name": ["short", "mix"][phase],
            "tokens": tokens,
            "step_tokens": 1000,
            "loss": sum(losses[n] * t for n, t in split.items()) / 1000,
            "lr": 1e-3 * min(1.0, step / 10) * (1 - 0.9 * step / 100),
        }
        if streams:
            row["streams"] = {
                n: {"samples": t // 50, "tokens": t, "loss": losses[n]} for n, t in split.items()
            }
        metrics.append(row)
        if step % 5 == 0:
            w = 0.1 + 0.3 * step / 100
            history.append({"step": step, "weights": [w, 0.5 - w / 2, 0.5 - w / 2]})
        if step % 20 == 0 or step == 40:
            eval_rows.append(
                {
                    "step": step,
                    "tokens": tokens,
                    "phase": phase,
                    "phase_name": row["phase_name"],
                    "loss": losses["web"] * 0.5 + losses["code"] * 0.5 + 0.1,
                    "eval_tokens": 2000,
                    "streams": {
                        "web": {"loss": losses["web"] + 0.1, "tokens": 1000},
                        "code": {"loss": losses["code"] + 0.1, "tokens": 1000},
                    },
                }
            )
    _write(run_dir / "metrics.jsonl", metrics)
    _write(run_dir / "curriculum_history.jsonl", history)
    if evals:
        _write(run_dir / "eval.jsonl", eval_rows)
    return run_dir


def test_summary_gives_tokens_steps_and_final_losses_per_phase(tmp_path: Path) -> None:
    report = load_report(synthetic_run(tmp_path / "run"))
    assert [(p.name, p.start_tokens, p.end_tokens) for p in report.phases] == [
        ("short", 0, 40_000),
        ("mix", 40_000, 100_000),
    ]
    text = summary(report)
    assert 'phase 0 "short": 40,000 tokens, 40 steps (steps 1-40)' in text
    assert 'phase 1 "mix": 60,000 tokens, 60 steps (steps 41-100)' in text
    # final train loss: token-weighted mean over the phase's last FINAL_STEPS steps
    web_short = sum(3.0 * math.exp(-s / 50) + 1.0 for s in range(41 - FINAL_STEPS, 41))
    assert f"train {web_short / FINAL_STEPS:.4f}" in text
    # the phase's last eval: step 40 for "short", step 100 for "mix"
    mix_block = text.split('phase 1 "mix"')[1]
    code_eval = 2.5 * math.exp(-100 / 80) + 1.5 + 0.1
    assert f"eval {code_eval:.4f} (step 100)" in mix_block
    assert "(step 40)" in text.split('phase 1 "mix"')[0]


def test_without_per_stream_accounting_the_total_loss_is_reported(tmp_path: Path) -> None:
    report = load_report(synthetic_run(tmp_path / "run", streams=False, evals=False))
    assert not report.has_streams
    text = summary(report)
    assert "total" in text
    assert "eval   -" in text
    png = render_report(report, tmp_path / "r.png")
    assert png.stat().st_size > 20_000


def test_the_picture_is_written_with_every_panel(tmp_path: Path) -> None:
    run = synthetic_run(tmp_path / "run")
    result = CliRunner().invoke(main, ["report", str(run)])
    assert result.exit_code == 0, result.output
    assert f"picture: {run / 'report.png'}" in result.output
    from matplotlib.image import imread

    image = imread(run / "report.png")
    height, width = image.shape[:2]
    assert width == 1650  # 11 in at 150 dpi
    assert height > 1500  # five panels
    assert image.std() > 0.05  # not blank


@pytest.mark.parametrize(
    ("make", "expected"),
    [
        (lambda p: p, "no such folder"),
        (lambda p: (p.mkdir(), p)[1], "no metrics.jsonl"),
        (lambda p: (p.mkdir(), (p / "metrics.jsonl").write_text(""), p)[2], "no complete row"),
        (
            lambda p: (p.mkdir(), (p / "metrics.jsonl").write_text('{"step": 1}\n'), p)[2],
            "line 1: no integer tokens, phase",
        ),
    ],
)
def test_a_bad_run_dir_is_one_line(tmp_path: Path, make: Any, expected: str) -> None:
    run = make(tmp_path / "run")
    line = one_error_line(CliRunner().invoke(main, ["report", str(run)]))
    assert expected in line
    with pytest.raises(DataError, match=expected):
        load_report(run)
