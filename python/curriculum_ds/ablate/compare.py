"""``curriculum-ds ablate-compare DIR_SMALL DIR_LARGE``: does a small proxy's verdict hold larger?

Reads the ``summary.json`` of the same experiment run at two model sizes (e.g. ``model``
``proxy`` and ``proxy_10x``) and prints, per quantity (the loss over all eval tokens, each eval
stream's loss, each QA stream's ``exact_match``) and per arm, the paired delta against the
reference at both sizes with its 95% interval, and whether their signs agree. With at least 4
arms (the reference counted, its delta 0) it also prints Spearman's rank correlation of the
arms' mean deltas at the two sizes (``scipy.stats.spearmanr``); with fewer, a rank correlation
says nothing and is left out (the field's proxy studies rank tens of mixtures: Olmix, RegMix).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from curriculum_ds.errors import ConfigError

__all__ = ["MIN_ARMS_FOR_RANKS", "compare_summaries", "read_summary", "render_comparison"]

MIN_ARMS_FOR_RANKS = 4
"""Arms (the reference counted) below which no rank correlation is printed."""


def read_summary(folder: Path) -> dict[str, Any]:
    """``folder/summary.json`` of a finished ``ablate``.

    Raises:
        ConfigError: one line: missing or unreadable, or not an ablate summary.
    """
    path = Path(folder) / "summary.json"
    try:
        summary = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:
        raise ConfigError(
            f"{path}: cannot read an ablate summary ({err}); run ablate first"
        ) from None
    if not isinstance(summary, dict) or not isinstance(summary.get("arms"), dict):
        raise ConfigError(f"{path}: not an ablate summary.json (no arms)")
    return summary


def _quantities(summary: Mapping[str, Any]) -> list[tuple[str, str, str | None]]:
    ref = summary["arms"][summary["reference"]]
    out: list[tuple[str, str, str | None]] = [("eval loss (all tokens)", "loss", None)]
    out += [(f"eval loss {n}", "streams", n) for n in ref["streams"]]
    out += [
        (f"exact_match {n} (higher is better)", "exact_match", n)
        for n in ref.get("exact_match", {})
    ]
    return out


def _delta(summary: Mapping[str, Any], arm: str, key: str, name: str | None) -> Mapping[str, Any]:
    delta = summary["arms"][arm]["delta"][key]
    return delta if name is None else delta[name]


def compare_summaries(small: Mapping[str, Any], large: Mapping[str, Any]) -> dict[str, Any]:
    """Each arm's paired deltas at both sizes, sign agreement and (≥ 4 arms) Spearman's ρ.

    Args:
        small: the ``summary.json`` object of the experiment at the smaller size.
        large: the same experiment's at the larger size.

    Returns:
        ``{"reference", "arms", "quantities": [{"title", "rows": [{"arm", "small", "large",
        "agree"}], "spearman": float | None}]}``; ``small``/``large`` are the deltas
        (``{mean, ci95, ...}``), ``agree`` whether their means have the same sign (None when
        either is 0). Only the arms and quantities both summaries hold. Deterministic.

    Raises:
        ConfigError: the two summaries have different reference arms, or share no other arm.
    """
    from scipy import stats

    if small["reference"] != large["reference"]:
        raise ConfigError(
            f"the reference arms differ ({small['reference']!r} and {large['reference']!r}): "
            "compare runs of the same experiment"
        )
    reference = small["reference"]
    arms = [a for a in small["arms"] if a in large["arms"]]
    if len(arms) < 2:
        raise ConfigError("the two summaries share no arm besides the reference")
    titles = {(k, n) for _, k, n in _quantities(large)}
    out: dict[str, Any] = {"reference": reference, "arms": arms, "quantities": []}
    for title, key, name in _quantities(small):
        if (key, name) not in titles:
            continue
        rows = []
        for arm in arms:
            if arm == reference:
                continue
            a, b = _delta(small, arm, key, name), _delta(large, arm, key, name)
            sign = math.copysign(1, a["mean"]) * math.copysign(1, b["mean"])
            agree = None if a["mean"] == 0 or b["mean"] == 0 else sign > 0
            rows.append({"arm": arm, "small": a, "large": b, "agree": agree})
        rho = None
        if len(arms) >= MIN_ARMS_FOR_RANKS:
            xs = [_delta(small, arm, key, name)["mean"] for arm in arms]
            ys = [_delta(large, arm, key, name)["mean"] for arm in arms]
            rho = float(stats.spearmanr(xs, ys).statistic)
        out["quantities"].append({"title": title, "rows": rows, "spearman": rho})
    return out


def _pm(delta: Mapping[str, Any]) -> str:
    ci = delta.get("ci95")
    mark = " *" if ci is not None and abs(delta["mean"]) > ci else ""
    return f"{delta['mean']:+.4f}" + ("" if ci is None else f" ± {ci:.4f}") + mark


def render_comparison(comparison: Mapping[str, Any], small: str, large: str) -> str:
    """The comparison as Markdown tables, one per quantity, and a closing line."""
    lines = []
    for q in comparison["quantities"]:
        lines += [
            f"### {q['title']}: Δ vs {comparison['reference']}",
            "",
            f"| arm | Δ at {small} | Δ at {large} | signs agree |",
            "|---|---|---|---|",
        ]
        for row in q["rows"]:
            agree = {True: "yes", False: "no", None: "—"}[row["agree"]]
            lines.append(f"| {row['arm']} | {_pm(row['small'])} | {_pm(row['large'])} | {agree} |")
        if q["spearman"] is not None:
            lines.append(
                f"\nSpearman's ρ of the arms' mean deltas (reference 0): {q['spearman']:+.3f}"
            )
        lines.append("")
    count = len(comparison["arms"])
    lines.append(
        "Δ = arm − reference, paired by seed, mean ± half-width of the two-sided 95% Student-t "
        "interval (* : it excludes 0). "
        + (
            f"No rank correlation: {count} arms (it needs ≥ {MIN_ARMS_FOR_RANKS})."
            if count < MIN_ARMS_FOR_RANKS
            else ""
        )
    )
    return "\n".join(lines).rstrip() + "\n"
