"""Elastic resume under ZeRO 0-3, through real DeepSpeed ranks on CPU (gloo).

A run on 2 ranks (micro-batch 2 x GAS 2 = global batch 8) is killed with SIGKILL right after
step 3 (``latest`` = step 2) and resumed on 1 rank (micro 2 x GAS 4, the same global batch 8);
under ZeRO 1-3 that goes through DeepSpeed's universal checkpoint format, converted once next to
the tag. The resumed run draws the uninterrupted 2-rank run's global batches at every step and
its losses agree within 1e-4 relative. And the other way: 1 rank killed, resumed on 2 ranks with
another micro-batch/GAS split (micro 1 x GAS 4 x 2 ranks).

From issue 13, item 1.
"""

from __future__ import annotations

import math
import shutil
from pathlib import Path
from typing import Any

import pytest
from helpers import launch, launch_many, make_dataset, metrics, ragged_docs, trace, write_ds_config

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


def _reference(elastic: dict[str, Any], stage: int) -> Path:
    """The uninterrupted 2-rank run under ``stage``."""
    return elastic["reference"][stage]  # type: ignore[no-any-return]


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


COMMON = ("--save-interval", str(SAVE_INTERVAL), "--trace-samples")
CASES = {  # name: (ZeRO stage, (ranks, micro, gas) killed, (ranks, micro, gas) resumed)
    "zero1": (1, (2, 2, 2), (1, 2, 4)),
    "zero2": (2, (2, 2, 2), (1, 2, 4)),
    "zero3": (3, (2, 2, 2), (1, 2, 4)),
    "one_rank_to_two": (2, (1, 2, 4), (2, 1, 4)),
    "zero0": (0, (2, 2, 2), (1, 2, 4)),
    "another_global_batch": (2, (2, 2, 2), (1, 2, 2)),
}


DEFERRED_KILL = "zero1"
"""The case whose killed run is the last run of the 2-rank job (its SIGKILL ends the job)."""


@pytest.fixture(scope="module")
def elastic(data: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Every case of CASES: a run on its ``killed`` split, SIGKILLed after step 3 (two cases with
    the same killed run each resume a copy of it), then resumed with ``--resume auto`` on its
    ``resumed`` split; and the uninterrupted 2-rank run of every stage.

    Jobs (``helpers.launch_many`` where there are several runs): each kill but one is a launch
    of its own; one job on 2 ranks runs the references, the resume on 2 ranks and, last, the
    kill of DEFERRED_KILL; one job on 1 rank runs the resumes on 1 rank. Returns
    ``{"reference": {stage: run dir}, "cases": {name: {"run", "killed_rc", "killed_output",
    "trace_at_kill", "latest_at_kill", "ranks_before", "tag_dir", "before_files", "output"}}}``;
    the checks of the killed runs are the tests' own.
    """
    root = tmp_path_factory.mktemp("elastic")
    killed: dict[tuple[int, tuple[int, int, int]], tuple[Path, tuple[int, str]]] = {}
    cases: dict[str, dict[str, Any]] = {}
    kill_args = (*COMMON, "--kill-after-step", str(KILL_AFTER))
    for name, (stage, before, after) in CASES.items():
        ranks0, micro0, gas0 = before
        run = root / name / "run"
        run.parent.mkdir()
        first = _config(
            root / name / "first.json", data, stage, micro=micro0, gas=gas0, ranks=ranks0
        )
        second = _config(
            root / name / "second.json", data, stage, micro=after[1], gas=after[2], ranks=after[0]
        )
        cases[name] = {
            "run": run,
            "ranks_before": ranks0,
            "kill": (first, run, kill_args),
            "resume": (second, run, (*COMMON, "--resume", "auto")),
        }
        if name == DEFERRED_KILL:
            continue
        if (stage, before) in killed:  # the same killed run: resume a copy of it
            source, cases[name]["killed_by"] = killed[(stage, before)]
            shutil.copytree(source, run, symlinks=True)
        else:
            proc = launch(first, run, *kill_args, num_gpus=ranks0, check=False)
            cases[name]["killed_by"] = (proc.returncode, proc.stderr)
            killed[(stage, before)] = (run, cases[name]["killed_by"])
        _after_kill(cases[name])
    references = {}
    ref_runs = []
    for stage in (0, 1, 2, 3):
        cfg = _config(root / f"ref_zero{stage}.json", data, stage, micro=2, gas=2, ranks=2)
        references[stage] = root / f"ref_zero{stage}"
        ref_runs.append(
            (cfg, references[stage], ("--save-interval", str(SAVE_INTERVAL), "--trace-samples"))
        )
    deferred = cases[DEFERRED_KILL]
    assert CASES[DEFERRED_KILL][1][0] == 2
    outputs = launch_many(
        [
            *ref_runs,
            *(c["resume"] for name, c in cases.items() if CASES[name][2][0] == 2),
            deferred["kill"],
        ],
        num_gpus=2,
        may_fail=frozenset({deferred["run"]}),
    )
    killed_run = outputs.pop(deferred["run"])
    deferred["killed_by"] = (killed_run.returncode, killed_run.output)
    _after_kill(deferred)
    outputs |= launch_many(
        [c["resume"] for name, c in cases.items() if CASES[name][2][0] == 1], num_gpus=1
    )
    for case in cases.values():
        case["output"] = outputs[case["run"]].output
    return {"reference": references, "cases": cases}


def _after_kill(case: dict[str, Any]) -> None:
    """What the killed run left, read before the resume."""
    run = case["run"]
    tag_dir = run / "checkpoints" / f"global_step{SAVE_INTERVAL}"
    case["killed_rc"], case["killed_output"] = case.pop("killed_by")
    case["trace_at_kill"] = trace(run)
    case["latest_at_kill"] = (run / "checkpoints" / "latest").read_text()
    case["tag_dir"] = tag_dir
    case["before_files"] = {p.name: p.stat().st_mtime_ns for p in tag_dir.iterdir()}


def _kill_and_resume(elastic: dict[str, Any], name: str) -> tuple[Path, str]:
    """The case's run, SIGKILLed after step 3 and resumed: its checks; returns (run, output of
    the resume)."""
    case = elastic["cases"][name]
    tag_dir = case["tag_dir"]
    assert case["killed_rc"] != 0
    assert [r["step"] for r in case["trace_at_kill"]] == list(range(1, KILL_AFTER + 1)), case[
        "killed_output"
    ][-3000:]
    assert case["latest_at_kill"] == f"global_step{SAVE_INTERVAL}"
    assert model_states(tag_dir)["dp_world_size"] == case["ranks_before"]
    assert {p.name: p.stat().st_mtime_ns for p in tag_dir.iterdir()} == case[
        "before_files"
    ]  # untouched
    return case["run"], case["output"]


@pytest.mark.parametrize("stage", [1, 2, 3])
def test_two_ranks_killed_resume_on_one_rank(elastic, stage):
    run, _ = _kill_and_resume(elastic, f"zero{stage}")
    ckpts = run / "checkpoints"
    universal = ckpts / f"global_step{SAVE_INTERVAL}_universal"
    assert (universal / "zero").is_dir()  # converted once, next to the tag
    assert not list(ckpts.glob(".universal-tmp-*"))  # no leftover of the conversion
    assert not (ckpts / "latest_universal").exists()
    # the checkpoints the resumed run wrote are its own world size's, loadable as they are
    last = (ckpts / "latest").read_text()
    assert model_states(ckpts / last)["dp_world_size"] == 1
    _assert_same_run(run, _reference(elastic, stage))


def test_one_rank_killed_resume_on_two_ranks_with_another_split(elastic):
    run, _ = _kill_and_resume(elastic, "one_rank_to_two")
    assert (run / "checkpoints" / f"global_step{SAVE_INTERVAL}_universal").is_dir()
    _assert_same_run(run, _reference(elastic, 2))


def test_zero0_resumes_on_another_world_size_without_conversion(elastic):
    run, _ = _kill_and_resume(elastic, "zero0")
    assert not list((run / "checkpoints").glob("*_universal"))  # the full state loads as it is
    _assert_same_run(run, _reference(elastic, 0))


def test_another_global_batch_size_continues_the_sample_sequence(elastic):
    """2 ranks x 2 x 2 (global 8) killed, resumed on 1 rank x 2 x 2 (global 4): accepted with one
    note line; each phase's samples after the checkpoint continue the uninterrupted sequence."""
    run, resumed = _kill_and_resume(elastic, "another_global_batch")
    assert "Traceback" not in resumed
    notes = [line for line in resumed.splitlines() if "curriculum_ds: note:" in line]
    assert len(notes) == 1, resumed[-3000:]
    assert "global batch size 8 at the checkpoint, 4 now" in notes[0]
    rows = trace(run)
    assert [len(r["samples"]) for r in rows] == [8] * SAVE_INTERVAL + [4] * (
        len(rows) - SAVE_INTERVAL
    )

    ref_rows = trace(_reference(elastic, 2))
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
