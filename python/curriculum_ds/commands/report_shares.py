"""The report's mix panel: each phase's realised stream share in a rolling window, and its target.

A phase's mix is set by its streams' ``proportion`` in the phase's ``proportion_unit`` (samples,
streaming's default, or non-padding tokens). The realised share of stream s at step t is, over
the last ``window`` steps of t's phase up to t (the window restarts at each phase's first step,
so one phase's mix never leaks into the next):

    share_s(t) = sum of s's units in the window / sum of all streams' units in the window

counted in the phase's unit, from the ``streams: {name: {samples, tokens}}`` of the metrics rows.
The target is the phase's configured proportions (normalised to sum 1), read from the run's
last checkpoint (``checkpoints/latest``: its curriculum state holds the schedule it ran), so the
picture needs no config. A phase whose proportions are not all given has no target line. A phase
with a proportion ramp (docs/moving-mixtures.md) has a moving target: the normalised shares along
the ramp (:func:`~curriculum_ds.config.ramps.value_at`, as the loader reads it), drawn over
tokens from the phase's start (a fraction of a ``tok`` phase's duration; of its span's tokens
for an ``ep`` phase).
"""

from __future__ import annotations

import itertools
import math
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from curriculum_ds.config.ramps import is_ramp, value_at

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from matplotlib.axes import Axes

    from curriculum_ds.records.schema import MetricsRow

__all__ = [
    "PhaseTarget",
    "draw_targets",
    "read_targets",
    "share_window",
    "shares",
    "target_ramps",
    "target_segments",
]

RAMP_SAMPLES = 16
"""Points per ramp segment where the streams' total moves (the normalised share is then a ratio
of two linear functions, not a line)."""


@dataclass(frozen=True)
class PhaseTarget:
    """A phase's configured mix.

    Attributes:
        unit: ``"samples"`` or ``"tokens"`` (the phase's ``proportion_unit``).
        proportions: stream name → its proportion, normalised to sum 1; empty when the phase
            does not give every stream a proportion, or when one of them is a ramp.
        ramps: for a phase with a proportion ramp, stream name → its normalised share along
            the phase, ``((fraction in [0, 1], share in [0, 1]), ...)``; else empty.
        tokens: the phase's ``duration`` in tokens (a ``"<int>tok"`` duration; a ramp's
            fraction is its consumed share of it); None for an ``ep`` duration.
    """

    unit: str
    proportions: dict[str, float]
    ramps: dict[str, tuple[tuple[float, float], ...]] = field(default_factory=dict)
    tokens: int | None = None


def share_window(num_steps: int) -> int:
    """The rolling window of the panel, in steps: a twentieth of the run, between 4 and 64."""
    return max(4, min(64, num_steps // 20))


def read_targets(run_dir: Path) -> dict[int, PhaseTarget]:
    """Each phase's target mix, from the curriculum state of ``run_dir/checkpoints/latest``.

    Returns:
        ``{phase index: PhaseTarget}``; empty when the run has no readable checkpoint or the
        checkpoint has no curriculum state.

    Raises:
        UnsafeCheckpointError: the checkpoint's model states file needs a pickle global outside
            the safe loader's allow-list (names the file and the global).
    """
    ckpts = run_dir / "checkpoints"
    if not (ckpts / "latest").is_file():
        return {}
    from curriculum_ds.checkpoint.files import read_curriculum_state
    from curriculum_ds.errors import CurriculumError, UnsafeCheckpointError

    try:
        _, saved = read_curriculum_state(ckpts)  # by the safe loader: no code in it runs
    except UnsafeCheckpointError:
        raise  # a file that could run code is refused, not passed over
    except (CurriculumError, OSError):
        return {}
    if not saved:
        return {}
    targets = {i: _target(phase) for i, phase in enumerate(saved.get("phases") or [])}
    return {i: t for i, t in targets.items() if t is not None}


def _target(saved: Mapping[str, Any]) -> PhaseTarget | None:
    """A saved phase's target, read through the config's own model (None: not a valid phase)."""
    from pydantic import ValidationError

    from curriculum_ds.config import PhaseConfig
    from curriculum_ds.errors import ConfigError

    try:
        phase = PhaseConfig.model_validate(saved)
    except (ValidationError, ConfigError, ValueError):
        return None
    loader = phase.train_loader
    unit = loader.proportion_unit
    names = [str(s.name) for s in loader.streams]  # the model defaults a name from `local`
    props = [s.proportion for s in loader.streams]
    if len(props) == 1:
        return PhaseTarget(unit, {names[0]: 1.0})
    if "proportion" not in _fields_given(saved):
        return PhaseTarget(unit, {})
    if any(is_ramp(p) for p in props):
        tokens = int(phase.duration.value) if phase.duration.unit == "tok" else None
        return PhaseTarget(unit, {}, _ramp_shares(names, props), tokens)
    values = cast("list[float]", props)  # no ramp among them
    total = float(sum(values))
    return PhaseTarget(unit, {n: float(p) / total for n, p in zip(names, values, strict=True)})


def _fields_given(saved: Mapping[str, Any]) -> set[str]:
    """The fields every stream of a saved phase gives (no target without every proportion)."""
    streams = (saved.get("train_loader") or {}).get("streams") or []
    return set.intersection(*(set(s) for s in streams)) if streams else set()


def _ramp_shares(names: list[str], specs: list[Any]) -> dict[str, tuple[tuple[float, float], ...]]:
    """Each stream's normalised share along a phase with a proportion ramp.

    The shares at every breakpoint of the phase's ramps, and at :data:`RAMP_SAMPLES` points
    inside a segment where the streams' total moves; empty if the total reaches 0.
    """
    cuts = sorted({float(f) for p in specs if is_ramp(p) for f, _ in p} | {0.0, 1.0})
    grid: list[float] = []
    for a, b in itertools.pairwise(cuts):
        moving = sum(value_at(p, a) for p in specs) != sum(value_at(p, b) for p in specs)
        parts = RAMP_SAMPLES if moving else 1
        grid.extend(a + (b - a) * k / parts for k in range(parts))
    grid.append(1.0)
    out: dict[str, list[tuple[float, float]]] = {name: [] for name in names}
    for x in grid:
        values = [value_at(p, x) for p in specs]
        total = sum(values)
        if total <= 0:
            return {}
        for name, v in zip(names, values, strict=True):
            out[name].append((x, v / total))
    return {name: tuple(points) for name, points in out.items()}


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


def target_ramps(
    phases: Sequence[Any], targets: Mapping[int, PhaseTarget]
) -> dict[str, list[tuple[list[float], list[float]]]]:
    """The moving target lines of the panel, one polyline per phase with a proportion ramp.

    Args:
        phases: the run's phase spans (:class:`~curriculum_ds.commands.report.PhaseSpan`).
        targets: :func:`read_targets`.

    Returns:
        ``{stream: [(xs, ys), ...]}``: x = cumulative tokens (the phase's fraction f at
        ``start_tokens + f × tokens``, its duration in tokens; ``ep`` phases: f × the span's
        tokens), y = the normalised target share.
    """
    out: dict[str, list[tuple[list[float], list[float]]]] = {}
    for span in phases:
        target = targets.get(span.idx)
        width = float(span.end_tokens - span.start_tokens)
        if target and target.tokens:
            width = float(target.tokens)
        for name, points in (target.ramps if target else {}).items():
            xs = [float(span.start_tokens) + f * width for f, _ in points]
            out.setdefault(name, []).append((xs, [share for _, share in points]))
    return out


def draw_targets(
    ax: Axes, phases: Sequence[Any], targets: Mapping[int, PhaseTarget], colors: Mapping[str, Any]
) -> None:
    """Draw every phase's target dashed on the token-share panel.

    A level per constant phase (:func:`target_segments`, ``hlines``), a polyline per ramp phase
    (:func:`target_ramps`); one legend entry per stream, ``"NAME target"``.
    """
    labelled: set[str] = set()

    def label(name: str) -> str:
        if name in labelled:
            return "_nolegend_"
        labelled.add(name)
        return f"{name} target"

    for name, segments in target_segments(phases, targets).items():
        for x0, x1, p in segments:
            color = colors.get(name, "0.3")
            ax.hlines(p, x0, x1, colors=color, linestyles="--", lw=1.1, label=label(name))
    for name, lines in target_ramps(phases, targets).items():
        for xs, ys in lines:
            ax.plot(xs, ys, color=colors.get(name, "0.3"), ls="--", lw=1.1, label=label(name))
