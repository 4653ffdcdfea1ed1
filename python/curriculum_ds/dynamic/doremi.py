"""DoReMi over the phase's streams: ``dynamic.method: "doremi"``, ``unit: "streams"``.

DoReMi (Xie et al. 2023, "DoReMi: Optimizing Data Mixtures Speeds Up Language Model
Pretraining", Algorithm 1; reference code ``sangmichaelxie/doremi``, ``doremi/trainer.py``
``DoReMiTrainer.update_domain_weights`` and ``write_weights`` at commit 7cde52d) moves the domain
weights by exponentiated gradient on each domain's excess loss over a reference model. Every
``recompute_every_n_steps``, over the rolling window of the last ``window`` samples::

    s_d   = mean over the window's samples of stream d of max(ℓ - ℓ_ref, 0)
            (a stream with no sample in the window keeps its last s_d)
    log w ← log w + η·s                      (η: ``dynamic.doremi.eta``)
    w     ← softmax(log w)
    w     ← (1 - ε)·w + ε/K                  (ε: ``dynamic.doremi.epsilon``, K)

and the running mean of ``w`` over the phase (the initial weights and every update, as the
reference's ``avg_domain_weights``) is DoReMi's output: the static mixture for the main run
(``curriculum-ds mix``). ``ℓ`` is each sample's mean token loss and ``ℓ_ref`` its
``reference_metric`` value: we clip per sample, where the reference clips per token, because the
reference model's losses we have (``curriculum-ds score``) are per sample. Run the reference's
function with one "token" per sample and it computes exactly our scores (the golden test,
``tests/unit/dynamic/test_doremi_matches_the_reference.py``). The weights start at the phase's
proportions (the reference's ``train_domain_weights``) and do not carry over a phase swap.

``apply`` says what the weights drive:

* ``"sampling"``: they replace the phase's proportions (in its ``proportion_unit``) from each
  update on, as the ``softmax`` method's do;
* ``"loss"``: the phase keeps its proportions and every stream's loss is weighted by
  ``(w_d / p_d) / Σ (w / p)`` (``p`` the phase's proportions), as the reference's proxy trains:
  it divides by its sampling weights so that the objective is ``Σ_d w_d·L_d`` whatever the mix;
  with uniform proportions that is ``w``. The loader's loss weights make the step's loss
  ``Σ w·ℓ / Σ w`` over its tokens (:class:`~curriculum_ds.plugin.normaliser.StepNormaliser`).

Everything is a function of the all-gathered losses, so every rank holds the same weights
without a broadcast.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np
import numpy.typing as npt
from scipy.special import logsumexp

from curriculum_ds.config.mixers import DoReMiConfig
from curriculum_ds.dynamic.registry import register
from curriculum_ds.dynamic.signals import excess_losses, metric_columns
from curriculum_ds.dynamic.state import DoReMiState, DoReMiSubState, StreamWindowState
from curriculum_ds.dynamic.state_common import method_keys
from curriculum_ds.dynamic.update import MixtureUpdate, PhaseView
from curriculum_ds.dynamic.window import StreamWindow

if TYPE_CHECKING:
    from curriculum_ds.config import DynamicConfig
    from curriculum_ds.dynamic.state import DynamicState

__all__ = ["DoReMiReweighter", "doremi_loss_weights", "doremi_step", "running_mean"]


def doremi_step(
    weights: npt.NDArray[np.float64],
    last_scores: npt.NDArray[np.float64],
    counts: npt.NDArray[np.int64],
    means: npt.NDArray[np.float64],
    *,
    eta: float,
    epsilon: float,
) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]:
    """One DoReMi update of the domain weights (the reference's ``doremiv1`` step).

    Args:
        weights: float64 ``(K,)``, the weights now (> 0, summing to 1).
        last_scores: float64 ``(K,)``, each stream's score at the previous update.
        counts: int64 ``(K,)``, each stream's samples in the window (0: absent).
        means: float64 ``(K,)``, each stream's mean clipped excess loss in the window (nats;
            read only where ``counts > 0``).
        eta: the step size η (> 0).
        epsilon: the smoothing ε toward uniform, in [0, 1).

    Returns:
        ``(weights, scores)``: float64 ``(K,)`` the new weights (summing to 1, each ≥ ε/K) and
        the scores used (an absent stream's is its last). Deterministic.
    """
    scores = np.where(counts > 0, means, last_scores)
    with np.errstate(divide="ignore"):  # ε = 0: a weight may have reached 0 (log: -inf, kept)
        log_w = np.log(weights) + eta * scores
    log_w = log_w - logsumexp(log_w)
    new = (1.0 - epsilon) * np.exp(log_w) + epsilon / len(log_w)
    return new, scores


def running_mean(
    average: npt.NDArray[np.float64], num_updates: int, weights: npt.NDArray[np.float64]
) -> npt.NDArray[np.float64]:
    """The mean of the weights over the initial ones and ``num_updates`` updates, with ``weights``.

    The reference's ``write_weights``: ``(avg·(c - 1) + w) / c`` with ``c`` the count of weight
    vectors so far, the initial one included (``c = num_updates + 1`` after this update).

    Args:
        average: float64 ``(K,)``, the mean over the initial weights and ``num_updates - 1``
            updates.
        num_updates: updates so far, this one included (≥ 1).
        weights: float64 ``(K,)``, this update's weights.
    """
    return (average * num_updates + weights) / (num_updates + 1)


def doremi_loss_weights(
    weights: npt.NDArray[np.float64], proportions: npt.NDArray[np.float64]
) -> npt.NDArray[np.float64]:
    """``apply: "loss"``: each stream's loss weight ``(w / p) / Σ (w / p)`` (the reference's).

    Args:
        weights: float64 ``(K,)`` DoReMi's weights.
        proportions: float64 ``(K,)`` the phase's proportions (> 0), the mix it samples by.
    """
    ratio = weights / proportions
    return ratio / ratio.sum()


@register
class DoReMiReweighter:
    """``method: "doremi"`` over ``unit: "streams"``: a window of excess losses, DoReMi's rule.

    Lifecycle as :class:`~curriculum_ds.dynamic.StreamReweighter`'s. Reads ``dynamic.window``,
    ``recompute_every_n_steps``, ``reference_metric`` and ``dynamic.doremi`` (``eta``, ``epsilon``,
    ``apply``, ``initial_score``).

    Args:
        cfg: The ``curriculum.dynamic`` section (``method: "doremi"``, ``unit: "streams"``).
    """

    method: ClassVar[str] = "doremi"
    units: ClassVar[frozenset[str]] = frozenset({"streams"})
    num_buckets = 1
    """The loader's samplers draw uniformly inside each stream (one bucket)."""

    def __init__(self, cfg: DynamicConfig):
        self.cfg = cfg
        doremi = cfg.method_config
        assert isinstance(doremi, DoReMiConfig)  # DynamicConfig: method "doremi"
        self.doremi = doremi
        self.phase_idx: int | None = None
        self.stream_names: list[str] = []
        self.proportions = np.zeros(0, dtype=np.float64)
        """The phase's own proportions (``apply: "loss"`` divides by them)."""
        self.probs = np.zeros(0, dtype=np.float64)
        """float64 ``(K,)``: DoReMi's weights now (the phase's proportions before any update)."""
        self.average = np.zeros(0, dtype=np.float64)
        """float64 ``(K,)``: their running mean over the phase (DoReMi's output)."""
        self.last_scores = np.zeros(0, dtype=np.float64)
        self.num_updates = 0
        self.window = StreamWindow(cfg.window)
        self.reference: list[npt.NDArray[np.float64]] = []
        self.num_recomputes = 0

    def start_phase(self, view: PhaseView, saved: DynamicState | None) -> MixtureUpdate:
        """Start a phase at its proportions, or restore ``saved`` if it was taken in this phase.

        Args:
            view: The new phase (stream names, proportions, metric columns).
            saved: A :meth:`state` from a checkpoint, or None. Taken inside this phase: the
                weights, their average, the last scores, the update count and the window come
                back exactly; taken in an earlier phase, only the recompute count carries over.

        Returns:
            ``apply: "loss"``: the loss weights of the weights now (the loader does not save its
            loss weights); ``"sampling"``: an empty update (the loader restores its own
            proportions on a resume).

        Raises:
            ConfigError: a stream without the ``reference_metric`` column, or a non-finite
                value in it.
        """
        assert self.cfg.reference_metric is not None  # DynamicConfig requires it for doremi
        self.phase_idx = view.phase_idx
        self.stream_names = list(view.stream_names)
        self.proportions = np.asarray(view.proportions, dtype=np.float64).copy()
        self.reference = metric_columns(
            view,
            self.cfg.reference_metric,
            "curriculum.dynamic.reference_metric",
            hint=" (score it again with `curriculum-ds score`)",
        )
        self.probs = self.proportions.copy()
        self.average = self.proportions.copy()
        self.last_scores = np.full(len(self.stream_names), self.doremi.initial_score)
        self.num_updates = 0
        self.window = StreamWindow(self.cfg.window)
        if saved is not None:
            self.num_recomputes = saved.num_recomputes
            if isinstance(saved, DoReMiState) and saved.phase_idx == view.phase_idx:
                self.probs = np.asarray(saved.probs, dtype=np.float64).copy()
                self.average = np.asarray(saved.doremi.average, dtype=np.float64).copy()
                self.last_scores = np.asarray(saved.doremi.last_scores, dtype=np.float64).copy()
                self.num_updates = saved.doremi.num_updates
                self.window = StreamWindow.from_state_dict(saved.window.to_dict())
        if self.doremi.apply == "loss":
            return MixtureUpdate(loss_weights=doremi_loss_weights(self.probs, self.proportions))
        return MixtureUpdate()

    def observe(self, batch: npt.NDArray[np.int64], losses: npt.NDArray[np.float64]) -> None:
        """Record a step's global per-sample excess losses (clipped at 0) with their streams.

        Args:
            batch: int64 ``(global_batch_size, 2)`` of ``(stream_idx, sample_idx)``.
            losses: float64 ``(global_batch_size,)`` mean token loss per sample (nats), NaN for
                a sample without loss-bearing tokens (left out, counted).
        """
        excess = excess_losses(batch, np.asarray(losses, dtype=np.float64), self.reference)
        self.window.push(excess, batch[:, 0])

    def observe_eval(self, global_step: int, losses: Mapping[str, float]) -> None:
        """Held-out losses do not move this method."""

    def maybe_recompute(self, global_step: int) -> MixtureUpdate | None:
        """Every ``recompute_every_n_steps``: DoReMi's update of the weights and their average.

        Args:
            global_step: The optimizer step just taken (1-based, global).

        Returns:
            None between recomputes; else the update (``proportions`` for ``apply:
            "sampling"``, ``loss_weights`` for ``"loss"``) and its history row (``method``,
            ``apply``, ``weights``, ``average_weights``, ``scores``, ``stream_counts``,
            ``window_size``, ``num_non_finite``, ``eta``, ``epsilon``; ``loss_weights`` for
            ``"loss"``). An empty window keeps the weights: ``kept_previous: true``.
        """
        if global_step % self.cfg.recompute_every_n_steps != 0:
            return None
        self.num_recomputes += 1
        counts, means = self.window.stream_means(len(self.stream_names))
        record: dict[str, Any] = {
            "unit": "streams",
            "method": self.method,
            "apply": self.doremi.apply,
            "signal": "excess_loss",
            "streams": list(self.stream_names),
            "window_size": len(self.window),
            "num_non_finite": int(self.window.num_non_finite),
            "eta": self.doremi.eta,
            "epsilon": self.doremi.epsilon,
        }
        if len(self.window) == 0:
            record.update(
                weights=self.probs.tolist(),
                average_weights=self.average.tolist(),
                scores=None,
                kept_previous=True,
            )
            return MixtureUpdate(record=record)
        self.probs, self.last_scores = doremi_step(
            self.probs,
            self.last_scores,
            counts,
            means,
            eta=self.doremi.eta,
            epsilon=self.doremi.epsilon,
        )
        self.num_updates += 1
        self.average = running_mean(self.average, self.num_updates, self.probs)
        record.update(
            weights=self.probs.tolist(),
            average_weights=self.average.tolist(),
            scores=self.last_scores.tolist(),
            stream_counts=counts.tolist(),
        )
        if self.doremi.apply == "loss":
            loss_weights = doremi_loss_weights(self.probs, self.proportions)
            record["loss_weights"] = loss_weights.tolist()
            return MixtureUpdate(loss_weights=loss_weights, record=record)
        return MixtureUpdate(proportions=self.probs.copy(), record=record)

    def state(self) -> DoReMiState:
        """Everything a resume needs (:class:`~curriculum_ds.dynamic.state.DoReMiState`). Copies."""
        return DoReMiState(
            method_keys=method_keys(self.cfg),
            phase_idx=self.phase_idx,
            signal=self.cfg.signal,
            reference_metric=self.cfg.reference_metric,
            probs=self.probs.copy(),
            window=StreamWindowState.model_validate(self.window.state_dict()),
            num_recomputes=self.num_recomputes,
            doremi=DoReMiSubState(
                last_scores=self.last_scores.copy(),
                average=self.average.copy(),
                num_updates=self.num_updates,
            ),
        )
