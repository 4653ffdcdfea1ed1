"""Stream weights (``curriculum.dynamic.unit: "streams"``) as ``curve`` and ``report`` show them.

A ``curriculum_history.jsonl`` row with ``unit: "streams"`` holds the weights over its phase's
streams, named by ``streams`` in the order of ``weights`` (sum 1). Unlike bucket weights they
never carry over a phase swap: until a phase's first recompute its own configured proportions
hold, and another phase may have other streams. So each phase's recomputes make their own line
per stream (:func:`weight_lines`), from the phase's first recompute to the phase's end, and a
stream keeps its name (and, in the report, its colour) across phases. A recompute that kept the
previous weights (``kept_previous``: an empty window; for ``signal: "learnability"``, no earlier
recompute in the phase to compare with) is marked: ``*`` in the table, an open marker in the
plots. Bucket rows of a history that mixes units (the unit may change at a phase boundary) are
labelled ``b0``, ``b1``, ...

What moved the weights is named by :func:`mixed_by` (``signal loss`` for ``softmax``, ``method
doremi (excess loss, apply loss)`` for a published method), and each row's method's own
quantities (:mod:`~curriculum_ds.records.method_quantities`: DoReMi's average, ODM's ε_t,
ADO's fitted α, Aioli's A, Skill-it's scores, the weights file's sha256) by
:func:`quantities` (a table's last column, the summary) and :func:`quantity_details` (the
last row's in full: Aioli's whole matrix, the file's whole hash).
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from curriculum_ds.records import method_quantities as mq

if TYPE_CHECKING:
    from matplotlib.axes import Axes

__all__ = [
    "KEPT_NOTE",
    "STREAMS_PHASE_START_NOTE",
    "WeightLine",
    "draw_lines",
    "final_weights",
    "is_streams_row",
    "mixed_by",
    "quantities",
    "quantity_details",
    "row_labels",
    "weight_lines",
]

STREAMS_PHASE_START_NOTE = (
    "stream weights never carry over a phase swap: a phase's own proportions hold until its "
    "first recompute"
)
"""What the weights are at a phase's first step (``StreamReweighter.start_phase``)."""

KEPT_NOTE = (
    "* kept the previous weights (an empty window; learnability: no earlier recompute in the "
    "phase to compare with)"
)
"""The table's note on a ``kept_previous`` recompute."""


def is_streams_row(row: Mapping[str, Any]) -> bool:
    """Whether a history row's weights are over streams (``unit: "streams"``)."""
    return row.get("unit") == "streams"


def row_labels(row: Mapping[str, Any]) -> list[str]:
    """A history row's weight labels, in the order of ``weights``.

    Returns:
        The stream names of a streams row, else ``b0`` ... ``b{K-1}`` (K = ``len(weights)``).
    """
    if is_streams_row(row):
        return [str(name) for name in row.get("streams") or []]
    return [f"b{b}" for b in range(len(row.get("weights") or []))]


METHOD_INPUTS = {
    "doremi": "excess loss",
    "odm": "training loss",
    "ado": "training loss curves",
    "aioli": "probe evaluations",
    "skillit": "held-out losses",
    "file": "weights file",
}
"""What each published method's weights follow, as ``curve`` and ``report`` name it."""


def _mixed_by(row: Mapping[str, Any]) -> str:
    method = str(row.get("method") or "softmax")
    if method == "softmax":
        return str(row.get("signal") or "loss")
    inputs = [METHOD_INPUTS[method]] if method in METHOD_INPUTS else []
    if row.get("apply"):
        inputs.append(f"apply {row['apply']}")
    return f"method {method}" + (f" ({', '.join(inputs)})" if inputs else "")


def mixed_by(rows: Sequence[Mapping[str, Any]]) -> str:
    """What moved the rows' weights, e.g. ``"signal loss"``, ``"method odm (training loss)"``.

    ``softmax`` rows name their ``signal`` (``"signal loss → learnability"`` when it changed at
    a phase boundary; rows written before the key existed count as ``"loss"``); a published
    method's rows name the method and what it follows; a change between them is joined with
    ``→``.
    """
    labels = [_mixed_by(row) for row in rows]
    runs = [label for label, _ in itertools.groupby(labels)]
    if all(not label.startswith("method ") for label in runs):
        return "signal " + " → ".join(runs)
    return " → ".join(label if label.startswith("method ") else f"signal {label}" for label in runs)


def _named(names: Sequence[str], values: Sequence[float | None]) -> str:
    return ", ".join(
        f"{n} {'-' if v is None else f'{v:.3f}'}" for n, v in zip(names, values, strict=False)
    )


_QUANTITY_NAMES = {
    "average_weights": "average",
    "loss_weights": "loss weights",
    "alpha": "α",
    "interaction_sum": "ΣA",
    "skillit_scores": "A·ΣL",
}


def quantities(row: Mapping[str, Any]) -> str:
    """A row's method's own quantities in one short text ("" for ``softmax``).

    E.g. ``"average code 0.240, noise 0.100"`` (DoReMi), ``"ε_t 0.0833"`` (ODM), ``"α code
    0.312, noise 0.051"`` (ADO), ``"ΣA code 0.120, noise -0.300"`` (Aioli), ``"sha256
    1a2b3c4d5e6f"`` (``file``: the first 12 hex digits; ``unreadable`` when None).
    """
    names = row_labels(row)
    parts = [f"{_QUANTITY_NAMES[k]} {_named(names, v)}" for k, v in mq.per_stream(row)]
    parts += [f"ε_t {v:.4g}" for _, v in mq.scalars(row)]
    is_file, sha = mq.source_sha256(row)
    if is_file:
        parts.append("sha256 " + ("unreadable" if sha is None else sha[:12]))
    return "; ".join(parts)


def quantity_details(row: Mapping[str, Any]) -> list[str]:
    """The lines that show a row's quantities in full.

    Aioli's ``A`` (a line per stream ``j``, ``A[j][i]`` by stream ``i``), the weights file's path
    and whole sha256; none for another method.
    """
    names = row_labels(row)
    lines = []
    if (a := mq.matrix(row)) is not None:
        lines.append("Aioli's A[j][i] (stream j's loss drop from training on stream i):")
        lines += [f"  {names[j]}: {_named(names, r)}" for j, r in enumerate(a)]
    is_file, sha = mq.source_sha256(row)
    if is_file:
        path = (row.get("source") or {}).get("path")
        lines.append(f"weights file {path}: sha256 {sha or 'unreadable'}")
    return lines


@dataclass(frozen=True)
class WeightLine:
    """One label's weight over one phase's recomputes.

    Attributes:
        label: the stream name (or ``bK`` for a bucket row).
        phase: the phase index of the recomputes.
        steps: each recompute's optimizer step (global), increasing.
        weights: the weight set at each (in [0, 1]).
        kept: whether each recompute kept the previous weights (``kept_previous``).
    """

    label: str
    phase: int
    steps: list[int]
    weights: list[float]
    kept: list[bool]


def weight_lines(rows: Sequence[Mapping[str, Any]]) -> list[WeightLine]:
    """Split history rows into a line per label and per run of rows of one phase.

    Args:
        rows: ``curriculum_history.jsonl`` rows by step, each with ``step``, ``phase`` and
            ``weights`` (and ``streams`` for a streams row); weights already checked finite.

    Returns:
        The lines, by phase and then by the label's position in the phase's first row.
        Deterministic; no I/O.
    """
    lines: list[WeightLine] = []
    for phase, group in itertools.groupby(rows, key=lambda r: r.get("phase")):
        run = list(group)
        by_label: dict[str, WeightLine] = {}
        for row in run:
            for label, w in zip(row_labels(row), row["weights"], strict=False):
                line = by_label.setdefault(label, WeightLine(label, int(phase or 0), [], [], []))
                line.steps.append(int(row["step"]))
                line.weights.append(float(w))
                line.kept.append(bool(row.get("kept_previous")))
        lines.extend(by_label.values())
    return lines


def final_weights(rows: Sequence[Mapping[str, Any]], phase: int) -> str | None:
    """The summary's line of a phase's last stream weights, or None (no streams row in it).

    ``"stream weights    code 0.240, noise 0.550 (step 20, signal loss)"``, and for a published
    method a second line with its :func:`quantities`.
    """
    last = [r for r in rows if r.get("phase") == phase and is_streams_row(r)]
    if not last:
        return None
    row = last[-1]
    pairs = ", ".join(
        f"{name} {float(w):.3f}" for name, w in zip(row_labels(row), row["weights"], strict=False)
    )
    line = f"  {'stream weights':<16} {pairs} (step {row['step']}, {mixed_by([row])})"
    own = quantities(row)
    return line + (f"\n  {'':<16} {own}" if own else "")


def draw_lines(
    ax: Axes,
    lines: Sequence[WeightLine],
    x_of: Mapping[int, float],
    ends: Mapping[int, float],
    colors: Mapping[str, Any],
) -> None:
    """Draw each line as steps (a weight holds until the next recompute), a marker per recompute.

    The marker is filled when the weights were computed, open when the previous ones were kept
    (then one legend entry, ``"kept previous weights"``, explains it).

    Args:
        ax: the matplotlib axes.
        lines: :func:`weight_lines`.
        x_of: a recompute step → its x (the step itself, or the cumulative tokens after it);
            a line's recomputes missing from it are left out.
        ends: phase index → the x where the phase's last weights stop holding.
        colors: label → colour (a label not in it is drawn grey).
    """
    labelled: set[str] = set()
    for line in lines:
        points = [
            (x_of[s], w, k)
            for s, w, k in zip(line.steps, line.weights, line.kept, strict=True)
            if s in x_of
        ]
        if not points:
            continue
        xs, ys = [p[0] for p in points], [p[1] for p in points]
        end = max(ends.get(line.phase, xs[-1]), xs[-1])
        color = colors.get(line.label, "0.5")
        label = "_nolegend_" if line.label in labelled else line.label
        labelled.add(line.label)
        ax.step([*xs, end], [*ys, ys[-1]], where="post", color=color, lw=1.8, label=label)
        for filled in (True, False):
            marks = [(x, y) for x, y, k in points if k != filled]
            if marks:
                ax.plot(
                    [x for x, _ in marks],
                    [y for _, y in marks],
                    "o",
                    color=color,
                    markersize=3 if filled else 5,
                    markerfacecolor=color if filled else "white",
                    label="_nolegend_",
                )
    if any(k for line in lines for k in line.kept):
        ax.plot([], [], "o", color="0.4", markerfacecolor="white", label="kept previous weights")
