"""``curriculum.lr_schedule`` on 2 CPU ranks (issue 11 item 4 acceptance, issue 14 item 6).

At every step, ``lr`` in ``metrics.jsonl`` equals the closed form evaluated at that row's
``progress`` (the step's END progress: tokens counted after the step) to 1e-9 relative, for
``cosine``, ``linear`` and ``wsd`` with ``"decay": "last_phase"``; the wsd run is killed
(SIGKILL once step 13 is logged: ``latest`` stays at step 12, inside the decay) and resumed
with ``--resume auto``, under ZeRO-1. The first step's lr is not 0, and the last step's lr is
the floor.

The closed forms are written out here again (not imported) as the oracle.
"""

from __future__ import annotations

import math
from collections.abc import Generator
from pathlib import Path
from typing import Any

import pytest
from helpers import make_dataset, metrics, ragged_docs, write_ds_config
from shared_job import Outputs, Run, shared_runs

pytestmark = pytest.mark.distributed

PEAK = 3e-3
TOTAL = 4000  # max_duration, tokens
FIRST = 1500  # the first phase; the last phase (2500tok) is the wsd decay
WARMUP = 600
RATIO = 0.1


def _oracle(kind: str, p: int) -> float:
    """The factor of DESIGN.md "Around the loop" at progress ``p`` (tokens)."""
    if p >= TOTAL:
        return RATIO
    if p < WARMUP:
        return p / WARMUP
    if kind == "wsd":
        start = FIRST  # decay over the last phase
        return 1.0 if p < start else 1 - (1 - RATIO) * (p - start) / (TOTAL - start)
    t = (p - WARMUP) / (TOTAL - WARMUP)
    if kind == "cosine":
        return RATIO + (1 - RATIO) * 0.5 * (1 + math.cos(math.pi * t))
    return RATIO + (1 - RATIO) * (1 - t)


def _data(root: Path) -> dict[str, Path]:
    return {
        "short": make_dataset(root, "short", ragged_docs(300, seed=1, min_len=10, max_len=40)),
        "long": make_dataset(root, "long", ragged_docs(300, seed=2, min_len=30, max_len=60)),
        "root": root,
    }


def _config(data: dict[str, Path], lr_schedule: dict[str, Any], name: str, **ds: Any) -> Path:
    curriculum = {
        "max_duration": f"{TOTAL}tok",
        "seed": 11,
        "schedule": [
            {
                "name": "short",
                "duration": f"{FIRST}tok",
                "train_loader": {"streams": [{"local": str(data["short"])}], "max_seq_len": 64},
            },
            {
                "name": "mix",
                "duration": f"{TOTAL - FIRST}tok",
                "train_loader": {
                    "streams": [
                        {"local": str(data["short"]), "proportion": 0.5},
                        {"local": str(data["long"]), "proportion": 0.5},
                    ],
                    "max_seq_len": 64,
                },
            },
        ],
        "lr_schedule": lr_schedule,
    }
    return write_ds_config(
        data["root"] / f"{name}.json",
        curriculum,
        optimizer={"type": "AdamW", "params": {"lr": PEAK}},
        **ds,
    )


def _check_rows(kind: str, rows: list[dict[str, Any]]) -> None:
    assert [r["step"] for r in rows] == list(range(1, len(rows) + 1))
    assert len(rows) >= 10
    for row in rows:
        progress = int(row["progress"])
        assert progress == row["tokens"]
        expected = PEAK * _oracle(kind, progress)
        assert math.isclose(row["lr"], expected, rel_tol=1e-9, abs_tol=0.0), (row, expected)
    # the first step is evaluated at its end progress: not 0 with a warmup from 0
    assert rows[0]["lr"] == pytest.approx(PEAK * rows[0]["step_tokens"] / WARMUP, rel=1e-12)
    assert rows[0]["lr"] > 0
    # the step that reaches max_duration has the floor; the one before is still above it
    assert rows[-1]["tokens"] >= TOTAL > rows[-2]["tokens"]
    assert math.isclose(rows[-1]["lr"], PEAK * RATIO, rel_tol=1e-12)
    assert rows[-2]["lr"] > PEAK * RATIO


@shared_runs
def _lr_runs(root: Path) -> Generator[list[Run], Outputs, dict[str, Any]]:
    """The cosine and linear runs, and the wsd run killed (SIGKILL) after step 13 and resumed.

    In the session's shared launched job (tests/shared_job.py): the cosine and linear runs and
    the kill in round 1, the wsd resume in round 2. Returns the run dirs by kind, and the killed
    run's output with what it left (``latest``, the last step logged).
    """
    data = _data(root / "data")
    wsd = _config(
        data,
        {"type": "wsd", "warmup": f"{WARMUP}tok", "decay": "last_phase", "min_lr_ratio": RATIO},
        "ds_wsd",
        zero_optimization={"stage": 1},
    )
    runs = {kind: root / kind for kind in ("cosine", "linear", "wsd")}
    common = ("--save-interval", "4")
    schedules = [
        Run(
            _config(
                data, {"type": kind, "warmup": f"{WARMUP}tok", "min_lr_ratio": RATIO}, f"ds_{kind}"
            ),
            runs[kind],
        )
        for kind in ("cosine", "linear")
    ]
    outputs = yield [*schedules, Run(wsd, runs["wsd"], (*common, "--kill-after-step", "13"))]
    killed = outputs[runs["wsd"]]
    after_kill = {
        "latest": (runs["wsd"] / "checkpoints" / "latest").read_text(),
        "last_step": max(r["step"] for r in metrics(runs["wsd"])),
    }
    yield [Run(wsd, runs["wsd"], (*common, "--resume", "auto"))]
    return {"runs": runs, "killed": killed, "after_kill": after_kill}


@pytest.fixture(scope="module")
def lr_runs(shared_job: Any) -> dict[str, Any]:
    return shared_job(_lr_runs)


@pytest.mark.parametrize("kind", ["cosine", "linear"])
def test_lr_follows_the_closed_form_at_each_steps_end_progress(
    lr_runs: dict[str, Any], kind: str
) -> None:
    _check_rows(kind, metrics(lr_runs["runs"][kind]))


def test_wsd_last_phase_across_a_kill_and_resume(lr_runs: dict[str, Any]) -> None:
    run_dir = lr_runs["runs"]["wsd"]
    assert lr_runs["killed"].returncode != 0  # SIGKILL after step 13
    assert lr_runs["after_kill"]["latest"] == "global_step12"
    assert lr_runs["after_kill"]["last_step"] == 13
    rows = metrics(run_dir)
    _check_rows("wsd", rows)
    # the stable part and the decay over the last phase are both in the run, and the resumed
    # checkpoint (step 12) lies in the decay: the optimizer it restores holds a decayed lr,
    # while the peak comes back from the param groups' saved initial_lr
    assert any(r["lr"] == PEAK for r in rows)
    assert rows[11]["tokens"] > FIRST
    assert rows[11]["lr"] < PEAK
    assert rows[-1]["phase_name"] == "mix"
