"""The curriculum state inside HF's ``checkpoint-N/`` folders, and which one a resume reads.

HF's Trainer writes ``OUTPUT_DIR/checkpoint-N/`` (the DeepSpeed engine's tag, the model, the
Trainer state); the callback adds :data:`STATE_FILE` (the plugin's
:class:`~curriculum_ds.checkpoint.state.CurriculumState`, ``torch.save`` form) once HF's files
are written, atomically (a temporary file renamed over it). A resume continues only from a
folder holding it: :func:`resume_folder` picks the newest such ``checkpoint-N`` for
``resume_from_checkpoint=True`` (a kill between HF's save and ours leaves the previous one),
and :func:`check_folder` reads the state once (by the safe loader,
:mod:`curriculum_ds.checkpoint.safe_load`), applies the plugin's resume rules (frozen completed
phases, ...) with their one-line refusals and passes the folder's DeepSpeed tag through the safe
loader, all before the Trainer builds anything.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

from curriculum_ds.checkpoint.files import HF_STATE_FILE
from curriculum_ds.errors import ResumeError
from curriculum_ds.files.atomic import replace_atomically

if TYPE_CHECKING:
    from curriculum_ds.config import CurriculumConfig

__all__ = ["STATE_FILE", "check_folder", "read_state", "resume_folder", "write_state"]

STATE_FILE = HF_STATE_FILE
"""The curriculum state's file in a ``checkpoint-N/`` folder."""

_CHECKPOINT = re.compile(r"^checkpoint-(\d+)$")


def write_state(folder: str | os.PathLike[str], state: dict[str, Any]) -> Path:
    """Write ``state`` (``Curriculum.state_dict()``) into ``folder``, atomically; its path."""
    import torch

    path = Path(folder) / STATE_FILE
    replace_atomically(path, lambda fh: torch.save(state, fh))
    return path


def read_state(folder: str | os.PathLike[str]) -> dict[str, Any]:
    """The curriculum state saved in ``folder``.

    Raises:
        ResumeError: ``folder`` holds no :data:`STATE_FILE` or it cannot be read (one line).
    """
    from curriculum_ds.checkpoint import safe_load

    path = _state_file(folder)
    try:
        state = safe_load.load(path)  # numpy arrays (the re-weighting window) are allowed
    except ResumeError as exc:  # any unreadable or refused file: one line naming it
        raise type(exc)(f"resume_from_checkpoint: {exc}") from None
    if not isinstance(state, dict):
        raise ResumeError(f"resume_from_checkpoint: {path} does not hold a curriculum state")
    return state


def resume_folder(
    output_dir: str | os.PathLike[str], resume: str | os.PathLike[str] | bool
) -> Path:
    """The ``checkpoint-N`` folder ``train(resume_from_checkpoint=resume)`` continues from.

    Args:
        output_dir: ``TrainingArguments.output_dir``.
        resume: True (the newest ``checkpoint-N`` of ``output_dir`` holding the curriculum
            state) or a folder.

    Raises:
        ResumeError: True and no such folder, or a folder without the curriculum state.
    """
    if resume is True:
        found = [
            (int(m.group(1)), p)
            for p in Path(output_dir).glob("checkpoint-*")
            if (m := _CHECKPOINT.match(p.name)) and (p / STATE_FILE).is_file()
        ]
        if not found:
            raise ResumeError(
                f"resume_from_checkpoint=True: no checkpoint-N folder with curriculum state in "
                f"{output_dir}"
            )
        return max(found)[1]
    folder = Path(resume)  # type: ignore[arg-type]
    _state_file(folder)  # refuses a folder without the state, in one line (read: check_folder)
    return folder


def _state_file(folder: str | os.PathLike[str]) -> Path:
    """``folder``'s :data:`STATE_FILE`; one line when it has none."""
    path = Path(folder) / STATE_FILE
    if not path.is_file():
        raise ResumeError(
            f"resume_from_checkpoint: {folder} holds no curriculum state ({STATE_FILE}); "
            "resume from a checkpoint-N folder that CurriculumTrainer saved"
        )
    return path


def check_folder(cfg: CurriculumConfig, folder: Path) -> dict[str, Any]:
    """The saved state of ``folder``, checked by the safe loader, then against ``cfg``.

    HF's resume loads the folder's DeepSpeed tag with ``engine.load_checkpoint``, which
    unpickles its files with ``torch.load(weights_only=False)`` (any code a crafted file names
    runs): every file of the tag ``folder/latest`` names goes through the safe loader first
    (:mod:`curriculum_ds.checkpoint.safe_load`). HF's own files (``rng_state*.pth``,
    ``scheduler.pt``) it loads with ``weights_only=True`` itself.

    Raises:
        UnsafeCheckpointError: a file of the folder needs a pickle global outside the allow-list
            (names the file and the global); nothing has unpickled it.
        ResumeError: an unreadable state, no readable DeepSpeed tag in ``folder``, or one line
            naming the phase and field of the first forbidden change
            (:func:`curriculum_ds.checkpoint.rules.check_resume`).
    """
    from curriculum_ds.checkpoint import safe_load
    from curriculum_ds.checkpoint.files import locate_checkpoint
    from curriculum_ds.checkpoint.rules import check_resume

    state = read_state(folder)
    try:
        load_dir, tag = locate_checkpoint(folder)
        safe_load.check_files(safe_load.tag_files(load_dir / tag))
    except ResumeError as exc:
        raise type(exc)(f"resume_from_checkpoint: {exc}") from None
    check_resume(cfg, state)
    return state
