"""Read ``curriculum_history.jsonl`` and show each bucket's weight over steps (table + PNG)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from curriculum_ds.errors import DataError
from curriculum_ds.runlog import read_jsonl

__all__ = ["Curve", "load_curve", "render_png", "render_table"]


@dataclass(frozen=True)
class Curve:
    """A run's weight history.

    Attributes:
        steps: optimizer step of each recompute.
        weights: per recompute, the bucket probabilities (each list sums to 1).
        phase_starts: ``(step, phase_name)`` of each phase's first step (from metrics.jsonl).
    """

    steps: list[int]
    weights: list[list[float]]
    phase_starts: list[tuple[int, str]]


def load_curve(run_dir: Path) -> Curve:
    """Load the history of ``run_dir``.

    Raises:
        DataError: If the run folder has no (or an empty) ``curriculum_history.jsonl``.
    """
    path = run_dir / "curriculum_history.jsonl"
    if not path.is_file():
        raise DataError(f"{path}: no curriculum history (was curriculum.dynamic.enabled true?)")
    records = read_jsonl(path)
    if not records:
        raise DataError(f"{path}: the history is empty (no recompute happened yet)")
    phase_starts: list[tuple[int, str]] = []
    metrics = run_dir / "metrics.jsonl"
    if metrics.is_file():
        last_phase = None
        for r in read_jsonl(metrics):
            if r.get("phase") != last_phase:
                phase_starts.append((int(r["step"]), str(r.get("phase_name", r.get("phase")))))
                last_phase = r.get("phase")
    return Curve([int(r["step"]) for r in records], [list(r["weights"]) for r in records], phase_starts)


def render_table(curve: Curve, max_rows: int = 20) -> str:
    """An ASCII table: one row per recompute (evenly thinned to ``max_rows``), one column per bucket."""
    num_buckets = len(curve.weights[0])
    header = f"{'step':>8} " + " ".join(f"{'b' + str(b):>6}" for b in range(num_buckets))
    stride = max(1, -(-len(curve.steps) // max_rows))
    rows = list(range(0, len(curve.steps), stride))
    if rows[-1] != len(curve.steps) - 1:
        rows.append(len(curve.steps) - 1)
    lines = [header, "-" * len(header)]
    for i in rows:
        lines.append(f"{curve.steps[i]:>8} " + " ".join(f"{w:6.3f}" for w in curve.weights[i]))
    if curve.phase_starts:
        lines.append("phases: " + ", ".join(f"{name} from step {s}" for s, name in curve.phase_starts))
    return "\n".join(lines)


def render_png(curve: Curve, out: Path) -> Path:
    """Plot each bucket's weight over steps with phase boundaries as dashed lines (matplotlib)."""
    import matplotlib  # noqa: PLC0415

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415

    fig, ax = plt.subplots(figsize=(9, 4.5))
    for b in range(len(curve.weights[0])):
        ax.plot(curve.steps, [w[b] for w in curve.weights], label=f"bucket {b}", linewidth=1.5)
    for step, name in curve.phase_starts[1:]:
        ax.axvline(step, color="k", linestyle="--", linewidth=1)
        ax.text(step, ax.get_ylim()[1], f" {name}", va="top", fontsize=9)
    ax.set_xlabel("optimizer step")
    ax.set_ylabel("bucket weight (probability)")
    ax.set_title("curriculum_ds: bucket weights (easy → hard buckets by loss percentile)")
    ax.legend(loc="upper left", fontsize=8, ncol=2)
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out
