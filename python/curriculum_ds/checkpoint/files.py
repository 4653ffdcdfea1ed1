"""Find a DeepSpeed checkpoint tag and read it once, without starting DeepSpeed.

:func:`open_tag` reads a tag's model states file once into a :class:`SavedTag`: the curriculum
state (typed) and the DeepSpeed bookkeeping a resume looks at (the data-parallel world size, the
global batch size, the step count). The resume rules, the global batch note and the elastic
conversion all take that value; nothing reopens the file. Every file is read through
:mod:`curriculum_ds.checkpoint.safe_load` (``weights_only``, one allow-list), and ``open_tag``
also passes the tag's other files (optimizer states, other ranks' model states) through it,
since DeepSpeed unpickles them with ``weights_only=False`` when it loads the tag.
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path
from typing import Any

from curriculum_ds.checkpoint import safe_load
from curriculum_ds.checkpoint.retention import UNIVERSAL_SUFFIX as _UNIVERSAL
from curriculum_ds.checkpoint.state import CurriculumState
from curriculum_ds.errors import ResumeError

__all__ = [
    "HF_STATE_FILE",
    "SavedTag",
    "locate_checkpoint",
    "model_states",
    "open_tag",
    "read_curriculum_state",
    "resume_target",
    "saved_curriculum",
]

HF_STATE_FILE = "curriculum_state.pt"
"""The curriculum state's file in a HF Trainer ``checkpoint-N/`` folder (beside the tag)."""


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
        checked: the tag's files as :func:`open_tag` passed them through the safe loader
            (:data:`~curriculum_ds.checkpoint.safe_load.Stamp`: path, size, modification
            time); DeepSpeed's load first checks any file it would open that is not there as
            it is now.
    """

    load_dir: Path
    tag: str
    curriculum: CurriculumState | None
    dp_world_size: int | None = None
    train_batch_size: int | None = None
    global_steps: int | None = None
    checked: frozenset[safe_load.Stamp] = frozenset()

    @property
    def path(self) -> Path:
        """The tag folder, ``load_dir / tag``."""
        return self.load_dir / self.tag


def open_tag(load_dir: Path, tag: str) -> SavedTag:
    """Read the tag ``load_dir/tag``: its model states file once, into a :class:`SavedTag`.

    The model's tensors are not read (the file is memory-mapped and only DeepSpeed's bookkeeping
    and the client state are kept). Every other file DeepSpeed opens when it loads or converts
    the tag (:func:`~curriculum_ds.checkpoint.safe_load.tag_files`) is loaded once by the safe
    loader and dropped: a file that could run code is refused here, before DeepSpeed starts.
    Deterministic.

    Raises:
        UnsafeCheckpointError: a file needs a pickle global outside the allow-list (names the
            file and the global).
        ResumeError: no model states file, a file cannot be read (names the file), or its
            curriculum state is malformed (names the key). When ``latest`` names this tag, the
            line also names the newest readable tag beside it and the ``--resume`` option that
            continues from it.
    """
    try:
        return _read_tag(load_dir, tag)
    except ResumeError as exc:
        raise type(exc)(f"{exc}{_fallback(load_dir, tag)}") from None


def _read_tag(load_dir: Path, tag: str) -> SavedTag:
    tag_dir = load_dir / tag
    states_file = _states_file(tag_dir)
    files = safe_load.tag_files(tag_dir)
    checked = frozenset(safe_load.stamp(p) for p in files)  # as they are before the reads
    states = _read_states(states_file)
    safe_load.check_files(p for p in files if p != states_file)
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
        checked=checked,
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
            raise ResumeError(
                f"{latest} names {tag!r}, which is not a folder there{_fallback(ckpt, tag)}"
            )
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
    ``global_steps``, ``ds_config``) and the client state are what callers read. Read by the
    safe loader (:func:`curriculum_ds.checkpoint.safe_load.load`): no code the file names runs.

    Raises:
        UnsafeCheckpointError: the file needs a pickle global outside the allow-list.
        ResumeError: no such file, or it cannot be read (names the file).
    """
    return _read_states(_states_file(tag_dir))


def _states_file(tag_dir: Path) -> Path:
    files = sorted(tag_dir.glob("*mp_rank_00_model_states.pt"))
    if not files:
        raise ResumeError(f"{tag_dir}: no mp_rank_00 model states file")
    return files[0]


def _read_states(path: Path) -> dict[str, Any]:
    state = safe_load.load(path)
    if not isinstance(state, dict):
        raise ResumeError(f"{path}: not a DeepSpeed model states file")
    return state


_STEP = re.compile(r"(\d+)$")


def _fallback(load_dir: Path, tag: str) -> str:
    """When ``load_dir/latest`` names ``tag``: the newest readable other tag and how to resume it.

    "Newest" by the number a tag's name ends with (``global_step<N>``), then by modification
    time; "readable" as :func:`open_tag` reads it. Only for a refusal (reads tags until one
    passes). Empty when ``latest`` does not name ``tag``.
    """
    try:
        if _read_latest(load_dir / "latest") != tag:
            return ""
    except ResumeError:
        return ""
    candidates = [
        p
        for p in load_dir.iterdir()
        if p.is_dir()
        and p.name != tag
        and not p.name.startswith(".")
        and not p.name.endswith(_UNIVERSAL)
        and any(p.glob("*model_states.pt"))
    ]
    candidates.sort(key=_newness, reverse=True)
    for candidate in candidates:
        try:
            _read_tag(load_dir, candidate.name)
        except ResumeError:
            continue
        return (
            f"; the newest readable tag there is {candidate.name}: "
            f"`--resume {candidate}` continues from it"
        )
    return "; no other tag there is readable"


def _newness(tag_dir: Path) -> tuple[int, int]:
    match = _STEP.search(tag_dir.name)
    return (int(match.group(1)) if match else -1, tag_dir.stat().st_mtime_ns)


def read_curriculum_state(ckpt: Path) -> tuple[str, dict[str, Any] | None]:
    """The tag and the saved ``curriculum`` client state as stored (None: no curriculum).

    For inspecting a checkpoint (``report``); a resume reads it with :func:`open_tag`. Every
    other file of the tag is checked by the safe loader too, as :func:`open_tag` checks it, so a
    tag that carries code is refused by whatever looks at it first, not only by a resume.

    Raises:
        UnsafeCheckpointError: a file of the tag needs a pickle global outside the allow-list.
        ResumeError: If the folder holds no readable DeepSpeed checkpoint.
    """
    tag_dir = _tag_dir(ckpt)
    saved = model_states(tag_dir).get("curriculum")
    states = _states_file(tag_dir)
    safe_load.check_files(p for p in safe_load.tag_files(tag_dir) if p != states)
    return tag_dir.name, saved


def saved_curriculum(tag_dir: Path) -> dict[str, Any] | None:
    """The curriculum state saved with the tag folder ``tag_dir``, as stored (None: none).

    The reference loop and the plugin API keep it in the tag's model states; the HF Trainer in
    :data:`HF_STATE_FILE` of the ``checkpoint-N/`` folder around the tag. Read by the safe
    loader.
    """
    saved = model_states(tag_dir).get("curriculum")
    hf_state = tag_dir.parent / HF_STATE_FILE
    if saved is None and hf_state.is_file():
        saved = safe_load.load(hf_state)
    return saved if isinstance(saved, dict) else None
