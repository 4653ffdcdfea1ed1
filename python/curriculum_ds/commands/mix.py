"""``curriculum-ds mix``: a static ``train_loader`` whose proportions are a run's learned weights.

DoReMi's output is the mean of its weights over the proxy run, meant to be the static mixture of
the main run (Xie et al. 2023, §2; the reference writes ``avg_domain_weights.json``). This
command reads a run's ``curriculum_history.jsonl`` rows of one phase (``unit: "streams"``) and
that phase as the run saved it (``checkpoints/latest``'s curriculum state: its streams and
``proportion_unit``), and builds the phase's ``train_loader`` with static proportions:

* default: the running average of the weights over the phase: a DoReMi row's
  ``average_weights`` (the initial weights and every update, the reference's running mean) at
  the phase's last recompute; for a method without one, the mean of the phase's recomputed
  ``weights``;
* ``--last``: the phase's final weights.

The proportions are in the run's own ``proportion_unit`` (a stream weight replaces a proportion
in that unit), so the loader reproduces the learned mixture as the run sampled it. Every other
key of the saved ``train_loader`` is kept.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from curriculum_ds.errors import DataError

__all__ = ["learned_weights", "mixed_loader", "render_loader"]


def learned_weights(rows: Sequence[Mapping[str, Any]], *, last: bool) -> dict[str, float]:
    """The stream weights a phase's history rows learned, by stream name.

    Args:
        rows: the phase's ``unit: "streams"`` history rows, by step (one phase: the same
            ``streams``).
        last: the final weights instead of the running average.

    Returns:
        ``{stream name: weight}``, summing to 1: the last row's ``average_weights`` (DoReMi), or
        the mean of the rows' ``weights``; with ``last``, the last row's ``weights``.
        Deterministic.
    """
    names = list(rows[-1]["streams"])
    if last:
        weights = np.asarray(rows[-1]["weights"], dtype=np.float64)
    elif "average_weights" in rows[-1]:
        weights = np.asarray(rows[-1]["average_weights"], dtype=np.float64)
    else:
        weights = np.asarray([r["weights"] for r in rows], dtype=np.float64).mean(axis=0)
    return dict(zip(names, weights.tolist(), strict=True))


def mixed_loader(run_dir: Path, *, phase: int | None = None, last: bool = False) -> dict[str, Any]:
    """The ``train_loader`` of phase ``phase`` of the run in ``run_dir``, its proportions learned.

    Args:
        run_dir: a run directory with ``curriculum_history.jsonl`` and ``checkpoints/latest``.
        phase: the phase index; None: the last phase with stream weights in the history.
        last: the phase's final weights instead of their running average.

    Returns:
        The phase's ``train_loader`` as the run saved it, each stream's ``proportion`` the
        learned weight; JSON-ready.

    Raises:
        DataError: no stream weights in the history (for that phase), no readable checkpoint
            of the run, or the saved phase lacks a stream the history names.
    """
    from curriculum_ds.checkpoint.files import read_curriculum_state
    from curriculum_ds.records.jsonl import last_row_per_step, read_jsonl

    history = run_dir / "curriculum_history.jsonl"
    rows = [
        r
        for r in last_row_per_step(read_jsonl(history) if history.is_file() else [])
        if r.get("unit") == "streams" and not r.get("kept_previous")
    ]
    if not rows:
        raise DataError(f'{history}: no stream weights (a run with dynamic.unit "streams")')
    phases = sorted({int(r["phase"]) for r in rows})
    chosen = phases[-1] if phase is None else phase
    rows = [r for r in rows if r["phase"] == chosen]
    if not rows:
        raise DataError(
            f"--phase {chosen}: {history} has stream weights for phase(s) "
            f"{', '.join(map(str, phases))} only"
        )
    ckpts = run_dir / "checkpoints"
    if not (ckpts / "latest").is_file():
        raise DataError(f"{ckpts}: no checkpoint (latest) to read phase {chosen}'s streams from")
    _, saved = read_curriculum_state(ckpts)
    saved_phases = (saved or {}).get("phases") or []
    if chosen >= len(saved_phases):
        raise DataError(f"{ckpts}: the run's saved schedule has no phase {chosen}")
    out = json.loads(json.dumps(saved_phases[chosen]))  # a copy, plain JSON
    weights = learned_weights(rows, last=last)
    streams = out["train_loader"]["streams"]
    names = [s.get("name") or s["local"] for s in streams]
    missing = sorted(set(weights) - set(names))
    if missing:
        raise DataError(
            f"{ckpts}: phase {chosen}'s saved streams ({', '.join(names)}) lack "
            f"{', '.join(missing)} of the history"
        )
    for stream, name in zip(streams, names, strict=True):
        stream["proportion"] = weights[name]
    return dict(out["train_loader"])


def render_loader(loader: Mapping[str, Any]) -> str:
    """The ``train_loader`` as indented JSON, ready to paste into a phase of the schedule."""
    return json.dumps(loader, indent=2)
