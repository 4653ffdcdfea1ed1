"""``curriculum-ds mix RUN_DIR``: the train_loader a run saved, its proportions the learned weights.

A run dir made of its parts: real prepared streams, the phase as a checkpoint saves it (a
DeepSpeed-shaped tag whose curriculum state is the run's config), and the history rows of a real
:class:`DoReMiReweighter` driven by synthetic losses. The printed phase's proportions are the
history's running average (``average_weights``, DoReMi's output) exactly, or with ``--last``
the final weights, in the run's own ``proportion_unit``; ``validate`` accepts a phase of it.
The same on a launched DoReMi run: ``tests/integration/test_mixing_methods_on_two_ranks.py``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from click.testing import CliRunner
from crafted_checkpoints import crafted_tag
from helpers import make_dataset, write_ds_config

from curriculum_ds.checkpoint.state import CurriculumState
from curriculum_ds.cli import main
from curriculum_ds.config import CurriculumConfig
from curriculum_ds.core.position import Position
from curriculum_ds.dynamic import DoReMiReweighter, PhaseView
from curriculum_ds.records.schema import history_row

NAMES = ("text", "code", "noise")


def _curriculum(folders: dict[str, Path]) -> dict[str, Any]:
    streams = [
        {"local": str(folders[n]), "name": n, "proportion": p}
        for n, p in zip(NAMES, (0.5, 0.3, 0.2), strict=True)
    ]
    loader = {"streams": streams, "max_seq_len": 64, "proportion_unit": "tokens"}
    return {
        "max_duration": "6000tok",
        "schedule": [
            {"name": "warm", "duration": "1000tok", "train_loader": {**loader, "streams": streams[:1]}},  # noqa: E501
            {"name": "proxy", "duration": "5000tok", "train_loader": loader},
        ],
        "dynamic": {
            "enabled": True,
            "method": "doremi",
            "unit": "streams",
            "reference_metric": "ref_loss",
            "window": 32,
            "recompute_every_n_steps": 2,
        },
    }  # fmt: skip


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("mix")
    folders = {
        n: make_dataset(root, n, [f"{n} document {i} " * 3 for i in range(20)]) for n in NAMES
    }
    curriculum = _curriculum(folders)
    cfg = CurriculumConfig.model_validate(curriculum)
    rng = np.random.default_rng(7)
    ref = tuple({"ref_loss": rng.uniform(1, 3, 20)} for _ in NAMES)
    rw = DoReMiReweighter(cfg.dynamic)
    rw.start_phase(PhaseView(1, NAMES, np.array([0.5, 0.3, 0.2]), (20,) * 3, ref), None)
    rows = []
    for step in range(1, 41):
        batch = np.stack([rng.integers(0, 3, 8), rng.integers(0, 20, 8)], axis=1)
        reference = np.array([ref[i]["ref_loss"][j] for i, j in batch])
        # text and code have excess loss left; noise is at its reference (its noise floor)
        excess = np.where(batch[:, 0] == 2, rng.uniform(-0.3, 0.05, 8), rng.uniform(0, 1, 8))
        rw.observe(batch, reference + excess)
        update = rw.maybe_recompute(step)
        if update is not None:
            rows.append(history_row(step=step, phase=1, phase_name="proxy", record=update.record))
    run_dir = root / "run"
    run_dir.mkdir()
    (run_dir / "curriculum_history.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    state = CurriculumState.of(cfg, Position(global_step=40, consumed_tokens=6000, progress=6000))
    crafted_tag(run_dir / "checkpoints", root / "never", payload_in="none", tag="global_step40",
                curriculum=state.to_dict())  # fmt: skip
    return {"root": root, "dir": run_dir, "rows": rows, "curriculum": curriculum}


def _mix(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(main, ["mix", *args])
    return result.exit_code, result.output


def _validate(root: Path, loader: dict[str, Any]) -> tuple[int, str]:
    phase = {"name": "main", "duration": "5000tok", "train_loader": loader}
    curriculum = {"max_duration": "5000tok", "schedule": [phase]}
    cfg = write_ds_config(root / f"mixed_{len(list(root.glob('mixed_*')))}.json", curriculum)
    result = CliRunner().invoke(main, ["validate", str(cfg)])
    return result.exit_code, result.output


def test_the_default_is_the_running_average_and_validate_accepts_it(run):
    code, out = _mix(str(run["dir"]))
    assert code == 0, out
    loader = json.loads(out)
    assert list(loader) == ["streams", "max_seq_len", "epoch_size", "proportion_unit"]
    assert loader["proportion_unit"] == "tokens"
    assert loader["max_seq_len"] == 64
    assert [s["name"] for s in loader["streams"]] == list(NAMES)
    average = run["rows"][-1]["average_weights"]
    got = [s["proportion"] for s in loader["streams"]]
    assert max(abs(a - b) for a, b in zip(got, average, strict=True)) <= 1e-12
    # the average is DoReMi's: the initial weights and every update's, over their count
    weights = np.array([[0.5, 0.3, 0.2]] + [r["weights"] for r in run["rows"]])
    np.testing.assert_allclose(got, weights.mean(axis=0), rtol=0, atol=1e-12)
    assert got[2] == min(got)  # no excess loss left on the noise: it goes lowest
    code, out = _validate(run["root"], loader)
    assert code == 0, out


def test_last_prints_the_final_weights_and_phase_picks_the_phase(run):
    code, out = _mix(str(run["dir"]), "--last", "--phase", "1")
    assert code == 0, out
    got = [s["proportion"] for s in json.loads(out)["streams"]]
    assert got == run["rows"][-1]["weights"]


def test_a_phase_without_stream_weights_is_one_line(run):
    code, out = _mix(str(run["dir"]), "--phase", "0")
    assert code == 1
    assert out.strip().splitlines() == [
        f"Error: --phase 0: {run['dir'] / 'curriculum_history.jsonl'} has stream weights for "
        "phase(s) 1 only"
    ]


def test_a_run_without_history_is_one_line(tmp_path):
    code, out = _mix(str(tmp_path))
    assert code == 1
    assert len(out.strip().splitlines()) == 1
    assert "no stream weights" in out
