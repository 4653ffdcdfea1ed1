"""``dynamic.method: "ado"``: Adaptive Data Optimization, a scaling law per stream and its policy.

The method of Jiang et al. 2025, "Adaptive Data Optimization: Dynamic Sample Selection with
Scaling Laws" (ICLR'25), as ``yidingjiang/ado`` ``src/data_selectors/ado.py`` (commit
``bc3d8d0e4d6a13f40f03b2e8fb83369d773a2611``) writes it in ``AdoSelector``:

* every step (``update``): the step's realised count per stream, its EMA ``h ← 0.9·h + 0.1·c/Σc``
  (from the natural share μ), and each stream's training loss (the mean over its samples; a
  stream absent from the step repeats its previous loss, or takes the step's mean loss at the
  phase's first step), the curve the fit reads;
* every ``refit_every`` steps from ``warmup_steps`` on: each stream's law
  ``L(n) = e^E + e^A / n^α`` fitted to its curve (:mod:`curriculum_ds.dynamic.ado_fit`), on
  rank 0, the parameters broadcast (a fit with a non-finite parameter is not taken, as the
  reference's ``check_valid``);
* at each recompute from ``warmup_steps`` on, once a fit exists (``curr_dist``,
  :func:`ado_policy`)::

      slope_k = max(α_k, 0.05)·(L̂_k(n) − e^{E_k}) / n         (n: all samples so far)
      ρ = clip_min_probability(normalise(slope·μ·h^0.5), 0.01)
      p = 0.9·p̄ + 0.1·ρ,   p̄ ← (1 − 1/(t+1))·p̄ + ρ/(t+1)       (p̄ starts at μ)

  with μ the phase's proportions (the reference's natural distribution) and ``t`` the step's
  0-based index in the phase (the reference's ``itr``).

The reference evaluates its policy at every step; here at every ``recompute_every_n_steps``-th
step (with 1, the recommended setting, exactly the reference). The fit's differences (scipy's
L-BFGS-B in float64 from the ``fit_starts`` best grid points; the Savitzky–Golay window cut to a
short curve) are in :mod:`~curriculum_ds.dynamic.ado_fit`. A phase is a fresh selector over its
own streams. History rows carry ``fit``: per stream its ``E``, ``A`` and ``alpha``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np
import numpy.typing as npt

from curriculum_ds.dynamic.ado_fit import fit_data, fit_scaling_law, scaling_law
from curriculum_ds.dynamic.odm import stream_mean_losses
from curriculum_ds.dynamic.rank0 import broadcast_from_rank0
from curriculum_ds.dynamic.registry import register
from curriculum_ds.dynamic.state import StreamADOState
from curriculum_ds.dynamic.state_common import method_keys
from curriculum_ds.dynamic.update import MixtureUpdate, PhaseView

if TYPE_CHECKING:
    from curriculum_ds.config import DynamicConfig
    from curriculum_ds.config.mixers import ADOConfig
    from curriculum_ds.dynamic.state import DynamicState

__all__ = ["ADOReweighter", "ado_policy", "clip_min_probability"]

MIN_PROB = 1e-2
"""The policy's floor per stream (the reference's ``clip_min_probability(dist_K, 1e-2)``)."""
MIN_EXPONENT = 0.05
"""The exponent's floor in the slope (the reference: "arbitrarily bound exponent to be >= 0.05")."""
COUNT_EMA = 0.9
"""γ of the realised-share EMA ``h``."""
MIX = 0.9
"""The weight of the running mean p̄ in ``p = 0.9·p̄ + 0.1·ρ``."""


def clip_min_probability(
    probs: npt.NDArray[np.float64], min_prob: float
) -> npt.NDArray[np.float64]:
    """The reference's ``clip_min_probability``: scale, floor each entry, renormalise.

    Args:
        probs: float64 ``(K,)`` summing to 1.
        min_prob: the floor, ≤ 1/K.

    Returns:
        float64 ``(K,)`` summing to 1. Deterministic.
    """
    total_deficit = max(min_prob * len(probs) - probs.sum(), 0)
    scaled = probs * ((1 - total_deficit) / probs.sum())
    clipped = np.maximum(scaled, min_prob)
    return np.asarray(clipped / clipped.sum(), dtype=np.float64)


def ado_policy(
    params: npt.NDArray[np.float64],
    num_samples: int,
    natural: npt.NDArray[np.float64],
    count_ema: npt.NDArray[np.float64],
    probs_mean: npt.NDArray[np.float64],
    t: int,
) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64], npt.NDArray[np.float64]]:
    """ADO's policy at step ``t`` (the reference's ``curr_dist(itr)``).

    Args:
        params: float64 ``(K, 3)``, each stream's fitted ``(A, E, α)``.
        num_samples: samples of all streams so far (n, the same for every stream: the
            reference's ``use_same_step_size``), ≥ 1.
        natural: float64 ``(K,)``, μ, the natural shares.
        count_ema: float64 ``(K,)``, h, the EMA of the realised shares.
        probs_mean: float64 ``(K,)``, p̄ before this step.
        t: the step's 0-based index (the reference's ``itr``).

    Returns:
        ``(probs, probs_mean, rho)``: the new proportions p, the new running mean p̄, and ρ,
        float64 ``(K,)`` each. Deterministic.
    """
    a, e, alpha = params[:, 0], params[:, 1], params[:, 2]
    irreducible = np.exp(e)
    exponent = np.maximum(alpha, MIN_EXPONENT)
    current = scaling_law((a, e, alpha), num_samples)
    n_seen = np.float32(num_samples)  # as the reference: a float32 count (exact below 2^24)
    slope = exponent * (current - irreducible) / n_seen
    weighted = slope * natural * count_ema**0.5
    rho = clip_min_probability(weighted / weighted.sum(), MIN_PROB)
    probs = MIX * probs_mean + (1 - MIX) * rho
    new_mean = (1 - 1 / (t + 1)) * probs_mean + 1 / (t + 1) * rho
    return probs, new_mean, rho


@register
class ADOReweighter:
    """``method: "ado"`` over ``unit: "streams"`` (see the module's docstring for the rule).

    Args:
        cfg: The ``curriculum.dynamic`` section (``method: "ado"``, ``unit: "streams"``); its
            ``ado`` section gives the fit's schedule and data.
    """

    method: ClassVar[str] = "ado"
    units: ClassVar[frozenset[str]] = frozenset({"streams"})
    num_buckets = 1
    """The loader's samplers draw uniformly inside each stream (one bucket)."""

    def __init__(self, cfg: DynamicConfig):
        self.cfg = cfg
        self.ado: ADOConfig = cfg.method_config  # type: ignore[assignment]
        self.phase_idx: int | None = None
        self.stream_names: list[str] = []
        self.natural = np.zeros(0, dtype=np.float64)
        self.probs = np.zeros(0, dtype=np.float64)
        self.count_ema = np.zeros(0, dtype=np.float64)
        self.probs_mean = np.zeros(0, dtype=np.float64)
        self.losses: list[list[float]] = []
        """Per step of the phase, each stream's training loss (imputed where absent)."""
        self.step_samples: list[int] = []
        self.params: npt.NDArray[np.float64] | None = None
        self.num_recomputes = 0
        self._num_non_finite = 0

    def start_phase(self, view: PhaseView, saved: DynamicState | None) -> MixtureUpdate:
        """A fresh selector over the phase's streams (μ = p = p̄ = h = the phase's proportions).

        Args:
            view: The new phase.
            saved: A checkpoint's state: inside this phase, the loss curves, counts, h, p̄, the
                fitted parameters and the weights come back exactly; from an earlier phase only
                the recompute count.

        Returns:
            An empty :class:`MixtureUpdate` (the loader restores its own proportions).
        """
        self.phase_idx = view.phase_idx
        self.stream_names = list(view.stream_names)
        self.natural = np.asarray(view.proportions, dtype=np.float64).copy()
        self.probs = self.natural.copy()
        self.count_ema = self.natural.copy()
        self.probs_mean = self.natural.copy()
        self.losses, self.step_samples, self.params = [], [], None
        if saved is not None:
            self.num_recomputes = saved.num_recomputes
            if isinstance(saved, StreamADOState) and saved.phase_idx == view.phase_idx:
                self.probs = np.asarray(saved.probs, dtype=np.float64).copy()
                self.count_ema = np.asarray(saved.count_ema, dtype=np.float64).copy()
                self.probs_mean = np.asarray(saved.probs_mean, dtype=np.float64).copy()
                curves = np.asarray(saved.losses, dtype=np.float64).reshape(
                    len(view.stream_names), -1
                )
                self.losses = curves.T.tolist()
                self.step_samples = [int(n) for n in saved.step_samples]
                if saved.fit_params:
                    self.params = np.asarray(saved.fit_params, dtype=np.float64).copy()
        return MixtureUpdate()

    def observe(self, batch: npt.NDArray[np.int64], losses: npt.NDArray[np.float64]) -> None:
        """A step's counts, realised-share EMA and per-stream loss (the reference's ``update``)."""
        k = len(self.stream_names)
        losses = np.asarray(losses, dtype=np.float64)
        counts = np.bincount(batch[:, 0], minlength=k)
        self.step_samples.append(int(counts.sum()))
        self.count_ema = COUNT_EMA * self.count_ema + (1 - COUNT_EMA) * (counts / counts.sum())
        finite_counts, means = stream_mean_losses(batch[:, 0], losses, k)
        self._num_non_finite = int(len(losses) - finite_counts.sum())
        if self.losses:
            fallback = np.asarray(self.losses[-1])
        else:  # the phase's first step: the step's mean loss (NaN if it has none)
            finite = losses[np.isfinite(losses)]
            fallback = np.full(k, finite.mean() if len(finite) else np.nan)
        self.losses.append(np.where(finite_counts > 0, means, fallback).tolist())

    def observe_eval(self, global_step: int, losses: Mapping[str, float]) -> None:
        """Held-out losses do not move this method (it fits the training loss)."""

    def refit(self) -> npt.NDArray[np.float64]:
        """Each stream's ``(A, E, α)`` fitted to its curve so far, float64 ``(K, 3)``.

        NaN rows: a stream with no point to fit or no finite run. Runs on the calling rank only.
        """
        curves = np.asarray(self.losses, dtype=np.float64)  # (T, K)
        cum_samples = np.cumsum(np.asarray(self.step_samples, dtype=np.float64))
        out = np.full((curves.shape[1], 3), np.nan)
        for k in range(curves.shape[1]):
            n, loss = fit_data(
                curves[:, k],
                cum_samples,
                skip_steps=self.ado.skip_steps,
                stride=self.ado.fit_stride,
                savgol_window=self.ado.savgol_window,
                savgol_order=3,
            )
            ok = np.isfinite(loss) & (loss > 0)
            if ok.any():
                out[k] = fit_scaling_law(n[ok], loss[ok], num_starts=self.ado.fit_starts)
        return out

    def maybe_recompute(self, global_step: int) -> MixtureUpdate | None:
        """A refit every ``refit_every`` steps and the policy at each recompute, after warmup.

        Args:
            global_step: The optimizer step just taken (1-based, global).

        Returns:
            None before ``warmup_steps``, before the first accepted fit and between recomputes;
            else the new proportions and the history row (``weights``, ``scores`` = ρ,
            ``fit`` per stream (``E``, ``A``, ``alpha``), ``refitted``, ``t``, ``stream_counts``).
        """
        t = len(self.losses) - 1  # the step's 0-based index in the phase (the reference's itr)
        refitted = False
        if t >= self.ado.warmup_steps and t % self.ado.refit_every == 0:
            params = broadcast_from_rank0(self.refit, (len(self.stream_names), 3))
            refitted = bool(np.all(np.isfinite(params)))
            if refitted:
                self.params = params
        if (
            global_step % self.cfg.recompute_every_n_steps != 0
            or t < self.ado.warmup_steps
            or self.params is None
        ):
            return None
        self.num_recomputes += 1
        self.probs, self.probs_mean, rho = ado_policy(
            self.params,
            sum(self.step_samples),
            self.natural,
            self.count_ema,
            self.probs_mean,
            t,
        )
        record: dict[str, Any] = {
            "unit": "streams",
            "method": self.method,
            "signal": "loss",
            "streams": list(self.stream_names),
            "num_non_finite": self._num_non_finite,
            "t": t,
            "weights": self.probs.tolist(),
            "scores": rho.tolist(),
            "fit": [{"E": e, "A": a, "alpha": al} for a, e, al in self.params.tolist()],
            "refitted": refitted,
            "stream_losses": [None if np.isnan(x) else x for x in self.losses[-1]],
        }
        return MixtureUpdate(proportions=self.probs.copy(), record=record)

    def state(self) -> StreamADOState:
        """Everything a resume needs (:class:`~curriculum_ds.dynamic.state.StreamADOState`)."""
        curves = np.asarray(self.losses, dtype=np.float64).reshape(
            len(self.losses), len(self.stream_names)
        )  # (0, 0) before a phase starts
        return StreamADOState(
            method_keys=method_keys(self.cfg),
            phase_idx=self.phase_idx,
            probs=self.probs.copy(),
            num_recomputes=self.num_recomputes,
            losses=tuple(curves[:, k].copy() for k in range(curves.shape[1])),
            step_samples=np.asarray(self.step_samples, dtype=np.int64),
            count_ema=self.count_ema.copy(),
            probs_mean=self.probs_mean.copy(),
            fit_params=() if self.params is None else tuple(p.copy() for p in self.params),
        )
