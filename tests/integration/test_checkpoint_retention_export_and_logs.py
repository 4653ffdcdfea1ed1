"""Checkpoint retention, export and the run's logs on real 2-rank DeepSpeed runs on CPU (gloo).

* ``--keep-last 2`` over a run with a save every step leaves exactly 2 tags and a valid
  ``latest``; a run SIGKILLed while pruning (a tag renamed to trash, half removed) resumes with
  ``--resume auto`` and continues exactly as the uninterrupted run.
* ``train --export-final`` (ZeRO 0) and ``curriculum-ds export`` (ZeRO 3) write HF folders that
  ``AutoModelForCausalLM.from_pretrained`` loads, whose logits equal the engine's on a batch;
  ``export`` of a run's checkpoint without ``--deepspeed-config`` too (the run recorded its
  model's architecture in ``checkpoints/model/``).
* With stdout and stderr redirected to a file: one banner, one line per ``--log-interval``, no
  progress bar, and none of our lines over 300 characters.

The runs are runs of the session's shared launched job (``tests/shared_job.py``: the reference
loop plus faulty_train's ``--dump-state``/``--kill-during-prune``, many_runs.py), each rank's
stdout and stderr redirected to a file: the full ZeRO-0 run, the ZeRO-3 run and the run killed
while pruning in one round, the killed run's resume in the next.

From issue 14, items 4 and 5, and issue 24.
"""

from __future__ import annotations

import json
from collections.abc import Generator
from pathlib import Path
from typing import Any

import pytest
import torch
from click.testing import CliRunner
from helpers import make_dataset, metrics, ragged_docs, write_ds_config
from shared_job import Outputs, Run, shared_runs

from curriculum_ds.checkpoint.retention import TRASH_PREFIX, checkpoint_tags
from curriculum_ds.cli import main as cli_main

pytestmark = pytest.mark.distributed

LOG_INTERVAL = 2


def _curriculum(data: Path) -> dict[str, Any]:
    stream = {"streams": [{"local": str(data)}], "max_seq_len": 64}
    return {
        "max_duration": "2200tok",
        "seed": 5,
        "schedule": [
            {"name": "warm", "duration": "800tok", "train_loader": stream},
            {"name": "main", "duration": "1400tok", "train_loader": stream},
        ],
    }


@shared_runs
def _runs(root: Path) -> Generator[list[Run], Outputs, dict[str, Any]]:
    """Round 1: the full ZeRO-0 run, the ZeRO-3 run and the run killed while pruning; round 2:
    the killed run's resume."""
    data = make_dataset(root, "data", ragged_docs(300, seed=4, min_len=10, max_len=40))
    zero0 = write_ds_config(root / "ds0.json", _curriculum(data))
    zero3 = write_ds_config(root / "ds3.json", _curriculum(data), zero_optimization={"stage": 3})
    full, zero3_run, killed = root / "full", root / "zero3", root / "killed"
    retention = ("--save-interval", "1", "--keep-last", "2", "--log-interval", str(LOG_INTERVAL))
    outputs = yield [
        Run(
            zero0,
            full,
            (
                "--save-interval", "1",
                "--keep-last", "2",
                "--log-interval", str(LOG_INTERVAL),
                "--export-final", str(root / "final"),
                "--dump-state", str(root / "full_dump"),
            ),
        ),
        Run(
            zero3,
            zero3_run,
            (
                "--max-steps", "3", "--save-interval", "1", "--keep-last", "1",
                "--dump-state", str(root / "zero3_dump"),
            ),
        ),
        Run(zero0, killed, (*retention, "--kill-during-prune", "4")),
    ]  # fmt: skip
    ckpts = killed / "checkpoints"
    after_kill = {  # before the resume: what the kill left
        "code": outputs[killed].returncode,
        "latest": (ckpts / "latest").read_text(),
        "tags": checkpoint_tags(ckpts),
        "trash": [p.name.split("-")[1] for p in ckpts.glob(TRASH_PREFIX + "*")],
    }
    resumed = yield [Run(zero0, killed, (*retention, "--resume", "auto"))]
    return {
        "root": root,
        "zero0": zero0,
        "zero3": zero3,
        "full": (full, outputs[full].output, outputs[full].job_output),
        "zero3_log": outputs[zero3_run].output,
        "after_kill": after_kill,
        "resumed_log": resumed[killed].output,
    }


@pytest.fixture(scope="module")
def setup(shared_job) -> dict[str, Any]:
    return shared_job(_runs)  # type: ignore[no-any-return]


@pytest.fixture(scope="module")
def full_run(setup):
    return setup["full"]


def _our_lines(log: str) -> list[str]:
    return [line for line in log.splitlines() if line.startswith("curriculum_ds:")]


def test_keep_last_2_over_many_saves_leaves_two_tags_and_a_valid_latest(full_run):
    run_dir, _, _ = full_run
    rows = metrics(run_dir)
    assert len(rows) >= 10  # one save per step
    ckpts = run_dir / "checkpoints"
    last = rows[-1]["step"]
    assert checkpoint_tags(ckpts) == [f"global_step{last - 1}", f"global_step{last}"]
    assert (ckpts / "latest").read_text() == f"global_step{last}"
    assert not list(ckpts.glob(TRASH_PREFIX + "*"))


def test_a_log_file_gets_a_banner_and_one_line_per_interval(full_run):
    run_dir, log, job_output = full_run
    rows = metrics(run_dir)
    ours = _our_lines(log)
    banners = [line for line in ours if line.startswith("curriculum_ds: start |")]
    assert len(banners) == 1
    assert "GPT2LMHeadModel" in banners[0]
    batch = "| world 2 | micro-batch 2 × GAS 2 × 2 ranks = global batch 8 samples | fp32 | ZeRO 0 |"
    assert batch in banners[0]
    assert banners[0].endswith("| fresh start")
    steps = [line for line in ours if line.startswith("curriculum_ds: step ")]
    expected = [r for r in rows if r["step"] % LOG_INTERVAL == 0]
    assert [int(line.split()[2]) for line in steps] == [r["step"] for r in expected]
    for line, row in zip(steps, expected, strict=True):
        assert f"phase {row['phase']} {row['phase_name']} |" in line
        assert f"loss {row['loss']:.4f}" in line
        for part in (" tok (", " tok/s", "| lr "):
            assert part in line
    assert all(len(line) <= 300 for line in ours), max(ours, key=len)
    assert "\r" not in log  # no progress bar in a file
    assert "\r" not in job_output  # nor in the launcher's own output


def _assert_logits_equal(folder: Path, dump: Path) -> None:
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(folder, torch_dtype=torch.float32)
    saved = torch.load(dump / "logits.pt")
    with torch.no_grad():
        logits = model.eval()(saved["input_ids"]).logits
    torch.testing.assert_close(logits, saved["logits"], rtol=1e-6, atol=1e-6)


def test_export_final_under_zero0_loads_with_the_engines_logits(setup, full_run):
    root = setup["root"]
    _, log, _ = full_run
    assert json.loads((root / "final" / "config.json").read_text())["model_type"] == "gpt2"
    assert any(line.startswith("curriculum_ds: exported global_step") for line in log.splitlines())
    _assert_logits_equal(root / "final", root / "full_dump")


def test_export_cli_under_zero3_loads_with_the_engines_logits(setup):
    root, zero3 = setup["root"], setup["zero3"]
    run_dir = root / "zero3"
    assert "| ZeRO 3 |" in setup["zero3_log"]
    ckpts = run_dir / "checkpoints"
    assert checkpoint_tags(ckpts) == ["global_step3"]
    assert list((ckpts / "global_step3").glob("zero_pp_rank_1_*optim_states.pt"))  # sharded
    out = root / "zero3_export"
    result = CliRunner().invoke(
        cli_main, ["export", str(ckpts), str(out), "--deepspeed-config", str(zero3)]
    )
    assert result.exit_code == 0, result.output
    assert result.output.startswith(f"exported {ckpts / 'global_step3'} (")
    _assert_logits_equal(out, root / "zero3_dump")
    # no flag: the run recorded its model's architecture beside its checkpoints (issue 24)
    assert (ckpts / "model" / "config.json").is_file()
    bare = root / "zero3_export_no_flag"
    result = CliRunner().invoke(cli_main, ["export", str(ckpts / "global_step3"), str(bare)])
    assert result.exit_code == 0, result.output
    assert "as a HF model folder" in result.output
    _assert_logits_equal(bare, root / "zero3_dump")


def test_a_kill_during_pruning_still_resumes_as_the_uninterrupted_run(setup, full_run):
    run_dir = setup["root"] / "killed"
    after_kill = setup["after_kill"]
    assert after_kill["code"] != 0
    ckpts = run_dir / "checkpoints"
    # killed while deleting global_step2: it is trash already, `latest` names step 4
    assert after_kill["latest"] == "global_step4"
    assert after_kill["tags"] == ["global_step3", "global_step4"]
    assert after_kill["trash"] == ["global_step2"]
    log = setup["resumed_log"]
    (banner,) = [line for line in _our_lines(log) if line.startswith("curriculum_ds: start |")]
    assert banner.endswith(f"| resumed from {ckpts / 'global_step4'}")
    full = metrics(full_run[0])
    resumed = metrics(run_dir)
    assert [r["step"] for r in resumed] == [r["step"] for r in full]
    assert [r["loss"] for r in resumed] == [r["loss"] for r in full]
    last = full[-1]["step"]
    assert checkpoint_tags(ckpts) == [f"global_step{last - 1}", f"global_step{last}"]
    assert not list(ckpts.glob(TRASH_PREFIX + "*"))
