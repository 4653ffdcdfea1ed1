"""The statistics of an ablation: means, Student-t intervals and paired deltas, as JSON and a table.

For each arm and each quantity (the final eval loss over all eval tokens, and each eval
stream's): the mean over seeds and the half-width of the two-sided 95% Student-t interval of
the mean, ``t_{0.975, n-1} · s / √n`` with ``s`` the sample standard deviation (``ddof=1``); the
t quantile is scipy's (``scipy.stats.t.ppf``). Deltas are arm − reference, paired by seed (the
same seed: the same initialisation and data order), with the same interval over the per-seed
differences (a paired t interval; e.g. Wasserman, *All of Statistics*, §10.6).

A question-answer eval stream (``prepare --format qa``) adds its final ``exact_match`` (the share
of its records answered exactly; higher is better) with the same statistics, under
``exact_match`` beside ``streams``; an experiment without one has no such key.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

__all__ = ["mean_ci95", "render_markdown", "summarize"]


def mean_ci95(values: Sequence[float]) -> dict[str, float | None]:
    """Mean and the half-width of the two-sided 95% Student-t interval of the mean.

    Args:
        values: n finite samples (n ≥ 1).

    Returns:
        ``{"mean", "ci95"}``; ``ci95`` is None when n < 2 (no spread to estimate). Deterministic.
    """
    from scipy import stats

    x = np.asarray(values, dtype=np.float64)
    n = int(x.size)
    mean = float(x.mean())
    if n < 2:
        return {"mean": mean, "ci95": None}
    half = float(stats.t.ppf(0.975, n - 1) * x.std(ddof=1) / math.sqrt(n))
    return {"mean": mean, "ci95": half}


def summarize(
    rows: Sequence[Mapping[str, Any]], *, reference: str, arms: Sequence[str]
) -> dict[str, Any]:
    """The ``summary.json`` object of finished runs.

    Args:
        rows: ``results.jsonl`` rows (``arm``, ``seed``, ``loss``, ``streams: {name: loss}``,
            and ``exact_match: {name: share}`` of the QA streams).
        reference: the arm the deltas are measured against.
        arms: the arms, in the order to report them (each with at least one row).

    Returns:
        ``{"reference", "seeds", "arms": {arm: {"n", "loss": {mean, ci95}, "streams": {name:
        {mean, ci95}}, "delta": {"loss": {mean, ci95, per_seed}, "streams": {name: {mean, ci95,
        per_seed}}}}}}``, and ``exact_match`` beside each ``streams`` (QA streams only, when
        there are); ``per_seed`` maps each seed the arm shares with the reference (as a string)
        to arm − reference. Deterministic.
    """
    by_arm: dict[str, dict[int, Mapping[str, Any]]] = {arm: {} for arm in arms}
    for row in rows:
        if row["arm"] in by_arm:
            by_arm[row["arm"]][int(row["seed"])] = row
    ref = by_arm[reference]
    first = next(iter(ref.values())) if ref else {}
    names = list(first.get("streams", {}))
    qa_names = list(first.get("exact_match", {}))
    seeds = sorted({seed for runs in by_arm.values() for seed in runs})
    summary: dict[str, Any] = {"reference": reference, "seeds": seeds, "arms": {}}
    for arm in arms:
        runs = by_arm[arm]
        order = sorted(runs)
        paired = [s for s in order if s in ref]

        def delta(
            get: Any, runs: Mapping[int, Mapping[str, Any]] = runs, paired: list[int] = paired
        ) -> dict[str, Any]:
            diffs = {str(s): get(runs[s]) - get(ref[s]) for s in paired}
            return {**mean_ci95(list(diffs.values())), "per_seed": diffs}

        stats: dict[str, Any] = {
            "n": len(order),
            "loss": mean_ci95([runs[s]["loss"] for s in order]),
            "streams": {
                name: mean_ci95([runs[s]["streams"][name] for s in order]) for name in names
            },
            "delta": {
                "loss": delta(lambda r: r["loss"]),
                "streams": {name: delta(lambda r, name=name: r["streams"][name]) for name in names},
            },
        }
        if qa_names:
            stats["exact_match"] = {
                name: mean_ci95([runs[s]["exact_match"][name] for s in order]) for name in qa_names
            }
            stats["delta"]["exact_match"] = {
                name: delta(lambda r, name=name: r["exact_match"][name]) for name in qa_names
            }
        summary["arms"][arm] = stats
    return summary


def _pm(stat: Mapping[str, Any], *, signed: bool = False) -> str:
    mean = f"{stat['mean']:+.4f}" if signed else f"{stat['mean']:.4f}"
    if stat["ci95"] is None:
        return mean
    mark = ""
    if signed and abs(stat["mean"]) > stat["ci95"]:
        mark = " *"
    return f"{mean} ± {stat['ci95']:.4f}{mark}"


def render_markdown(summary: Mapping[str, Any]) -> str:
    """``summary.md``: one row per arm, the loss and each stream's with its delta (a table).

    Cells are ``mean ± ci95``; deltas are signed, marked ``*`` when their interval excludes 0.
    """
    reference = summary["reference"]
    arms = summary["arms"]
    names = list(arms[reference]["streams"])
    qa_names = list(arms[reference].get("exact_match", {}))
    head = ["arm", "n", "eval loss", "Δ loss"]
    for name in names:
        head += [name, f"Δ {name}"]
    for name in qa_names:
        head += [f"{name} exact_match ↑", f"Δ {name} exact_match"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for arm, stats in arms.items():
        is_ref = arm == reference
        label = f"{arm} (reference)" if is_ref else arm
        cells = [label, str(stats["n"]), _pm(stats["loss"])]
        cells.append("—" if is_ref else _pm(stats["delta"]["loss"], signed=True))
        for name in names:
            cells.append(_pm(stats["streams"][name]))
            cells.append("—" if is_ref else _pm(stats["delta"]["streams"][name], signed=True))
        for name in qa_names:
            cells.append(_pm(stats["exact_match"][name]))
            cells.append("—" if is_ref else _pm(stats["delta"]["exact_match"][name], signed=True))
        lines.append("| " + " | ".join(cells) + " |")
    lines += [
        "",
        f"Final held-out eval loss (nats/token), mean ± half-width of the two-sided 95% "
        f"Student-t interval over seeds {', '.join(map(str, summary['seeds']))}; Δ = arm − "
        f"{reference}, paired by seed (* : the interval excludes 0).",
    ]
    if qa_names:
        lines.append(
            "exact_match ↑: the share of a QA stream's held-out records whose every answer token "
            "is the model's argmax (teacher-forced); higher is better, unlike the losses."
        )
    return "\n".join(lines) + "\n"
