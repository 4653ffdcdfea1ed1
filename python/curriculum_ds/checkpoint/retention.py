"""Checkpoint retention: keep the newest N tags of a checkpoints folder, safely.

Used by the reference loop's ``--keep-last N`` and usable from any loop that saves with
:meth:`curriculum_ds.Curriculum.save_checkpoint`::

    curriculum.save_checkpoint(ckpt_dir)            # collective; `latest` has moved when it returns
    if dist.get_rank() == 0:
        prune_checkpoints(ckpt_dir, keep_last=3)

Safety rules:

* The tag ``latest`` names is never deleted, and pruning reads ``latest`` itself: call it only
  after ``save_checkpoint`` returned (then ``latest`` names the new tag).
* A tag is deleted by renaming it first to a hidden trash name (``.trash-<tag>-<pid>``, one
  atomic rename), then removing the trash. Killed at any moment, the folder holds whole tags, a
  valid ``latest`` and perhaps a trash folder: it resumes. Leftover trash is never taken for a
  tag, and the next prune removes it.
* One process prunes (global rank 0 in the reference loop); the others never touch the folder.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
from pathlib import Path

__all__ = ["TRASH_PREFIX", "checkpoint_tags", "prune_checkpoints"]

TRASH_PREFIX = ".trash-"
"""Name prefix of a tag folder being deleted (hidden: DeepSpeed and ``--resume`` ignore it)."""

UNIVERSAL_SUFFIX = "_universal"
"""``<tag>_universal``: DeepSpeed's universal-format copy of a tag
(:mod:`curriculum_ds.checkpoint.universal`), deleted with its tag."""

_TAG = re.compile(r"global_step(\d+)")


def checkpoint_tags(save_dir: Path) -> list[str]:
    """The tags of ``save_dir`` that :meth:`Curriculum.save_checkpoint` writes, oldest first.

    A tag is a folder named ``global_step<N>``; they are ordered by ``N``. Trash folders, files
    and other folders are not tags. Deterministic; reads only.
    """
    if not save_dir.is_dir():
        return []
    found = []
    for entry in save_dir.iterdir():
        match = _TAG.fullmatch(entry.name)
        if match and entry.is_dir():
            found.append((int(match.group(1)), entry.name))
    return [name for _, name in sorted(found)]


def prune_checkpoints(save_dir: str | os.PathLike[str], *, keep_last: int) -> list[str]:
    """Delete all but the newest ``keep_last`` tags of ``save_dir``; never the one ``latest`` names.

    The kept tags are the one ``latest`` names plus the newest others (by step) up to
    ``keep_last`` in all; a deleted tag's ``<tag>_universal`` copy goes with it. Without a
    readable ``latest`` nothing is deleted (there is no tag to resume from that could be told
    apart). Leftover trash of an earlier, interrupted prune is removed too.

    Args:
        save_dir: the checkpoints folder (``RUN_DIR/checkpoints`` in the reference loop).
        keep_last: tags to keep, >= 1.

    Returns:
        The tags deleted, oldest first.

    Raises:
        ValueError: ``keep_last < 1``.
        OSError: a tag could not be renamed to trash (nothing of that tag is deleted then).
    """
    if keep_last < 1:
        raise ValueError(f"keep_last must be >= 1, got {keep_last}")
    save_dir = Path(save_dir)
    if not save_dir.is_dir():
        return []
    for leftover in sorted(save_dir.glob(TRASH_PREFIX + "*")):
        _remove_trash(leftover)
    try:
        latest = (save_dir / "latest").read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError):
        return []
    tags = checkpoint_tags(save_dir)
    if latest not in tags:
        return []
    keep = {latest}
    for tag in reversed(tags):  # newest first
        if len(keep) >= keep_last:
            break
        keep.add(tag)
    deleted = []
    for tag in tags:
        if tag in keep:
            continue
        trash = save_dir / f"{TRASH_PREFIX}{tag}-{os.getpid()}"
        os.replace(save_dir / tag, trash)  # atomic: the tag is whole or gone
        deleted.append(tag)
        _remove_trash(trash)
        converted = save_dir / f"{tag}{UNIVERSAL_SUFFIX}"  # its elastic-resume conversion
        if converted.is_dir():
            trash = save_dir / f"{TRASH_PREFIX}{converted.name}-{os.getpid()}"
            os.replace(converted, trash)
            _remove_trash(trash)
    return deleted


def _remove_trash(path: Path) -> None:
    """Remove a trash folder; errors are ignored (the next prune tries again)."""
    with contextlib.suppress(OSError):
        shutil.rmtree(path)
