"""Mixture search: fit a regression per eval stream on proxy runs, propose a constrained mixture.

(``curriculum-ds mixopt``, docs/mixopt.md.) Modules, one concern each:

- ``tables.py``: the swarm's runs from CSV files in RegMix's layout (joined on the first column,
  mixture rows renormalised within 1e-2 of 1), and the ``{stream: number}`` JSON files;
- ``regressors.py``: ``log_linear`` (Olmix's default) and ``lightgbm`` (RegMix's), per eval stream;
- ``crossval.py``: k-fold cross-validated Spearman and mean relative error per eval stream;
- ``candidates.py``: Dirichlet mixtures around a prior, with RegMix's knobs;
- ``constraints.py``: the repetition cap, the minimum weight, the KL weight; the box they make;
- ``propose.py``: the search (best-k average of candidates, SLSQP for ``log_linear``), bootstrap;
- ``fit.py``: the fit and the proposal of a swarm in process (:func:`fit_swarm`);
- ``outputs.py``: ``fit.json``, ``proposal.json``, ``predictions.csv`` and the printed tables;
- ``plot.py``: ``mixopt.png``;
- ``fit_command.py``: ``mixopt fit``'s back-end (every input checked before anything is written).
"""

from __future__ import annotations

from curriculum_ds.mixopt.constraints import Constraints
from curriculum_ds.mixopt.fit import FitOptions, FitResult, fit_swarm
from curriculum_ds.mixopt.propose import SearchSettings
from curriculum_ds.mixopt.tables import SwarmData, read_swarm_csv

__all__ = [
    "Constraints",
    "FitOptions",
    "FitResult",
    "SearchSettings",
    "SwarmData",
    "fit_swarm",
    "read_swarm_csv",
]
