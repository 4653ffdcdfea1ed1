"""DeepSpeed checkpoints with the curriculum inside: the ``latest`` protocol and load errors.

``save`` writes the engine's checkpoint (the curriculum state in its ``client_state``) and then
moves ``latest`` to it, atomically, once every rank's files are on disk; ``load`` checks the
resume rules against the checkpoint's curriculum state before DeepSpeed touches the engine and
turns DeepSpeed's load failures into one :class:`~curriculum_ds.errors.ResumeError` line.
:class:`~curriculum_ds.plugin.curriculum.Curriculum` is their one user.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch.distributed as dist

from curriculum_ds.checkpoint import universal
from curriculum_ds.checkpoint.files import locate_checkpoint, model_states, read_curriculum_state
from curriculum_ds.checkpoint.rules import check_resume
from curriculum_ds.errors import CheckpointError, ResumeError

if TYPE_CHECKING:
    from curriculum_ds.config import CurriculumConfig

__all__ = ["find", "global_batch_note", "load", "publish_latest", "save"]


def save(engine: Any, save_dir: Path, tag: str, client_state: dict[str, Any]) -> Path:
    """``engine.save_checkpoint(save_dir, tag)`` then :func:`publish_latest`. Collective.

    Raises:
        CheckpointError: DeepSpeed could not write the tag (a full disk, no permission, a file
            where a folder should be): one line naming it; ``latest`` has not moved.
    """
    try:
        engine.save_checkpoint(str(save_dir), tag=tag, save_latest=False, client_state=client_state)
    except Exception as exc:
        raise CheckpointError(
            f"{save_dir / tag}: DeepSpeed could not write this checkpoint ({_detail(exc)}); "
            "`latest` still names the previous one"
        ) from None
    publish_latest(save_dir, tag)
    return save_dir / tag


def _detail(exc: BaseException) -> str:
    """An exception's type and first two lines, at most 240 characters.

    Two lines: torch's "Error(s) in loading state_dict for X:" is followed by the keys that differ.
    """
    text = str(exc).strip()
    detail = " ".join(line.strip() for line in text.splitlines()[:2])
    detail = f"{type(exc).__name__}: {detail}" if detail else type(exc).__name__
    return detail if len(detail) <= 240 else detail[:237] + "..."


def publish_latest(save_dir: Path, tag: str) -> None:
    """Move ``save_dir/latest`` to ``tag`` once every rank has written its files.

    Global rank 0 writes ``latest.tmp`` and renames it over ``latest`` (atomic on POSIX), between
    two barriers: a kill at any moment leaves the previous ``latest`` valid.
    """
    if dist.is_initialized():
        dist.barrier()
    if not dist.is_initialized() or dist.get_rank() == 0:
        tmp = save_dir / "latest.tmp"
        tmp.write_text(tag)
        os.replace(tmp, save_dir / "latest")
    if dist.is_initialized():
        dist.barrier()


def find(load_dir: Path, tag: str | None) -> tuple[Path, str] | None:
    """``(folder DeepSpeed loads from, tag)``, or None when ``load_dir`` holds no checkpoint.

    Raises:
        ResumeError: ``latest`` is unreadable.
    """
    if tag is not None:
        return load_dir, tag
    if not (load_dir / "latest").is_file() and not any(load_dir.glob("*model_states.pt")):
        return None
    return locate_checkpoint(load_dir)


def load(engine: Any, config: CurriculumConfig, load_dir: Path, tag: str) -> dict[str, Any] | None:
    """Load ``load_dir/tag`` into ``engine`` after the resume rules accept its curriculum state.

    A ZeRO checkpoint written on another data-parallel world size is converted once to
    DeepSpeed's universal format (``load_dir/<tag>_universal``, see
    :mod:`curriculum_ds.checkpoint.universal`) and loaded from there; the original is untouched.

    Returns:
        The saved curriculum state (None for a checkpoint of a run without curriculum).

    Raises:
        ResumeError: the resume rules refuse it (the engine is untouched then), its files cannot
            be read, or DeepSpeed cannot load it into this engine (another model's, a missing or
            truncated file, a data-parallel world size it cannot take): one line naming it.
    """
    _, saved = read_curriculum_state(load_dir / tag)
    if saved is not None:
        check_resume(config, saved)  # refuse before the engine changes
    universal_tag = universal.prepare(engine, load_dir, tag)  # another data-parallel world size
    try:
        if universal_tag is None:
            load_path, client_state = engine.load_checkpoint(str(load_dir), tag=tag)
        else:
            load_path, client_state = universal.load(engine, load_dir, universal_tag)
    except Exception as exc:
        raise ResumeError(
            f"{load_dir / tag}: DeepSpeed cannot load this checkpoint into this engine "
            f"({_detail(exc)})"
        ) from None
    if load_path is None:
        raise ResumeError(f"{load_dir / tag}: DeepSpeed could not load this checkpoint")
    saved_state: dict[str, Any] | None = (client_state or {}).get("curriculum")
    return saved_state


def global_batch_note(tag_dir: Path, global_batch_size: int) -> str | None:
    """One line when ``tag_dir`` was written with another global batch size (None otherwise).

    Such a resume is accepted: the sample sequence continues from the saved counters, cut into
    batches of the new size; the line says what differs from the uninterrupted run.

    Raises:
        ResumeError: the model states file is missing or unreadable.
    """
    saved = (model_states(tag_dir).get("ds_config") or {}).get("train_batch_size")
    if saved is None or int(saved) == global_batch_size:
        return None
    return (
        f"{tag_dir}: global batch size {saved} at the checkpoint, {global_batch_size} now: the "
        f"same sample sequence continues in batches of {global_batch_size}; phase boundary "
        "steps, the updates and dynamic re-weighting's recompute intervals differ from the "
        "uninterrupted run's"
    )
