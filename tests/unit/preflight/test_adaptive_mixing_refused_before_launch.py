"""Adaptive mixing's bad inputs are refused by ``curriculum-ds launch`` before any rank starts.

Each in one line, with nothing written (no run dir, the data folders byte for byte unchanged):
learnability with buckets, an unknown signal, ``excess_loss`` whose ``reference_metric`` column
is missing from a stream, or holds a non-finite value.

From issue 20 (acceptance: bad inputs).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from click.testing import CliRunner
from helpers import make_dataset, one_error_line, ragged_docs, write_ds_config

from curriculum_ds.cli import main as cli_main
from curriculum_ds.data import write_metric_column

CASES = {
    "learnability_with_buckets": (
        {"signal": "learnability"},
        'curriculum.dynamic.signal: learnability needs unit "streams": a bucket keyed by the '
        "current loss changes its members every recompute, so its loss drop measures nothing",
    ),
    "unknown_signal": (
        {"unit": "streams", "signal": "perplexity"},
        'curriculum.dynamic.signal: expected one of "loss", "excess_loss" or "learnability", got '
        '"perplexity"',
    ),
    "missing_reference_column": (
        {"unit": "streams", "signal": "excess_loss", "reference_metric": "other_loss"},
        "curriculum.dynamic.reference_metric: ",
    ),
    "non_finite_reference_column": (
        {"unit": "streams", "signal": "excess_loss", "reference_metric": "ref_loss"},
        "curriculum.dynamic.reference_metric: ",
    ),
}


@pytest.fixture
def streams(tmp_path: Path) -> list[Path]:
    folders = []
    for i, name in enumerate(("a", "b")):
        folder = make_dataset(tmp_path / "data", name, ragged_docs(30, seed=i))
        values = np.full(30, 2.0)
        if name == "b":
            values[7] = np.nan  # the non-finite case reads it; the others never get that far
        write_metric_column(folder, "ref_loss", values)
        folders.append(folder)
    return folders


def _listing(folders: list[Path]) -> dict[str, bytes]:
    return {str(p): p.read_bytes() for f in folders for p in sorted(f.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("case", list(CASES))
def test_launch_refuses_in_one_line_before_any_rank(
    tmp_path: Path, streams: list[Path], monkeypatch: pytest.MonkeyPatch, case: str
) -> None:
    from curriculum_ds.commands import launch as launch_module

    def no_rank(*args: Any, **kwargs: Any) -> int:
        raise AssertionError("a rank was started")

    monkeypatch.setattr(launch_module, "run_command", no_rank)
    dynamic, message = CASES[case]
    curriculum = {
        "max_duration": "2000tok",
        "schedule": [
            {
                "name": "mix",
                "duration": "2000tok",
                "train_loader": {
                    "streams": [{"local": str(s), "proportion": 0.5} for s in streams],
                    "max_seq_len": 64,
                },
            }
        ],
        "dynamic": {"enabled": True, "floor": 0.05, **dynamic},
    }
    cfg = write_ds_config(tmp_path / "ds.json", curriculum)
    before = _listing(streams)
    run_dir = tmp_path / "run"
    result = CliRunner().invoke(
        cli_main, ["launch", str(cfg), "--num-gpus", "2", "--", "--run-dir", str(run_dir)]
    )
    line = one_error_line(result)
    assert line.startswith(f"Error: {message}"), line
    if case == "missing_reference_column":
        assert "other_loss" in line
    if case == "non_finite_reference_column":
        assert "ref_loss" in line
        assert "nan" in line.lower()
        assert "7" in line
    assert not run_dir.exists()
    assert _listing(streams) == before
