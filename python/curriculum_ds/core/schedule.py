"""Phase schedule arithmetic. Pure Python: no torch, no RNG, no I/O.

Progress is cumulative over the whole run, in ``max_duration``'s unit: an ``int`` count of tokens
for ``tok`` (non-padding input tokens of the global batch, all dp ranks and micro-batches), an
exact :class:`~fractions.Fraction` of passes for ``ep``. Phase ``k`` covers
``[starts[k], ends[k])``; a step that crosses a boundary carries its overshoot into the next phase,
so phase ``k`` ends at the first step whose cumulative progress reaches ``ends[k]``
(docs/config.md). The training loop therefore only ever asks
``phase_at(progress)`` after each optimizer step.

The checkpoint state is :class:`curriculum_ds.checkpoint.state.CurriculumState`; the rules for
resuming it under an edited schedule are :mod:`curriculum_ds.checkpoint.rules`; the table
``validate`` prints is :mod:`curriculum_ds.commands.schedule_table`.
"""

from __future__ import annotations

import bisect
import hashlib
import json
from fractions import Fraction
from typing import TYPE_CHECKING, Any

from curriculum_ds.config import Duration
from curriculum_ds.errors import ResumeError

if TYPE_CHECKING:
    from curriculum_ds.config import CurriculumConfig, PhaseConfig

__all__ = [
    "PhaseSchedule",
    "Progress",
    "duration_str",
    "json_fingerprint",
    "phase_fingerprint",
    "phase_label",
    "progress_from_str",
    "progress_to_str",
]

Progress = int | Fraction
"""Cumulative progress in the run's unit: int tokens (``tok``) or Fraction passes (``ep``)."""


def phase_label(idx: int, name: str) -> str:
    """``curriculum.schedule[idx] ("name")``: how error messages name a phase."""
    return f"curriculum.schedule[{idx}] ({json.dumps(name, ensure_ascii=False)})"


def duration_str(unit: str, value: Progress) -> str:
    """A progress value in the config's duration syntax (``"1000tok"``, ``"1.5ep"``)."""
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

    def phase_fraction(self, progress: Progress, phase_idx: int) -> float:
        """``progress`` as a share of phase ``phase_idx``, in [0, 1] (where ramps are read)."""
        done = self.phase_progress(progress, phase_idx)
        return min(1.0, float(done / self.durations[phase_idx]))

    def is_done(self, progress: Progress) -> bool:
        """True when ``progress`` has reached ``total`` (the run ends)."""
        return progress >= self.total

    def __repr__(self) -> str:
        ends = ", ".join(duration_str(self.unit, e) for e in self.ends)
        return f"PhaseSchedule(unit={self.unit!r}, ends=[{ends}])"


def phase_fingerprint(phase: PhaseConfig) -> str:
    """SHA-256 hex digest of the canonical JSON (sorted keys) of ``phase.model_dump(mode="json")``.

    Deterministic across processes and machines; changes when any field of the phase changes
    (name, duration, any train_loader field, including defaults that were filled in).
    """
    return json_fingerprint(phase.model_dump(mode="json"))


def json_fingerprint(dumped: Any) -> str:
    """SHA-256 hex digest of the canonical JSON (sorted keys, compact) of a JSON value."""
    canonical = json.dumps(dumped, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


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
