"""``ablation.png``: the answer of an ablation at a glance.

One column per quantity (all eval tokens, each eval stream, then the ``exact_match`` of each
question-answer eval stream, where higher is better), three rows:

1. the answer: each arm's paired delta against the reference (arm − reference, mean over seeds)
   with its 95% Student-t interval and a line at 0; green when the interval lies below 0 (the
   arm is better), red above 0 (worse), grey when it contains 0 (no significant difference);
2. each arm's mean final eval loss with its 95% interval, the reference's interval shaded;
3. each arm's eval loss over training, averaged over seeds at each evaluation, over tokens (the
   y range is the last 80% of training, where arms differ).

For ``exact_match`` the verdict's sign is reversed (a delta above 0 is better), and its panels
say so.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["mean_curve", "render_png"]


def mean_curve(
    runs: Sequence[Sequence[Mapping[str, Any]]], name: str | None, key: str = "loss"
) -> np.ndarray:
    """An arm's mean eval curve: ``(k, 2)`` float64 rows of (tokens, value), averaged over runs.

    The i-th evaluation of each run is averaged (the runs of an arm evaluate at the same
    schedule points); runs are cut to the shortest. ``name`` None: the loss over all eval tokens,
    else that stream's ``key`` (``"loss"``, or ``"exact_match"`` of a QA stream).
    """
    usable = [r for r in runs if r]
    if not usable:
        return np.zeros((0, 2))
    k = min(len(r) for r in usable)

    def loss(row: Mapping[str, Any]) -> float:
        return float(row["loss"] if name is None else row["streams"][name][key])

    tokens = np.array([[float(r[i]["tokens"]) for i in range(k)] for r in usable]).mean(axis=0)
    losses = np.array([[loss(r[i]) for i in range(k)] for r in usable]).mean(axis=0)
    return np.stack([tokens, losses], axis=1)


_VERDICT_COLORS = {"better": "tab:green", "worse": "tab:red", "no significant difference": "0.45"}


def _verdict(delta: Mapping[str, Any], *, higher_is_better: bool = False) -> str:
    """``better`` / ``worse`` when the delta's interval excludes 0, else no difference."""
    ci = delta["ci95"]
    if ci is None or abs(delta["mean"]) <= ci:
        return "no significant difference"
    return "better" if (delta["mean"] > 0) == higher_is_better else "worse"


@dataclass(frozen=True)
class _Quantity:
    """One column of the picture: a loss (lower is better) or an exact match (higher)."""

    title: str
    name: str | None  # None: the loss over all eval tokens
    key: str = "loss"  # "loss" or "exact_match"

    @property
    def higher_is_better(self) -> bool:
        return self.key == "exact_match"

    def of(self, stats: Mapping[str, Any]) -> Mapping[str, Any]:
        """Its entry in an arm's statistics or in their ``delta``."""
        if self.name is None:
            return stats["loss"]
        return stats["exact_match" if self.higher_is_better else "streams"][self.name]

    @property
    def label(self) -> str:
        return "exact match (higher is better)" if self.higher_is_better else "eval loss"


def _delta_panel(ax: Any, summary: Mapping[str, Any], q: _Quantity) -> None:
    others = [arm for arm in summary["arms"] if arm != summary["reference"]]
    labels = []
    for y, arm in enumerate(others):
        d = q.of(summary["arms"][arm]["delta"])
        verdict = _verdict(d, higher_is_better=q.higher_is_better)
        ci = d["ci95"] or 0.0
        ax.errorbar(
            [d["mean"]], [y], xerr=[[ci], [ci]], fmt="o", ms=9, capsize=6, lw=2.5,
            color=_VERDICT_COLORS[verdict],
        )  # fmt: skip
        labels.append(f"{arm}\n{d['mean']:+.4f} ± {ci:.4f}\n{verdict}")
    ax.axvline(0.0, color="black", lw=1)
    ax.set_yticks(range(len(others)), labels, fontsize=8)
    ax.set_ylim(-0.7, len(others) - 0.3)
    better = "> 0: better" if q.higher_is_better else "< 0: better"
    ax.set_xlabel(f"Δ vs {summary['reference']}, paired by seed ({better})")
    ax.set_title(f"{q.title}: Δ vs {summary['reference']}", fontsize=10, fontweight="bold")
    ax.grid(axis="x", alpha=0.3)


def render_png(
    summary: Mapping[str, Any],
    curves: Mapping[str, Sequence[Sequence[Mapping[str, Any]]]],
    out: Path,
) -> Path:
    """Draw the picture (see the module docstring) to ``out`` (PNG, 130 dpi, Agg backend).

    Args:
        summary: the ``summary.json`` object (:func:`~curriculum_ds.ablate.summary.summarize`).
        curves: arm → the ``eval.jsonl`` rows of each of its runs.
        out: the PNG path (its folder exists).

    Returns:
        ``out``.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    arms = list(summary["arms"])
    reference = summary["reference"]
    ref_stats = summary["arms"][reference]
    quantities = [
        _Quantity("all eval tokens", None),
        *(_Quantity(f"eval stream {n}", n) for n in ref_stats["streams"]),
        *(
            _Quantity(f"{n} exact match ↑", n, "exact_match")
            for n in ref_stats.get("exact_match", {})
        ),
    ]
    cmap = matplotlib.colormaps["tab10"]
    colors = {arm: cmap(i % 10) for i, arm in enumerate(arms)}
    fig, axes = plt.subplots(
        3,
        len(quantities),
        figsize=(4.8 * len(quantities), 10.5),
        squeeze=False,
        constrained_layout=True,
        height_ratios=[0.6 + 0.3 * (len(arms) - 1), 1.2, 1.2],
    )
    for col, q in enumerate(quantities):
        _delta_panel(axes[0][col], summary, q)
        ax = axes[1][col]
        for x, arm in enumerate(arms):
            s = q.of(summary["arms"][arm])
            ci = s["ci95"] or 0.0
            if arm == reference:
                ax.axhspan(s["mean"] - ci, s["mean"] + ci, color=colors[arm], alpha=0.15, lw=0)
            ax.errorbar(
                [x], [s["mean"]], yerr=[[ci], [ci]], fmt="o", ms=8, capsize=6, lw=2,
                color=colors[arm],
            )  # fmt: skip
        ax.set_xticks(
            range(len(arms)), [f"{a}\n(reference)" if a == reference else a for a in arms]
        )
        ax.set_xlim(-0.6, len(arms) - 0.4)
        ax.set_title(f"{q.title}: final {q.label}", fontsize=9)
        ax.set_ylabel("mean ± 95% t-interval")
        ax.grid(axis="y", alpha=0.3)

        ax = axes[2][col]
        tail: list[float] = []
        for arm in arms:
            curve = mean_curve(curves.get(arm, []), q.name, q.key)
            if len(curve) == 0:
                continue
            ax.plot(curve[:, 0], curve[:, 1], marker=".", lw=1.6, color=colors[arm], label=arm)
            tail += list(curve[curve[:, 0] >= 0.2 * curve[-1, 0], 1])
        if tail:
            low, high = min(tail), max(tail)
            pad = 0.08 * (high - low) or 0.05
            ax.set_ylim(low - pad, high + pad)
        ax.set_xlabel("tokens")
        ax.set_ylabel(f"{q.label}, mean over {len(summary['seeds'])} seeds")
        ax.set_title(f"{q.title} over training", fontsize=9)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle(
        f"Ablation: {len(arms)} arms × {len(summary['seeds'])} seeds at equal tokens "
        f"(eval loss: lower is better"
        + (
            "; exact match: higher is better"
            if len(quantities) > 1 + len(ref_stats["streams"])
            else ""
        )
        + "; intervals: two-sided 95% Student-t)",
        fontsize=11,
    )
    fig.savefig(out, dpi=130)
    plt.close(fig)
    return out
