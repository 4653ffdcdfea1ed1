"""``curriculum-ds report RUN_DIR``: one picture and a per-phase summary of a run.

Reads the run directory's ``metrics.jsonl`` (required), ``eval.jsonl`` and
``curriculum_history.jsonl`` (when present) and draws one PNG of stacked panels sharing the
x axis (cumulative global non-padding tokens), every phase shaded and named:

1. train loss per stream (``streams: {name: {samples, tokens, loss}}`` of each metrics row, a
   rolling mean over the steps drawn over the raw values; the total loss dashed black). A run
   whose rows have no ``streams`` shows the total loss alone.
2. eval loss per stream (``eval.jsonl``), with the loss over all eval tokens dashed.
3. each phase's realised stream share in a rolling window of steps inside the phase, in the
   phase's ``proportion_unit``, with its target (the configured proportions) dashed beside it
   (:mod:`~curriculum_ds.commands.report_shares`).
4. the learning rate.
5. the bucket probabilities over steps, when the run has dynamic re-weighting; with
   ``dynamic.unit: "streams"`` the stream weights instead, a line per stream name and phase in
   the stream's colour (:mod:`~curriculum_ds.commands.stream_weights`).

A stream keeps its colour in every panel (a train and an eval stream of the same name share it).
The text summary gives, per phase: its tokens and steps, and the final train and eval loss of each
stream (train: the token-weighted mean over the phase's last :data:`FINAL_STEPS` steps; eval: the
phase's last evaluation), and a streams run's last stream weights in the phase with what moved
them and the method's own quantities (:func:`~curriculum_ds.commands.stream_weights.
final_weights`). Partial last lines of the JSONL files (a crash mid-write) are ignored.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeGuard, cast

from curriculum_ds.commands import stream_weights as sw
from curriculum_ds.commands.report_shares import (
    PhaseTarget,
    draw_targets,
    read_targets,
    share_window,
    shares,
)
from curriculum_ds.errors import DataError
from curriculum_ds.records.jsonl import last_row_per_step, read_jsonl

if TYPE_CHECKING:
    from matplotlib.axes import Axes

    from curriculum_ds.records.schema import MetricsRow

__all__ = ["FINAL_STEPS", "PhaseSpan", "RunReport", "load_report", "render_report", "summary"]

FINAL_STEPS = 10
"""Steps at the end of a phase whose train losses make its "final" train loss (token-weighted)."""


@dataclass(frozen=True)
class PhaseSpan:
    """One phase as the run went through it.

    Attributes:
        idx: the phase index. name: its name.
        start_tokens / end_tokens: cumulative global tokens before its first and after its last
            step.
        first_step / last_step: its first and last optimizer steps.
    """

    idx: int
    name: str
    start_tokens: int
    end_tokens: int
    first_step: int
    last_step: int


@dataclass(frozen=True)
class RunReport:
    """What a run directory holds for the report.

    Attributes:
        run_dir: the folder. metrics: ``metrics.jsonl`` rows
        (:class:`~curriculum_ds.records.schema.MetricsRow`; rows of older runs may lack
        ``streams``), by step. evals: ``eval.jsonl`` rows (may be empty). history:
        ``curriculum_history.jsonl`` rows (may be empty).
        phases: the phases the run went through, in order.
        targets: each phase's configured mix (:func:`~curriculum_ds.commands.report_shares.
        read_targets`, from the last checkpoint; empty without one).
        has_streams: whether the metrics rows carry per-stream accounting.
    """

    run_dir: Path
    metrics: list[MetricsRow]
    evals: list[dict[str, Any]] = field(default_factory=list)
    history: list[dict[str, Any]] = field(default_factory=list)
    phases: list[PhaseSpan] = field(default_factory=list)
    targets: dict[int, PhaseTarget] = field(default_factory=dict)

    @property
    def has_streams(self) -> bool:
        """Whether the metrics rows carry per-stream accounting (``streams``)."""
        return any(isinstance(r.get("streams"), dict) for r in self.metrics)

    def stream_names(self) -> list[str]:
        """Train then eval stream names, each once, in order of first appearance."""
        names: dict[str, None] = {}
        for rows in (self.metrics, self.evals):
            for row in rows:
                names.update(dict.fromkeys(row.get("streams") or {}))
        return list(names)


def load_report(run_dir: Path) -> RunReport:
    """Read a run directory.

    Raises:
        DataError: one line: ``run_dir`` is not a folder, or has no (or an empty)
            ``metrics.jsonl``, or a row lacks ``step``/``tokens``/``phase``.
    """
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise DataError(f"report: {run_dir} is not a run directory (no such folder)")
    path = run_dir / "metrics.jsonl"
    if not path.is_file():
        raise DataError(f"report: {run_dir} is not a run directory (no metrics.jsonl)")
    raw = read_jsonl(path)
    if not raw:
        raise DataError(f"report: {path} has no complete row (the run has not finished a step)")
    for i, row in enumerate(raw):
        missing = [k for k in ("step", "tokens", "phase") if not isinstance(row.get(k), int)]
        if missing:
            raise DataError(f"report: {path} line {i + 1}: no integer {', '.join(missing)}")
    # metrics rows from here on: step, tokens and phase checked, the other fields read with care
    # one row per step: the last written (a run resumed before its records were cut back)
    rows = cast("list[MetricsRow]", last_row_per_step(raw))

    def optional(name: str) -> list[dict[str, Any]]:
        p = run_dir / name
        return last_row_per_step(read_jsonl(p)) if p.is_file() else []

    return RunReport(
        run_dir=run_dir,
        metrics=rows,
        evals=optional("eval.jsonl"),
        history=optional("curriculum_history.jsonl"),
        phases=_phase_spans(rows),
        targets=read_targets(run_dir),
    )


def _phase_spans(rows: list[MetricsRow]) -> list[PhaseSpan]:
    spans: list[PhaseSpan] = []
    before = 0
    for row in rows:
        if not spans or spans[-1].idx != row["phase"]:
            name = str(row.get("phase_name", f"phase {row['phase']}"))
            spans.append(PhaseSpan(row["phase"], name, before, row["tokens"], row["step"], 0))
        last = spans[-1]
        spans[-1] = PhaseSpan(
            last.idx, last.name, last.start_tokens, row["tokens"], last.first_step, row["step"]
        )
        before = row["tokens"]
    return spans


# ---------------------------------------------------------------------------------- summary
def _final_train_losses(report: RunReport, span: PhaseSpan) -> dict[str, float]:
    rows = [r for r in report.metrics if span.first_step <= r["step"] <= span.last_step]
    tail = rows[-FINAL_STEPS:]
    sums: dict[str, list[float]] = {}
    for row in tail:
        streams = row.get("streams")
        if not isinstance(streams, dict):
            streams = {"total": {"loss": row.get("loss"), "tokens": row.get("step_tokens", 1)}}
        for name, s in streams.items():
            loss, tokens = s.get("loss"), s.get("tokens") or 0
            if _finite(loss) and tokens > 0:
                acc = sums.setdefault(name, [0.0, 0.0])
                acc[0] += float(loss) * tokens
                acc[1] += tokens
    return {name: total / count for name, (total, count) in sums.items() if count > 0}


def summary(report: RunReport) -> str:
    """The per-phase text summary (see the module docstring): one block per phase.

    Deterministic; no I/O.
    """
    lines = [f"run: {report.run_dir}"]
    for span in report.phases:
        tokens = span.end_tokens - span.start_tokens
        steps = span.last_step - span.first_step + 1
        lines.append(
            f'phase {span.idx} "{span.name}": {tokens:,} tokens, {steps} steps '
            f"(steps {span.first_step}-{span.last_step})"
        )
        train = _final_train_losses(report, span)
        evals = [e for e in report.evals if e.get("phase") == span.idx]
        last_eval = evals[-1] if evals else None
        eval_streams = (last_eval or {}).get("streams") or {}
        for name in dict.fromkeys([*train, *eval_streams]):
            ev = (eval_streams.get(name) or {}).get("loss")
            exact = (eval_streams.get(name) or {}).get("exact_match")
            lines.append(
                f"  {name:<16} train {_fmt(train.get(name))}   eval {_fmt(ev)}"
                + (f"   exact_match {exact:.3f}" if exact is not None else "")
                + (f" (step {last_eval['step']})" if name in eval_streams and last_eval else "")
            )
        if last_eval is not None:
            lines.append(f"  {'all eval tokens':<16} eval  {_fmt(last_eval.get('loss'))}")
        if (weights := sw.final_weights(report.history, span.idx)) is not None:
            lines.append(weights)
    return "\n".join(lines)


def _fmt(value: Any) -> str:
    return f"{float(value):.4f}" if _finite(value) else "  -   "


def _finite(value: Any) -> TypeGuard[float]:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


# ---------------------------------------------------------------------------------- picture
_PHASE_SHADES = ("#e8eef7", "#f7efe3", "#e9f4ea", "#f3e8f3", "#f4f4e4", "#e6f2f4")


def render_report(report: RunReport, out: Path) -> Path:
    """Draw the report picture (see the module docstring) to ``out`` (PNG, 150 dpi).

    Uses matplotlib's Agg backend (no display). Returns ``out``.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker

    panels = ["train", "eval", "share", "lr"] + (["probs"] if report.history else [])
    heights = {"train": 3.0, "eval": 2.4, "share": 1.8, "lr": 1.5, "probs": 1.8}
    fig, axes = plt.subplots(
        len(panels),
        1,
        sharex=True,
        figsize=(11, sum(heights[p] for p in panels) + 1.2),
        gridspec_kw={"height_ratios": [heights[p] for p in panels]},
        constrained_layout=True,
    )
    colors = _stream_colors(report.stream_names())
    draw = {
        "train": _train_panel,
        "eval": _eval_panel,
        "share": _share_panel,
        "lr": _lr_panel,
        "probs": _probs_panel,
    }
    for ax, panel in zip(axes, panels, strict=True):
        _shade_phases(ax, report.phases, label=ax is axes[0])
        draw[panel](ax, report, colors)
        ax.grid(True, alpha=0.3, linewidth=0.6)
        ax.tick_params(labelsize=9)
    axes[-1].set_xlabel("tokens (cumulative, global, non-padding)", fontsize=10)
    axes[-1].xaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(_tokens_label))
    last = report.metrics[-1]
    name = f"{report.run_dir.resolve().parent.name}/{report.run_dir.name}"
    fig.suptitle(
        f"{name}: {last['step']} steps, {_tokens_label(last['tokens'])} tokens, "
        f"{len(report.phases)} phase(s)",
        fontsize=13,
        fontweight="bold",
    )
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=150)
    plt.close(fig)
    return out


def _tokens_label(value: float, _pos: Any = None) -> str:
    for size, suffix in ((1e9, "B"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= size:
            return f"{value / size:.3g}{suffix}"
    return f"{value:.0f}"


def _stream_colors(names: list[str]) -> dict[str, Any]:
    import matplotlib

    cmap = matplotlib.colormaps["tab10"]
    return {name: cmap(i % 10) for i, name in enumerate(names)}


def _shade_phases(ax: Axes, phases: list[PhaseSpan], *, label: bool) -> None:
    for k, span in enumerate(phases):
        ax.axvspan(span.start_tokens, span.end_tokens, color=_PHASE_SHADES[k % 6], zorder=0, lw=0)
        if k:
            ax.axvline(span.start_tokens, color="0.45", lw=0.8, ls="--", zorder=1)
        if label:
            ax.text(
                (span.start_tokens + span.end_tokens) / 2,
                0.97,
                f"{span.idx}: {span.name}",
                transform=ax.get_xaxis_transform(),
                ha="center",
                va="top",
                fontsize=10,
                fontweight="bold",
                color="0.2",
                bbox={"boxstyle": "round,pad=0.25", "fc": "white", "ec": "0.7", "alpha": 0.85},
                zorder=5,
            )


def _rolling(values: list[float], window: int) -> list[float]:
    out, acc, kept = [], 0.0, []
    for v in values:
        kept.append(v)
        acc += v
        if len(kept) > window:
            acc -= kept.pop(0)
        out.append(acc / len(kept))
    return out


def _xy(points: list[tuple[float, Any]]) -> tuple[list[float], list[float]]:
    kept = [(x, float(y)) for x, y in points if _finite(y)]
    return [x for x, _ in kept], [y for _, y in kept]


def _train_panel(ax: Axes, report: RunReport, colors: dict[str, Any]) -> None:
    window = max(1, len(report.metrics) // 40)
    series: dict[str, list[tuple[float, Any]]] = {}
    for row in report.metrics:
        for name, s in (row.get("streams") or {}).items():
            series.setdefault(name, []).append((row["tokens"], (s or {}).get("loss")))
    for name, points in series.items():
        xs, ys = _xy(points)
        ax.plot(xs, ys, color=colors[name], alpha=0.25, lw=0.8)
        ax.plot(xs, _rolling(ys, window), color=colors[name], lw=1.8, label=name, zorder=3)
    xs, ys = _xy([(r["tokens"], r.get("loss")) for r in report.metrics])
    style = {"ls": "--", "lw": 1.1, "alpha": 0.8} if series else {"lw": 1.6}
    ax.plot(xs, _rolling(ys, window), color="black", label="total", zorder=2, **style)
    title = "train loss per stream" if series else "train loss (no per-stream accounting in run)"
    smoothing = f"  (rolling mean over {window} steps)" if window > 1 else ""
    ax.set_title(title + smoothing, fontsize=10, loc="left")
    ax.set_ylabel("loss (nats/token)", fontsize=9)
    _legend(ax)


def _eval_panel(ax: Axes, report: RunReport, colors: dict[str, Any]) -> None:
    ax.set_title("eval loss per stream (held-out, fixed set)", fontsize=10, loc="left")
    ax.set_ylabel("loss (nats/token)", fontsize=9)
    if not report.evals:
        _empty(ax, "no eval.jsonl: set curriculum.eval to evaluate held-out streams")
        return
    names = list(dict.fromkeys(n for e in report.evals for n in e.get("streams") or {}))
    for name in names:
        xs, ys = _xy(
            [(e["tokens"], (e["streams"].get(name) or {}).get("loss")) for e in report.evals]
        )
        ax.plot(xs, ys, color=colors[name], marker="o", ms=4, lw=1.6, label=name)
    xs, ys = _xy([(e["tokens"], e.get("loss")) for e in report.evals])
    ax.plot(xs, ys, color="black", ls="--", marker=".", lw=1.2, label="all eval tokens")
    _legend(ax)


def _share_panel(ax: Axes, report: RunReport, colors: dict[str, Any]) -> None:
    window = share_window(len(report.metrics))
    units = sorted({t.unit for t in report.targets.values()}) or ["tokens"]
    ax.set_title(
        f"realised stream share per phase (rolling {window} steps, in {'/'.join(units)}); "
        "target dashed",
        fontsize=10,
        loc="left",
    )
    ax.set_ylabel("share", fontsize=9)
    if not report.has_streams:
        _empty(ax, "no per-stream accounting (`streams`) in metrics.jsonl")
        return
    realised = shares(report.metrics, report.targets, window)
    if not realised:
        _empty(ax, "no stream tokens in metrics.jsonl")
        return
    for name, (xs, ys) in realised.items():
        ax.plot(xs, ys, color=colors[name], lw=1.6, label=name)
    draw_targets(ax, report.phases, report.targets, colors)
    ax.set_ylim(0, 1.02)
    _legend(ax)


def _lr_panel(ax: Axes, report: RunReport, colors: dict[str, Any]) -> None:
    del colors
    import matplotlib.ticker

    xs, ys = _xy([(r["tokens"], r.get("lr")) for r in report.metrics])
    ax.plot(xs, ys, color="#c0392b", lw=1.6)
    ax.set_title("learning rate", fontsize=10, loc="left")
    ax.set_ylabel("lr", fontsize=9)
    ax.yaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda v, _: f"{v:.3g}"))


def _probs_panel(ax: Axes, report: RunReport, colors: dict[str, Any]) -> None:
    import matplotlib

    tokens_at = {r["step"]: r["tokens"] for r in report.metrics}
    rows = [h for h in report.history if h["step"] in tokens_at and h.get("weights")]
    if any(sw.is_streams_row(h) for h in rows):  # a weight from step s on: x = tokens after s
        title = f"stream weights (dynamic re-weighting, {sw.mixed_by(rows)})"
        ax.set_title(title, fontsize=10, loc="left")
        ax.set_ylabel("weight", fontsize=9)
        ends = {span.idx: float(span.end_tokens) for span in report.phases}
        x_of = {step: float(t) for step, t in tokens_at.items()}
        sw.draw_lines(ax, sw.weight_lines(rows), x_of, ends, colors)
        ax.set_ylim(0, None)
        _legend(ax)
        return
    ax.set_title(
        "bucket probabilities (dynamic re-weighting; 0 = easiest)", fontsize=10, loc="left"
    )
    ax.set_ylabel("probability", fontsize=9)
    if not rows:
        _empty(ax, "no recompute in curriculum_history.jsonl")
        return
    num_buckets = max(len(h["weights"]) for h in rows)
    cmap = matplotlib.colormaps["plasma"]  # easy (dark blue) to hard (orange)
    xs = [tokens_at[h["step"]] for h in rows] + [report.metrics[-1]["tokens"]]
    for b in range(num_buckets):
        ys = [float(h["weights"][b]) if b < len(h["weights"]) else math.nan for h in rows]
        color = cmap(0.85 * b / max(1, num_buckets - 1))
        ax.step(xs, [*ys, ys[-1]], where="post", color=color, lw=1.5, label=f"bucket {b}")
    ax.set_ylim(0, None)
    _legend(ax, reverse=True)


def _legend(ax: Axes, *, reverse: bool = False) -> None:
    """The panel's legend outside its right edge (top entry = top band when ``reverse``)."""
    handles, labels = ax.get_legend_handles_labels()
    if reverse:
        handles, labels = handles[::-1], labels[::-1]
    ax.legend(
        handles, labels, fontsize=8, loc="upper left", bbox_to_anchor=(1.005, 1.0), frameon=False
    )


def _empty(ax: Axes, text: str) -> None:
    ax.text(0.5, 0.5, text, transform=ax.transAxes, ha="center", va="center", color="0.4")
    ax.set_yticks([])
