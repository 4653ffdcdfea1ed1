"""Shared builders for the ODM/ADO unit tests: a config, a phase view, synthetic steps."""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

from curriculum_ds.config import DynamicConfig
from curriculum_ds.dynamic.update import PhaseView


def dynamic(method: str, recompute: int = 1, **section: Any) -> DynamicConfig:
    """``curriculum.dynamic`` for ``method`` over streams, its section as given."""
    keys: dict[str, Any] = {
        "enabled": True,
        "method": method,
        "unit": "streams",
        "recompute_every_n_steps": recompute,
    }
    if section:
        keys[method] = section
    return DynamicConfig.model_validate(keys)


def phase(proportions: npt.ArrayLike, phase_idx: int = 0) -> PhaseView:
    """A phase of ``len(proportions)`` streams of 100 samples each, no metric columns."""
    p = np.asarray(proportions, dtype=np.float64)
    return PhaseView(
        phase_idx=phase_idx,
        stream_names=tuple(f"s{i}" for i in range(len(p))),
        proportions=p,
        num_samples=(100,) * len(p),
        metrics=tuple({} for _ in p),
    )


def batch(streams: npt.ArrayLike) -> npt.NDArray[np.int64]:
    """A global batch ``(B, 2)`` of ``(stream_idx, sample_idx)`` for the given streams."""
    s = np.asarray(streams, dtype=np.int64)
    return np.stack([s, np.arange(len(s), dtype=np.int64)], axis=1)


def synthetic_steps(
    k: int, num_steps: int, seed: int, batch_size: int = 16
) -> list[tuple[npt.NDArray[np.int64], npt.NDArray[np.float64]]]:
    """Steps of power-law-decaying per-stream losses with noise (a NaN now and then)."""
    rng = np.random.default_rng(seed)
    floor, scale, rate = rng.uniform(1, 3, k), rng.uniform(1, 4, k), rng.uniform(0.2, 0.6, k)
    steps = []
    for i in range(num_steps):
        streams = rng.integers(0, k, batch_size)
        n = batch_size * (i + 1)
        losses = floor[streams] + scale[streams] * n ** -rate[streams]
        losses = losses + rng.normal(0, 0.02, batch_size)
        if i % 7 == 3:
            losses[0] = np.nan
        steps.append((batch(streams), losses))
    return steps
