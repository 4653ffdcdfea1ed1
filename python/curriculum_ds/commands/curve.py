"""Read ``curriculum_history.jsonl`` and show each bucket's weight over steps (table + PNG).

The history has one line per recompute of the bucket weights (``step``, ``phase``, ``phase_name``,
``weights``, ...). A run with ``dynamic.unit: "streams"`` has weights over each phase's streams
instead, named by the rows' ``streams``: the table has a column per stream name and the PNG a
line per stream (:mod:`~curriculum_ds.commands.stream_weights`); a bucket run reads as before.
A weight holds from its recompute step until the next one, so the plot draws steps, not
interpolated lines. Phase boundaries come from ``metrics.jsonl`` (the first step of
each phase) when the run folder has it, else from the history itself. A partial last line (a crash
in the middle of a write) is ignored. A weight that is not a finite number (NaN, ±inf, null) is
refused with a :class:`~curriculum_ds.errors.DataError` naming the line, step and bucket (or
stream): the
weights are probabilities, so such a line means a corrupt history, and leaving it out would draw
a plausible but wrong curve.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from curriculum_ds.commands import stream_weights as sw
from curriculum_ds.errors import DataError
from curriculum_ds.records.jsonl import last_row_per_step, read_jsonl

if TYPE_CHECKING:
    from matplotlib.figure import Figure

__all__ = ["PHASE_START_NOTE", "Curve", "figure", "load_curve", "render_png", "render_table"]

PHASE_START_NOTE = (
    "a new phase starts with the previous phase's weights (its samples bucketed by the static "
    "metric) until its first recompute"
)
"""What the weights are at a phase's first step (``BucketReweighter.start_phase``)."""


@dataclass(frozen=True)
class Curve:
    """A run's weight history.

    Attributes:
        steps: optimizer step (global, 1-based) of each recompute.
        weights: per recompute, the bucket probabilities (each list sums to 1); bucket 0 holds
            the easiest samples (lowest loss percentile), the last bucket the hardest.
        phase_starts: ``(step, phase_name)`` of each phase's first step.
        phases: per recompute, the name of its phase (empty if the history lacks it).
        last_step: the run's last optimizer step (from metrics.jsonl), or the last recompute's.
        floor: the per-bucket floor of the weights, if the history records it.
        temperature: the softmax temperature, if the history records it.
        title: what the run is called in the plot (the run folder's name).
        unit: ``"streams"`` when some recompute's weights are over streams, else ``"buckets"``.
        streams: per recompute, its stream names in the order of its weights (``b0``, ``b1``,
            ... for a bucket row of a streams run: the unit may change at a phase boundary;
            empty for every row of a bucket run).
        kept: per recompute, whether it kept the previous weights (``kept_previous``).
        phase_idx: per recompute, its phase index.
        signal: what moved the rows' weights, ``"signal loss"`` or ``"method doremi (excess
            loss, apply loss)"`` (:func:`~curriculum_ds.commands.stream_weights.mixed_by`).
        quantities: per recompute, its method's own quantities in one text ("" for
            ``softmax``; :func:`~curriculum_ds.commands.stream_weights.quantities`).
        details: the last recompute's quantities in full (Aioli's A, the weights file's hash).
    """

    steps: list[int]
    weights: list[list[float]]
    phase_starts: list[tuple[int, str]]
    phases: list[str] = field(default_factory=list)
    last_step: int | None = None
    floor: float | None = None
    temperature: float | None = None
    title: str = ""
    unit: str = "buckets"
    streams: list[list[str]] = field(default_factory=list)
    kept: list[bool] = field(default_factory=list)
    phase_idx: list[int] = field(default_factory=list)
    signal: str = "signal loss"
    quantities: list[str] = field(default_factory=list)
    details: list[str] = field(default_factory=list)


def load_curve(run_dir: Path) -> Curve:
    """Load the weight history of ``run_dir``.

    Args:
        run_dir: A run folder (``--run-dir`` of training).

    Returns:
        The :class:`Curve`; complete lines only (a partial last line is left out).

    Raises:
        DataError: If the run folder has no (or an empty) ``curriculum_history.jsonl``, a
            record lacks ``step``/``weights``, a streams record's ``streams`` does not name each
            weight, or a weight is not a finite number (the first such weight, by line, step
            and bucket or stream).
    """
    path = run_dir / "curriculum_history.jsonl"
    if not path.is_file():
        raise DataError(f"{path}: no curriculum history (was curriculum.dynamic.enabled true?)")
    records = read_jsonl(path)
    if not records:
        raise DataError(f"{path}: the history is empty (no recompute happened yet)")
    for i, r in enumerate(records):
        if not isinstance(r.get("step"), int) or not r.get("weights"):
            raise DataError(f"{path}: line {i + 1} has no integer step or no weights")
        if not isinstance(r["weights"], list):
            raise DataError(f"{path}: line {i + 1} (step {r['step']}): weights is not a list")
        if sw.is_streams_row(r):
            _check_stream_row(r, f"{path}: line {i + 1} (step {r['step']})")
            continue
        for b, w in enumerate(r["weights"]):
            if not _is_finite_number(w):
                raise DataError(
                    f"{path}: line {i + 1} (step {r['step']}): weight of bucket {b} is {w!r}; "
                    "bucket weights must be finite numbers"
                )
    # one row per step: the last written (a run resumed before its records were cut back)
    records = last_row_per_step(records)
    phase_starts: list[tuple[int, str]] = []
    last_step = int(records[-1]["step"])
    metrics = run_dir / "metrics.jsonl"
    rows = last_row_per_step(read_jsonl(metrics)) if metrics.is_file() else []
    source = rows or records
    last_phase = object()
    for r in source:
        phase = r.get("phase")
        if phase != last_phase:
            phase_starts.append((int(r["step"]), str(r.get("phase_name", phase))))
            last_phase = phase
    if rows:
        last_step = max(last_step, int(rows[-1]["step"]))
    if not rows and phase_starts:
        phase_starts[0] = (1, phase_starts[0][1])  # the history starts at the first recompute
    last = records[-1]
    unit = "streams" if any(sw.is_streams_row(r) for r in records) else "buckets"
    return Curve(
        steps=[int(r["step"]) for r in records],
        weights=[[float(w) for w in r["weights"]] for r in records],
        phase_starts=phase_starts,
        phases=[str(r.get("phase_name", r.get("phase", ""))) for r in records],
        last_step=last_step,
        floor=float(last["floor"]) if "floor" in last else None,
        temperature=float(last["temperature"]) if "temperature" in last else None,
        title=run_dir.resolve().name,
        unit=unit,
        # a history that mixes units (changed at a phase boundary): bucket rows are b0, b1, ...
        streams=[sw.row_labels(r) if unit == "streams" else [] for r in records],
        kept=[bool(r.get("kept_previous")) for r in records],
        phase_idx=[int(r.get("phase") or 0) for r in records],
        signal=sw.mixed_by(records),
        quantities=[sw.quantities(r) for r in records],
        details=sw.quantity_details(last),
    )


def _check_stream_row(r: dict[str, Any], where: str) -> None:
    names = r.get("streams")
    if not isinstance(names, list) or len(names) != len(r["weights"]):
        raise DataError(f"{where}: unit is streams but streams does not name each of its weights")
    for name, w in zip(names, r["weights"], strict=True):
        if not _is_finite_number(w):
            raise DataError(
                f"{where}: weight of stream {name!r} is {w!r}; stream weights must be finite "
                "numbers"
            )


def _is_finite_number(x: object) -> bool:
    """An int or float (not a bool) that is neither NaN nor ±inf."""
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def _max_buckets(curve: Curve) -> int:
    return max(len(w) for w in curve.weights)


def _bucket_counts(curve: Curve) -> str:
    """``"16"``, or ``"4 → 8"`` when the number of buckets changed at a phase boundary."""
    counts = [len(curve.weights[0])]
    for w in curve.weights[1:]:
        if len(w) != counts[-1]:
            counts.append(len(w))
    return " → ".join(str(c) for c in counts)


def render_table(curve: Curve, max_rows: int = 20) -> str:
    """ASCII table: a row per recompute (evenly thinned to ``max_rows``), a column per bucket.

    Phase boundaries are listed under the table; the first and the last recompute are always
    shown. A streams run (``curve.unit == "streams"``) has a column per stream name instead,
    ``-`` where a phase lacks the stream, and ``*`` after a recompute that kept the previous
    weights.
    """
    if curve.unit == "streams":
        return _streams_table(curve, max_rows)
    num_buckets = _max_buckets(curve)
    phases = curve.phases if len(curve.phases) == len(curve.steps) else [""] * len(curve.steps)
    phase_width = max([5, *(len(p) for p in phases)])
    header = f"{'step':>8}  {'phase':<{phase_width}} " + " ".join(
        f"{'b' + str(b):>6}" for b in range(num_buckets)
    )
    rows = _shown_rows(len(curve.steps), max_rows)
    lines = [
        f"bucket weights ({_bucket_counts(curve)} buckets, b0 = easiest, b{num_buckets - 1} = "
        "hardest; "
        f"{len(curve.steps)} recomputes{_knobs(curve)})",
        header,
        "-" * len(header),
    ]
    for i in rows:
        weights = curve.weights[i]
        lines.append(
            f"{curve.steps[i]:>8}  {phases[i]:<{phase_width}} "
            + " ".join(
                f"{weights[b]:6.3f}" if b < len(weights) else f"{'-':>6}"
                for b in range(num_buckets)
            )
        )
    if curve.phase_starts:
        lines.append(
            "phases: " + ", ".join(f"{name} from step {s}" for s, name in curve.phase_starts)
        )
    if len(curve.phase_starts) > 1:
        lines.append(PHASE_START_NOTE)
    return "\n".join(lines)


def _knobs(curve: Curve) -> str:
    """``, floor F, temperature T`` for a table's title (each when the history records it)."""
    floor = f", floor {curve.floor:g}" if curve.floor is not None else ""
    return floor + (f", temperature {curve.temperature:g}" if curve.temperature is not None else "")


def _shown_rows(num_rows: int, max_rows: int) -> list[int]:
    """Row indices evenly thinned to about ``max_rows``, the first and the last always in."""
    stride = max(1, -(-num_rows // max_rows))
    rows = list(range(0, num_rows, stride))
    if rows[-1] != num_rows - 1:
        rows.append(num_rows - 1)
    return rows


def _streams_table(curve: Curve, max_rows: int) -> str:
    names = list(dict.fromkeys(n for row in curve.streams for n in row))
    phases = curve.phases if len(curve.phases) == len(curve.steps) else [""] * len(curve.steps)
    phase_width = max([5, *(len(p) for p in phases)])
    widths = [max(6, len(n)) for n in names]
    header = f"{'step':>8}  {'phase':<{phase_width}} " + " ".join(
        f"{n:>{w}}" for n, w in zip(names, widths, strict=True)
    )
    lines = [
        f"stream weights ({curve.signal}; {_bucket_counts(curve)} streams; "
        f"{len(curve.steps)} recomputes{_knobs(curve)})",
        header,
        "-" * len(header),
    ]
    for i in _shown_rows(len(curve.steps), max_rows):
        weight = dict(zip(curve.streams[i], curve.weights[i], strict=True))
        lines.append(
            f"{curve.steps[i]:>8}  {phases[i]:<{phase_width}} "
            + " ".join(
                f"{weight[n]:{w}.3f}" if n in weight else f"{'-':>{w}}"
                for n, w in zip(names, widths, strict=True)
            )
            + (" *" if curve.kept[i] else "")
            + (f"  {own}" if (own := _quantity(curve, i)) else "")
        )
    if curve.phase_starts:
        lines.append(
            "phases: " + ", ".join(f"{name} from step {s}" for s, name in curve.phase_starts)
        )
    lines += curve.details
    if any(curve.kept):
        lines.append(sw.KEPT_NOTE)
    lines.append(sw.STREAMS_PHASE_START_NOTE)
    return "\n".join(lines)


def _quantity(curve: Curve, i: int) -> str:
    """Recompute ``i``'s method's own quantities ("" when none)."""
    return curve.quantities[i] if i < len(curve.quantities) else ""


def render_png(curve: Curve, out: Path) -> Path:
    """Plot each bucket's (or stream's) weight over steps (:func:`figure`) to a PNG (110 dpi).

    Args:
        curve: The history (:func:`load_curve`).
        out: The PNG to write (its folder is created).

    Returns:
        ``out``. Uses matplotlib's Agg backend (no display needed).
    """
    import matplotlib.pyplot as plt

    fig = figure(curve)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


def figure(curve: Curve) -> Figure:
    """The plot of :func:`render_png` (10 x 5 in); the caller closes it.

    A line per bucket; for a streams run a line per stream name over each phase's recomputes.
    Phases are shaded and their boundaries marked. Uses matplotlib's Agg backend (no display).
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    num_buckets = _max_buckets(curve)
    last_step = max(curve.last_step or curve.steps[-1], curve.steps[-1])
    first_step = min([curve.steps[0], *(s for s, _ in curve.phase_starts)])
    # a weight holds from its recompute until the next one: extend the last to the run's end;
    # before the first recompute of a run the weights are uniform (1 / num_buckets)
    head = [first_step] if first_step < curve.steps[0] else []
    xs = [*head, *curve.steps, last_step]
    colors = plt.get_cmap("viridis")(
        [0.85 * b / max(1, num_buckets - 1) for b in range(num_buckets)]
    )

    fig, ax = plt.subplots(figsize=(10, 5))
    top = max(max(w) for w in curve.weights)
    ymax = min(1.0, top * 1.15 + 0.02)
    # phases: alternate light shading, a dashed line at each boundary, the name at the top
    bounds = [*curve.phase_starts, (last_step + 1, "")]
    for k, ((start, name), (end, _)) in enumerate(itertools.pairwise(bounds)):
        left = start - 0.5
        if k % 2 == 1:
            ax.axvspan(left, end - 0.5, color="0.94", zorder=0)
        if k > 0:
            ax.axvline(left, color="0.3", linestyle="--", linewidth=1, zorder=1)
        ax.text(
            left,
            ymax,
            f" {name}",
            va="top",
            ha="left",
            fontsize=9,
            color="0.25",
            fontweight="bold",
        )
    if curve.unit == "streams":
        _draw_streams(ax, curve, last_step)
    else:
        for b in range(num_buckets):
            label = f"bucket {b}"
            if b == 0:
                label += " (easiest)"
            elif b == num_buckets - 1:
                label += " (hardest)"
            # NaN (not drawn) where the bucket does not exist: num_buckets may change at a phase
            # boundary
            ys = [w[b] if b < len(w) else math.nan for w in curve.weights]
            first = 1.0 / len(curve.weights[0]) if b < len(curve.weights[0]) else math.nan
            ys_line = [first] * len(head) + [*ys, ys[-1]]
            ax.step(xs, ys_line, where="post", color=colors[b], linewidth=1.8, label=label)
            ax.plot(curve.steps, ys, "o", color=colors[b], markersize=2.5)
        uniform = [1.0 / len(w) for w in curve.weights]
        ax.step(
            xs,
            [uniform[0]] * len(head) + [*uniform, uniform[-1]],
            where="post",
            color="0.5",
            linestyle=":",
            linewidth=1,
            label="uniform 1/B",
        )
    if curve.floor is not None:
        ax.axhline(
            curve.floor, color="tab:red", linestyle=":", linewidth=1, label=f"floor {curve.floor:g}"
        )
    ax.set_xlim(first_step - 0.5, last_step + 0.5)
    ax.set_ylim(0.0, ymax)
    ax.set_xlabel("optimizer step")
    name = f" — {curve.title}" if curve.title else ""
    if curve.unit == "streams":
        ax.set_xlabel("optimizer step  (until a phase's first recompute its own proportions hold)")
        ax.set_ylabel("stream weight (sums to 1 over the phase's streams)")
        subtitle = f"{curve.signal}, {_bucket_counts(curve)} streams, {len(curve.steps)} recomputes"
        what = "stream weights"
    else:
        ax.set_ylabel("bucket probability (sums to 1)")
        subtitle = f"{_bucket_counts(curve)} loss-percentile buckets, {len(curve.steps)} recomputes"
        what = "bucket weights"
    if curve.temperature is not None:
        subtitle += f", temperature {curve.temperature:g}"
    if curve.floor is not None:
        subtitle += f", floor {curve.floor:g}"
    ax.set_title(f"curriculum_ds: dynamic {what}{name}\n{subtitle}", fontsize=11)
    ax.grid(axis="y", color="0.85", linewidth=0.6)
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, frameon=False)
    fig.tight_layout()
    return fig


def _draw_streams(ax: Any, curve: Curve, last_step: int) -> None:
    """A line per stream name and phase (a colour per name), and each phase's uniform 1/K.

    A line ends where its phase does; the uniform level is dotted.
    """
    import matplotlib

    rows: list[dict[str, Any]] = [
        {"step": s, "phase": p, "unit": "streams" if names else "buckets", "streams": names}
        | {"weights": w, "kept_previous": k}
        for s, p, names, w, k in zip(
            curve.steps, curve.phase_idx, curve.streams, curve.weights, curve.kept, strict=True
        )
    ]
    lines = sw.weight_lines(rows)
    cmap = matplotlib.colormaps["tab10"]
    names = list(dict.fromkeys(line.label for line in lines))
    colors = {n: cmap(i % 10) for i, n in enumerate(names)}
    starts = [s for s, _ in curve.phase_starts]
    ends: dict[int, float] = {}
    for line in lines:
        later = [s for s in starts if s > line.steps[-1]]
        ends[line.phase] = later[0] - 0.5 if later else float(last_step)
    sw.draw_lines(ax, lines, {s: float(s) for s in curve.steps}, ends, colors)
    uniform_label = "uniform 1/K"
    for phase, group in itertools.groupby(rows, key=lambda r: r["phase"]):
        first = next(group)
        k = len(first["weights"])
        ends_at = ends[phase]
        ax.hlines(1.0 / k, first["step"], ends_at, colors="0.5", ls=":", lw=1, label=uniform_label)
        uniform_label = "_nolegend_"
