"""A ``curriculum.dynamic`` section for DoReMi, built through the config's own model."""

from __future__ import annotations

from curriculum_ds.config import DynamicConfig


def doremi_dynamic(
    *,
    window: int,
    eta: float = 1.0,
    epsilon: float = 1e-4,
    initial_score: float = 0.0,
    apply: str = "sampling",
    recompute_every_n_steps: int = 1,
) -> DynamicConfig:
    """``method: "doremi"`` over streams, excess loss over column ``ref_loss``."""
    return DynamicConfig.model_validate(
        {
            "enabled": True,
            "method": "doremi",
            "unit": "streams",
            "reference_metric": "ref_loss",
            "window": window,
            "recompute_every_n_steps": recompute_every_n_steps,
            "doremi": {
                "eta": eta,
                "epsilon": epsilon,
                "initial_score": initial_score,
                "apply": apply,
            },
        }
    )
