"""Data of the mixopt tests: RegMix's published runs (folder), and a synthetic log-linear swarm."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from curriculum_ds.mixopt.tables import SwarmData

REGMIX = Path(__file__).resolve().parents[2] / "data" / "regmix"


def synthetic_swarm(
    intercept: np.ndarray, coef: np.ndarray, runs: int = 60, seed: int = 0
) -> SwarmData:
    """Runs on Dirichlet mixtures whose losses follow ``exp(intercept + coef @ w)`` exactly.

    ``intercept`` ``(eval streams,)``, ``coef`` ``(eval streams, streams)``.
    """
    rng = np.random.default_rng(seed)
    mixtures = rng.dirichlet(np.ones(coef.shape[1]), size=runs)
    losses = np.exp(intercept + mixtures @ coef.T)
    return SwarmData(
        keys=tuple(str(i) for i in range(runs)),
        streams=tuple(f"s{j}" for j in range(coef.shape[1])),
        mixtures=mixtures,
        loss_names=tuple(f"eval{s}" for s in range(coef.shape[0])),
        losses=losses,
    )
