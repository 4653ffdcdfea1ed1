r"""DeepSpeed checkpoints with the curriculum inside: the ``latest`` protocol and load errors.

One call each way. ``save`` writes the engine's checkpoint (the curriculum state in its
``client_state``) and then moves ``latest`` to it, atomically, once every rank's files are on
disk. ``resume`` finds a tag, reads it once (:func:`~curriculum_ds.checkpoint.files.open_tag`)
unless the caller has, and ``load``\ s it: the resume rules are checked against it before
DeepSpeed touches the engine (unless the caller checked them already and hands the plan on), and
DeepSpeed's load failures become one :class:`~curriculum_ds.errors.ResumeError` line.
:class:`~curriculum_ds.plugin.curriculum.Curriculum` is their one user.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch.distributed as dist

from curriculum_ds.checkpoint import safe_load, universal
from curriculum_ds.checkpoint.adam_powers import restore_adam_powers
from curriculum_ds.checkpoint.files import SavedTag, locate_checkpoint, open_tag
from curriculum_ds.checkpoint.rules import ResumePlan, check_resume, fresh_plan
from curriculum_ds.errors import CheckpointError, ResumeError

if TYPE_CHECKING:
    from curriculum_ds.checkpoint.state import CurriculumState
    from curriculum_ds.config import CurriculumConfig

__all__ = [
    "elastic_dynamic_note",
    "find",
    "global_batch_note",
    "load",
    "publish_latest",
    "resume",
    "save",
]


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


def resume(
    engine: Any,
    config: CurriculumConfig,
    target: Path | SavedTag,
    *,
    tag: str | None = None,
    plan: ResumePlan | None = None,
    global_batch_size: int,
) -> tuple[SavedTag, ResumePlan, CurriculumState | None] | None:
    """Find the checkpoint ``target`` names, read it once and :func:`load` it. Collective.

    Another global batch size than the checkpoint's is accepted with one ``curriculum_ds: note:``
    line on stderr (global rank 0; :func:`global_batch_note`).

    Args:
        engine: the DeepSpeed engine to load into.
        config: the curriculum config the run continues under.
        target: a checkpoints folder (with ``latest``) or one tag folder; or a tag already read
            by :func:`~curriculum_ds.checkpoint.files.open_tag` (not read again).
        tag: the tag of a checkpoints folder to load; default: what ``latest`` names.
        plan: with a read tag, ``check_resume(config, target)`` when the caller checked it
            already (not checked again then).
        global_batch_size: this run's samples per optimizer step, over all ranks.

    Returns:
        ``(tag read, plan, saved curriculum state or None)`` as :func:`load` gives them, or None
        when ``target`` holds no checkpoint (no ``latest``, no tag files): a fresh start.

    Raises:
        ResumeError: as :func:`load`, or ``latest`` is unreadable.
    """
    if isinstance(target, SavedTag):
        saved = target
    else:
        found = find(target, tag)
        if found is None:
            return None
        saved, plan = open_tag(*found), None
    note = global_batch_note(saved, global_batch_size)
    plan, state = load(engine, config, saved, plan)
    if note is not None and (not dist.is_initialized() or dist.get_rank() == 0):
        print(f"curriculum_ds: note: {note}", file=sys.stderr)
    return saved, plan, state


def load(
    engine: Any,
    config: CurriculumConfig,
    saved: SavedTag,
    plan: ResumePlan | None = None,
) -> tuple[ResumePlan, CurriculumState | None]:
    """Load the tag ``saved`` into ``engine`` once the resume rules accept it.

    A ZeRO checkpoint written on another data-parallel world size is converted once to
    DeepSpeed's universal format (``load_dir/<tag>_universal``, see
    :mod:`curriculum_ds.checkpoint.universal`) and loaded from there; the original is untouched.

    Args:
        engine: the DeepSpeed engine to load into.
        config: the curriculum config the run continues under.
        saved: the tag, read once by :func:`~curriculum_ds.checkpoint.files.open_tag`.
        plan: ``check_resume(config, saved)`` when the caller has checked it already (the
            reference loop does before DeepSpeed starts); None: checked here.

    Returns:
        ``(plan, state)``: where the run continues, and the saved curriculum state it restores
        (None for a checkpoint of a run without curriculum: the plan is then
        :func:`~curriculum_ds.checkpoint.rules.fresh_plan` with the engine's step count).

    Raises:
        UnsafeCheckpointError: a file of the tag (or of its universal conversion) needs a
            pickle global outside the safe loader's allow-list; DeepSpeed has not opened it.
        ResumeError: the resume rules refuse it (the engine is untouched then), its files cannot
            be read, or DeepSpeed cannot load it into this engine (another model's, a missing or
            truncated file, a data-parallel world size it cannot take): one line naming it.
    """
    if plan is None:
        plan = check_resume(config, saved)  # refuse before the engine changes
    load_dir, tag = saved.load_dir, saved.tag
    # DeepSpeed unpickles every file of the tag with torch.load(weights_only=False), which runs
    # any code a crafted file names: each goes through the safe loader first (open_tag did that
    # when it read the tag; a file added or rewritten since is checked now)
    safe_load.check_unchecked(saved.path, saved.checked)
    universal_tag = universal.prepare(engine, saved)  # another data-parallel world size
    try:
        if universal_tag is None:
            load_path, _ = engine.load_checkpoint(str(load_dir), tag=tag)
        else:
            load_path, _ = universal.load(engine, load_dir, universal_tag)
    except Exception as exc:
        raise ResumeError(
            f"{load_dir / tag}: DeepSpeed cannot load this checkpoint into this engine "
            f"({_detail(exc)})"
        ) from None
    if load_path is None:
        raise ResumeError(f"{load_dir / tag}: DeepSpeed could not load this checkpoint")
    restore_adam_powers(engine.optimizer)  # DeepSpeed's CPU Adam: β^t as the uninterrupted run's
    if saved.curriculum is None:  # a DeepSpeed run without curriculum: its step count is kept
        plan = fresh_plan(config, global_step=int(engine.global_steps))
    return plan, saved.curriculum


def global_batch_note(saved: SavedTag, global_batch_size: int) -> str | None:
    """One line when ``saved`` was written with another global batch size (None otherwise).

    Such a resume is accepted: the sample sequence continues from the saved counters, cut into
    batches of the new size; the line says what differs from the uninterrupted run.
    """
    before = saved.train_batch_size
    if before is None or before == global_batch_size:
        return None
    return (
        f"{saved.path}: global batch size {before} at the checkpoint, {global_batch_size} now: "
        f"the same sample sequence continues in batches of {global_batch_size}; phase boundary "
        "steps, the updates and dynamic re-weighting's recompute intervals differ from the "
        "uninterrupted run's"
    )


def elastic_dynamic_note(
    saved: SavedTag, dp_world_size: int, global_batch_size: int, *, dynamic: bool
) -> str | None:
    """One line when ``saved`` resumes on another world size, same global batch, with dynamic on.

    What such a resume keeps and what can differ (docs/resume-and-faults.md, measured by
    tests/integration/test_elastic_resume.py): the curriculum state is kept exactly, so the
    samples are the uninterrupted run's up to the first re-weighting recompute after the resume;
    from then on each sample's loss is computed in another reduction order (another micro-batch
    and rank split), the recomputed bucket weights differ by that float-level amount, and a draw
    that falls that close to a bucket boundary takes another sample.

    Args:
        saved: the tag resumed from.
        dp_world_size: the data-parallel ranks of the resumed run.
        global_batch_size: its global batch in samples.
        dynamic: whether the resumed run has dynamic re-weighting on.

    Returns:
        The line, or None (no dynamic, the same world size, none recorded, or another global
        batch: :func:`global_batch_note` says that).
    """
    before = saved.dp_world_size
    if not dynamic or before is None or before == dp_world_size:
        return None
    if saved.train_batch_size is not None and saved.train_batch_size != global_batch_size:
        return None
    return (
        f"{saved.path}: written on {before} data-parallel rank(s), resumed on {dp_world_size} "
        "with dynamic re-weighting: the curriculum state (phase, counters, rolling window, bucket "
        "weights) is kept exactly and the samples are the uninterrupted run's up to the first "
        "recompute after the resume; from it on the per-sample losses differ in the last float "
        "bits (another reduction order), the recomputed weights by as little (below 1e-5 "
        "relative in the tests), and a draw that close to a bucket boundary takes another sample"
    )
