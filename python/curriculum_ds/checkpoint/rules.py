"""The resume rules: what may change between a checkpoint and the config it resumes under.

Rules (docs/resume-and-faults.md): the seed and the unit never change; every phase completed at the
checkpoint is frozen (name, duration, every ``train_loader`` field); the phase in progress keeps its
name and data and may only grow; later phases may change or be appended. A checkpoint exactly on a
boundary continues at the start of the next phase. :func:`check_resume` applies the rules, each a
small function below, and returns a :class:`ResumePlan` or raises one
:class:`~curriculum_ds.errors.ResumeError` line naming the phase and the field (JSON path);
:func:`resume_verdict` says the plan as the line ``validate --resume-from`` prints.
Pure Python: no torch, no I/O.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from fractions import Fraction
from typing import Any, Literal

from pydantic import ValidationError

from curriculum_ds.checkpoint.files import SavedTag
from curriculum_ds.checkpoint.state import CurriculumState, DynamicState
from curriculum_ds.config import CurriculumConfig, Duration, PhaseConfig, RunConfig
from curriculum_ds.core.position import Position
from curriculum_ds.core.schedule import (
    PhaseSchedule,
    Progress,
    duration_str,
    json_fingerprint,
    phase_fingerprint,
    phase_label,
)
from curriculum_ds.errors import ConfigError, ResumeError

__all__ = ["ResumePlan", "check_resume", "fresh_plan", "resume_verdict"]


@dataclasses.dataclass(frozen=True, kw_only=True)
class ResumePlan:
    """Where a resumed run continues under the (possibly edited) new schedule."""

    phase_idx: int
    """Phase to continue in, under the new schedule; ``num_phases`` when the run is done."""
    position: Position
    """The counters the run continues from: the checkpoint's (steps, tokens and samples consumed,
    cumulative progress), unchanged by resuming."""
    phase_progress: Progress
    """Progress already consumed inside ``phase_idx`` (0 when the phase starts now)."""
    is_new_phase: bool
    """True when the continuation starts ``phase_idx`` at its beginning (fresh loader, counters
    0): a checkpoint exactly on a boundary, one whose last step ended the previous phase (only its
    overshoot counted into this one, nothing drawn), or the current phase shortened to what it
    consumed."""
    notes: tuple[str, ...] = ()
    """Human-readable lines about accepted edits (for logs and ``validate --resume-from``)."""
    order_version: Literal[1, 2] = 2
    """The order of samples within a stream the run continues in: the checkpoint's (1 for one
    without it), or the config's for a fresh start (``curriculum.order_version``)."""

    @property
    def progress(self) -> Progress:
        """``position.progress``: cumulative progress at the checkpoint."""
        return self.position.progress

    @property
    def global_step(self) -> int:
        """``position.global_step``: optimizer steps done."""
        return self.position.global_step

    @property
    def consumed_tokens(self) -> int:
        """``position.consumed_tokens``: tokens consumed, global."""
        return self.position.consumed_tokens

    @property
    def consumed_samples(self) -> int:
        """``position.consumed_samples``: samples consumed, global."""
        return self.position.consumed_samples


def fresh_plan(cfg: CurriculumConfig, *, global_step: int = 0) -> ResumePlan:
    """Plan for a checkpoint without curriculum state: phase 0, progress 0, step count kept."""
    position = Position.start(cfg.max_duration.unit, global_step=int(global_step))
    notes: tuple[str, ...] = ()
    if global_step:
        notes = (
            f"checkpoint has no curriculum state: the schedule starts at phase 0 "
            f"({json.dumps(cfg.schedule[0].name)}), global_step {global_step} kept",
        )
    return ResumePlan(
        phase_idx=0,
        position=position,
        phase_progress=position.progress,
        is_new_phase=True,
        notes=notes,
        order_version=cfg.fresh_order_version,
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


def _drawn_phase(state: CurriculumState) -> int | None:
    """The phase the saved loader state belongs to (the last phase drawn from), if known."""
    return None if state.loader is None else state.loader.phase_idx


def _check_dynamic_unchanged(
    cfg: CurriculumConfig, saved_dynamic: DynamicState | None, phase_idx: int, phase_name: str
) -> None:
    """Inside a phase the re-weighting state continues, so its shape may not change.

    ``enabled``, ``method`` and its own keys (``dynamic.<method>``), ``unit``, ``signal``,
    ``num_buckets`` and ``window`` fix the sampler's buckets, the stream weights and the rolling
    window that the checkpoint restores; they may change from the next phase on.
    """
    where = f"the checkpoint is inside phase {phase_idx} ({json.dumps(phase_name)})"
    was_on = saved_dynamic is not None
    if was_on != cfg.dynamic.enabled:
        raise ResumeError(
            f"curriculum.dynamic.enabled: {where}, which ran with dynamic re-weighting "
            f"{'on' if was_on else 'off'}; it cannot change before that phase ends"
        )
    if saved_dynamic is None:
        return
    dynamic = cfg.dynamic
    fields: list[tuple[str, str, Any, Any]] = [  # (where in the section, name, saved, now)
        ("method", "method", saved_dynamic.method, dynamic.method),
        ("unit", "unit", saved_dynamic.unit, dynamic.unit),
        ("signal", "signal", saved_dynamic.signal, dynamic.signal),
        # the window's excess losses were taken against this column (None: not recorded)
        (
            "reference_metric",
            "reference_metric",
            saved_dynamic.reference_metric or dynamic.reference_metric,
            dynamic.reference_metric,
        ),
    ]
    saved_keys, section = saved_dynamic.method_keys, dynamic.method_config
    if saved_keys is not None and section is not None:  # the method's own keys, as it ran
        keys = section.model_dump(mode="json")
        fields += [
            (f"{dynamic.method}.{key}", key, saved_keys.get(key), keys.get(key))
            for key in sorted(set(saved_keys) | set(keys))
        ]
    for path, name, saved_value, value in fields:
        if saved_value != value:
            raise ResumeError(
                f"curriculum.dynamic.{path}: {where}, which ran with {name} "
                f"{json.dumps(saved_value)}, not {json.dumps(value)}; it cannot change before "
                "that phase ends"
            )
    saved_buckets = saved_dynamic.num_buckets
    saved_window = getattr(saved_dynamic, "window_capacity", None)  # None: a method without one
    if dynamic.unit == "buckets" and saved_buckets != dynamic.num_buckets:
        raise ResumeError(
            f"curriculum.dynamic.num_buckets: {where}, which ran with {saved_buckets} buckets, "
            f"not {dynamic.num_buckets}; it cannot change before that phase ends"
        )
    if saved_window is not None and saved_window != dynamic.window:  # None: a method without one
        raise ResumeError(
            f"curriculum.dynamic.window: {where}, whose rolling window holds {saved_window} "
            f"losses, not {dynamic.window}; it cannot change before that phase ends"
        )


def _check_identity(cfg: CurriculumConfig, saved: CurriculumState) -> None:
    """The seed, the unit of progress and the order version are fixed for the life of a run."""
    if saved.seed != cfg.seed:
        raise ResumeError(
            f"curriculum.seed: changed from {saved.seed} (checkpoint) to {cfg.seed} (config); the "
            "sample order depends on it, so the run cannot resume under a new seed"
        )
    if cfg.order_version not in (None, saved.drawn_order):
        raise ResumeError(
            f"curriculum.order_version: {cfg.order_version} (config) but the checkpoint's run "
            f"draws in order version {saved.drawn_order}; remove the key to continue in it"
        )
    if saved.unit != cfg.max_duration.unit:
        raise ResumeError(
            f'curriculum.max_duration: unit changed from "{saved.unit}" (checkpoint) to '
            f'"{cfg.max_duration.unit}" (config); the progress of a run cannot be converted'
        )


def _check_completed_frozen(
    cfg: CurriculumConfig, old: PhaseSchedule, old_dumps: list[Any], saved_idx: int
) -> None:
    """Phases completed at the checkpoint are all there and unchanged."""
    new_dumps = [p.model_dump(mode="json") for p in cfg.schedule]
    if len(cfg.schedule) < saved_idx:
        done = ", ".join(json.dumps(n) for n in old.names[:saved_idx])
        raise ResumeError(
            f"curriculum.schedule: the checkpoint has completed {saved_idx} phase(s) ({done}) "
            f"but the config has only {len(cfg.schedule)}; completed phases cannot be removed"
        )
    for i in range(saved_idx):
        diff = _first_difference(old_dumps[i], new_dumps[i])
        if diff:
            field, was, now = diff
            raise ResumeError(
                f"{phase_label(i, cfg.schedule[i].name)}{field}: phase "
                f"{json.dumps(old.names[i])} is complete and cannot change "
                f"(checkpoint has {was}, config has {now})"
            )


def _check_current_phase(
    cfg: CurriculumConfig,
    old: PhaseSchedule,
    old_dumps: list[Any],
    current: int,
    consumed: Progress,
) -> str | None:
    """The phase in progress keeps its name and data; its duration covers what it consumed.

    Returns:
        A note when its duration changed (grew, or shrank to what it consumed), else None.
    """
    new = PhaseSchedule(cfg)
    unit = old.unit
    if new.num_phases <= current:
        raise ResumeError(
            f"curriculum.schedule: phase {json.dumps(old.names[current])} "
            f"(schedule[{current}]) was in progress at the checkpoint "
            f"({duration_str(unit, consumed)} consumed) but the config has only "
            f"{new.num_phases} phase(s)"
        )
    label = phase_label(current, cfg.schedule[current].name)
    new_dump = cfg.schedule[current].model_dump(mode="json")
    for key in ("name", "train_loader"):
        diff = _first_difference({key: old_dumps[current][key]}, {key: new_dump[key]})
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
            f"{label}.duration: {duration_str(unit, new_duration)} is less than the "
            f"{duration_str(unit, consumed)} phase {json.dumps(old.names[current])} already "
            "consumed at the checkpoint"
        )
    if new_duration == old.durations[current]:
        return None
    return (
        f"phase {json.dumps(old.names[current])}: duration "
        f"{duration_str(unit, old.durations[current])} -> "
        f"{duration_str(unit, new_duration)} "
        f"({duration_str(unit, consumed)} already consumed)"
    )


def _later_phase_notes(
    cfg: CurriculumConfig, old: PhaseSchedule, old_dumps: list[Any], first_free: int
) -> list[str]:
    """Later phases are free: say which were appended, changed or removed."""
    notes = []
    new = PhaseSchedule(cfg)
    for i in range(first_free, new.num_phases):
        if i >= old.num_phases:
            notes.append(f"phase {json.dumps(new.names[i])} (schedule[{i}]) appended")
        elif json_fingerprint(old_dumps[i]) != phase_fingerprint(cfg.schedule[i]):
            notes.append(f"phase {json.dumps(new.names[i])} (schedule[{i}]) changed")
    for i in range(new.num_phases, old.num_phases):
        notes.append(f"phase {json.dumps(old.names[i])} (schedule[{i}]) removed")
    return notes


def check_resume(
    cfg: CurriculumConfig, saved: SavedTag | CurriculumState | Mapping[str, Any]
) -> ResumePlan:
    """Check that a checkpoint can continue under ``cfg`` and say where.

    Rules (each a function above): the seed and the unit must not change; every phase completed
    at save time must be unchanged (name, duration, every train_loader field); the phase in
    progress keeps its name and train_loader and its duration must be at least what it already
    consumed (equal: it is complete and the run continues at the next phase); later phases may
    change and phases may be appended. A checkpoint exactly on a boundary continues at the start
    of the next phase. A phase at the checkpoint that has consumed nothing yet counts as a later
    phase (its data may change: nothing of it has been drawn). Inside a phase, the dynamic
    re-weighting's ``enabled``/``num_buckets``/``window`` may not change. The run keeps the
    checkpoint's ``order_version``; an explicit other one is refused.

    A tag without curriculum state (a plain DeepSpeed run's) gets :func:`fresh_plan`: phase 0,
    the tag's step count kept.

    Args:
        cfg: the new (validated) curriculum config.
        saved: the checkpoint: a tag read by :func:`~curriculum_ds.checkpoint.files.open_tag`,
            or its state: a :class:`CurriculumState` or its :meth:`~CurriculumState.to_dict`
            form (checked key by key; extra keys are ignored).

    Returns:
        The plan: phase to continue in, cumulative and in-phase progress, whether the phase starts
        fresh, counters kept, and notes on accepted edits. Deterministic.

    Raises:
        ResumeError: one line naming the JSON path (and phase) of the first forbidden change, or
            describing what is wrong with the saved state.
    """
    if isinstance(saved, SavedTag):
        if saved.curriculum is None:
            return fresh_plan(cfg, global_step=saved.global_steps or 0)
        saved = saved.curriculum
    state = CurriculumState.from_dict(saved)
    _check_identity(cfg, state)
    old_cfg = _saved_schedule(state.phases, state.seed, state.unit)
    old = PhaseSchedule(old_cfg)
    progress, saved_idx = state.progress, state.phase_idx
    if old.phase_at(progress) != saved_idx:
        raise ResumeError(
            f"checkpoint curriculum state: phase_idx {saved_idx} does not match progress "
            f"{progress} (expected {old.phase_at(progress)})"
        )
    old_dumps = [p.model_dump(mode="json") for p in old_cfg.schedule]
    _check_completed_frozen(cfg, old, old_dumps, saved_idx)

    # A phase at the checkpoint from which nothing was drawn yet is not "in progress": its start
    # exactly, or only the overshoot of the step that ended the previous phase (the loader state
    # is still the previous phase's). Without a loader state, progress alone decides.
    current = saved_idx
    drawn_idx = _drawn_phase(state)
    in_progress = (
        current < old.num_phases
        and progress != old.starts[current]
        and drawn_idx in (None, current)
    )
    notes: list[str] = []
    if in_progress:
        note = _check_current_phase(cfg, old, old_dumps, current, progress - old.starts[current])
        if note:
            notes.append(note)
    notes += _later_phase_notes(cfg, old, old_dumps, current + 1 if in_progress else current)

    new = PhaseSchedule(cfg)
    phase_idx = new.phase_at(progress)
    if phase_idx < new.num_phases:
        phase_progress = new.phase_progress(progress, phase_idx)
        is_new_phase = phase_progress == 0 or drawn_idx not in (None, phase_idx)
    else:
        phase_progress = progress - progress
        is_new_phase = False
        notes.append("the run had already reached max_duration: nothing left to train")
    if phase_idx < new.num_phases and not is_new_phase:
        _check_dynamic_unchanged(cfg, state.dynamic, phase_idx, new.names[phase_idx])
    if state.drawn_order == 2 and cfg.bucket_unit:  # after the dynamic rules' own lines
        raise ResumeError(
            'curriculum.dynamic.unit: "buckets" cannot continue a run drawn in order version 2 '
            "(its per-sample buckets need version 1)"
        )
    return ResumePlan(
        phase_idx=phase_idx,
        position=state.position,
        phase_progress=phase_progress,
        is_new_phase=is_new_phase,
        notes=tuple(notes),
        order_version=state.drawn_order,
    )


def resume_verdict(run: RunConfig, saved: SavedTag) -> str:
    """What resuming ``saved`` under ``run`` would do, as text; raises ResumeError if refused.

    ``saved`` is a tag :func:`~curriculum_ds.checkpoint.files.open_tag` has read; the text is the
    line of ``validate --resume-from``. Progress is shown in the config's duration syntax with
    its unit (``4763tok``, ``0.5ep``).
    """
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
