"""The fit and the proposal of a swarm's runs, in process: :func:`fit_swarm`.

One regression per eval stream (``log_linear`` or ``lightgbm``), its k-fold cross-validated
Spearman and relative error, then the constrained proposal (:mod:`curriculum_ds.mixopt.propose`).
The prior defaults to uniform (said in ``notes``), the target to the mean over the eval streams.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

from curriculum_ds.mixopt.constraints import Constraints, mixture_bounds
from curriculum_ds.mixopt.crossval import StreamQuality, cross_validate
from curriculum_ds.mixopt.propose import Proposal, SearchSettings, propose
from curriculum_ds.mixopt.regressors import Model, RegressorName, fit_model
from curriculum_ds.mixopt.tables import SwarmData

__all__ = ["FitOptions", "FitResult", "fit_swarm"]


@dataclass(frozen=True, kw_only=True)
class FitOptions:
    """What :func:`fit_swarm` is asked.

    Attributes:
        regressor: ``"log_linear"`` (default) or ``"lightgbm"``.
        prior: float64 ``(streams,)`` > 0, normalised here; ``None``: uniform.
        tokens: float64 ``(streams,)`` token counts; ``None``: no repetition cap possible.
        constraints: the proposal's constraints.
        target_weights: float64 ``(eval streams,)`` ≥ 0 (normalised here); ``None``: the mean.
        folds: cross-validation folds.
        search: the proposal's search settings.
        n_jobs: LightGBM's threads.
    """

    regressor: RegressorName = "log_linear"
    prior: np.ndarray | None = None
    tokens: np.ndarray | None = None
    constraints: Constraints = field(default_factory=Constraints)
    target_weights: np.ndarray | None = None
    folds: int = 5
    search: SearchSettings = field(default_factory=SearchSettings)
    n_jobs: int = 1


@dataclass(frozen=True)
class FitResult:
    """A swarm's fit and proposal.

    Attributes:
        swarm: the runs fitted.
        regressor: the regressions' name.
        models: one regression per eval stream, fitted on every run.
        cv_predicted: float64 ``(runs, eval streams)`` out-of-fold predictions.
        quality: cross-validated quality per eval stream.
        prior: float64 ``(streams,)`` on the simplex.
        target_weights: float64 ``(eval streams,)`` summing to 1.
        constraints: the constraints applied.
        proposal: the proposed mixture and its predictions.
        notes: lines for the user (defaults taken, constraints left out).
        fit_seconds: wall time of the fits and the cross-validation.
        proposal_seconds: wall time of the search and the bootstrap.
    """

    swarm: SwarmData
    regressor: RegressorName
    models: list[Model]
    cv_predicted: np.ndarray
    quality: list[StreamQuality]
    prior: np.ndarray
    target_weights: np.ndarray
    constraints: Constraints
    proposal: Proposal
    notes: list[str]
    fit_seconds: float
    proposal_seconds: float


def fit_swarm(swarm: SwarmData, options: FitOptions) -> FitResult:
    """Fit one regression per eval stream, cross-validate it, and propose a mixture.

    Args:
        swarm: the runs (mixtures and losses).
        options: regressor, prior, tokens, constraints, target, settings.

    Returns:
        The :class:`FitResult`; deterministic in its inputs.

    Raises:
        ConfigError: constraints that no mixture satisfies, or a repetition cap without token
            counts or ``target_tokens`` (raised before any fit).
    """
    streams = swarm.streams
    notes: list[str] = []
    bounds = mixture_bounds(options.constraints, streams, options.tokens)
    if options.prior is None:
        prior = np.full(len(streams), 1.0 / len(streams))
        notes.append("no --prior: the prior is uniform")
    else:
        prior = options.prior / options.prior.sum()
    if options.tokens is None:
        notes.append("no --tokens: no repetition cap")
    elif options.constraints.max_repetition is None:
        notes.append("no max_repetition: no repetition cap")
    if options.target_weights is None:
        target_weights = np.full(len(swarm.loss_names), 1.0 / len(swarm.loss_names))
    else:
        target_weights = options.target_weights / options.target_weights.sum()
    started = time.perf_counter()
    models = [
        fit_model(options.regressor, swarm.mixtures, swarm.losses[:, s], n_jobs=options.n_jobs)
        for s in range(len(swarm.loss_names))
    ]
    cv_predicted, quality = cross_validate(
        options.regressor,
        swarm.mixtures,
        swarm.losses,
        folds=options.folds,
        seed=options.search.seed,
        n_jobs=options.n_jobs,
    )
    fitted = time.perf_counter()
    proposal = propose(
        options.regressor,
        models,
        swarm.mixtures,
        swarm.losses,
        prior=prior,
        bounds=bounds,
        target_weights=target_weights,
        kl_weight=options.constraints.kl_to_prior,
        settings=options.search,
        n_jobs=options.n_jobs,
    )
    return FitResult(
        swarm=swarm,
        regressor=options.regressor,
        models=models,
        cv_predicted=cv_predicted,
        quality=quality,
        prior=prior,
        target_weights=target_weights,
        constraints=options.constraints,
        proposal=proposal,
        notes=notes,
        fit_seconds=fitted - started,
        proposal_seconds=time.perf_counter() - fitted,
    )
