"""Phase schedule arithmetic and the resume rules. Pure Python: no torch, no RNG, no I/O.

Progress is cumulative over the whole run, in ``max_duration``'s unit: an ``int`` count of tokens
for ``tok`` (non-padding input tokens of the global batch, all dp ranks and micro-batches), an
exact :class:`~fractions.Fraction` of passes for ``ep``. Phase ``k`` covers
``[starts[k], ends[k])``; a step that crosses a boundary carries its overshoot into the next phase,
so phase ``k`` ends at the first step whose cumulative progress reaches ``ends[k]`` (DESIGN.md,
"Phase boundaries are cumulative and exact"). The training loop therefore only ever asks
``phase_at(progress)`` after each optimizer step.

Resumption (DESIGN.md "Resumption", issue 4 item 6): the loop stores a :class:`SavedCurriculum`
(see :func:`saved_curriculum`) in DeepSpeed's ``client_state`` and, on resume, calls
:func:`check_resume` with the new config, which either returns a :class:`ResumePlan` or raises a
one-line :class:`~curriculum_ds.errors.ResumeError` naming the phase and the field.
"""

from __future__ import annotations

import bisect
import dataclasses
import hashlib
import json
import math
from collections.abc import Mapping
from fractions import Fraction
from typing import TYPE_CHECKING, Any, NotRequired, TypedDict

import numpy as np
from pydantic import ValidationError

from curriculum_ds.config import CurriculumConfig, Duration, PhaseConfig, read_stream_info_checked
from curriculum_ds.errors import ConfigError, ResumeError

if TYPE_CHECKING:
    from curriculum_ds.config import RunConfig

__all__ = [
    "SAVED_CURRICULUM_VERSION",
    "PhaseSchedule",
    "Progress",
    "ResumePlan",
    "SavedCurriculum",
    "check_resume",
    "describe_schedule",
    "fresh_plan",
    "phase_fingerprint",
    "progress_from_str",
    "progress_to_str",
    "saved_curriculum",
]

Progress = int | Fraction
"""Cumulative progress in the run's unit: int tokens (``tok``) or Fraction passes (``ep``)."""

SAVED_CURRICULUM_VERSION = 1


def _phase_label(idx: int, name: str) -> str:
    return f"curriculum.schedule[{idx}] ({json.dumps(name, ensure_ascii=False)})"


def _duration_str(unit: str, value: Progress) -> str:
    return str(Duration(unit=unit, value=value))  # type: ignore[arg-type]


class PhaseSchedule:
    """Cumulative phase boundaries of a schedule, exact in its unit.

    Attributes:
        unit: ``"tok"`` or ``"ep"`` (``max_duration``'s unit).
        num_phases: number of phases.
        durations: each phase's duration value (int tokens or Fraction passes).
        starts: cumulative start of each phase (``starts[0] == 0``).
        ends: cumulative end of each phase (``ends[-1] == total``).
        total: ``max_duration``'s value.
    """

    def __init__(self, cfg: CurriculumConfig) -> None:
        """Build the boundaries of ``cfg.schedule`` (already validated: units equal, sum exact)."""
        self.unit: str = cfg.max_duration.unit
        self.names: tuple[str, ...] = tuple(p.name for p in cfg.schedule)
        self.durations: tuple[Progress, ...] = tuple(p.duration.value for p in cfg.schedule)
        ends: list[Progress] = []
        acc: Progress = 0 if self.unit == "tok" else Fraction(0)
        starts: list[Progress] = []
        for d in self.durations:
            starts.append(acc)
            acc = acc + d
            ends.append(acc)
        self.starts: tuple[Progress, ...] = tuple(starts)
        self.ends: tuple[Progress, ...] = tuple(ends)
        self.total: Progress = cfg.max_duration.value
        self.num_phases: int = len(self.durations)

    def phase_at(self, progress: Progress) -> int:
        """Index of the phase in progress after ``progress`` units.

        Returns the first ``k`` with ``progress < ends[k]``, or ``num_phases`` when
        ``progress >= total`` (the run is done). Exact (no float rounding); deterministic.

        Raises:
            ValueError: ``progress`` is negative.
        """
        if progress < 0:
            raise ValueError(f"progress must be >= 0, got {progress}")
        return bisect.bisect_right(self.ends, progress)

    def phase_progress(self, progress: Progress, phase_idx: int) -> Progress:
        """Progress consumed inside phase ``phase_idx``: ``progress - starts[phase_idx]``.

        Raises:
            IndexError: ``phase_idx`` is not in ``[0, num_phases)``.
        """
        if not 0 <= phase_idx < self.num_phases:
            raise IndexError(f"phase_idx {phase_idx} not in [0, {self.num_phases})")
        return progress - self.starts[phase_idx]

    def is_done(self, progress: Progress) -> bool:
        """True when ``progress`` has reached ``total`` (the run ends)."""
        return progress >= self.total

    def __repr__(self) -> str:
        ends = ", ".join(_duration_str(self.unit, e) for e in self.ends)
        return f"PhaseSchedule(unit={self.unit!r}, ends=[{ends}])"


def phase_fingerprint(phase: PhaseConfig) -> str:
    """SHA-256 hex digest of the canonical JSON (sorted keys) of ``phase.model_dump(mode="json")``.

    Deterministic across processes and machines; changes when any field of the phase changes
    (name, duration, any train_loader field, including defaults that were filled in).
    """
    return _fingerprint_dict(phase.model_dump(mode="json"))


def _fingerprint_dict(dumped: Any) -> str:
    canonical = json.dumps(dumped, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


# --------------------------------------------------------------------------------------------
# Saved state
# --------------------------------------------------------------------------------------------


class SavedCurriculum(TypedDict):
    """The curriculum state the training loop puts in DeepSpeed's ``client_state`` (JSON-able).

    Build it with :func:`saved_curriculum`; the loop may store its own sampler/window state beside
    it (other keys are ignored by :func:`check_resume`).
    """

    version: int
    """Format version, :data:`SAVED_CURRICULUM_VERSION` (1)."""
    seed: int
    """``curriculum.seed`` of the saved run."""
    unit: str
    """``"tok"`` or ``"ep"``."""
    progress: str
    """Cumulative progress, :func:`progress_to_str` form: ``"1000"`` (tok), ``"3/2"`` (ep)."""
    phase_idx: int
    """``phase_at(progress)`` under the saved schedule; ``len(phases)`` when the run had ended."""
    phases: list[dict[str, Any]]
    """Every phase's ``model_dump(mode="json")`` at save time."""
    global_step: int
    """Optimizer steps done."""
    consumed_tokens: int
    """Non-padding input tokens consumed, global across dp ranks."""
    consumed_samples: int
    """Samples consumed, global across dp ranks."""
    fingerprints: NotRequired[list[str]]
    """:func:`phase_fingerprint` of each phase (informational)."""


def progress_to_str(progress: Progress) -> str:
    """Exact text form of a progress value: ``"1000"`` for tok, ``"3/2"`` (or ``"2"``) for ep."""
    if isinstance(progress, bool) or not isinstance(progress, int | Fraction):
        raise TypeError(f"progress must be an int or a Fraction, got {type(progress).__name__}")
    return str(progress)


def progress_from_str(text: str, unit: str) -> Progress:
    """Inverse of :func:`progress_to_str`: an int for ``tok``, a Fraction for ``ep``.

    Raises:
        ResumeError: the text is not a non-negative integer (tok) / fraction (ep), or the unit is
            unknown.
    """
    try:
        if unit == "tok":
            if not (isinstance(text, str) and text.isascii() and text.isdigit()):
                raise ValueError(text)
            return int(text)
        if unit == "ep":
            value = Fraction(text)
            if value < 0:
                raise ValueError(text)
            return value
    except (ValueError, TypeError, ZeroDivisionError):
        raise ResumeError(
            f"checkpoint curriculum state: progress {text!r} is not a valid {unit} count"
        ) from None
    raise ResumeError(f'checkpoint curriculum state: unknown unit {unit!r} (expected "tok"/"ep")')


def saved_curriculum(
    cfg: CurriculumConfig,
    progress: Progress,
    *,
    global_step: int,
    consumed_tokens: int,
    consumed_samples: int,
) -> SavedCurriculum:
    """The :class:`SavedCurriculum` for a checkpoint taken after ``progress`` units.

    Args:
        cfg: the running config.
        progress: cumulative progress in ``cfg.max_duration.unit`` (int tok / Fraction ep).
        global_step: optimizer steps done.
        consumed_tokens: non-padding input tokens consumed, global across dp ranks.
        consumed_samples: samples consumed, global across dp ranks.
    """
    schedule = PhaseSchedule(cfg)
    return SavedCurriculum(
        version=SAVED_CURRICULUM_VERSION,
        seed=cfg.seed,
        unit=schedule.unit,
        progress=progress_to_str(progress),
        phase_idx=schedule.phase_at(progress),
        phases=[p.model_dump(mode="json") for p in cfg.schedule],
        global_step=int(global_step),
        consumed_tokens=int(consumed_tokens),
        consumed_samples=int(consumed_samples),
        fingerprints=[phase_fingerprint(p) for p in cfg.schedule],
    )


@dataclasses.dataclass(frozen=True, kw_only=True)
class ResumePlan:
    """Where a resumed run continues under the (possibly edited) new schedule."""

    phase_idx: int
    """Phase to continue in, under the new schedule; ``num_phases`` when the run is done."""
    progress: Progress
    """Cumulative progress at the checkpoint (unchanged by resuming)."""
    phase_progress: Progress
    """Progress already consumed inside ``phase_idx`` (0 when the phase starts now)."""
    is_new_phase: bool
    """True when the continuation starts ``phase_idx`` at its beginning (fresh loader, counters
    0): a checkpoint exactly on a boundary, or the current phase shortened to what it consumed."""
    global_step: int = 0
    """Optimizer steps done (kept from the checkpoint)."""
    consumed_tokens: int = 0
    """Tokens consumed, global (kept from the checkpoint)."""
    consumed_samples: int = 0
    """Samples consumed, global (kept from the checkpoint)."""
    notes: tuple[str, ...] = ()
    """Human-readable lines about accepted edits (for logs and ``validate --resume-from``)."""


def fresh_plan(cfg: CurriculumConfig, *, global_step: int = 0) -> ResumePlan:
    """Plan for a checkpoint without curriculum state: phase 0, progress 0, step count kept."""
    zero: Progress = 0 if cfg.max_duration.unit == "tok" else Fraction(0)
    notes: tuple[str, ...] = ()
    if global_step:
        notes = (
            f"checkpoint has no curriculum state: the schedule starts at phase 0 "
            f"({json.dumps(cfg.schedule[0].name)}), global_step {global_step} kept",
        )
    return ResumePlan(
        phase_idx=0,
        progress=zero,
        phase_progress=zero,
        is_new_phase=True,
        global_step=int(global_step),
        notes=notes,
    )


def _first_difference(old: Any, new: Any, path: str = "") -> tuple[str, str, str] | None:
    """First (path, old, new) where two JSON values differ, or None."""
    if isinstance(old, dict) and isinstance(new, dict):
        for key in list(old) + [k for k in new if k not in old]:
            if key not in old or key not in new:
                return (
                    f"{path}.{key}",
                    json.dumps(old.get(key)) if key in old else "no value",
                    json.dumps(new.get(key)) if key in new else "no value",
                )
            diff = _first_difference(old[key], new[key], f"{path}.{key}")
            if diff:
                return diff
        return None
    if isinstance(old, list) and isinstance(new, list):
        for i, (a, b) in enumerate(zip(old, new, strict=False)):
            diff = _first_difference(a, b, f"{path}[{i}]")
            if diff:
                return diff
        if len(old) != len(new):
            return (path, f"{len(old)} items", f"{len(new)} items")
        return None
    if old == new and type(old) is type(new):
        return None
    if isinstance(old, int | float) and isinstance(new, int | float) and old == new:
        return None
    return (path, json.dumps(old), json.dumps(new))


def _require(saved: Any, key: str, kind: type | tuple[type, ...]) -> Any:
    if not isinstance(saved, Mapping) or key not in saved:
        raise ResumeError(f"checkpoint curriculum state: missing {key!r}")
    value = saved[key]
    if isinstance(value, bool) or not isinstance(value, kind):
        raise ResumeError(f"checkpoint curriculum state: {key!r} has the wrong type ({value!r})")
    return value


def _saved_schedule(phases: list[dict[str, Any]], seed: int, unit: str) -> CurriculumConfig:
    """Rebuild the saved schedule as a CurriculumConfig (its max_duration = sum of durations)."""
    try:
        parsed = [PhaseConfig.model_validate(p) for p in phases]
        total = sum((p.duration.value for p in parsed), start=Fraction(0))
        max_duration = Duration(unit=unit, value=int(total) if unit == "tok" else total)  # type: ignore[arg-type]
        return CurriculumConfig(max_duration=max_duration, seed=seed, schedule=parsed)
    except (ValidationError, ConfigError, ValueError) as exc:
        detail = str(exc).splitlines()[0]
        raise ResumeError(
            f"checkpoint curriculum state: its phases are invalid ({detail})"
        ) from None


def _check_dynamic_unchanged(
    cfg: CurriculumConfig, saved_dynamic: Any, phase_idx: int, phase_name: str
) -> None:
    """Inside a phase the re-weighting state continues, so its shape may not change.

    ``enabled``, ``num_buckets`` and ``window`` fix the sampler's buckets and the rolling window
    that the checkpoint restores; they may change from the next phase on.
    """
    where = f"the checkpoint is inside phase {phase_idx} ({json.dumps(phase_name)})"
    was_on = saved_dynamic is not None
    if was_on != cfg.dynamic.enabled:
        raise ResumeError(
            f"curriculum.dynamic.enabled: {where}, which ran with dynamic re-weighting "
            f"{'on' if was_on else 'off'}; it cannot change before that phase ends"
        )
    if not was_on:
        return
    saved_buckets = len(saved_dynamic["probs"])
    if saved_buckets != cfg.dynamic.num_buckets:
        raise ResumeError(
            f"curriculum.dynamic.num_buckets: {where}, which ran with {saved_buckets} buckets, "
            f"not {cfg.dynamic.num_buckets}; it cannot change before that phase ends"
        )
    saved_window = int(saved_dynamic["window"]["capacity"])
    if saved_window != cfg.dynamic.window:
        raise ResumeError(
            f"curriculum.dynamic.window: {where}, whose rolling window holds {saved_window} "
            f"losses, not {cfg.dynamic.window}; it cannot change before that phase ends"
        )


def check_resume(cfg: CurriculumConfig, saved: SavedCurriculum | Mapping[str, Any]) -> ResumePlan:
    """Check that a checkpoint can continue under ``cfg`` and say where (issue 4 item 6).

    Rules: the seed and the unit must not change; every phase completed at save time must be
    unchanged (name, duration, every train_loader field); the phase in progress keeps its name and
    train_loader and its duration must be at least what it already consumed (equal: it is
    complete and the run continues at the next phase); later phases may change and phases may be
    appended. A checkpoint exactly on a boundary continues at the start of the next phase. A
    phase at the checkpoint that has consumed nothing yet counts as a later phase (its data may
    change: nothing of it has been drawn).

    Args:
        cfg: the new (validated) curriculum config.
        saved: the state read back from the checkpoint (:func:`saved_curriculum`); any mapping,
            checked key by key (extra keys are ignored).

    Returns:
        The plan: phase to continue in, cumulative and in-phase progress, whether the phase starts
        fresh, counters kept, and notes on accepted edits. Deterministic.

    Raises:
        ResumeError: one line naming the JSON path (and phase) of the first forbidden change, or
            describing what is wrong with the saved state.
    """
    version = _require(saved, "version", int)
    if version != SAVED_CURRICULUM_VERSION:
        raise ResumeError(
            f"checkpoint curriculum state: version {version} not supported "
            f"(this curriculum_ds reads version {SAVED_CURRICULUM_VERSION})"
        )
    seed = _require(saved, "seed", int)
    unit = _require(saved, "unit", str)
    old_phases = _require(saved, "phases", list)
    saved_idx = _require(saved, "phase_idx", int)
    progress = progress_from_str(_require(saved, "progress", str), unit)
    counters = {
        k: _require(saved, k, int) for k in ("global_step", "consumed_tokens", "consumed_samples")
    }

    if seed != cfg.seed:
        raise ResumeError(
            f"curriculum.seed: changed from {seed} (checkpoint) to {cfg.seed} (config); the "
            "sample order depends on it, so the run cannot resume under a new seed"
        )
    if unit != cfg.max_duration.unit:
        raise ResumeError(
            f'curriculum.max_duration: unit changed from "{unit}" (checkpoint) to '
            f'"{cfg.max_duration.unit}" (config); the progress of a run cannot be converted'
        )

    old_cfg = _saved_schedule(old_phases, seed, unit)
    old = PhaseSchedule(old_cfg)
    if old.phase_at(progress) != saved_idx:
        raise ResumeError(
            f"checkpoint curriculum state: phase_idx {saved_idx} does not match progress "
            f"{progress_to_str(progress)} (expected {old.phase_at(progress)})"
        )
    new = PhaseSchedule(cfg)
    new_dumps = [p.model_dump(mode="json") for p in cfg.schedule]
    old_dumps = [p.model_dump(mode="json") for p in old_cfg.schedule]

    # A phase at the checkpoint with nothing consumed yet is not "in progress".
    current = saved_idx
    if current < old.num_phases and progress == old.starts[current]:
        current_consumed = False
    else:
        current_consumed = current < old.num_phases

    if new.num_phases < saved_idx:
        done = ", ".join(json.dumps(n) for n in old.names[:saved_idx])
        raise ResumeError(
            f"curriculum.schedule: the checkpoint has completed {saved_idx} phase(s) ({done}) "
            f"but the config has only {new.num_phases}; completed phases cannot be removed"
        )
    for i in range(saved_idx):
        diff = _first_difference(old_dumps[i], new_dumps[i])
        if diff:
            field, was, now = diff
            raise ResumeError(
                f"{_phase_label(i, cfg.schedule[i].name)}{field}: phase "
                f"{json.dumps(old.names[i])} is complete and cannot change "
                f"(checkpoint has {was}, config has {now})"
            )

    notes: list[str] = []
    if current_consumed:
        consumed = progress - old.starts[current]
        if new.num_phases <= current:
            raise ResumeError(
                f"curriculum.schedule: phase {json.dumps(old.names[current])} "
                f"(schedule[{current}]) was in progress at the checkpoint "
                f"({_duration_str(unit, consumed)} consumed) but the config has only "
                f"{new.num_phases} phase(s)"
            )
        label = _phase_label(current, cfg.schedule[current].name)
        for key in ("name", "train_loader"):
            diff = _first_difference({key: old_dumps[current][key]}, {key: new_dumps[current][key]})
            if diff:
                field, was, now = diff
                raise ResumeError(
                    f"{label}{field}: phase {json.dumps(old.names[current])} was in progress at "
                    f"the checkpoint and its data cannot change (checkpoint has {was}, config "
                    f"has {now})"
                )
        new_duration = new.durations[current]
        if new_duration < consumed:
            raise ResumeError(
                f"{label}.duration: {_duration_str(unit, new_duration)} is less than the "
                f"{_duration_str(unit, consumed)} phase {json.dumps(old.names[current])} already "
                "consumed at the checkpoint"
            )
        if new_duration != old.durations[current]:
            notes.append(
                f"phase {json.dumps(old.names[current])}: duration "
                f"{_duration_str(unit, old.durations[current])} -> "
                f"{_duration_str(unit, new_duration)} "
                f"({_duration_str(unit, consumed)} already consumed)"
            )
    first_free = current + 1 if current_consumed else current
    for i in range(first_free, new.num_phases):
        if i >= old.num_phases:
            notes.append(f"phase {json.dumps(new.names[i])} (schedule[{i}]) appended")
        elif _fingerprint_dict(old_dumps[i]) != _fingerprint_dict(new_dumps[i]):
            notes.append(f"phase {json.dumps(new.names[i])} (schedule[{i}]) changed")
    for i in range(new.num_phases, old.num_phases):
        notes.append(f"phase {json.dumps(old.names[i])} (schedule[{i}]) removed")

    phase_idx = new.phase_at(progress)
    if phase_idx < new.num_phases:
        phase_progress = new.phase_progress(progress, phase_idx)
        is_new_phase = phase_progress == 0
    else:
        phase_progress = progress - progress
        is_new_phase = False
        notes.append("the run had already reached max_duration: nothing left to train")
    saved_map: Mapping[str, Any] = saved
    if phase_idx < new.num_phases and not is_new_phase and "dynamic" in saved_map:
        _check_dynamic_unchanged(cfg, saved_map["dynamic"], phase_idx, new.names[phase_idx])
    return ResumePlan(
        phase_idx=phase_idx,
        progress=progress,
        phase_progress=phase_progress,
        is_new_phase=is_new_phase,
        notes=tuple(notes),
        **counters,
    )


# --------------------------------------------------------------------------------------------
# Human-readable schedule
# --------------------------------------------------------------------------------------------


def _mean_tokens(info: Any, max_seq_len: int) -> float | None:
    metrics = getattr(info, "metrics", None)
    if not isinstance(metrics, Mapping) or "num_tokens" not in metrics:
        return None
    values = metrics["num_tokens"]
    try:
        arr = np.minimum(np.asarray(values, dtype=np.float64), max_seq_len)
        return float(arr.mean()) if arr.size else None
    except (TypeError, ValueError):
        return None


def describe_schedule(run: RunConfig, dp_world_size: int = 1) -> str:
    """A readable table of the schedule, for ``curriculum-ds validate``.

    Columns: phase index, name, duration, cumulative end, datamix (``stream: proportion``),
    max_seq_len and estimated optimizer steps. Steps: for ``tok``, duration / (global batch size ×
    mean of ``min(num_tokens, max_seq_len)`` over the mix, weighted by proportion); for ``ep``,
    duration × epoch size / global batch size. Shows ``?`` where a stream's info cannot be read.

    Args:
        run: the loaded config.
        dp_world_size: data-parallel ranks, for the global batch size.

    Raises:
        ConfigError: the batch-size keys are inconsistent for ``dp_world_size``.
    """
    cfg = run.curriculum
    schedule = PhaseSchedule(cfg)
    gbs = run.global_batch_size(dp_world_size)
    infos: dict[str, Any] = {}

    def info(local: str) -> Any:
        if local not in infos:
            try:
                infos[local] = read_stream_info_checked(local)
            except Exception:  # describing must not fail on unreadable data
                infos[local] = None
        return infos[local]

    rows = [("phase", "name", "duration", "ends at", "datamix", "max_seq_len", "~steps")]
    total_steps: int | None = 0
    for k, phase in enumerate(cfg.schedule):
        loader = phase.train_loader
        psum = sum(s.proportion for s in loader.streams)
        mix = ", ".join(f"{s.name}: {s.proportion / psum:.3g}" for s in loader.streams)
        steps: int | None = None
        if schedule.unit == "tok":
            means = [_mean_tokens(info(s.local), loader.max_seq_len) for s in loader.streams]
            known = [m for m in means if m is not None]
            if len(known) == len(means):
                weighted = zip(loader.streams, known, strict=True)
                mean = sum(s.proportion * m for s, m in weighted) / psum
                if mean > 0:
                    steps = math.ceil(phase.duration.value / (gbs * mean))
        else:
            epoch_size = loader.epoch_size
            if epoch_size is None:
                counts = [getattr(info(s.local), "num_samples", None) for s in loader.streams]
                if all(isinstance(c, int) for c in counts):
                    epoch_size = sum(counts)  # type: ignore[arg-type]
            if epoch_size is not None:
                steps = math.ceil(phase.duration.value * epoch_size / gbs)
        if steps is None or total_steps is None:
            total_steps = None
        else:
            total_steps += steps
        rows.append(
            (
                str(k),
                phase.name,
                str(phase.duration),
                _duration_str(schedule.unit, schedule.ends[k]),
                mix,
                str(loader.max_seq_len),
                "?" if steps is None else str(steps),
            )
        )
    widths = [max(len(r[c]) for r in rows) for c in range(len(rows[0]))]
    lines = [
        "  ".join(cell.ljust(w) for cell, w in zip(r, widths, strict=True)).rstrip() for r in rows
    ]
    lines.insert(1, "  ".join("-" * w for w in widths))
    footer = (
        f"max_duration {cfg.max_duration}, {schedule.num_phases} phase(s), global batch {gbs} "
        f"samples (dp_world_size {dp_world_size}), ~{'?' if total_steps is None else total_steps} "
        f"optimizer steps, loss_weighting {cfg.loss_weighting}, seed {cfg.seed}, dynamic "
        f"{'on' if cfg.dynamic.enabled else 'off'}"
    )
    return "\n".join([*lines, footer])
