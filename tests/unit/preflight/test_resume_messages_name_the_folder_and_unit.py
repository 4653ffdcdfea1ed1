"""Resume messages say what is wrong and carry units (issue 14, item 6).

``--resume``/``--resume-from`` to a folder that does not exist said "no latest file"; it now
says the folder does not exist. The verdict of ``validate --resume-from`` printed "continues in
phase 1 at 800 into it"; the progress now carries its unit in the duration syntax (``800tok``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from click.testing import CliRunner
from helpers import one_error_line, two_phase_curriculum, write_ds_config

from curriculum_ds.checkpoint.files import locate_checkpoint, resume_target
from curriculum_ds.checkpoint.state import CurriculumState
from curriculum_ds.cli import main as cli_main
from curriculum_ds.config import parse_curriculum
from curriculum_ds.errors import ResumeError


def test_validate_resume_from_a_missing_folder(
    tmp_path: Path, two_streams: tuple[Path, Path]
) -> None:
    cfg = write_ds_config(tmp_path / "ds.json", two_phase_curriculum(*two_streams))
    missing = tmp_path / "no_such_ckpt"
    result = CliRunner().invoke(cli_main, ["validate", str(cfg), "--resume-from", str(missing)])
    assert one_error_line(result) == f"Error: --resume-from {missing}: no such folder"
    assert not missing.exists()


def test_resume_to_a_missing_folder_says_so(tmp_path: Path) -> None:
    missing = tmp_path / "no_such_ckpt"
    with pytest.raises(ResumeError, match=rf"^--resume {missing}: no such folder$"):
        resume_target(str(missing), tmp_path / "run")
    with pytest.raises(ResumeError, match=rf"^{missing}: no such folder$"):
        locate_checkpoint(missing)
    assert resume_target("auto", tmp_path / "run") is None  # auto: a fresh start, as before
    assert not missing.exists()


def _fake_checkpoint(root: Path, curriculum: dict[str, Any], progress: int, step: int) -> Path:
    tag = root / f"global_step{step}"
    tag.mkdir(parents=True)
    state = CurriculumState.at(
        parse_curriculum(curriculum),
        progress,
        global_step=step,
        consumed_tokens=progress,
        consumed_samples=8 * step,
    ).to_dict()
    torch.save({"global_steps": step, "curriculum": state}, tag / "mp_rank_00_model_states.pt")
    (root / "latest").write_text(tag.name)
    return root


def test_the_resume_verdict_carries_the_unit(
    tmp_path: Path, two_streams: tuple[Path, Path]
) -> None:
    curriculum = two_phase_curriculum(*two_streams)
    ckpt = _fake_checkpoint(tmp_path / "ckpt", curriculum, progress=1800, step=9)
    cfg = write_ds_config(tmp_path / "ds.json", curriculum)
    result = CliRunner().invoke(cli_main, ["validate", str(cfg), "--resume-from", str(ckpt)])
    assert result.exit_code == 0, result.output
    assert result.output.strip().splitlines()[-1] == (
        "resume from global_step9 (step 9): OK, continues in phase 1 ('mix') at 800tok into it"
    )
