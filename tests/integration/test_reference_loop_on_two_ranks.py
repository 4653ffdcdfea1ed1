"""A real 2-rank curriculum run under the deepspeed launcher on CPU (gloo).

From issue 2.
"""

from __future__ import annotations

import math
from collections.abc import Generator
from pathlib import Path

import pytest
from helpers import RunOutput, make_dataset, metrics, ragged_docs, write_ds_config
from shared_job import Outputs, Run, shared_runs

from curriculum_ds.commands.launch import build_command
from curriculum_ds.train import parse_args

pytestmark = pytest.mark.distributed


@shared_runs
def _two_phase_runs(root: Path) -> Generator[list[Run], Outputs, tuple[Path, RunOutput]]:
    """The run, in the session's shared launched job (tests/shared_job.py)."""
    short = make_dataset(root, "short", ragged_docs(400, seed=1, min_len=10, max_len=40))
    long = make_dataset(
        root, "long", ragged_docs(400, seed=2, min_len=60, max_len=200), max_seq_len=128
    )
    curriculum = {
        "max_duration": "24000tok",
        "seed": 7,
        "schedule": [
            {
                "name": "short",
                "duration": "8000tok",
                "train_loader": {"streams": [{"local": str(short)}], "max_seq_len": 64},
            },
            {
                "name": "mix",
                "duration": "16000tok",
                "train_loader": {
                    "streams": [
                        {"local": str(short), "proportion": 0.3},
                        {"local": str(long), "proportion": 0.7},
                    ],
                    "max_seq_len": 128,
                },
            },
        ],
    }
    cfg = write_ds_config(
        root / "ds.json",
        curriculum,
        train_micro_batch_size_per_gpu=4,
        gradient_accumulation_steps=2,
        optimizer={"type": "AdamW", "params": {"lr": 3e-3}},
    )
    run_dir = root / "run"
    outputs = yield [Run(cfg, run_dir, ("--save-interval", "10"))]
    return run_dir, outputs[run_dir]


@pytest.fixture(scope="module")
def two_phase_run(shared_job):
    """(run dir, its output: every rank's, and the launched job's own)."""
    return shared_job(_two_phase_runs)


def test_two_phase_run_switches_at_the_exact_boundary(two_phase_run):
    run_dir, proc = two_phase_run
    rows = metrics(run_dir)
    global_batch = 4 * 2 * 2
    assert [r["step"] for r in rows] == list(range(1, len(rows) + 1))
    phases = [r["phase_name"] for r in rows]
    first_mix = phases.index("mix")
    assert set(phases[:first_mix]) == {"short"}
    assert set(phases[first_mix:]) == {"mix"}
    # the switch comes at the first step whose cumulative token count reaches 8000
    assert rows[first_mix - 1]["tokens"] >= 8000
    assert first_mix == 1 or rows[first_mix - 2]["tokens"] < 8000
    # the run ends within one global batch of max_duration
    last = rows[-1]
    assert 24000 <= last["tokens"] < 24000 + global_batch * 128
    assert last["samples"] == len(rows) * global_batch
    assert all(math.isfinite(r["loss"]) for r in rows)
    assert all(r["step_applied"] and not r["skipped"] for r in rows)
    first5 = sum(r["loss"] for r in rows[:5]) / 5
    last5 = sum(r["loss"] for r in rows[-5:]) / 5
    assert last5 < first5
    assert (run_dir / "checkpoints" / "latest").read_text() == f"global_step{last['step']}"
    assert "finished at step" in proc.output


def test_module_flag_and_local_rank(two_phase_run, monkeypatch):
    """Case C08: the launcher runs ``--module`` and hands each rank ``--local_rank=K``."""
    _, proc = two_phase_run
    # the launcher was called with --module (never -m) and appended --local_rank=K
    cmd = build_command(Path("ds.json"), num_gpus=2, master_port=1234)
    assert cmd[cmd.index("--module") + 1] == "curriculum_ds.train"
    assert "-m" not in cmd
    assert "'--local_rank=1'" in proc.job_output  # the launcher's line of rank 1's command
    monkeypatch.setenv("LOCAL_RANK", "3")
    args = parse_args(["--local_rank=3", "--deepspeed_config", "ds.json", "--run-dir", "r"])
    assert args.local_rank == 3
    monkeypatch.delenv("LOCAL_RANK")
    args = parse_args(["--local_rank=2", "--deepspeed_config", "ds.json", "--run-dir", "r"])
    assert args.local_rank == 2
    import os

    assert os.environ["LOCAL_RANK"] == "2"
    monkeypatch.setenv("LOCAL_RANK", "5")  # --no_local_rank: the rank comes from the environment
    assert parse_args(["--deepspeed_config", "ds.json", "--run-dir", "r"]).local_rank == 5
    from curriculum_ds.distributed import LocalRankError

    with pytest.raises(LocalRankError, match="--local_rank=1 disagrees with LOCAL_RANK=5"):
        parse_args(["--local_rank=1", "--deepspeed_config", "ds.json", "--run-dir", "r"])


def test_torchrun_gives_the_same_steps_as_the_deepspeed_launcher(two_phase_run, tmp_path):
    import subprocess
    import sys

    from curriculum_ds.commands.launch import launcher_env
    from curriculum_ds.distributed import free_port

    run_dir, _ = two_phase_run
    torchrun = str(Path(sys.executable).parent / "torchrun")
    cmd = [
        torchrun,
        "--nproc_per_node",
        "2",
        "--master_port",
        str(free_port()),
        "-m",
        "curriculum_ds.train",
        "--deepspeed_config",
        str(run_dir.parent / "ds.json"),
        "--run-dir",
        str(tmp_path / "run"),
        "--max-steps",
        "3",
        "--no-progress",
    ]
    proc = subprocess.run(
        cmd,
        env=launcher_env(cuda=False),
        capture_output=True,
        text=True,
        timeout=600,
        cwd=run_dir.parent,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    ours = metrics(tmp_path / "run")
    reference = metrics(run_dir)[:3]
    assert [r["tokens"] for r in ours] == [r["tokens"] for r in reference]
    assert [r["loss"] for r in ours] == pytest.approx([r["loss"] for r in reference], rel=1e-6)


@pytest.mark.parametrize("value", ["abc", "", " "])
def test_invalid_local_rank_env_is_one_line(monkeypatch, capsys, value):
    """Case C08: a bad ``LOCAL_RANK`` is refused in one line."""
    from curriculum_ds.distributed import LocalRankError
    from curriculum_ds.train import main

    monkeypatch.setenv("LOCAL_RANK", value)
    monkeypatch.delenv("RANK", raising=False)
    with pytest.raises(LocalRankError, match=f"LOCAL_RANK={value!r} in the environment"):
        parse_args(["--deepspeed_config", "ds.json", "--run-dir", "r"])
    with pytest.raises(LocalRankError, match=f"LOCAL_RANK={value!r}"):
        parse_args(["--local_rank=0", "--deepspeed_config", "ds.json", "--run-dir", "r"])
    assert main(["--deepspeed_config", "ds.json", "--run-dir", "r"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    assert f"LOCAL_RANK={value!r}" in err
