"""How well a regression ranks mixtures: k-fold cross-validated Spearman and relative error.

For each eval stream the runs are split into ``k`` folds (a seeded permutation of the runs), each
fold predicted by the regression fitted on the others; the Spearman rank correlation and the mean
relative error ``|predicted - observed| / observed`` are computed over all runs' out-of-fold
predictions. :func:`rank_quality` scores predictions of held-out runs the same way (RegMix's check:
fit on the 512 1M runs, rank the 256 held-out ones).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.stats import spearmanr

from curriculum_ds.mixopt.regressors import RegressorName, fit_model

__all__ = ["StreamQuality", "cross_validate", "rank_quality"]


@dataclass(frozen=True)
class StreamQuality:
    """One eval stream's fit quality.

    Attributes:
        spearman: Spearman rank correlation of predicted and observed losses, in [-1, 1].
        relative_error: mean ``|predicted - observed| / observed``, ≥ 0.
    """

    spearman: float
    relative_error: float


def rank_quality(predicted: np.ndarray, observed: np.ndarray) -> StreamQuality:
    """Spearman and mean relative error of ``predicted`` against ``observed`` (both ``(runs,)``)."""
    rho = spearmanr(predicted, observed).statistic
    error = float(np.mean(np.abs(predicted - observed) / observed))
    return StreamQuality(float(rho) if np.isfinite(rho) else 0.0, error)


def cross_validate(
    regressor: RegressorName,
    mixtures: np.ndarray,
    losses: np.ndarray,
    *,
    folds: int = 5,
    seed: int = 0,
    n_jobs: int = 1,
) -> tuple[np.ndarray, list[StreamQuality]]:
    """Out-of-fold predictions and their quality, per eval stream.

    Args:
        regressor: the regression's name.
        mixtures: float64 ``(runs, streams)``.
        losses: float64 ``(runs, eval streams)``.
        folds: number of folds, clipped to the number of runs (at least 2 runs).
        seed: the seed of the runs' permutation into folds.
        n_jobs: LightGBM's threads.

    Returns:
        ``(predicted, quality)``: float64 ``(runs, eval streams)`` out-of-fold predictions, and one
        :class:`StreamQuality` per eval stream. Deterministic in its inputs.
    """
    runs = mixtures.shape[0]
    k = max(2, min(folds, runs))
    order = np.random.default_rng(seed).permutation(runs)
    fold_of = np.empty(runs, dtype=np.int64)
    fold_of[order] = np.arange(runs) % k
    predicted = np.empty_like(losses)
    for fold in range(k):
        held = fold_of == fold
        for s in range(losses.shape[1]):
            model = fit_model(regressor, mixtures[~held], losses[~held, s], n_jobs=n_jobs)
            predicted[held, s] = model.predict(mixtures[held])
    quality = [rank_quality(predicted[:, s], losses[:, s]) for s in range(losses.shape[1])]
    return predicted, quality
