"""Re-weighting over difficulty buckets: per-sample signals → percentile buckets → the sampler.

Every step the training loop all-gathers the step's per-sample losses (one collective) and every
rank pushes the same values, in the same order, into its own :class:`RollingWindow`. Edges, bucket
scores and weights are therefore bit-identical on every rank and the per-stream
:class:`BucketSampler` objects stay in lockstep without broadcasting batches.

Weights (:func:`~curriculum_ds.dynamic.weights.mixture_probs`)::

    probs_b = floor + (1 - num_buckets * floor) * softmax(score / temperature)_b

Per-bucket score: the mean signal (nats) of the window's values in the bucket; a bucket left
empty by ties gets the mean of the populated buckets. The signal is a sample's loss (``signal:
"loss"``, the default) or its excess loss over a reference model (``"excess_loss"``,
:mod:`curriculum_ds.dynamic.signals`).

Non-finite losses (a sample without loss-bearing tokens, an overflow) are left out of the window
and counted (case C06); a recompute over an empty window keeps the previous weights.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np
import numpy.typing as npt

from curriculum_ds.dynamic.registry import register
from curriculum_ds.dynamic.signals import excess_losses, metric_columns
from curriculum_ds.dynamic.state import BucketSoftmaxState, BucketWindowState
from curriculum_ds.dynamic.update import MixtureUpdate, PhaseView
from curriculum_ds.dynamic.weights import mixture_probs
from curriculum_ds.kernels import RollingWindow, assign_buckets, bucket_edges

if TYPE_CHECKING:
    from curriculum_ds.config import DynamicConfig
    from curriculum_ds.dynamic.state import DynamicState

__all__ = ["BucketReweighter", "bucket_scores"]


def bucket_scores(
    values: npt.NDArray[np.floating[Any]], edges: npt.NDArray[np.float64], num_buckets: int
) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.int64]]:
    """Mean value per percentile bucket of a window, and the count per bucket.

    A bucket left empty (many tied values) gets the mean of the populated buckets, so it neither
    dominates nor vanishes.

    Args:
        values: The window's finite values (per-sample losses, nats), float ``(N,)``, ``N ≥ 1``.
        edges: Their percentile edges (:func:`~curriculum_ds.kernels.bucket_edges`), float64
            ``(num_buckets - 1,)``.
        num_buckets: ``B``.

    Returns:
        ``(scores, counts)``: float64 and int64 arrays of shape ``(num_buckets,)``. Deterministic.

    Raises:
        ValueError: If ``values`` is empty.
        BucketingError: If a value is NaN.
    """
    if len(values) == 0:
        raise ValueError("bucket_scores: the window has no value (keep the previous weights)")
    idx = assign_buckets(values, edges)
    counts = np.bincount(idx, minlength=num_buckets).astype(np.int64)
    sums = np.bincount(idx, weights=values.astype(np.float64), minlength=num_buckets)
    scores = np.divide(sums, counts, out=np.full(num_buckets, np.nan), where=counts > 0)
    populated = counts > 0
    scores[~populated] = scores[populated].mean()
    return scores, counts


@register
class BucketReweighter:
    """``method: "softmax"`` over ``unit: "buckets"``: rolling window, per-sample buckets, probs.

    Lifecycle per phase: :meth:`start_phase` (new window; samples bucketed by the static metric),
    then every optimizer step :meth:`observe` (the step's global per-sample losses) and
    :meth:`maybe_recompute` (every ``recompute_every_n_steps``: edges, scores, probs, buckets).
    It reads only the phase's :class:`PhaseView`: the bucket assignments and probabilities it
    computes are handed back as a :class:`MixtureUpdate` (from :meth:`start_phase` and
    :meth:`maybe_recompute`), which the caller applies to the loader.
    Everything is a deterministic function of the observed losses, so ranks that observe the same
    all-gathered losses hold bit-identical state.

    Args:
        cfg: The ``curriculum.dynamic`` section.
    """

    method: ClassVar[str] = "softmax"
    units: ClassVar[frozenset[str]] = frozenset({"buckets"})

    def __init__(self, cfg: DynamicConfig):
        self.cfg = cfg
        self.num_buckets = cfg.num_buckets
        self.probs = np.full(cfg.num_buckets, 1.0 / cfg.num_buckets)
        self.window = RollingWindow(cfg.window)
        self.phase_idx: int | None = None
        self.last_loss: list[npt.NDArray[np.float32]] = []
        """Per stream: each sample's latest finite loss (nats), NaN while unseen in this phase."""
        self.static_buckets: list[npt.NDArray[np.int64]] = []
        """Per stream: each sample's bucket by the static metric column."""
        self.buckets: list[npt.NDArray[np.int64]] = []
        """Per stream: the assignment the stream's BucketSampler holds now."""
        self.edges: npt.NDArray[np.float64] | None = None  # of the last recompute in this phase
        self.num_recomputes = 0
        self.reference: list[npt.NDArray[np.float64]] = []
        """``signal: "excess_loss"``: per stream, each sample's reference loss (nats)."""

    def start_phase(self, view: PhaseView, saved: DynamicState | None) -> MixtureUpdate:
        """Reset the window for a new datamix and bucket its samples by the static metric.

        **Phase start.** The probabilities carry over from the previous phase (uniform at the
        start of a run) until the first recompute with a non-empty window. A bucket is a
        difficulty percentile in every phase, so the learned preference over percentiles stays
        meaningful across a swap: resetting to uniform would discard it, and a recompute needs
        the new phase's losses, which do not exist yet. The new phase's samples are bucketed by
        the static metric until then (``curriculum-ds curve`` says so under its table).

        Args:
            view: The new phase (its streams' names and metric columns).
            saved: A :meth:`state` from a checkpoint, or None. Taken inside this phase, the
                window, latest losses, edges, bucket assignment and probabilities are restored
                exactly; taken in an earlier phase (a checkpoint on a phase boundary), only the
                probabilities and the recompute count carry over, as they would have without the
                interruption (uniform instead when the checkpoint's run weighted streams, or
                another number of buckets: both may change at a phase boundary).

        Returns:
            The :class:`MixtureUpdate` with the bucket assignment per stream (int64
            ``(num_samples,)`` each) and the bucket probabilities, for the loader's samplers.

        Raises:
            ConfigError: If a stream has no ``static_metric`` column, or a non-finite value in
                it (named by stream, column and sample).
        """
        columns = metric_columns(
            view,
            self.cfg.static_metric,
            "curriculum.dynamic.static_metric",
            hint=" (re-run `curriculum-ds prepare`)",
        )
        edges = bucket_edges(np.concatenate(columns), self.num_buckets)
        self.phase_idx = view.phase_idx
        if self.cfg.signal == "excess_loss":
            assert self.cfg.reference_metric is not None  # DynamicConfig requires it
            self.reference = metric_columns(
                view, self.cfg.reference_metric, "curriculum.dynamic.reference_metric"
            )
        self.static_buckets = [assign_buckets(c, edges) for c in columns]
        self.last_loss = [np.full(n, np.nan, dtype=np.float32) for n in view.num_samples]
        self.window = RollingWindow(self.cfg.window)
        self.edges = None
        buckets = None
        if saved is not None:
            self.probs = self._carried_probs(saved)
            self.num_recomputes = saved.num_recomputes
            if isinstance(saved, BucketSoftmaxState) and saved.phase_idx == view.phase_idx:
                self.window = RollingWindow.from_state_dict(saved.window.to_dict())
                self.last_loss = [np.asarray(a, dtype=np.float32).copy() for a in saved.last_loss]
                saved_edges = saved.edges
                self.edges = (
                    None if saved_edges is None else np.asarray(saved_edges, dtype=np.float64)
                )
                if saved.buckets is not None:
                    buckets = [np.asarray(b, dtype=np.int64) for b in saved.buckets]
        if buckets is None:
            buckets = self._sample_buckets()
        # else: the assignment of the last recompute, not one rebuilt from losses seen after it
        self.buckets = buckets
        return MixtureUpdate(buckets=buckets, bucket_probs=self.probs.copy())

    def _carried_probs(self, saved: DynamicState) -> npt.NDArray[np.float64]:
        """The bucket probabilities a saved state hands this phase, float64 ``(num_buckets,)``.

        The saved ones when they are bucket probabilities of this ``num_buckets``; uniform when
        the state is of ``unit: "streams"`` (its ``probs`` are stream weights) or of another
        ``num_buckets`` (both may change at a phase boundary): a preference over other buckets
        has no meaning here.
        """
        probs = np.asarray(saved.probs, dtype=np.float64)
        if saved.unit != "buckets" or probs.shape != (self.num_buckets,):
            return np.full(self.num_buckets, 1.0 / self.num_buckets)
        return probs.copy()

    def observe(self, batch: npt.NDArray[np.int64], losses: npt.NDArray[np.float64]) -> None:
        """Record a step's global per-sample losses (as their signal: loss or excess loss).

        Args:
            batch: The step's global batch, int64 ``(global_batch_size, 2)`` of
                ``(stream_idx, sample_idx)``, in global order.
            losses: float64 ``(global_batch_size,)``, each sample's mean loss over its
                loss-bearing tokens (nats), NaN for a sample without any. Non-finite values are
                left out of the window and counted (case C06); the sample stays unseen.
        """
        losses = np.asarray(losses, dtype=np.float64)
        if self.cfg.signal == "excess_loss":
            losses = excess_losses(batch, losses, self.reference)
        self.window.push(losses)  # non-finite values are skipped and counted by the window
        finite = np.isfinite(losses)
        streams = batch[:, 0]
        if len(self.last_loss) == 1:
            self.last_loss[0][batch[finite, 1]] = losses[finite]
            return
        for stream, last in enumerate(self.last_loss):
            mask = finite & (streams == stream)
            last[batch[mask, 1]] = losses[mask]

    def observe_eval(self, global_step: int, losses: Mapping[str, float]) -> None:
        """Held-out losses do not move this method."""

    def maybe_recompute(self, global_step: int) -> MixtureUpdate | None:
        """Every ``recompute_every_n_steps``: new edges, scores, probs and sample buckets.

        Args:
            global_step: The optimizer step just taken (1-based, global).

        Returns:
            None between recomputes; else the :class:`MixtureUpdate` whose ``record`` is the
            history record (``unit``, ``signal``, ``weights``, ``scores``, ``edges``,
            ``bucket_counts``, ``window_size``, ``num_non_finite``, ``temperature``, ``floor``)
            and whose ``buckets`` and ``bucket_probs`` the caller applies to the loader. An
            empty window (start-up, right after a phase swap, or only non-finite losses) keeps
            the previous weights and buckets and says so with ``kept_previous: true``.
        """
        if global_step % self.cfg.recompute_every_n_steps != 0:
            return None
        self.num_recomputes += 1
        record: dict[str, Any] = {
            "unit": "buckets",
            "signal": self.cfg.signal,
            "window_size": len(self.window),
            "num_non_finite": int(self.window.num_non_finite),
            "temperature": self.cfg.temperature,
            "floor": self.cfg.floor,
        }
        if len(self.window) == 0:
            record.update(weights=self.probs.tolist(), scores=None, kept_previous=True)
            return MixtureUpdate(record=record)
        edges = self.window.edges(self.num_buckets)
        scores, counts = bucket_scores(self.window.values(), edges, self.num_buckets)
        self.probs = mixture_probs(scores, temperature=self.cfg.temperature, floor=self.cfg.floor)
        self.edges = edges
        self.buckets = self._sample_buckets()
        record.update(
            weights=self.probs.tolist(),
            scores=scores.tolist(),
            edges=edges.tolist(),
            bucket_counts=counts.tolist(),
        )
        return MixtureUpdate(buckets=self.buckets, bucket_probs=self.probs.copy(), record=record)

    def _sample_buckets(self) -> list[npt.NDArray[np.int64]]:
        """Seen samples by their latest loss against the last recompute's edges; unseen by metric.

        Before the first recompute of a phase every sample keeps its static-metric bucket.
        """
        buckets = []
        for last, static in zip(self.last_loss, self.static_buckets, strict=True):
            if self.edges is None:
                buckets.append(static)
                continue
            b = static.copy()
            seen = np.flatnonzero(np.isfinite(last))
            b[seen] = assign_buckets(last[seen], self.edges)
            buckets.append(b)
        return buckets

    def state(self) -> BucketSoftmaxState:
        """Everything a resume needs (:class:`~curriculum_ds.dynamic.state.BucketSoftmaxState`).

        The probabilities, the window, each sample's latest signal and bucket (int8: buckets
        ≤ 64), the last recompute's edges, the recompute count and the phase; the sampler
        counters are the loader's. Copies.
        """
        signal = self.cfg.signal
        return BucketSoftmaxState(
            phase_idx=self.phase_idx,
            signal=signal,
            reference_metric=None if signal == "loss" else self.cfg.reference_metric,
            probs=self.probs.copy(),
            window=BucketWindowState.model_validate(self.window.state_dict()),
            last_loss=tuple(a.copy() for a in self.last_loss),
            buckets=tuple(b.astype(np.int8) for b in self.buckets),
            edges=None if self.edges is None else self.edges.copy(),
            num_recomputes=self.num_recomputes,
        )
