"""Find a DeepSpeed checkpoint tag and read it once, without starting DeepSpeed.

:func:`open_tag` reads a tag's model states file once into a :class:`SavedTag`: the curriculum
state (typed) and the DeepSpeed bookkeeping a resume looks at (the data-parallel world size, the
global batch size, the step count). The resume rules, the global batch note and the elastic
conversion all take that value; nothing reopens the file.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import TYPE_CHECKING, Any

from curriculum_ds.checkpoint.state import CurriculumState
from curriculum_ds.errors import ResumeError

if TYPE_CHECKING:
    from curriculum_ds.config import RunConfig

__all__ = [
    "SavedTag",
    "locate_checkpoint",
    "model_states",
    "open_tag",
    "read_curriculum_state",
    "resume_target",
    "resume_verdict",
]


@dataclasses.dataclass(frozen=True, kw_only=True)
class SavedTag:
    """One checkpoint tag as read from its ``mp_rank_00`` model states file, once.

    Attributes:
        load_dir: the folder DeepSpeed loads from (the tag's parent).
        tag: the tag folder's name (``global_step<N>``).
        curriculum: the saved curriculum state, checked key by key; None for a checkpoint of a
            run without curriculum.
        dp_world_size: data-parallel ranks the tag was written on (None: not recorded).
        train_batch_size: its ds_config's global batch size in samples (None: not recorded).
        global_steps: DeepSpeed's optimizer step count at the save (None: not recorded).
    """

    load_dir: Path
    tag: str
    curriculum: CurriculumState | None
    dp_world_size: int | None = None
    train_batch_size: int | None = None
    global_steps: int | None = None

    @property
    def path(self) -> Path:
        """The tag folder, ``load_dir / tag``."""
        return self.load_dir / self.tag


def open_tag(load_dir: Path, tag: str) -> SavedTag:
    """Read the tag ``load_dir/tag``: its model states file once, into a :class:`SavedTag`.

    The model's tensors are not read (the file is memory-mapped and only DeepSpeed's bookkeeping
    and the client state are kept). Deterministic.

    Raises:
        ResumeError: no model states file, it cannot be read (names the file), or its curriculum
            state is malformed (names the key).
    """
    states = model_states(load_dir / tag)
    saved = states.get("curriculum")
    ds_config = states.get("ds_config") or {}
    batch = ds_config.get("train_batch_size") if isinstance(ds_config, dict) else None
    return SavedTag(
        load_dir=load_dir,
        tag=tag,
        curriculum=None if saved is None else CurriculumState.from_dict(saved),
        dp_world_size=_int_or_none(states.get("dp_world_size")),
        train_batch_size=_int_or_none(batch),
        global_steps=_int_or_none(states.get("global_steps")),
    )


def _int_or_none(value: Any) -> int | None:
    return None if value is None else int(value)


def locate_checkpoint(ckpt: Path) -> tuple[Path, str]:
    """``(folder DeepSpeed loads from, tag)`` for a checkpoints folder (with ``latest``) or a tag.

    Raises:
        ResumeError: If ``ckpt`` does not exist, is neither, or its ``latest`` is not UTF-8 text
            or does not name a tag folder beside it (names the file).
    """
    if not ckpt.exists():
        raise ResumeError(f"{ckpt}: no such folder")
    latest = ckpt / "latest"
    if latest.is_file():
        tag = _read_latest(latest)
        if not tag or "/" in tag or not (ckpt / tag).is_dir():
            raise ResumeError(f"{latest} names {tag!r}, which is not a folder there")
        return ckpt, tag
    if any(ckpt.glob("*model_states.pt")):
        return ckpt.parent, ckpt.name
    raise ResumeError(
        f"{ckpt}: not a DeepSpeed checkpoint folder (no `latest`, no *model_states.pt)"
    )


def _read_latest(latest: Path) -> str:
    """The tag a ``latest`` file names; one line naming the file when it is unreadable."""
    try:
        tag = latest.read_text(encoding="utf-8").strip()
    except UnicodeDecodeError as exc:
        raise ResumeError(
            f"{latest}: not a DeepSpeed `latest` file (not UTF-8 text: byte "
            f"{exc.object[exc.start : exc.start + 1]!r} at offset {exc.start})"
        ) from None
    except OSError as exc:
        raise ResumeError(f"{latest}: cannot be read ({exc.strerror or exc})") from None
    return tag


def resume_target(resume: str | None, run_dir: Path) -> tuple[Path, str] | None:
    """What ``--resume`` names: ``(load folder, tag)``, or None to start fresh.

    ``auto`` is ``run_dir/checkpoints`` when it has a ``latest`` (else a fresh start); a path is a
    checkpoints folder or one tag folder.

    Raises:
        ResumeError: A given path does not exist or holds no checkpoint, or a ``latest`` file
            is not UTF-8 text.
    """
    if not resume:
        return None
    if resume == "auto":
        ckpts = run_dir / "checkpoints"
        return locate_checkpoint(ckpts) if (ckpts / "latest").is_file() else None
    path = Path(resume)
    if not path.exists():
        raise ResumeError(f"--resume {path}: no such folder")
    if (path / "latest").is_file():
        return locate_checkpoint(path)  # an unreadable `latest` is reported as it is
    try:
        return locate_checkpoint(path)
    except ResumeError:
        raise ResumeError(f"--resume {path}: no `latest` file in that checkpoint folder") from None


def _tag_dir(ckpt: Path) -> Path:
    load_dir, tag = locate_checkpoint(ckpt)
    return load_dir / tag


def model_states(tag_dir: Path) -> dict[str, Any]:
    """The ``mp_rank_00`` model states of the tag folder ``tag_dir``, memory-mapped.

    The model's tensors are not read until used: DeepSpeed's bookkeeping (``dp_world_size``,
    ``global_steps``, ``ds_config``) and the client state are what callers read.

    Raises:
        ResumeError: no such file, or it cannot be read (names the file).
    """
    import torch

    files = sorted(tag_dir.glob("*mp_rank_00_model_states.pt"))
    if not files:
        raise ResumeError(f"{tag_dir}: no mp_rank_00 model states file")
    try:
        state = torch.load(files[0], map_location="cpu", weights_only=False, mmap=True)
    except Exception as exc:  # a truncated or foreign file: one line, not a traceback
        raise ResumeError(f"{files[0]}: cannot be read ({type(exc).__name__}: {exc})") from None
    if not isinstance(state, dict):
        raise ResumeError(f"{files[0]}: not a DeepSpeed model states file")
    return state


def read_curriculum_state(ckpt: Path) -> tuple[str, dict[str, Any] | None]:
    """The tag and the saved ``curriculum`` client state as stored (None: no curriculum).

    For inspecting a checkpoint; a resume reads it with :func:`open_tag`.

    Raises:
        ResumeError: If the folder holds no readable DeepSpeed checkpoint.
    """
    tag_dir = _tag_dir(ckpt)
    return tag_dir.name, model_states(tag_dir).get("curriculum")


def resume_verdict(run: RunConfig, ckpt: Path) -> str:
    """What resuming ``ckpt`` under ``run`` would do, as text; raises ResumeError if refused.

    Progress is shown in the config's duration syntax with its unit (``4763tok``, ``0.5ep``).
    """
    from curriculum_ds.checkpoint.rules import check_resume
    from curriculum_ds.core.schedule import duration_str

    saved = open_tag(*locate_checkpoint(ckpt))
    tag = saved.tag
    if saved.curriculum is None:
        return (
            f"resume from {tag}: checkpoint has no curriculum state; the schedule starts at "
            f"phase 0 ({run.curriculum.schedule[0].name!r}) and the step count is kept"
        )
    plan = check_resume(run.curriculum, saved)
    phases = run.curriculum.schedule
    where = (
        "the end of the schedule"
        if plan.phase_idx >= len(phases)
        else (
            f"phase {plan.phase_idx} ({phases[plan.phase_idx].name!r})"
            + (
                " from its start"
                if plan.is_new_phase
                else f" at {duration_str(run.curriculum.max_duration.unit, plan.phase_progress)}"
                " into it"
            )
        )
    )
    return (
        f"resume from {tag} (step {saved.curriculum.position.global_step}): OK, continues in "
        f"{where}"
    )
