"""The report's mix panel: each phase's realised stream share in a rolling window, and its target.

A phase's mix is set by its streams' ``proportion`` in the phase's ``proportion_unit`` (samples,
streaming's default, or non-padding tokens). The realised share of stream s at step t is, over
the last ``window`` steps of t's phase up to t (the window restarts at each phase's first step,
so one phase's mix never leaks into the next):

    share_s(t) = sum of s's units in the window / sum of all streams' units in the window

counted in the phase's unit, from the ``streams: {name: {samples, tokens}}`` of the metrics rows.
The target is the phase's configured proportions (normalised to sum 1), read from the run's
last checkpoint (``checkpoints/latest``: its curriculum state holds the schedule it ran), so the
picture needs no config. A phase whose proportions are not all given has no target line.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from curriculum_ds.records.schema import MetricsRow

__all__ = ["PhaseTarget", "read_targets", "share_window", "shares", "target_segments"]


@dataclass(frozen=True)
class PhaseTarget:
    """A phase's configured mix.

    Attributes:
        unit: ``"samples"`` or ``"tokens"`` (the phase's ``proportion_unit``).
        proportions: stream name → its proportion, normalised to sum 1; empty when the phase
            does not give every stream a proportion.
    """

    unit: str
    proportions: dict[str, float]


def share_window(num_steps: int) -> int:
    """The rolling window of the panel, in steps: a twentieth of the run, between 4 and 64."""
    return max(4, min(64, num_steps // 20))


def read_targets(run_dir: Path) -> dict[int, PhaseTarget]:
    """Each phase's target mix, from the curriculum state of ``run_dir/checkpoints/latest``.

    Returns:
        ``{phase index: PhaseTarget}``; empty when the run has no readable checkpoint or the
        checkpoint has no curriculum state.
    """
    ckpts = run_dir / "checkpoints"
    if not (ckpts / "latest").is_file():
        return {}
    from curriculum_ds.checkpoint.files import read_curriculum_state
    from curriculum_ds.errors import CurriculumError

    try:
        _, saved = read_curriculum_state(ckpts)
    except (CurriculumError, OSError):
        return {}
    if not saved:
        return {}
    return {i: _target(phase) for i, phase in enumerate(saved.get("phases") or [])}


def _target(phase: Mapping[str, Any]) -> PhaseTarget:
    loader = phase.get("train_loader") or {}
    unit = str(loader.get("proportion_unit") or "samples")
    streams = loader.get("streams") or []
    names = [str(s.get("name") or Path(str(s.get("local", ""))).name) for s in streams]
    props = [s.get("proportion") for s in streams]
    if len(streams) == 1:
        return PhaseTarget(unit, {names[0]: 1.0})
    if not streams or any(not isinstance(p, int | float) for p in props) or sum(props) <= 0:
        return PhaseTarget(unit, {})
    total = float(sum(props))
    return PhaseTarget(unit, {n: float(p) / total for n, p in zip(names, props, strict=True)})


def shares(
    rows: Sequence[MetricsRow], targets: Mapping[int, PhaseTarget], window: int
) -> dict[str, tuple[list[float], list[float]]]:
    """Each stream's realised share per step in a rolling window inside its phase.

    Args:
        rows: metrics rows, one per step, by step (with ``streams``; rows without are skipped).
        targets: :func:`read_targets` (a phase's unit; ``"tokens"`` for a phase not in it).
        window: steps per window (≥ 1).

    Returns:
        ``{stream: (xs, ys)}``: x = the step's cumulative tokens, y = the share in [0, 1]; a
        stream has a point at every step of the phases it belongs to (0 when it drew nothing),
        and a NaN y at the first step of each later phase (a break in its line).
    """
    out: dict[str, tuple[list[float], list[float]]] = {}
    recent: deque[dict[str, int]] = deque()
    phase = None
    for row in rows:
        streams = row.get("streams")
        if not isinstance(streams, dict) or not streams:
            continue
        if row["phase"] != phase:  # the window restarts; a NaN breaks each line there
            if phase is not None:
                for xs, ys in out.values():
                    xs.append(float(row["tokens"]))
                    ys.append(math.nan)
            phase, recent = row["phase"], deque()
        target = targets.get(row["phase"])
        key = "tokens" if target is None else target.unit
        recent.append({n: int(cast("Any", s or {}).get(key) or 0) for n, s in streams.items()})
        if len(recent) > window:
            recent.popleft()
        sums: dict[str, int] = {}
        for counts in recent:
            for n, c in counts.items():
                sums[n] = sums.get(n, 0) + c
        total = sum(sums.values())
        if total == 0:
            continue
        for n in streams:
            xs, ys = out.setdefault(n, ([], []))
            xs.append(float(row["tokens"]))
            ys.append(sums.get(n, 0) / total)
    return out


def target_segments(
    phases: Sequence[Any], targets: Mapping[int, PhaseTarget]
) -> dict[str, list[tuple[float, float, float]]]:
    """The target lines of the panel, one segment per phase with a target.

    Args:
        phases: the run's phase spans (:class:`~curriculum_ds.commands.report.PhaseSpan`).
        targets: :func:`read_targets`.

    Returns:
        ``{stream: [(start_tokens, end_tokens, proportion), ...]}``.
    """
    out: dict[str, list[tuple[float, float, float]]] = {}
    for span in phases:
        target = targets.get(span.idx)
        for name, p in (target.proportions if target else {}).items():
            out.setdefault(name, []).append((float(span.start_tokens), float(span.end_tokens), p))
    return out
