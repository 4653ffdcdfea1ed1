"""Issue 13 item 1: elastic resume under ZeRO 0-3, through real DeepSpeed ranks on CPU (gloo).

A run on 2 ranks (micro-batch 2 x GAS 2 = global batch 8) is killed with SIGKILL right after
step 3 (``latest`` = step 2) and resumed on 1 rank (micro 2 x GAS 4, the same global batch 8);
under ZeRO 1-3 that goes through DeepSpeed's universal checkpoint format, converted once next to
the tag. The resumed run draws the uninterrupted 2-rank run's global batches at every step and
its losses agree within 1e-4 relative. And the other way: 1 rank killed, resumed on 2 ranks with
another micro-batch/GAS split (micro 1 x GAS 4 x 2 ranks).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
from helpers import launch, make_dataset, metrics, ragged_docs, trace, write_ds_config

from curriculum_ds.checkpoint.files import model_states

pytestmark = pytest.mark.distributed

SAVE_INTERVAL = 2
KILL_AFTER = 3  # killed before the step-4 draw: `latest` is step 2
GLOBAL_BATCH = 8


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("elastic_data")
    return make_dataset(root, "docs", ragged_docs(96, seed=13, min_len=10, max_len=40))


def _config(path: Path, data: Path, stage: int, *, micro: int, gas: int, ranks: int) -> Path:
    curriculum = {
        "max_duration": "1000tok",
        "seed": 13,
        "schedule": [
            {
                "name": "first",
                "duration": "500tok",
                "train_loader": {"streams": [{"local": str(data)}], "max_seq_len": 64},
            },
            {
                "name": "second",
                "duration": "500tok",
                "train_loader": {"streams": [{"local": str(data)}], "max_seq_len": 48},
            },
        ],
    }
    return write_ds_config(
        path,
        curriculum,
        train_batch_size=micro * gas * ranks,
        train_micro_batch_size_per_gpu=micro,
        gradient_accumulation_steps=gas,
        optimizer={"type": "AdamW", "params": {"lr": 3e-3}},
        zero_optimization={"stage": stage},
    )


_REFERENCE: dict[tuple[Path, int], Path] = {}


def _reference(data: Path, stage: int) -> Path:
    """The uninterrupted 2-rank run under ``stage`` (once per stage and session)."""
    key = (data, stage)
    if key not in _REFERENCE:
        root = data.parent / f"ref_zero{stage}"
        cfg = _config(data.parent / f"ref_zero{stage}.json", data, stage, micro=2, gas=2, ranks=2)
        launch(cfg, root, "--save-interval", str(SAVE_INTERVAL), "--trace-samples")
        _REFERENCE[key] = root
    return _REFERENCE[key]


def _assert_same_run(resumed: Path, reference: Path) -> None:
    ref_trace, got_trace = trace(reference), trace(resumed)
    assert len(ref_trace) >= 4
    assert {r["phase"] for r in ref_trace} == {0, 1}
    assert all(len(r["samples"]) == GLOBAL_BATCH for r in ref_trace)
    assert got_trace == ref_trace  # the same global batches, step for step, sample for sample
    a, b = metrics(reference), metrics(resumed)
    assert [r["step"] for r in b] == [r["step"] for r in a]
    for ra, rb in zip(a, b, strict=True):
        assert (ra["tokens"], ra["samples"]) == (rb["tokens"], rb["samples"])
        assert math.isclose(rb["loss"], ra["loss"], rel_tol=1e-4), (ra["step"], ra, rb)


def _kill_and_resume(
    data: Path,
    tmp_path: Path,
    stage: int,
    *,
    before: tuple[int, int, int],
    after: tuple[int, int, int],
) -> tuple[Path, Any]:
    """Run on ``before`` = (ranks, micro, gas), SIGKILL after step 3, resume on ``after``."""
    ranks0, micro0, gas0 = before
    ranks1, micro1, gas1 = after
    run = tmp_path / "run"
    common = ["--save-interval", str(SAVE_INTERVAL), "--trace-samples"]
    first = _config(tmp_path / "first.json", data, stage, micro=micro0, gas=gas0, ranks=ranks0)
    killed = launch(
        first, run, *common, "--kill-after-step", str(KILL_AFTER), num_gpus=ranks0, check=False
    )
    assert killed.returncode != 0
    ckpts = run / "checkpoints"
    assert [r["step"] for r in trace(run)] == list(range(1, KILL_AFTER + 1)), killed.stderr[-3000:]
    assert (ckpts / "latest").read_text() == f"global_step{SAVE_INTERVAL}"
    tag_dir = ckpts / f"global_step{SAVE_INTERVAL}"
    assert model_states(tag_dir)["dp_world_size"] == ranks0
    before_files = {p.name: p.stat().st_mtime_ns for p in tag_dir.iterdir()}
    second = _config(tmp_path / "second.json", data, stage, micro=micro1, gas=gas1, ranks=ranks1)
    resumed = launch(second, run, *common, "--resume", "auto", num_gpus=ranks1)
    assert {p.name: p.stat().st_mtime_ns for p in tag_dir.iterdir()} == before_files  # untouched
    return run, resumed


@pytest.mark.parametrize("stage", [1, 2, 3])
def test_two_ranks_killed_resume_on_one_rank(data, tmp_path, stage):
    run, _ = _kill_and_resume(data, tmp_path, stage, before=(2, 2, 2), after=(1, 2, 4))
    ckpts = run / "checkpoints"
    universal = ckpts / f"global_step{SAVE_INTERVAL}_universal"
    assert (universal / "zero").is_dir()  # converted once, next to the tag
    assert not list(ckpts.glob(".universal-tmp-*"))  # no leftover of the conversion
    assert not (ckpts / "latest_universal").exists()
    # the checkpoints the resumed run wrote are its own world size's, loadable as they are
    last = (ckpts / "latest").read_text()
    assert model_states(ckpts / last)["dp_world_size"] == 1
    _assert_same_run(run, _reference(data, stage))


def test_one_rank_killed_resume_on_two_ranks_with_another_split(data, tmp_path):
    run, _ = _kill_and_resume(data, tmp_path, 2, before=(1, 2, 4), after=(2, 1, 4))
    assert (run / "checkpoints" / f"global_step{SAVE_INTERVAL}_universal").is_dir()
    _assert_same_run(run, _reference(data, 2))


def test_zero0_resumes_on_another_world_size_without_conversion(data, tmp_path):
    run, _ = _kill_and_resume(data, tmp_path, 0, before=(2, 2, 2), after=(1, 2, 4))
    assert not list((run / "checkpoints").glob("*_universal"))  # the full state loads as it is
    _assert_same_run(run, _reference(data, 0))


def test_another_global_batch_size_continues_the_sample_sequence(data, tmp_path):
    """2 ranks x 2 x 2 (global 8) killed, resumed on 1 rank x 2 x 2 (global 4): accepted with one
    note line; each phase's samples after the checkpoint continue the uninterrupted sequence."""
    run, resumed = _kill_and_resume(data, tmp_path, 2, before=(2, 2, 2), after=(1, 2, 2))
    assert "Traceback" not in resumed.stderr
    notes = [line for line in resumed.stderr.splitlines() if "curriculum_ds: note:" in line]
    assert len(notes) == 1, resumed.stderr[-3000:]
    assert "global batch size 8 at the checkpoint, 4 now" in notes[0]
    rows = trace(run)
    assert [len(r["samples"]) for r in rows] == [8] * SAVE_INTERVAL + [4] * (
        len(rows) - SAVE_INTERVAL
    )

    ref_rows = trace(_reference(data, 2))
    for phase in (0, 1):  # each phase's sequence after the checkpoint, cut into batches of 4

        def samples(rows: list[dict[str, Any]], phase: int = phase) -> list[Any]:
            return [
                s
                for r in rows
                if r["step"] > SAVE_INTERVAL and r["phase"] == phase
                for s in r["samples"]
            ]

        ref, got = samples(ref_rows), samples(rows)
        common = min(len(ref), len(got))
        assert common >= 4, phase
        assert got[:common] == ref[:common], phase
    assert metrics(run)[-1]["tokens"] >= 1000  # ran to the end of the schedule
