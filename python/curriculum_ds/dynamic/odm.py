"""``dynamic.method: "odm"``: online data mixing, a smoothed-mean EXP3 bandit over the streams.

The rule of Albalak et al. 2023, "Efficient Online Data Mixing For Language Model Pre-Training"
(arXiv 2312.02406), as ``alon-albalak/online-data-mixing``
``megatron/data/data_sampling_utils.py`` (commit ``edbfdadb62b0388120b6198b1743067a7cd990dc``)
writes it in ``SmoothedMeanWeightUpdater``, over K streams, at an update of (phase-local) step
``t`` (:func:`odm_update`)::

    R̂_d ← α·R̂_d + (1 - α)·exp(r_d)          for each stream d sampled in the step
    ε_t = min(1/K, sqrt(ln K / (K·t)))
    w_d = exp(ε_{t-1}·R̂_d)·(1 - K·ε_t) / Σ_j exp(ε_{t-1}·R̂_j) + ε_t,   π = w / Σ w

with the reward ``r_d`` the training loss of stream d's samples in the step (the mean of their
per-sample mean token losses), ``R̂`` starting at 0 and ``ε`` at 1/K.

Which of the reference's two code paths: the reference has ``update`` (one domain per step:
megatron's ``train`` samples a whole batch from one domain; the weights exponentiate ``ε·R̂``,
the formula of the paper and of the README) and ``group_update`` (a mixed batch, every present
domain's ``R̂`` updated, one ``ε`` step per optimizer step; it drops the ``exp`` and takes
``ε·R̂ / Σ ε·R̂`` instead). Our batches mix streams, so we follow ``group_update``'s structure
(every stream of the step updated, ε advanced once per update) with ``update``'s exponentiated
weights, the paper's formula. :func:`odm_update` with ``exponentiate=False`` is
``group_update`` exactly (tests replay both paths against the reference's own code). The softmax
subtracts its maximum first: mathematically the reference's formula, without its overflow when
``ε·R̂`` passes ~709 (a loss of ~8.8 nats with K = 2 at the first update).

How the reference's per-batch update maps onto a recompute: the reference updates at iteration
``t`` when ``t > warmup_steps`` and ``t % update_frequency == 0`` (``UpdateScheduler``), from
that one step's batch only; the steps in between feed nothing. Here the update runs at every
``recompute_every_n_steps``-th global step once the phase has taken more than
``dynamic.odm.warmup_steps`` steps, from the losses of that step's global batch (the rolling
``window`` is not read). With ``recompute_every_n_steps: 1`` (ODM's recommended setting, the
reference's ``update_frequency: 1``) every step updates, as in the reference. The difference:
``t`` counts the phase's own steps (a phase is a fresh bandit over its own streams), where the
reference counts from the run's start (one phase).

Every rank observes the same all-gathered losses, so every rank holds the same weights without a
broadcast. History rows carry ``epsilon_t`` (ε_t), the step's ``rewards`` and ``estimated_reward``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np
import numpy.typing as npt

from curriculum_ds.dynamic.registry import register
from curriculum_ds.dynamic.state import StreamODMState
from curriculum_ds.dynamic.state_common import method_keys
from curriculum_ds.dynamic.update import MixtureUpdate, PhaseView

if TYPE_CHECKING:
    from curriculum_ds.config import DynamicConfig
    from curriculum_ds.config.mixers import ODMConfig
    from curriculum_ds.dynamic.state import DynamicState

__all__ = ["ODMReweighter", "odm_update", "stream_mean_losses"]


def odm_update(
    estimated_reward: npt.NDArray[np.float64],
    eps: float,
    rewards: npt.NDArray[np.float64],
    t: int,
    *,
    smoothing: float,
    exponentiate: bool = True,
) -> tuple[npt.NDArray[np.float64], float, npt.NDArray[np.float64]]:
    """One update of ODM's smoothed-mean EXP3 bandit (``SmoothedMeanWeightUpdater``).

    Args:
        estimated_reward: float64 ``(K,)``, R̂ before the update (≥ 0).
        eps: ε of the previous update (1/K before the first).
        rewards: float64 ``(K,)``, each stream's reward (training loss, nats) at this update;
            NaN for a stream absent from it (its R̂ is kept).
        t: the update's step, ≥ 1 (the reference's ``iteration``).
        smoothing: α in (0, 1).
        exponentiate: True: the weights of ``update`` (``exp(ε·R̂)``, the paper's); False: those
            of ``group_update`` (``ε·R̂``, no exp).

    Returns:
        ``(estimated_reward, eps, probs)``: the new R̂ float64 ``(K,)``, ε_t, and the stream
        probabilities float64 ``(K,)`` summing to 1. Deterministic.
    """
    k = len(estimated_reward)
    present = np.isfinite(rewards)
    new_reward = np.asarray(estimated_reward, dtype=np.float64).copy()
    new_reward[present] = smoothing * new_reward[present] + (1 - smoothing) * np.exp(
        rewards[present]
    )
    new_eps = min(1 / k, math.sqrt(math.log(k) / (k * t)))
    scaled = eps * new_reward
    if exponentiate:
        e = np.exp(scaled - scaled.max())  # the max cancels in the ratio; no overflow
        share = e / e.sum()
    else:
        share = scaled / scaled.sum()
    weights = share * (1 - k * new_eps) + new_eps
    return new_reward, new_eps, weights / weights.sum()


def stream_mean_losses(
    streams: npt.NDArray[np.int64], losses: npt.NDArray[np.float64], num_streams: int
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.float64]]:
    """Per stream, the step's count of finite losses and their mean (NaN: none).

    Args:
        streams: int ``(B,)`` each sample's stream index.
        losses: float64 ``(B,)`` each sample's mean token loss (NaN: no loss-bearing token).
        num_streams: K.

    Returns:
        ``(counts int64 (K,), means float64 (K,))``. Deterministic (summed in batch order).
    """
    finite = np.isfinite(losses)
    counts = np.bincount(streams[finite], minlength=num_streams).astype(np.int64)
    sums = np.bincount(streams[finite], weights=losses[finite], minlength=num_streams)
    means = np.divide(sums, counts, out=np.full(num_streams, np.nan), where=counts > 0)
    return counts, means


@register
class ODMReweighter:
    """``method: "odm"`` over ``unit: "streams"`` (see the module's docstring for the rule).

    Args:
        cfg: The ``curriculum.dynamic`` section (``method: "odm"``, ``unit: "streams"``); its
            ``odm`` section gives α (``alpha``) and ``warmup_steps``.
    """

    method: ClassVar[str] = "odm"
    units: ClassVar[frozenset[str]] = frozenset({"streams"})
    num_buckets = 1
    """The loader's samplers draw uniformly inside each stream (one bucket)."""

    def __init__(self, cfg: DynamicConfig):
        self.cfg = cfg
        self.odm: ODMConfig = cfg.method_config  # type: ignore[assignment]
        self.phase_idx: int | None = None
        self.stream_names: list[str] = []
        self.probs = np.zeros(0, dtype=np.float64)
        self.estimated_reward = np.zeros(0, dtype=np.float64)
        self.eps = 0.0
        self.phase_steps = 0
        """Optimizer steps the phase has taken (``t`` of the next update is this after it)."""
        self.num_recomputes = 0
        self._step: tuple[npt.NDArray[np.int64], npt.NDArray[np.float64], int] | None = None

    def start_phase(self, view: PhaseView, saved: DynamicState | None) -> MixtureUpdate:
        """A fresh bandit over the phase's streams (R̂ = 0, ε = 1/K, the phase's proportions).

        Args:
            view: The new phase.
            saved: A checkpoint's state: inside this phase, R̂, ε, the weights and the step
                count come back exactly; from an earlier phase only the recompute count.

        Returns:
            An empty :class:`MixtureUpdate` (the loader restores its own proportions).
        """
        k = len(view.stream_names)
        self.phase_idx = view.phase_idx
        self.stream_names = list(view.stream_names)
        self.probs = np.asarray(view.proportions, dtype=np.float64).copy()
        self.estimated_reward = np.zeros(k, dtype=np.float64)
        self.eps = 1.0 / k
        self.phase_steps = 0
        self._step = None
        if saved is not None:
            self.num_recomputes = saved.num_recomputes
            if isinstance(saved, StreamODMState) and saved.phase_idx == view.phase_idx:
                self.probs = np.asarray(saved.probs, dtype=np.float64).copy()
                self.estimated_reward = np.asarray(saved.estimated_reward, np.float64).copy()
                self.eps = saved.eps
                self.phase_steps = saved.phase_steps
        return MixtureUpdate()

    def observe(self, batch: npt.NDArray[np.int64], losses: npt.NDArray[np.float64]) -> None:
        """Keep the step's per-stream mean loss (the rewards of an update at this step)."""
        losses = np.asarray(losses, dtype=np.float64)
        counts, means = stream_mean_losses(batch[:, 0], losses, len(self.stream_names))
        self._step = (counts, means, int(len(losses) - counts.sum()))

    def observe_eval(self, global_step: int, losses: Mapping[str, float]) -> None:
        """Held-out losses do not move this method (its reward is the training loss)."""

    def maybe_recompute(self, global_step: int) -> MixtureUpdate | None:
        """An update at every ``recompute_every_n_steps``-th step after the warmup.

        Args:
            global_step: The optimizer step just taken (1-based, global).

        Returns:
            None between updates (and during ``warmup_steps``); else the new proportions and
            the history row (``rewards``, ``estimated_reward``, ``epsilon_t``, ``t``, ``weights``,
            ``scores`` = R̂, ``stream_counts``). A step with no finite loss keeps the weights
            (``kept_previous: true``).
        """
        self.phase_steps += 1
        step, self._step = self._step, None
        if (
            global_step % self.cfg.recompute_every_n_steps != 0
            or self.phase_steps <= self.odm.warmup_steps
        ):
            return None
        self.num_recomputes += 1
        counts, rewards, num_non_finite = step if step is not None else (None, None, 0)
        record: dict[str, Any] = {
            "unit": "streams",
            "method": self.method,
            "signal": "loss",
            "streams": list(self.stream_names),
            "num_non_finite": num_non_finite,
            "t": self.phase_steps,
        }
        if counts is None or rewards is None or counts.sum() == 0:
            record.update(
                weights=self.probs.tolist(), scores=None, epsilon_t=self.eps, kept_previous=True
            )
            return MixtureUpdate(record=record)
        self.estimated_reward, self.eps, self.probs = odm_update(
            self.estimated_reward, self.eps, rewards, self.phase_steps, smoothing=self.odm.alpha
        )
        record.update(
            stream_counts=counts.tolist(),
            rewards=[None if np.isnan(r) else float(r) for r in rewards],
            estimated_reward=self.estimated_reward.tolist(),
            scores=self.estimated_reward.tolist(),
            epsilon_t=self.eps,
            weights=self.probs.tolist(),
        )
        return MixtureUpdate(proportions=self.probs.copy(), record=record)

    def state(self) -> StreamODMState:
        """Everything a resume needs (:class:`~curriculum_ds.dynamic.state.StreamODMState`)."""
        return StreamODMState(
            method_keys=method_keys(self.cfg),
            phase_idx=self.phase_idx,
            probs=self.probs.copy(),
            num_recomputes=self.num_recomputes,
            estimated_reward=self.estimated_reward.copy(),
            eps=self.eps,
            phase_steps=self.phase_steps,
        )
