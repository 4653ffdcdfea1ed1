"""RegMix's acceptance: regressions fitted on its 512 1M-parameter proxy runs rank its 256
held-out 1M runs per Pile domain. LightGBM (RegMix's settings): mean Spearman ≥ 0.98 and the worst
domain ≥ 0.96; log_linear: at least a plain ridge regression's mean, 0.83."""

from __future__ import annotations

import numpy as np
from mixopt_swarms import REGMIX

from curriculum_ds.mixopt.crossval import rank_quality
from curriculum_ds.mixopt.regressors import fit_model
from curriculum_ds.mixopt.tables import read_swarm_csv


def _heldout_spearman(regressor: str) -> np.ndarray:
    train = read_swarm_csv(REGMIX / "train_pile_loss_1m.csv", REGMIX / "train_mixture_1m.csv")
    test = read_swarm_csv(REGMIX / "test_pile_loss_1m.csv", REGMIX / "test_mixture_1m.csv")
    assert test.streams == train.streams
    assert test.loss_names == train.loss_names
    assert len(train.keys) == 512
    assert len(test.keys) == 256
    rhos = []
    for s in range(len(train.loss_names)):
        model = fit_model(regressor, train.mixtures, train.losses[:, s], n_jobs=1)  # type: ignore[arg-type]
        rhos.append(rank_quality(model.predict(test.mixtures), test.losses[:, s]).spearman)
    return np.array(rhos)


def test_lightgbm_ranks_the_heldout_1m_runs() -> None:
    rhos = _heldout_spearman("lightgbm")
    assert rhos.mean() >= 0.98, rhos
    assert rhos.min() >= 0.96, rhos


def test_log_linear_ranks_them_at_least_as_well_as_ridge() -> None:
    rhos = _heldout_spearman("log_linear")
    assert rhos.mean() >= 0.83
