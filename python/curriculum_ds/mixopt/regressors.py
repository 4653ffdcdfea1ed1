"""The regressions from a mixture to one eval stream's loss: ``log_linear`` and ``lightgbm``.

- ``log_linear`` (the default, as Olmix's): ``log(loss) = a + t · w`` for a mixture ``w``, fitted by
  ridge least squares (a small penalty on ``t``: the shares sum to 1, so the intercept and the
  shares are collinear). The predicted loss ``exp(a + t · w)`` is smooth and convex in ``w``,
  which lets the proposal refine it with a gradient method.
- ``lightgbm`` (as RegMix's): gradient-boosted trees, RegMix's settings (``gbdt``, 1,000 trees at
  learning rate 0.01, L2 objective), seeded and deterministic.

Both are fitted per eval stream on float64 arrays ``X`` ``(runs, streams)`` and ``y`` ``(runs,)``;
the same inputs give the same model.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, Protocol

import numpy as np

from curriculum_ds.errors import ConfigError

__all__ = [
    "REGRESSORS",
    "LightGbmModel",
    "LogLinearModel",
    "Model",
    "RegressorName",
    "check_regressor",
    "fit_model",
]

RegressorName = Literal["log_linear", "lightgbm"]
REGRESSORS: tuple[RegressorName, ...] = ("log_linear", "lightgbm")

RIDGE_PENALTY = 1e-4
"""The ridge penalty on ``t`` of ``log_linear``, per run (scaled by the number of runs)."""

LIGHTGBM_TREES = 1000
LIGHTGBM_LEARNING_RATE = 0.01


class Model(Protocol):
    """A fitted regression: predicted loss of one eval stream for each mixture row."""

    def predict(self, mixtures: np.ndarray) -> np.ndarray:
        """Predicted losses, float64 ``(rows,)``, for mixtures ``(rows, streams)``."""
        ...


@dataclass(frozen=True)
class LogLinearModel:
    """``loss = exp(intercept + coef · w)``.

    Attributes:
        intercept: float.
        coef: float64 ``(streams,)``.
    """

    intercept: float
    coef: np.ndarray

    def predict(self, mixtures: np.ndarray) -> np.ndarray:
        """Predicted losses, float64 ``(rows,)``."""
        return np.asarray(np.exp(self.intercept + mixtures @ self.coef), dtype=np.float64)


@dataclass(frozen=True)
class LightGbmModel:
    """A LightGBM booster over the mixture's shares."""

    booster: Any

    def predict(self, mixtures: np.ndarray) -> np.ndarray:
        """Predicted losses, float64 ``(rows,)``."""
        return np.asarray(self.booster.predict(mixtures), dtype=np.float64)


def check_regressor(name: str) -> RegressorName:
    """``name`` if it is a known regressor.

    Raises:
        ConfigError: an unknown name (one line listing the known ones).
    """
    for known in REGRESSORS:
        if name == known:
            return known
    raise ConfigError(f"regressor: {name!r} is not one of {', '.join(REGRESSORS)}")


def _fit_log_linear(x: np.ndarray, y: np.ndarray) -> LogLinearModel:
    runs, streams = x.shape
    design = np.hstack([np.ones((runs, 1)), x])
    penalty = np.eye(streams + 1) * (RIDGE_PENALTY * runs)
    penalty[0, 0] = 0.0  # the intercept is not shrunk
    target = np.log(y)
    solution = np.linalg.solve(design.T @ design + penalty, design.T @ target)
    return LogLinearModel(float(solution[0]), solution[1:].copy())


def _fit_lightgbm(x: np.ndarray, y: np.ndarray, n_jobs: int, seed: int) -> LightGbmModel:
    import lightgbm

    params = {
        "objective": "regression",
        "boosting_type": "gbdt",
        "learning_rate": LIGHTGBM_LEARNING_RATE,
        "seed": seed,
        "deterministic": True,
        "force_row_wise": True,
        "num_threads": n_jobs,
        "verbosity": -1,
    }
    booster = lightgbm.train(
        params, lightgbm.Dataset(x, label=y, params={"verbosity": -1}), LIGHTGBM_TREES
    )
    return LightGbmModel(booster)


def fit_model(
    name: RegressorName,
    mixtures: np.ndarray,
    losses: np.ndarray,
    *,
    n_jobs: int = 1,
    seed: int = 42,
) -> Model:
    """Fit one eval stream's regression.

    Args:
        name: ``"log_linear"`` or ``"lightgbm"``.
        mixtures: float64 ``(runs, streams)``, rows on the simplex.
        losses: float64 ``(runs,)``, > 0.
        n_jobs: LightGBM's threads (its result does not depend on it: ``deterministic``).
        seed: LightGBM's seed (RegMix's is 42).

    Returns:
        The fitted model; deterministic in its inputs.
    """
    if name == "log_linear":
        return _fit_log_linear(mixtures, losses)
    return _fit_lightgbm(mixtures, losses, n_jobs, seed)
