"""The `curriculum-ds` front door: help, prepare, launch (command printed, exit code), demo."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from helpers import REPO, make_dataset, ragged_docs, write_ds_config

from curriculum_ds.cli import main
from curriculum_ds.commands.launch import launcher_env

CLI = str(Path(sys.executable).parent / "curriculum-ds")


def _cli(*args: str, cwd: Path, timeout: int = 600) -> subprocess.CompletedProcess[str]:
    env = launcher_env(cuda=False)
    env["PYTHONPATH"] = str(REPO / "python")
    return subprocess.run(
        [CLI, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout
    )


@pytest.mark.parametrize(
    "command", [[], ["prepare"], ["validate"], ["launch"], ["demo"], ["curve"], ["bench"]]
)
def test_every_command_has_help(command):
    result = CliRunner().invoke(main, [*command, "--help"])
    assert result.exit_code == 0, result.output
    assert "Usage:" in result.output


def test_prepare_writes_shards_and_refuses_bad_input_in_one_line(tmp_path):
    doc = tmp_path / "a.txt"
    doc.write_text("Curriculum learning starts easy. " * 20)
    result = CliRunner().invoke(
        main, ["prepare", str(doc), "--out", str(tmp_path / "mds"), "--max-seq-len", "64"]
    )
    assert result.exit_code == 0, result.output
    assert "samples" in result.output
    meta = json.loads((tmp_path / "mds" / "curriculum_meta.json").read_text())
    assert meta["vocab_size"] == 257
    assert meta["num_samples"] > 0
    assert f"wrote {meta['num_samples']:,} samples" in result.output
    bad = CliRunner().invoke(
        main, ["prepare", str(tmp_path / "nope.txt"), "--out", str(tmp_path / "o")]
    )
    assert bad.exit_code == 1
    assert bad.output.startswith("Error: ")
    assert len(bad.output.strip().splitlines()) == 1
    assert "Traceback" not in bad.output
    assert not (tmp_path / "o").exists()


@pytest.fixture(scope="module")
def tiny_config(tmp_path_factory):
    root = tmp_path_factory.mktemp("cli")
    data = make_dataset(root, "d", ragged_docs(200, seed=3))
    curriculum = {
        "max_duration": "2000tok",
        "schedule": [
            {
                "name": "a",
                "duration": "1000tok",
                "train_loader": {"streams": [{"local": str(data)}], "max_seq_len": 64},
            },
            {
                "name": "b",
                "duration": "1000tok",
                "train_loader": {"streams": [{"local": str(data)}], "max_seq_len": 32},
            },
        ],
    }
    return write_ds_config(root / "ds.json", curriculum)


@pytest.mark.distributed
def test_launch_prints_the_deepspeed_command_then_runs_it(tiny_config, tmp_path):
    proc = _cli(
        "launch",
        str(tiny_config),
        "--num-gpus",
        "2",
        "--",
        "--run-dir",
        str(tmp_path / "run"),
        "--no-progress",
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    first = proc.stdout.splitlines()[0]
    assert first.startswith("DS_ACCELERATOR=cpu ")
    assert "--num_gpus 2" in first
    assert "--module curriculum_ds.train --deepspeed_config" in first
    assert (tmp_path / "run" / "metrics.jsonl").is_file()


@pytest.mark.distributed
def test_launch_exit_code_is_the_runs(tiny_config, tmp_path):
    proc = _cli(
        "launch",
        str(tiny_config),
        "--num-gpus",
        "2",
        "--",
        "--run-dir",
        str(tmp_path / "run"),
        "--resume",
        str(tmp_path / "no_such_ckpt"),
        cwd=tmp_path,
    )
    assert proc.returncode != 0
    assert f"--resume {tmp_path / 'no_such_ckpt'}: no such folder" in proc.stderr + proc.stdout


def test_launch_refuses_a_bad_config_before_starting_ranks(tmp_path):
    cfg = write_ds_config(tmp_path / "bad.json", {"max_duration": "10tok", "schedule": []})
    result = CliRunner().invoke(main, ["launch", str(cfg), "--num-gpus", "2"])
    assert result.exit_code == 1
    assert result.output.startswith("Error: curriculum.schedule")
    assert "deepspeed" not in result.output


@pytest.mark.parametrize("spelling", ["separate", "joined"])
def test_launch_checks_the_trainers_model_vocab_before_starting_ranks(
    tiny_config, tmp_path, spelling
):
    """The trainer's --model (after --) is checked like `validate --model`: byte-level data
    (ids up to 256) against a 200-token vocabulary is refused before any rank starts."""
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text(json.dumps({"model_type": "gpt2", "vocab_size": 200}))
    option = ["--model", str(model)] if spelling == "separate" else [f"--model={model}"]
    result = CliRunner().invoke(
        main, ["launch", str(tiny_config), "--num-gpus", "2", "--", "--run-dir", "r", *option]
    )
    assert result.exit_code == 1, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1, result.output
    assert "out of range for vocab_size 200" in lines[0]
    assert "deepspeed" not in result.output


@pytest.mark.distributed
def test_demo_runs_end_to_end_and_points_at_the_picture(tmp_path):
    proc = _cli("demo", "--out", str(tmp_path / "demo"), "--max-duration", "40000tok", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-4000:]
    run = tmp_path / "demo" / "run"
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert rows[0]["phase_name"] == "docstrings"
    assert rows[-1]["phase_name"] == "mix"
    assert rows[-1]["tokens"] >= 40000
    assert (run / "curriculum_curve.png").stat().st_size > 10_000
    assert "bucket weights over steps" in proc.stdout
    assert "curriculum-ds curve" in proc.stdout
    # held-out evals of both streams (every 10% of the tokens and at phase ends), then the report
    evals = [json.loads(line) for line in (run / "eval.jsonl").read_text().splitlines()]
    assert {e["phase_name"] for e in evals} == {"docstrings", "mix"}
    assert set(evals[-1]["streams"]) == {"docstrings", "code"}
    assert evals[-1]["step"] == rows[-1]["step"]
    assert (run / "report.png").stat().st_size > 50_000
    assert 'phase 1 "mix"' in proc.stdout
    assert "curriculum-ds report" in proc.stdout
