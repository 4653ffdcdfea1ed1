"""Elastic resume: a checkpoint of another data-parallel world size, via the universal format.

A ZeRO-1/2/3 checkpoint (and any with partitioned optimizer files, e.g. DeepSpeed's bf16
optimizer) holds one optimizer shard per data-parallel rank; DeepSpeed refuses to load it on
another number of ranks. :func:`prepare` notices that (the DP world size recorded in the model
states against the engine's), converts the tag once with ``deepspeed.checkpoint.ds_to_universal``
into ``<tag>_universal`` next to it (written under a hidden temporary folder and renamed into
place: a kill leaves either nothing or the whole conversion; the original is never touched), and
:func:`load` loads that with ``checkpoint.load_universal`` switched on for the one load. One rank
(global rank 0) converts; the others wait for its verdict. ZeRO-0 checkpoints (the full optimizer
state in the model states) load on any world size as they are and are never converted.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch.distributed as dist

from curriculum_ds.checkpoint import safe_load
from curriculum_ds.checkpoint.files import open_tag
from curriculum_ds.checkpoint.retention import UNIVERSAL_SUFFIX
from curriculum_ds.distributed import Topology
from curriculum_ds.errors import ResumeError

if TYPE_CHECKING:
    from curriculum_ds.checkpoint.files import SavedTag

__all__ = ["SUFFIX", "TMP_PREFIX", "load", "prepare", "saved_dp_world_size", "universal_tag"]

SUFFIX = UNIVERSAL_SUFFIX
"""``<tag>_universal``: the converted copy of ``<tag>``, beside it (retention deletes it with
the tag)."""
TMP_PREFIX = ".universal-tmp-"
"""Hidden folder a conversion is written under before its rename (removed on the next one)."""


def universal_tag(tag: str) -> str:
    """The folder name of the universal copy of ``tag``."""
    return tag + SUFFIX


def saved_dp_world_size(tag_dir: Path) -> int | None:
    """The data-parallel world size the checkpoint ``tag_dir`` was written on (None: unrecorded).

    Reads the tag (:func:`~curriculum_ds.checkpoint.files.open_tag`); a resume that has read it
    already looks at its :attr:`~curriculum_ds.checkpoint.files.SavedTag.dp_world_size`.

    Raises:
        ResumeError: the model states file is missing or unreadable.
    """
    return open_tag(tag_dir.parent, tag_dir.name).dp_world_size


def _partitioned_optimizer(tag_dir: Path) -> bool:
    return any(tag_dir.glob("*optim_states.pt"))


def prepare(engine: Any, tag: SavedTag) -> str | None:
    """The universal tag to load instead of ``tag``, converting it first if needed.

    None when ``tag`` loads on this engine as it is. Collective (every rank calls it).

    Args:
        engine: the DeepSpeed engine it is loaded into (its data-parallel world size counts).
        tag: the tag as read by :func:`~curriculum_ds.checkpoint.files.open_tag`.

    Raises:
        ResumeError: the conversion failed, or a file of the universal copy does not pass the
            safe loader (one line naming the checkpoint or the file; every rank raises).
    """
    load_dir, tag_dir = tag.load_dir, tag.path
    saved = tag.dp_world_size
    current = Topology.from_engine(engine).dp_world_size
    if saved is None or saved == current or not _partitioned_optimizer(tag_dir):
        return None
    target = load_dir / universal_tag(tag.tag)
    error: str | None = None
    if not dist.is_initialized() or dist.get_rank() == 0:
        try:
            if target.is_dir() and _older_than(target, tag_dir):
                shutil.rmtree(target)  # the tag was written again since (a re-run of that step)
            if not target.is_dir():
                # ds_to_universal unpickles the tag's files with weights_only=False: the files
                # of ``tag`` went through the safe loader when it was read (open_tag)
                _convert(tag_dir, target)
        except Exception as exc:  # DeepSpeed raises asserts, KeyErrors, FileNotFoundErrors ...
            detail = " ".join(str(exc).split())[:200] or type(exc).__name__
            error = (
                f"{tag_dir}: written on {saved} data-parallel ranks, this run has {current}, "
                f"and DeepSpeed cannot convert it to its universal format ({detail})"
            )
        if error is None:
            try:  # DeepSpeed's universal load unpickles the copy (found there, or just written)
                safe_load.check_files(safe_load.tag_files(target))
            except ResumeError as exc:
                error = str(exc)
    if dist.is_initialized():
        verdict = [error]
        dist.broadcast_object_list(verdict, src=0)
        error = verdict[0]
    if error is not None:
        raise ResumeError(error)
    return target.name


def _older_than(target: Path, tag_dir: Path) -> bool:
    newest = max((p.stat().st_mtime_ns for p in tag_dir.iterdir() if p.is_file()), default=0)
    return target.stat().st_mtime_ns < newest


def _convert(tag_dir: Path, target: Path) -> None:
    """``ds_to_universal`` of ``tag_dir`` into ``target``, atomically (temp folder, rename)."""
    from deepspeed.checkpoint import ds_to_universal

    for stale in target.parent.glob(TMP_PREFIX + "*"):
        shutil.rmtree(stale, ignore_errors=True)  # a conversion killed midway
    tmp_root = target.parent / f"{TMP_PREFIX}{os.getpid()}"
    tmp_root.mkdir()
    try:
        args = argparse.Namespace(
            input_folder=str(tag_dir),
            output_folder=str(tmp_root / target.name),
            num_extract_workers=1,  # no process pool inside a training rank
            num_merge_workers=1,
            keep_temp_folder=False,
            strict=True,
            inject_missing_state=True,  # a plain model carries no universal-checkpoint info
        )
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            ds_to_universal.main(args)  # also writes tmp_root/latest_universal: dropped below
        os.replace(tmp_root / target.name, target)
    finally:
        shutil.rmtree(tmp_root, ignore_errors=True)


def load(engine: Any, load_dir: Path, tag: str) -> tuple[Any, Any]:
    """``engine.load_checkpoint(load_dir, tag)`` of a universal tag.

    ``checkpoint.load_universal`` is on for this load only (a later save or load is DeepSpeed's
    usual one). Returns DeepSpeed's ``(load_path, client_state)``.
    """
    config = engine._config
    before = config.load_universal_checkpoint
    config.load_universal_checkpoint = True
    try:
        return engine.load_checkpoint(str(load_dir), tag=tag)
    finally:
        config.load_universal_checkpoint = before
