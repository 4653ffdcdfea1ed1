"""A synthetic ``dynamic.unit: "streams"`` history for the curve, report and monitor tests.

Two phases with different streams: "mix" (docstrings/code/noise, signal loss, recomputes at
steps 10 and 20) and "anneal" (code/prose, signal learnability, from step 21), whose first
recompute (step 30) kept the previous weights, as ``StreamReweighter`` writes it.
"""

from __future__ import annotations

from typing import Any

MIX = ["docstrings", "code", "noise"]
ANNEAL = ["code", "prose"]
WEIGHTS = {
    10: [0.21, 0.24, 0.55],
    20: [0.3, 0.3, 0.4],
    30: [0.5, 0.5],  # kept: the anneal phase's own proportions
    40: [0.35, 0.65],
}


def history_row(step: int) -> dict[str, Any]:
    """A streams row as ``StreamReweighter`` writes it (phase 0 to step 20, phase 1 after)."""
    phase = int(step > 20)
    names = [MIX, ANNEAL][phase]
    row: dict[str, Any] = {
        "step": step,
        "phase": phase,
        "phase_name": ["mix", "anneal"][phase],
        "unit": "streams",
        "signal": ["loss", "learnability"][phase],
        "streams": names,
        "window_size": 640,
        "num_non_finite": 0,
        "temperature": 0.5,
        "floor": 0.05,
        "weights": WEIGHTS[step],
        "scores": [3.0] * len(names),
        "stream_counts": [200] * len(names),
    }
    if phase == 1:
        row["mean_losses"] = [2.5, 3.1]
    if step == 30:
        row.update(scores=None, kept_previous=True)
    return row
