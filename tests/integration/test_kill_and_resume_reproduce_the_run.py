"""Kill -9 and resume, and the resume rules, through real 2-rank DeepSpeed runs on CPU (gloo).

* Resume reproduces the uninterrupted run: a run killed (SIGKILL) while writing the checkpoint
  of step 6 keeps ``latest`` at step 3; resumed from it and killed right after step 7, then
  resumed again from step 6, its trace, losses, weight history and final state equal the
  uninterrupted run's, with dynamic re-weighting on, under ZeRO-2; every record file and every
  CSV monitor file holds one row per step, equal to the uninterrupted run's (issue 24).
* Resume rules: a completed phase edited is refused with one line naming the phase and the
  field; the current phase's duration raised and a phase appended are accepted and used; a
  DeepSpeed checkpoint without curriculum state starts the schedule at phase 0 and keeps the
  step count. ``curriculum-ds validate --resume-from`` gives the same verdicts without training.

The runs are built once by :func:`resume_scenario` (in 3 launched jobs, ``helpers.launch_many``)
and shared with
test_resume_leaves_global_rngs_alone.py.

From issue 4, items 5 and 6.
"""

from __future__ import annotations

import copy
import json
import math
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
import torch
from click.testing import CliRunner
from helpers import (
    REPO,
    history,
    launch,
    launch_many,
    make_dataset,
    metrics,
    ragged_docs,
    trace,
    write_ds_config,
)
from run_records import RESUME_REL_TOL, assert_same_records

from curriculum_ds.checkpoint.files import read_curriculum_state
from curriculum_ds.cli import main as cli_main
from curriculum_ds.commands.launch import launcher_env

pytestmark = pytest.mark.distributed

SAVE_INTERVAL = 3
GLOBAL_BATCH = 8  # 2 ranks x micro 2 x GAS 2


def _curriculum(short: Path, long: Path) -> dict[str, Any]:
    return {
        "max_duration": "3500tok",
        "seed": 21,
        "schedule": [
            {
                "name": "short",
                "duration": "1500tok",
                "train_loader": {"streams": [{"local": str(short)}], "max_seq_len": 64},
            },
            {
                "name": "mix",
                "duration": "2000tok",
                "train_loader": {
                    "streams": [
                        {"local": str(short), "proportion": 0.4},
                        {"local": str(long), "proportion": 0.6},
                    ],
                    "max_seq_len": 96,
                },
            },
        ],
        "dynamic": {
            "enabled": True,
            "num_buckets": 4,
            "window": 64,
            "recompute_every_n_steps": 2,
            "temperature": 0.5,
            "floor": 0.05,
        },
    }


def _write_config(path: Path, curriculum: dict[str, Any], *, zero_stage: int = 2) -> Path:
    """ZeRO-2 with DeepSpeed's CSV monitor (under ``RUN_DIR/monitors/csv``), as a user runs."""
    return write_ds_config(
        path,
        curriculum,
        train_micro_batch_size_per_gpu=2,
        gradient_accumulation_steps=2,
        optimizer={"type": "AdamW", "params": {"lr": 3e-3}},
        zero_optimization={"stage": zero_stage},
        csv_monitor={"enabled": True},
    )


_SCENARIOS: dict[Path, dict[str, Any]] = {}


def resume_scenario(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Run (once per session) the uninterrupted run A and the killed-and-resumed run B.

    A: ``--save-interval 3 --trace-samples --dump-state``. B: killed while saving step 6
    (``latest`` stays at step 3), resumed with ``--resume auto`` and killed right after step 7
    (``latest`` is then step 6), resumed again to the end with ``--dump-state``. And the runs of
    :func:`_continuations`. Each SIGKILL is the last run of its job.
    """
    base = tmp_path_factory.getbasetemp() / "resume_scenario"
    if base in _SCENARIOS:
        return _SCENARIOS[base]
    shutil.rmtree(base, ignore_errors=True)  # a previous attempt in this session failed midway
    base.mkdir()
    short = make_dataset(base, "short", ragged_docs(120, seed=5, min_len=10, max_len=40))
    long = make_dataset(
        base, "long", ragged_docs(160, seed=6, min_len=40, max_len=120), max_seq_len=96
    )
    curriculum = _curriculum(short, long)
    cfg = _write_config(base / "ds.json", curriculum)
    a, b = base / "A", base / "B"
    common = ["--save-interval", str(SAVE_INTERVAL), "--trace-samples"]
    # job 1: A, then B killed while saving step 6 (the SIGKILL ends the job)
    first = launch_many(
        [
            (cfg, a, (*common, "--dump-state", str(a / "dump"))),
            (cfg, b, (*common, "--kill-during-save", "6")),
        ],
        may_fail=frozenset({b}),
    )[b]
    after_first = {
        "rc": first.returncode,
        "latest": (b / "checkpoints" / "latest").read_text(),
        "trace_steps": [r["step"] for r in trace(b)],
        "has_tag6": (b / "checkpoints" / "global_step6").is_dir(),
    }
    # job 2: the resume-rule runs (from A's checkpoints), then B resumed and killed after step 7
    runs, continuations = _continuations(base, curriculum, cfg, a)
    outputs = launch_many(
        [*runs.values(), (cfg, b, (*common, "--resume", "auto", "--kill-after-step", "7"))],
        may_fail=frozenset({runs["refused"][1], b}),
    )
    for name, run in runs.items():
        continuations[name]["output"] = outputs[run[1]]
    second = outputs[b]
    after_second = {
        "rc": second.returncode,
        "latest": (b / "checkpoints" / "latest").read_text(),
        "trace_steps": [r["step"] for r in trace(b)],
        "metrics_steps": [r["step"] for r in metrics(b)],
    }
    third = launch(cfg, b, *common, "--resume", "auto", "--dump-state", str(b / "dump"))
    result = {
        "root": base,
        "cfg": cfg,
        "curriculum": curriculum,
        "A": a,
        "B": b,
        "after_first": after_first,
        "after_second": after_second,
        "third": third,
        "short": short,
        "long": long,
        "continuations": continuations,
    }
    _SCENARIOS[base] = result
    return result


@pytest.fixture(scope="module")
def scenario(tmp_path_factory):
    return resume_scenario(tmp_path_factory)


# ------------------------------------------------------------------- item 5: kill -9 and resume


def test_kill_during_save_never_becomes_latest(scenario):
    first = scenario["after_first"]
    assert first["rc"] != 0  # killed by SIGKILL
    assert first["latest"] == "global_step3"
    assert first["has_tag6"]  # DeepSpeed had written the tag ...
    assert first["trace_steps"] == list(range(1, 7))  # ... after step 6, when the kill came


def test_kill_after_step_resumes_from_latest(scenario):
    second = scenario["after_second"]
    assert second["rc"] != 0
    assert second["latest"] == "global_step6"
    # the resumed run cut the files back to step 3 and appended steps 4..7
    assert second["trace_steps"] == list(range(1, 8))
    assert second["metrics_steps"] == list(range(1, 8))
    assert "finished at step" in scenario["third"].stdout


def test_resumed_trace_equals_uninterrupted(scenario):
    a, b = trace(scenario["A"]), trace(scenario["B"])
    assert len(a) >= 10
    assert {r["phase"] for r in a} == {0, 1}
    assert b == a  # step for step, sample for sample


def test_resumed_losses_equal_uninterrupted(scenario):
    a, b = metrics(scenario["A"]), metrics(scenario["B"])
    assert [r["step"] for r in b] == [r["step"] for r in a]
    for ra, rb in zip(a, b, strict=True):
        assert (ra["phase"], ra["tokens"], ra["samples"]) == (
            rb["phase"],
            rb["tokens"],
            rb["samples"],
        )
        assert math.isclose(rb["loss"], ra["loss"], rel_tol=RESUME_REL_TOL), (
            ra["step"],
            ra["loss"],
            rb["loss"],
        )
    assert (scenario["B"] / "checkpoints" / "latest").read_text() == f"global_step{a[-1]['step']}"


def _read_ahead_rule(rows: list[dict[str, Any]], first_steps: set[int]) -> list[int]:
    """Micro-batches each row's step had read on the prefetch thread (prefetch 2, GAS 2): all of
    them, but at the first step of a process and after a step that recomputed the weights (every
    2) or swapped the phase, where the training thread reads the first when drawn (issue 35)."""
    out = []
    for prev, row in zip([None, *rows], rows, strict=False):
        settled = prev is not None and prev["step"] % 2 == 1 and prev["phase"] == row["phase"]
        out.append(2 if settled and row["step"] not in first_steps else 1)
    return out


def test_steps_were_read_ahead_where_nothing_due_could_change_them(scenario):
    # issue 23: with the default prefetch_micro_batches (2) on, under ZeRO-2 with dynamic
    # re-weighting; each process of B (steps 1-3, 4-6, 7-13 kept) read its first step itself
    a, b = metrics(scenario["A"]), metrics(scenario["B"])
    assert [r["prefetched"] for r in a] == _read_ahead_rule(a, {1})
    assert [r["prefetched"] for r in b] == _read_ahead_rule(b, {1, 4, 7})
    assert a[3]["prefetched"] == 2  # step 4 read ahead in A, read when drawn after B's resume
    assert all(r["data_wait_s"] >= 0 for r in a + b)


def test_every_record_file_and_the_csv_monitor_equal_uninterrupted(scenario):
    # ZeRO-2, dynamic on, killed twice: metrics, history, trace and every csv_monitor file hold
    # one row per step (one header each), equal to the uninterrupted run's
    worst = assert_same_records(scenario["A"], scenario["B"], rel_tol=RESUME_REL_TOL)
    assert worst <= RESUME_REL_TOL, worst


def test_resumed_weight_history_and_final_state_equal_uninterrupted(scenario):
    assert len(history(scenario["A"])) >= 4
    keys = ("step", "phase", "weights", "scores", "edges", "bucket_counts", "window_size")
    assert [{k: r.get(k) for k in keys} for r in history(scenario["B"])] == [
        {k: r.get(k) for k in keys} for r in history(scenario["A"])
    ]
    pa = torch.load(scenario["A"] / "dump" / "params.pt")
    pb = torch.load(scenario["B"] / "dump" / "params.pt")
    assert pa.keys() == pb.keys()
    for name in pa:
        torch.testing.assert_close(pb[name], pa[name], rtol=1e-5, atol=1e-6, msg=name)


# ------------------------------------------------------------------------ item 6: resume rules


def _ckpt_copy(src_ckpts: Path, tag: str, dest: Path) -> Path:
    """A checkpoints folder holding only ``tag``, with ``latest`` pointing at it."""
    dest.mkdir(parents=True)
    shutil.copytree(src_ckpts / tag, dest / tag)
    (dest / "latest").write_text(tag)
    return dest


def _mid_phase1_tag_of(a: Path) -> tuple[str, dict[str, Any]]:
    """The last checkpoint of A (run dir ``a``) that is inside phase 1 ("mix"), past its first
    step."""
    a_ckpts = a / "checkpoints"
    found = None
    for step in range(SAVE_INTERVAL, 100, SAVE_INTERVAL):
        if not (a_ckpts / f"global_step{step}").is_dir():
            break
        _, saved = read_curriculum_state(a_ckpts / f"global_step{step}")
        if saved["phase_idx"] == 1 and int(saved["progress"]) > 1500:
            found = (f"global_step{step}", saved)
    assert found is not None, "no checkpoint of A inside phase 1; adjust the schedule"
    return found


def _validate(cfg: Path, ckpt: Path) -> Any:
    return CliRunner().invoke(cli_main, ["validate", str(cfg), "--resume-from", str(ckpt)])


def _error_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if "curriculum_ds: error:" in line]


def test_completed_phase_edited_is_refused_in_one_line(scenario, tmp_path):
    refused = scenario["continuations"]["refused"]
    ckpts, cfg, run_dir = refused["ckpts"], refused["cfg"], refused["ckpts"].parent

    # validate --resume-from: the same verdict, without training
    result = _validate(cfg, ckpts)
    assert result.exit_code == 1
    msg = result.output.strip().splitlines()[-1]
    assert 'curriculum.schedule[0] ("short").train_loader.streams[0].proportion' in msg
    assert "Traceback" not in result.output

    proc = refused["output"]  # launched with --resume auto (in the scenario's last job)
    assert proc.returncode != 0
    assert "Traceback" not in proc.output
    lines = _error_lines(proc.output)  # both ranks' output: one line, from rank 0
    assert len(lines) == 1, proc.output[-3000:]
    assert 'curriculum.schedule[0] ("short").train_loader.streams[0].proportion' in lines[0]
    assert "is complete and cannot change" in lines[0]
    assert not (run_dir / "metrics.jsonl").exists() or not metrics(run_dir)

    # the other completed-phase fields are refused the same way (validate: no training)
    for field, edit in [
        (
            "duration",
            lambda c: (
                c["schedule"][0].update(duration="1400tok")
                or c["schedule"][1].update(duration="2100tok")
            ),
        ),
        (
            "train_loader.streams[0].local",
            lambda c: c["schedule"][0]["train_loader"]["streams"][0].update(
                local=str(scenario["long"])
            ),
        ),
        (
            "train_loader.max_seq_len",
            lambda c: c["schedule"][0]["train_loader"].update(max_seq_len=32),
        ),
    ]:
        other = copy.deepcopy(scenario["curriculum"])
        edit(other)
        result = _validate(_write_config(tmp_path / "other.json", other), ckpts)
        assert result.exit_code == 1, (field, result.output)
        assert f'curriculum.schedule[0] ("short").{field}' in result.output.strip().splitlines()[-1]


def test_current_phase_extended_and_phase_appended_are_used(scenario):
    extended = scenario["continuations"]["extended"]
    ckpts, cfg, step = extended["ckpts"], extended["cfg"], extended["step"]
    run_dir = extended["run"]

    result = _validate(cfg, ckpts)
    assert result.exit_code == 0, result.output
    assert "OK" in result.output
    assert "phase 1 ('mix')" in result.output

    # launched with --resume auto --trace-samples (in the scenario's last job)
    assert extended["output"].returncode == 0
    rows = metrics(run_dir)
    assert rows[0]["step"] == step + 1
    phases = [r["phase_name"] for r in rows]
    assert phases[0] == "mix"
    assert phases[-1] == "extra"
    ends = {"mix": 4100, "extra": 4700}
    for name, end in ends.items():
        last = max(i for i, p in enumerate(phases) if p == name)
        assert rows[last]["tokens"] >= end
        assert last == 0 or rows[last - 1]["tokens"] < end
    assert rows[-1]["tokens"] < 4700 + GLOBAL_BATCH * 96
    # the continuation of "mix" is the uninterrupted run's, as far as that run went
    a_trace = {r["step"]: r for r in trace(scenario["A"])}
    resumed = trace(run_dir)
    overlap = [r for r in resumed if r["step"] in a_trace]
    assert overlap
    assert all(r == a_trace[r["step"]] for r in overlap)
    extra = [s for r in resumed if r["phase"] == 2 for s in r["samples"]]
    assert extra
    assert {s for s, _ in extra} == {"long"}


NO_CURRICULUM_SCRIPT = textwrap.dedent("""
    import sys
    from pathlib import Path

    from curriculum_ds.distributed import prepare_environment, resolve_local_rank

    resolve_local_rank(None)  # LOCAL_RANK=0: DeepSpeed then skips its MPI discovery
    prepare_environment()  # a world of one
    import deepspeed
    import torch

    from curriculum_ds.config import load_config
    from curriculum_ds.train import build_model

    cfg_path, out, steps = Path(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3])
    run = load_config(cfg_path)
    cur = run.curriculum
    torch.manual_seed(cur.seed)  # as the trainer does: the same initial model
    model = build_model(None, cur, max(p.train_loader.max_seq_len for p in cur.schedule))
    ds_config = dict(run.ds_config)  # one rank: DeepSpeed derives train_batch_size itself
    deepspeed.init_distributed(verbose=False)
    engine, *_ = deepspeed.initialize(model=model, model_parameters=list(model.parameters()),
                                      config=ds_config)
    engine.global_steps = steps  # a DeepSpeed run that trained `steps` steps without curriculum
    engine.save_checkpoint(str(out), tag=f"global_step{steps}", save_latest=True)
""")


def _edited_curriculum(curriculum: dict[str, Any]) -> dict[str, Any]:
    """A completed phase edited: phase 0's stream proportion."""
    edited = copy.deepcopy(curriculum)
    edited["schedule"][0]["train_loader"]["streams"][0]["proportion"] = 0.5
    return edited


def _extended_curriculum(curriculum: dict[str, Any], long: Path) -> dict[str, Any]:
    """The current phase's duration raised above what it consumed, and a phase appended."""
    extended = copy.deepcopy(curriculum)
    extended["schedule"][1]["duration"] = "2600tok"  # raised above what it consumed
    extended["schedule"].append(
        {
            "name": "extra",
            "duration": "600tok",
            "train_loader": {"streams": [{"local": str(long)}], "max_seq_len": 96},
        }
    )
    extended["max_duration"] = "4700tok"
    return extended


Run = tuple[Path, Path, tuple[str, ...]]  # (ds_config, run_dir, extra args) of launch_many


def _continuations(
    base: Path, curriculum: dict[str, Any], cfg: Path, a: Path
) -> tuple[dict[str, Run], dict[str, dict[str, Any]]]:
    """The resume-rule runs, resumed from A's mid-phase-1 checkpoint (a copy) or from a plain
    DeepSpeed checkpoint: ``({name: run}, {name: details})``; the runs are for launch_many.

    * ``extended``: :func:`_extended_curriculum`, ``--resume auto --trace-samples``;
    * ``plain``: the checkpoint NO_CURRICULUM_SCRIPT writes (6 steps, no curriculum state),
      ``--resume CKPTS --trace-samples``; left out when the script fails (its test says why);
    * ``refused``: :func:`_edited_curriculum`, ``--resume auto`` (refused: last, may fail).
    """
    tag, saved = _mid_phase1_tag_of(a)
    runs: dict[str, Run] = {}
    details: dict[str, dict[str, Any]] = {}
    root = base / "extended"
    _ckpt_copy(a / "checkpoints", tag, root / "run" / "checkpoints")
    # validate reads a copy of its own: the run adds its checkpoints to the other one
    ckpts = _ckpt_copy(a / "checkpoints", tag, root / "validate" / "checkpoints")
    ext_cfg = _write_config(root / "ds.json", _extended_curriculum(curriculum, base / "long"))
    runs["extended"] = (ext_cfg, root / "run", ("--resume", "auto", "--trace-samples"))
    details["extended"] = {
        "ckpts": ckpts,
        "cfg": ext_cfg,
        "step": int(saved["global_step"]),
        "run": root / "run",
    }

    root = base / "plain"
    root.mkdir()
    steps = 6  # a multiple of the recompute interval: the re-weighting runs as in A, shifted
    script = root / "write_plain_ckpt.py"
    script.write_text(NO_CURRICULUM_SCRIPT)
    plain_ckpts = root / "plain_ckpts"
    # a one-rank ZeRO-0 checkpoint, continued under ZeRO-0 (not an elastic resume)
    plain_cfg = _write_config(root / "ds.json", curriculum, zero_stage=0)
    env = launcher_env(cuda=False)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO / "python"), env.get("PYTHONPATH")]))
    proc = subprocess.run(
        [sys.executable, str(script), str(plain_cfg), str(plain_ckpts), str(steps)],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    details["plain"] = {"proc": proc, "ckpts": plain_ckpts, "steps": steps, "run": root / "run"}
    if proc.returncode == 0:
        runs["plain"] = (
            plain_cfg,
            root / "run",
            ("--resume", str(plain_ckpts), "--trace-samples"),
        )

    root = base / "refused"
    ckpts = _ckpt_copy(a / "checkpoints", tag, root / "run" / "checkpoints")
    edited_cfg = _write_config(root / "ds.json", _edited_curriculum(curriculum))
    runs["refused"] = (edited_cfg, root / "run", ("--resume", "auto"))
    details["refused"] = {"ckpts": ckpts, "cfg": edited_cfg}
    return runs, details


def test_checkpoint_without_curriculum_starts_at_phase0_and_keeps_the_step(scenario):
    plain = scenario["continuations"]["plain"]
    proc, ckpts, steps, run_dir = plain["proc"], plain["ckpts"], plain["steps"], plain["run"]
    assert proc.returncode == 0, proc.stderr[-4000:]
    tag, saved = read_curriculum_state(ckpts)
    assert tag == f"global_step{steps}"
    assert saved is None

    result = _validate(scenario["cfg"], ckpts)
    assert result.exit_code == 0, result.output
    assert "no curriculum state" in result.output
    assert "phase 0 ('short')" in result.output

    # launched with --resume CKPTS --trace-samples (in the scenario's last job)
    assert plain["output"].returncode == 0
    rows = metrics(run_dir)
    assert rows[0]["step"] == steps + 1
    assert rows[0]["phase_name"] == "short"
    # the schedule runs from its start: the same samples as A's fresh run, shifted by `steps`
    a = trace(scenario["A"])
    resumed = trace(run_dir)
    assert [r["step"] - steps for r in resumed] == [r["step"] for r in a]
    assert [(r["phase"], r["samples"]) for r in resumed] == [(r["phase"], r["samples"]) for r in a]
    assert rows[-1]["tokens"] == metrics(scenario["A"])[-1]["tokens"]
    assert (
        json.loads((run_dir / "checkpoints" / "latest").read_text().replace("global_step", ""))
        == rows[-1]["step"]
    )
