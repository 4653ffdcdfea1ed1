"""``validate --resume-from`` notes a global-batch change (issue 24, item 5).

At another world size (or batch sizes) than the checkpoint's, the resume prints one
``curriculum_ds: note:`` line (``checkpoint.engine_io.global_batch_note``); ``validate`` said a
silent OK. It now prints the same line after its verdict, and none when the batch is the same.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from click.testing import CliRunner
from helpers import make_dataset, ragged_docs, two_phase_curriculum, write_ds_config

from curriculum_ds.checkpoint.engine_io import global_batch_note
from curriculum_ds.checkpoint.files import open_tag
from curriculum_ds.checkpoint.state import CurriculumState
from curriculum_ds.cli import main as cli_main
from curriculum_ds.config import parse_curriculum


@pytest.fixture(scope="module")
def curriculum(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("batch_note")
    return two_phase_curriculum(
        make_dataset(root, "short", ragged_docs(40, seed=1)),
        make_dataset(root, "long", ragged_docs(40, seed=2)),
    )


def _checkpoint(root: Path, curriculum: dict[str, Any], train_batch_size: int) -> Path:
    """A checkpoints folder written at global batch ``train_batch_size`` (step 9)."""
    tag = root / "global_step9"
    tag.mkdir(parents=True)
    state = CurriculumState.at(
        parse_curriculum(curriculum),
        1800,
        global_step=9,
        consumed_tokens=1800,
        consumed_samples=9 * train_batch_size,
    ).to_dict()
    torch.save(
        {
            "global_steps": 9,
            "dp_world_size": train_batch_size // 4,
            "ds_config": {"train_batch_size": train_batch_size},
            "curriculum": state,
        },
        tag / "mp_rank_00_model_states.pt",
    )
    (root / "latest").write_text(tag.name)
    return root


def _validate(cfg: Path, ckpt: Path, num_gpus: int) -> Any:
    args = ["validate", str(cfg), "--resume-from", str(ckpt), "--num-gpus", str(num_gpus)]
    return CliRunner().invoke(cli_main, args)


def test_another_world_size_is_noted_with_the_resumes_line(
    tmp_path: Path, curriculum: dict[str, Any]
) -> None:
    ckpt = _checkpoint(tmp_path / "ckpt", curriculum, train_batch_size=8)  # 2 ranks x 2 x 2
    cfg = write_ds_config(tmp_path / "ds.json", curriculum)  # micro 2, GAS 2
    result = _validate(cfg, ckpt, num_gpus=1)
    assert result.exit_code == 0, result.output
    lines = result.output.strip().splitlines()
    assert "OK" in lines[-2]
    expected = global_batch_note(open_tag(ckpt, "global_step9"), 4)
    assert expected is not None
    assert lines[-1] == f"curriculum_ds: note: {expected}"
    assert lines[-1] == (
        f"curriculum_ds: note: {ckpt / 'global_step9'}: global batch size 8 at the checkpoint, "
        "4 now: the same sample sequence continues in batches of 4; phase boundary steps, the "
        "updates and dynamic re-weighting's recompute intervals differ from the uninterrupted "
        "run's"
    )


def test_another_micro_batch_is_noted_and_the_same_batch_is_not(
    tmp_path: Path, curriculum: dict[str, Any]
) -> None:
    ckpt = _checkpoint(tmp_path / "ckpt", curriculum, train_batch_size=8)
    same = _validate(write_ds_config(tmp_path / "same.json", curriculum), ckpt, num_gpus=2)
    assert same.exit_code == 0, same.output
    assert "OK" in same.output.strip().splitlines()[-1]
    assert "note" not in same.output
    bigger = write_ds_config(tmp_path / "big.json", curriculum, gradient_accumulation_steps=4)
    result = _validate(bigger, ckpt, num_gpus=2)
    assert result.exit_code == 0, result.output
    assert (
        result.output.strip()
        .splitlines()[-1]
        .startswith(
            f"curriculum_ds: note: {ckpt / 'global_step9'}: global batch size 8 at the checkpoint, "
            "16 now"
        )
    )
