"""A ``curriculum.dynamic`` section for DoReMi, built as a user's config would be."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any


def doremi_dynamic(
    *, window: int, eta: float = 1.0, eps: float = 1e-4, initial_score: float = 0.0,
    apply: str = "sampling", recompute_every_n_steps: int = 1,
) -> Any:  # fmt: skip
    return SimpleNamespace(
        method="doremi", unit="streams", signal="excess_loss", reference_metric="ref_loss",
        window=window, recompute_every_n_steps=recompute_every_n_steps,
        method_config=SimpleNamespace(eta=eta, eps=eps, initial_score=initial_score, apply=apply),
    )  # fmt: skip
