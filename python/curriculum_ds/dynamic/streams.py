"""Re-weighting over the phase's streams (domains): ``dynamic.unit: "streams"``.

Every step the step's global per-sample signals (loss, or excess loss over a reference model)
enter one rolling window with the stream each sample came from (:class:`StreamWindow`); every
``recompute_every_n_steps`` the per-stream scores give the weights::

    probs_s = floor + (1 - K * floor) * softmax(score / temperature)_s      (K streams)

and the weights replace the phase's stream proportions, in its ``proportion_unit``: the loader's
largest-deficit rule follows the new targets from that step on
(:meth:`~curriculum_ds.core.loader.PhaseLoader.apply`). Until the phase's first recompute
the phase's own proportions hold; weights never carry over a phase swap (another phase may have
other streams).

Scores per stream: the mean signal in the window (``loss``, ``excess_loss``), or the relative
drop of the mean loss since ``learnability_horizon`` recomputes ago (``learnability``;
:mod:`curriculum_ds.dynamic.signals`). A stream with no sample in the window gets the mean of
the others' scores. Everything is a function of the all-gathered losses, so every rank holds the
same weights without a broadcast.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np
import numpy.typing as npt

from curriculum_ds.dynamic.registry import register
from curriculum_ds.dynamic.signals import excess_losses, learnability_scores, metric_columns
from curriculum_ds.dynamic.state import StreamSoftmaxState, StreamWindowState
from curriculum_ds.dynamic.update import MixtureUpdate, PhaseView
from curriculum_ds.dynamic.weights import mixture_probs
from curriculum_ds.dynamic.window import StreamWindow

if TYPE_CHECKING:
    from curriculum_ds.config import DynamicConfig
    from curriculum_ds.dynamic.state import DynamicState

__all__ = ["StreamReweighter"]


@register
class StreamReweighter:
    """``method: "softmax"`` over ``unit: "streams"``: rolling window, stream weights, history.

    Lifecycle per phase as :class:`~curriculum_ds.dynamic.BucketReweighter`'s:
    :meth:`start_phase`, then every optimizer step :meth:`observe` and :meth:`maybe_recompute`,
    whose :class:`MixtureUpdate` carries the new ``proportions`` the caller gives the loader.

    Args:
        cfg: The ``curriculum.dynamic`` section (``unit: "streams"``).
    """

    method: ClassVar[str] = "softmax"
    units: ClassVar[frozenset[str]] = frozenset({"streams"})
    num_buckets = 1
    """The loader's samplers draw uniformly inside each stream (one bucket)."""

    def __init__(self, cfg: DynamicConfig):
        self.cfg = cfg
        self.probs = np.zeros(0, dtype=np.float64)
        """float64 ``(num_streams,)``: the stream weights now (the phase's proportions until its
        first recompute)."""
        self.window = StreamWindow(cfg.window)
        self.phase_idx: int | None = None
        self.stream_names: list[str] = []
        self.reference: list[npt.NDArray[np.float64]] = []
        """``signal: "excess_loss"``: per stream, each sample's reference loss (nats)."""
        self.mean_losses: list[npt.NDArray[np.float64]] = []
        """``signal: "learnability"``: each stream's mean window loss at the phase's last
        ``learnability_horizon + 1`` recomputes, oldest first (NaN: no sample of it)."""
        self.num_recomputes = 0

    def start_phase(self, view: PhaseView, saved: DynamicState | None) -> MixtureUpdate:
        """Reset the window for a new datamix; the weights start as the phase's proportions.

        Args:
            view: The new phase (stream names, proportions, metric columns).
            saved: A :meth:`state` from a checkpoint, or None. Taken inside this phase, the
                window, weights and loss history are restored exactly (the loader restores its
                own proportions and targets); taken in an earlier phase, only the recompute
                count carries over.

        Returns:
            An empty :class:`MixtureUpdate`: the phase starts at its own proportions, or on a
            resume inside the phase at the weights the loader restores with its own state.

        Raises:
            ConfigError: ``signal: "excess_loss"`` and a stream without the ``reference_metric``
                column, or a non-finite value in it.
        """
        self.phase_idx = view.phase_idx
        self.stream_names = list(view.stream_names)
        self.probs = np.asarray(view.proportions, dtype=np.float64).copy()
        if self.cfg.signal == "excess_loss":
            assert self.cfg.reference_metric is not None  # DynamicConfig requires it
            self.reference = metric_columns(
                view,
                self.cfg.reference_metric,
                "curriculum.dynamic.reference_metric",
                hint=" (score it again with `curriculum-ds score`)",
            )
        self.window = StreamWindow(self.cfg.window)
        self.mean_losses = []
        if saved is not None:
            self.num_recomputes = saved.num_recomputes
            if isinstance(saved, StreamSoftmaxState) and saved.phase_idx == view.phase_idx:
                self.probs = np.asarray(saved.probs, dtype=np.float64).copy()
                self.window = StreamWindow.from_state_dict(saved.window.to_dict())
                self.mean_losses = [
                    np.asarray(m, dtype=np.float64).copy() for m in saved.mean_losses
                ]
        return MixtureUpdate()

    def observe(self, batch: npt.NDArray[np.int64], losses: npt.NDArray[np.float64]) -> None:
        """Record a step's global per-sample losses (as their signal) with their streams.

        Args:
            batch: The step's global batch, int64 ``(global_batch_size, 2)`` of
                ``(stream_idx, sample_idx)``, in global order.
            losses: float64 ``(global_batch_size,)``, each sample's mean loss over its
                loss-bearing tokens (nats), NaN for a sample without any (left out, counted).
        """
        losses = np.asarray(losses, dtype=np.float64)
        if self.cfg.signal == "excess_loss":
            losses = excess_losses(batch, losses, self.reference)
        self.window.push(losses, batch[:, 0])

    def observe_eval(self, global_step: int, losses: Mapping[str, float]) -> None:
        """Held-out losses do not move this method."""

    def maybe_recompute(self, global_step: int) -> MixtureUpdate | None:
        """Every ``recompute_every_n_steps``: per-stream scores and the new stream weights.

        Args:
            global_step: The optimizer step just taken (1-based, global).

        Returns:
            None between recomputes; else the :class:`MixtureUpdate` whose ``proportions`` the
            caller gives the loader and whose ``record`` is the history row (``unit``,
            ``signal``, ``streams``, ``weights``, ``scores``, ``stream_counts``,
            ``window_size``, ``num_non_finite``, ``temperature``, ``floor``; ``mean_losses`` for
            learnability). An empty window, or learnability's first recompute of a phase (no
            earlier loss to compare), keeps the weights: ``kept_previous: true``, no
            proportions.
        """
        if global_step % self.cfg.recompute_every_n_steps != 0:
            return None
        self.num_recomputes += 1
        num_streams = len(self.stream_names)
        counts, means = self.window.stream_means(num_streams)
        record: dict[str, Any] = {
            "unit": "streams",
            "signal": self.cfg.signal,
            "streams": list(self.stream_names),
            "window_size": len(self.window),
            "num_non_finite": int(self.window.num_non_finite),
            "temperature": self.cfg.temperature,
            "floor": self.cfg.floor,
        }
        kept = MixtureUpdate(record=record)
        if len(self.window) == 0:
            record.update(weights=self.probs.tolist(), scores=None, kept_previous=True)
            return kept
        record["stream_counts"] = counts.tolist()
        if self.cfg.signal == "learnability":
            record["mean_losses"] = [None if np.isnan(m) else float(m) for m in means]
            self.mean_losses = [*self.mean_losses, means][-(self.cfg.learnability_horizon + 1) :]
            if len(self.mean_losses) < 2:  # nothing earlier in this phase to compare with
                record.update(weights=self.probs.tolist(), scores=None, kept_previous=True)
                return kept
            scores = learnability_scores(self.mean_losses[0], means)
        else:
            present = counts > 0
            scores = np.where(present, means, means[present].mean())
        self.probs = mixture_probs(scores, temperature=self.cfg.temperature, floor=self.cfg.floor)
        record.update(weights=self.probs.tolist(), scores=scores.tolist())
        return MixtureUpdate(proportions=self.probs.copy(), record=record)

    def state(self) -> StreamSoftmaxState:
        """Everything a resume needs (:class:`~curriculum_ds.dynamic.state.StreamSoftmaxState`).

        The weights, the window, the recompute count, the phase and, for learnability, the
        stream mean losses of the phase's last recomputes; the loader keeps its own proportions
        and targets. Copies.
        """
        return StreamSoftmaxState(
            phase_idx=self.phase_idx,
            signal=self.cfg.signal,
            reference_metric=self.cfg.reference_metric,
            probs=self.probs.copy(),
            window=StreamWindowState.model_validate(self.window.state_dict()),
            num_recomputes=self.num_recomputes,
            mean_losses=tuple(m.copy() for m in self.mean_losses),
        )
