"""The proposal: the mixture minimising the predicted target under the constraints.

As RegMix: draw many Dirichlet candidates around the prior (mapped into the constraints' box),
score each by the predicted target (a weighted sum of the per-stream predicted losses) plus
``kl_to_prior · KL(w || prior)``, and average the best ``top_k``. For ``log_linear`` the average is
then refined by SLSQP (the objective is smooth and convex there: a sum of exponentials of linear
functions plus a KL term), from the average, within the bounds and below each stream's largest
share among the swarm's runs (a log-linear fit extrapolated past the shares it saw runs to a
corner of the simplex). That region depends on the swarm only, so the refined mixture is the
exact optimum of the objective over a fixed convex set. The interval of each
predicted loss is a bootstrap over the swarm's runs: the regressions refitted on runs drawn with
replacement, evaluated at the proposed mixture.

Everything is seeded: the same inputs and settings give the same proposal, bit for bit.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
from scipy.optimize import minimize
from scipy.special import xlogy

from curriculum_ds.mixopt.candidates import DirichletKnobs, dirichlet_mixtures
from curriculum_ds.mixopt.constraints import Bounds, into_bounds
from curriculum_ds.mixopt.regressors import LogLinearModel, Model, RegressorName, fit_model

__all__ = ["Proposal", "SearchSettings", "kl_divergence", "predict_target", "propose"]

INTERVAL = (5.0, 95.0)
"""The bootstrap interval's percentiles."""


@dataclass(frozen=True, kw_only=True)
class SearchSettings:
    """How the proposal is searched for.

    Attributes:
        num_candidates: Dirichlet candidates scored (RegMix: 100,000).
        top_k: the best candidates averaged (RegMix: 128).
        seed: seeds the candidates and the bootstrap.
        knobs: how candidates are drawn around the prior.
        bootstrap: refits over resampled runs for the interval (0: no interval).
        refine: refine ``log_linear``'s average by SLSQP.
    """

    num_candidates: int = 100_000
    top_k: int = 128
    seed: int = 0
    knobs: DirichletKnobs = field(default_factory=DirichletKnobs)
    bootstrap: int = 20
    refine: bool = True


@dataclass(frozen=True)
class Proposal:
    """The proposed mixture and what the regressions predict for it.

    Attributes:
        mixture: float64 ``(streams,)`` on the simplex, within the bounds.
        predicted: float64 ``(eval streams,)`` predicted loss per eval stream.
        low: float64 ``(eval streams,)`` the bootstrap interval's low end (= predicted without).
        high: float64 ``(eval streams,)`` its high end.
        target: the predicted target (weighted sum of ``predicted``).
        target_low: its bootstrap low end.
        target_high: its bootstrap high end.
        prior_predicted: float64 ``(eval streams,)`` predicted loss per eval stream at the prior.
        prior_target: the predicted target at the prior.
        kl_to_prior: ``KL(mixture || prior)`` in nats.
    """

    mixture: np.ndarray
    predicted: np.ndarray
    low: np.ndarray
    high: np.ndarray
    target: float
    target_low: float
    target_high: float
    prior_predicted: np.ndarray
    prior_target: float
    kl_to_prior: float


def kl_divergence(mixtures: np.ndarray, prior: np.ndarray) -> np.ndarray:
    """``KL(w || prior)`` in nats per row of ``mixtures`` ``(rows, streams)``: float64 ``(rows,)``.

    Deterministic; a 0 share contributes 0.
    """
    return np.asarray(np.sum(xlogy(mixtures, mixtures) - mixtures * np.log(prior), axis=-1))


def predict_target(
    models: Sequence[Model], mixtures: np.ndarray, target_weights: np.ndarray
) -> np.ndarray:
    """The predicted target ``Σ_s target_weights[s] · model_s(w)`` per row; float64 ``(rows,)``."""
    total = np.zeros(mixtures.shape[0])
    for model, weight in zip(models, target_weights, strict=True):
        if weight:
            total += weight * model.predict(mixtures)
    return total


def _refine(
    models: Sequence[LogLinearModel],
    start: np.ndarray,
    bounds: Bounds,
    target_weights: np.ndarray,
    prior: np.ndarray,
    kl_weight: float,
    seen_max: np.ndarray,
) -> np.ndarray:
    coef = np.stack([m.coef for m in models])  # (eval streams, streams)
    intercept = np.array([m.intercept for m in models])
    log_prior = np.log(prior)
    floor = 1e-12 if kl_weight > 0 else 0.0  # KL's gradient is -inf at 0

    def objective(w: np.ndarray) -> tuple[float, np.ndarray]:
        terms = target_weights * np.exp(intercept + coef @ w)
        value = float(terms.sum())
        grad = terms @ coef
        if kl_weight > 0:
            safe = np.maximum(w, floor)
            value += kl_weight * float(np.sum(safe * (np.log(safe) - log_prior)))
            grad = grad + kl_weight * (np.log(safe) + 1.0 - log_prior)
        return value, grad

    lower = np.maximum(bounds.lower, floor)
    upper = np.maximum(np.minimum(bounds.upper, seen_max), lower)
    if upper.sum() < 1.0:  # the constraints leave the swarm's region: their box alone
        upper = bounds.upper
    box = list(zip(lower, upper, strict=True))
    result = minimize(
        objective,
        np.clip(start, lower, upper),
        jac=True,
        method="SLSQP",
        bounds=box,
        constraints=[{"type": "eq", "fun": lambda w: w.sum() - 1.0, "jac": np.ones_like}],
        options={"ftol": 1e-15, "maxiter": 1000},
    )
    if not result.success:
        return start
    refined = np.clip(result.x, bounds.lower, upper)
    return np.asarray(refined / refined.sum())


def _bootstrap(
    regressor: RegressorName,
    mixtures: np.ndarray,
    losses: np.ndarray,
    point: np.ndarray,
    settings: SearchSettings,
    n_jobs: int,
) -> np.ndarray:
    """Predicted losses at ``point``, ``(draws, eval streams)``, of fits on resampled runs."""
    rng = np.random.default_rng([settings.seed, 1])
    runs = mixtures.shape[0]
    out = np.empty((settings.bootstrap, losses.shape[1]))
    for b in range(settings.bootstrap):
        rows = rng.integers(0, runs, size=runs)
        for s in range(losses.shape[1]):
            model = fit_model(regressor, mixtures[rows], losses[rows, s], n_jobs=n_jobs)
            out[b, s] = model.predict(point[None, :])[0]
    return out


def propose(
    regressor: RegressorName,
    models: Sequence[Model],
    mixtures: np.ndarray,
    losses: np.ndarray,
    *,
    prior: np.ndarray,
    bounds: Bounds,
    target_weights: np.ndarray,
    kl_weight: float,
    settings: SearchSettings,
    n_jobs: int = 1,
) -> Proposal:
    """Search the mixture minimising the predicted target (+ KL pull) within the bounds.

    Args:
        regressor: the regressions' name (``log_linear`` is refined by SLSQP).
        models: one fitted regression per eval stream.
        mixtures: float64 ``(runs, streams)``, the swarm's mixtures (for the bootstrap).
        losses: float64 ``(runs, eval streams)``, the swarm's losses (for the bootstrap).
        prior: float64 ``(streams,)`` on the simplex, > 0.
        bounds: the constraints' box (feasible).
        target_weights: float64 ``(eval streams,)``, ≥ 0, summing to 1.
        kl_weight: weight of ``KL(w || prior)``, ≥ 0.
        settings: candidates, top-k, seed, bootstrap.
        n_jobs: LightGBM's threads.

    Returns:
        The :class:`Proposal`; deterministic in its inputs.
    """
    rng = np.random.default_rng([settings.seed, 0])
    drawn = dirichlet_mixtures(prior, settings.num_candidates, rng, settings.knobs)
    candidates = into_bounds(drawn, bounds)
    score = predict_target(models, candidates, target_weights)
    if kl_weight > 0:
        score = score + kl_weight * kl_divergence(candidates, prior)
    best = np.argsort(score, kind="stable")[: max(1, settings.top_k)]
    mixture = candidates[best].mean(axis=0)
    mixture = mixture / mixture.sum()
    if regressor == "log_linear" and settings.refine:
        linear = [m for m in models if isinstance(m, LogLinearModel)]
        mixture = _refine(
            linear, mixture, bounds, target_weights, prior, kl_weight, mixtures.max(axis=0)
        )
    predicted = np.array([m.predict(mixture[None, :])[0] for m in models])
    target = float(predicted @ target_weights)
    if settings.bootstrap > 0:
        draws = _bootstrap(regressor, mixtures, losses, mixture, settings, n_jobs)
        low, high = np.percentile(draws, INTERVAL, axis=0)
        target_low, target_high = np.percentile(draws @ target_weights, INTERVAL)
    else:
        low, high, target_low, target_high = predicted, predicted, target, target
    prior_predicted = np.array([m.predict(prior[None, :])[0] for m in models])
    return Proposal(
        mixture=mixture,
        predicted=predicted,
        low=np.asarray(low),
        high=np.asarray(high),
        target=target,
        target_low=float(target_low),
        target_high=float(target_high),
        prior_predicted=prior_predicted,
        prior_target=float(prior_predicted @ target_weights),
        kl_to_prior=float(kl_divergence(mixture[None, :], prior)[0]),
    )
