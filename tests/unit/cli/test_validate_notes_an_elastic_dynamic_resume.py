"""``validate --resume-from`` at another world size, the same global batch, with dynamic
re-weighting on: one note of what is kept (the curriculum state, the samples up to the first
recompute) and what can differ (the weights at float level, then samples). None without
dynamic or at the same world size.

From issue 24, item 4 (the trial's 2 -> 1 rank resume diverged in samples from step 42).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from click.testing import CliRunner
from helpers import make_dataset, ragged_docs, two_phase_curriculum, write_ds_config

from curriculum_ds.checkpoint.engine_io import elastic_dynamic_note
from curriculum_ds.checkpoint.files import open_tag
from curriculum_ds.checkpoint.state import CurriculumState
from curriculum_ds.cli import main as cli_main
from curriculum_ds.config import parse_curriculum


def _checkpoint(root: Path, curriculum: dict[str, Any]) -> Path:
    """A checkpoints folder of step 9 written on 2 ranks at global batch 8, at the end of
    phase 0 (a state built without a re-weighting state: the next phase may turn it on)."""
    tag = root / "global_step9"
    tag.mkdir(parents=True)
    state = CurriculumState.at(
        parse_curriculum(curriculum), 1000, global_step=9, consumed_tokens=1000, consumed_samples=72
    ).to_dict()
    states = {"global_steps": 9, "dp_world_size": 2, "ds_config": {"train_batch_size": 8}}
    torch.save({**states, "curriculum": state}, tag / "mp_rank_00_model_states.pt")
    (root / "latest").write_text(tag.name)
    return root


def _validate(cfg: Path, ckpt: Path, num_gpus: int) -> Any:
    args = ["validate", str(cfg), "--resume-from", str(ckpt), "--num-gpus", str(num_gpus)]
    return CliRunner().invoke(cli_main, args)


def test_one_rank_with_the_same_batch_and_dynamic_notes_what_is_kept(tmp_path: Path) -> None:
    data = [make_dataset(tmp_path, n, ragged_docs(40, seed=i)) for i, n in enumerate("ab")]
    curriculum = two_phase_curriculum(*data, static_metric="num_tokens")
    ckpt = _checkpoint(tmp_path / "ckpt", curriculum)
    cfg = write_ds_config(tmp_path / "ds.json", curriculum, gradient_accumulation_steps=4)
    result = _validate(cfg, ckpt, num_gpus=1)  # 1 rank x micro 2 x GAS 4 = 8
    assert result.exit_code == 0, result.output
    lines = result.output.strip().splitlines()
    assert "OK" in lines[-2]
    expected = elastic_dynamic_note(open_tag(ckpt, "global_step9"), 1, 8, dynamic=True)
    assert expected is not None
    assert lines[-1] == f"curriculum_ds: note: {expected}"
    assert "written on 2 data-parallel rank(s), resumed on 1 with dynamic re-weighting" in expected
    assert "curriculum state (phase, counters, rolling window, bucket weights) is kept" in expected
    assert "up to the first recompute after the resume" in expected

    # the same world size: no note; dynamic off: no note
    same = _validate(write_ds_config(tmp_path / "same.json", curriculum), ckpt, num_gpus=2)
    assert "note" not in same.output, same.output
    saved = open_tag(ckpt, "global_step9")
    assert elastic_dynamic_note(saved, 1, 8, dynamic=False) is None
    assert elastic_dynamic_note(saved, 2, 8, dynamic=True) is None
    assert elastic_dynamic_note(saved, 1, 4, dynamic=True) is None  # the batch note says it
