"""The curriculum state inside HF's ``checkpoint-N/`` folders, and which one a resume reads.

HF's Trainer writes ``OUTPUT_DIR/checkpoint-N/`` (the DeepSpeed engine's tag, the model, the
Trainer state); the callback adds :data:`STATE_FILE` (the plugin's
:class:`~curriculum_ds.checkpoint.state.CurriculumState`, ``torch.save`` form) once HF's files
are written, atomically (a temporary file renamed over it). A resume continues only from a
folder holding it: :func:`resume_folder` picks the newest such ``checkpoint-N`` for
``resume_from_checkpoint=True`` (a kill between HF's save and ours leaves the previous one),
and :func:`check_folder` applies the plugin's resume rules (frozen completed phases, ...) with
their one-line refusals before the Trainer builds anything.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

from curriculum_ds.errors import ResumeError

if TYPE_CHECKING:
    from curriculum_ds.config import CurriculumConfig

__all__ = ["STATE_FILE", "check_folder", "read_state", "resume_folder", "write_state"]

STATE_FILE = "curriculum_state.pt"
"""The curriculum state's file in a ``checkpoint-N/`` folder."""

_CHECKPOINT = re.compile(r"^checkpoint-(\d+)$")


def write_state(folder: str | os.PathLike[str], state: dict[str, Any]) -> Path:
    """Write ``state`` (``Curriculum.state_dict()``) into ``folder``, atomically; its path."""
    import torch

    path = Path(folder) / STATE_FILE
    tmp = path.with_name(f".{STATE_FILE}.tmp")
    torch.save(state, tmp)
    os.replace(tmp, path)
    return path


def read_state(folder: str | os.PathLike[str]) -> dict[str, Any]:
    """The curriculum state saved in ``folder``.

    Raises:
        ResumeError: ``folder`` holds no :data:`STATE_FILE` or it cannot be read (one line).
    """
    import torch

    path = Path(folder) / STATE_FILE
    if not path.is_file():
        raise ResumeError(
            f"resume_from_checkpoint: {folder} holds no curriculum state ({STATE_FILE}); "
            "resume from a checkpoint-N folder that CurriculumTrainer saved"
        )
    try:
        state = torch.load(path, weights_only=False)  # numpy arrays: the re-weighting window
    except Exception as exc:  # any unreadable file: the same refusal
        raise ResumeError(f"resume_from_checkpoint: cannot read {path}: {exc}") from None
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
    read_state(folder)  # refuses a folder without the state, in one line
    return folder


def check_folder(cfg: CurriculumConfig, folder: Path) -> dict[str, Any]:
    """The saved state of ``folder``, checked against ``cfg`` by the plugin's resume rules.

    Raises:
        ResumeError: one line naming the phase and field of the first forbidden change
            (:func:`curriculum_ds.checkpoint.rules.check_resume`), or an unreadable state.
    """
    from curriculum_ds.checkpoint.rules import check_resume

    state = read_state(folder)
    check_resume(cfg, state)
    return state
