"""Every DeepSpeed checkpoint load or save failure is one line naming the
checkpoint, exit code 1, never a traceback (``python -m curriculum_ds.train``, one process,
ZeRO-2 so that the optimizer state is a file of its own).

A run writes ``global_step1`` and ``global_step2``; copies of it are then damaged and resumed
with ``--resume auto``: ``latest`` naming a tag that is not there, an empty ``latest``, the
model states truncated, the optimizer states missing or truncated. And a run whose checkpoints
folder cannot be created fails at its first save with one line, ``latest`` never written.

From issue 13, item 4.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from helpers import fixed_docs, make_dataset, run_train_module, write_ds_config

pytestmark = pytest.mark.distributed


def _run(cfg: Path, run_dir: Path, *extra: str) -> Any:
    return run_train_module(
        "--deepspeed_config", str(cfg), "--run-dir", str(run_dir), *extra, cwd=cfg.parent
    )


def _one_error_line(proc: Any) -> str:
    assert proc.returncode == 1, proc.stderr[-3000:]
    output = proc.stdout + proc.stderr
    assert "Traceback" not in output, output[-3000:]
    errors = [line for line in output.splitlines() if line.startswith("curriculum_ds: error: ")]
    assert len(errors) == 1, output[-3000:]
    return errors[0].removeprefix("curriculum_ds: error: ")


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("ckpt_failures")
    data = make_dataset(root, "d", fixed_docs(32, 32), max_seq_len=32)
    curriculum = {
        "max_duration": "2048tok",
        "schedule": [
            {
                "name": "a",
                "duration": "2048tok",
                "train_loader": {"streams": [{"local": str(data)}], "max_seq_len": 32},
            }
        ],
    }
    cfg = write_ds_config(root / "ds.json", curriculum, zero_optimization={"stage": 2})
    run_dir = root / "base"
    proc = _run(cfg, run_dir, "--max-steps", "2", "--save-interval", "1")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert (run_dir / "checkpoints" / "latest").read_text() == "global_step2"
    return cfg, run_dir


def _truncate(path: Path) -> None:
    path.write_bytes(path.read_bytes()[:100])


DAMAGE: list[tuple[str, Callable[[Path], None], str]] = [
    (
        "latest names a missing tag",
        lambda ck: (ck / "latest").write_text("global_step9"),
        "{ck}/latest names 'global_step9', which is not a folder there",
    ),
    (
        "latest is empty",
        lambda ck: (ck / "latest").write_text(""),
        "{ck}/latest names '', which is not a folder there",
    ),
    (
        "model states truncated",
        lambda ck: _truncate(ck / "global_step2" / "mp_rank_00_model_states.pt"),
        "{ck}/global_step2/mp_rank_00_model_states.pt: cannot be read (",
    ),
    (
        "optimizer states missing",
        lambda ck: (ck / "global_step2" / "zero_pp_rank_0_mp_rank_00_optim_states.pt").unlink(),
        "{ck}/global_step2: DeepSpeed cannot load this checkpoint into this engine (",
    ),
    (
        "optimizer states truncated",
        lambda ck: _truncate(ck / "global_step2" / "zero_pp_rank_0_mp_rank_00_optim_states.pt"),
        "{ck}/global_step2: DeepSpeed cannot load this checkpoint into this engine (",
    ),
]


@pytest.mark.parametrize(("what", "damage", "line"), DAMAGE, ids=[d[0] for d in DAMAGE])
def test_a_damaged_checkpoint_is_one_line(
    base: tuple[Path, Path],
    tmp_path: Path,
    what: str,
    damage: Callable[[Path], None],
    line: str,
) -> None:
    cfg, run_dir = base
    copy = tmp_path / "run"
    shutil.copytree(run_dir, copy)
    ckpts = copy / "checkpoints"
    damage(ckpts)
    error = _one_error_line(_run(cfg, copy, "--resume", "auto"))
    assert error.startswith(line.format(ck=ckpts)), error


def test_a_save_that_fails_is_one_line_and_moves_no_latest(
    base: tuple[Path, Path], tmp_path: Path
) -> None:
    cfg, _ = base
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "checkpoints").write_text("a file where the checkpoints folder goes")
    error = _one_error_line(_run(cfg, run_dir, "--max-steps", "1"))
    assert error.startswith(
        f"{run_dir / 'checkpoints' / 'global_step1'}: DeepSpeed could not write this checkpoint ("
    ), error
    assert error.endswith("; `latest` still names the previous one")
