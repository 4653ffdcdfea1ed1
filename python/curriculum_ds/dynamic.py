"""Dynamic bucket re-weighting: per-sample losses → percentile buckets → softmax + floor → sampler.

Every step the training loop all-gathers the step's per-sample losses (one collective) and every
rank pushes the same values, in the same order, into its own :class:`RollingWindow`. Edges, bucket
scores and weights are therefore bit-identical on every rank and the per-stream
:class:`BucketSampler` objects stay in lockstep without broadcasting batches.

Weights (the formula of Soup's dynamic curriculum and the exploration floor of DoReMi/ODM)::

    probs_b = floor + (1 - num_buckets * floor) * softmax(score / temperature)_b

which is ≥ ``floor`` for every bucket and sums to exactly 1 without renormalising (clamping and
then renormalising, the common mistake, breaks the floor). The softmax subtracts the maximum
first, so a tiny temperature gives a one-hot softmax, never NaN or inf.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from curriculum_ds.kernels import RollingWindow, assign_buckets, bucket_edges

if TYPE_CHECKING:
    from curriculum_ds.config import DynamicConfig
    from curriculum_ds.loader import PhaseLoader

__all__ = ["DynamicReweighter", "bucket_probs", "bucket_scores"]


def bucket_probs(
    scores: npt.ArrayLike, *, temperature: float, floor: float
) -> npt.NDArray[np.float64]:
    """Bucket probabilities ``floor + (1 - B * floor) * softmax(scores / temperature)``.

    Args:
        scores: Per-bucket score (mean recent loss, nats), float ``(num_buckets,)``, finite.
        temperature: Softmax temperature, > 0. Small values approach argmax.
        floor: Minimum probability per bucket, ``0 < floor <= 1 / num_buckets``.

    Returns:
        float64 ``(num_buckets,)``, every entry ≥ ``floor``, summing to 1 (to rounding).

    Raises:
        ValueError: If temperature ≤ 0, the floor is out of range, or a score is not finite.
    """
    s = np.asarray(scores, dtype=np.float64)
    if not temperature > 0:
        raise ValueError(f"temperature must be > 0, got {temperature}")
    if not 0 < floor * len(s) <= 1 or floor <= 0:
        raise ValueError(f"floor must be in (0, 1/num_buckets], got {floor} with {len(s)} buckets")
    if not np.all(np.isfinite(s)):
        raise ValueError(f"bucket scores must be finite, got {s.tolist()}")
    z = (s - s.max()) / temperature  # ≤ 0: exp never overflows; the max bucket gets exp(0) = 1
    e = np.exp(z)
    softmax = e / e.sum()
    return floor + (1.0 - len(s) * floor) * softmax


def bucket_scores(
    values: npt.NDArray[np.floating[Any]], edges: npt.NDArray[np.float64], num_buckets: int
) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.int64]]:
    """Mean value per percentile bucket of a window, and the count per bucket.

    A bucket left empty (many tied values) gets the mean of the populated buckets, so it neither
    dominates nor vanishes. Returns float64 and int64 arrays of shape ``(num_buckets,)``.
    """
    idx = assign_buckets(values, edges)
    counts = np.bincount(idx, minlength=num_buckets).astype(np.int64)
    sums = np.bincount(idx, weights=values.astype(np.float64), minlength=num_buckets)
    scores = np.divide(sums, counts, out=np.full(num_buckets, np.nan), where=counts > 0)
    populated = counts > 0
    scores[~populated] = scores[populated].mean()
    return scores, counts


class DynamicReweighter:
    """The re-weighting state of a run: rolling window, per-sample buckets, bucket probabilities.

    Args:
        cfg: The ``curriculum.dynamic`` section.
        seed: The run's seed (unused by the maths; kept for the record).
    """

    def __init__(self, cfg: DynamicConfig, *, seed: int):
        self.cfg = cfg
        self.seed = seed
        self.num_buckets = cfg.num_buckets
        self.probs = np.full(cfg.num_buckets, 1.0 / cfg.num_buckets)
        self.window = RollingWindow(cfg.window)
        self.last_loss: list[npt.NDArray[np.float32]] = []
        self.static_buckets: list[npt.NDArray[np.int64]] = []
        self.edges: npt.NDArray[np.float64] | None = None  # of the last recompute in this phase
        self.num_recomputes = 0

    def start_phase(self, loader: PhaseLoader, saved: dict[str, Any] | None) -> None:
        """Reset the window for a new datamix and bucket its samples by the static metric.

        With ``saved`` (a checkpoint taken inside this phase) the window, the latest losses and
        the probabilities are restored exactly instead.
        """
        metric = self.cfg.static_metric
        columns = [np.asarray(info.metrics[metric], dtype=np.float64) for info in loader.infos]
        edges = bucket_edges(np.concatenate(columns), self.num_buckets)
        self.static_buckets = [assign_buckets(c, edges) for c in columns]
        self.last_loss = [np.full(info.num_samples, np.nan, dtype=np.float32) for info in loader.infos]
        self.window = RollingWindow(self.cfg.window)
        self.edges = None
        if saved is not None:
            self.probs = np.asarray(saved["probs"], dtype=np.float64)
            self.window = RollingWindow.from_state_dict(saved["window"])
            self.last_loss = [np.asarray(a, dtype=np.float32) for a in saved["last_loss"]]
            self.num_recomputes = int(saved["num_recomputes"])
            edges = saved["edges"]
            self.edges = None if edges is None else np.asarray(edges, dtype=np.float64)
        self._refresh_buckets(loader)

    def observe(
        self, loader: PhaseLoader, batch: npt.NDArray[np.int64], losses: npt.NDArray[np.float64]
    ) -> None:
        """Record a step's per-sample losses (float64 ``(global_batch,)``; NaN = no tokens)."""
        self.window.push(losses)  # non-finite values are skipped and counted by the window
        finite = np.isfinite(losses)
        for stream, last in enumerate(self.last_loss):
            mask = finite & (batch[:, 0] == stream)
            last[batch[mask, 1]] = losses[mask]

    def maybe_recompute(self, global_step: int, loader: PhaseLoader) -> dict[str, Any] | None:
        """Every ``recompute_every_n_steps``: new edges, scores, probs and sample buckets.

        Returns the history record (``weights``, ``scores``, ``edges``, ``bucket_counts``,
        ``window_size``, ``num_non_finite``) or None between recomputes. An empty window (start-up,
        right after a phase swap, or only non-finite losses) keeps the previous weights.
        """
        if global_step % self.cfg.recompute_every_n_steps != 0:
            return None
        self.num_recomputes += 1
        record: dict[str, Any] = {"window_size": len(self.window),
                                  "num_non_finite": int(self.window.num_non_finite)}
        if len(self.window) == 0:
            record.update(weights=self.probs.tolist(), scores=None, kept_previous=True)
            return record
        edges = self.window.edges(self.num_buckets)
        scores, counts = bucket_scores(self.window.values(), edges, self.num_buckets)
        self.probs = bucket_probs(scores, temperature=self.cfg.temperature, floor=self.cfg.floor)
        self.edges = edges
        self._refresh_buckets(loader)
        record.update(weights=self.probs.tolist(), scores=scores.tolist(), edges=edges.tolist(),
                      bucket_counts=counts.tolist())
        return record

    def _refresh_buckets(self, loader: PhaseLoader) -> None:
        """Seen samples by their latest loss against the last recompute's edges; unseen by metric.

        Before the first recompute of a phase every sample keeps its static-metric bucket.
        """
        for sampler, last, static in zip(loader.samplers, self.last_loss, self.static_buckets, strict=True):
            buckets = static.copy()
            if self.edges is not None:
                seen = np.isfinite(last)
                buckets[seen] = assign_buckets(last[seen], self.edges)
            sampler.set_buckets(buckets)

    def state_dict(self) -> dict[str, Any]:
        """Window, latest losses, probabilities: plain numpy arrays and ints."""
        return {
            "probs": self.probs.copy(),
            "window": self.window.state_dict(),
            "last_loss": [a.copy() for a in self.last_loss],
            "edges": None if self.edges is None else self.edges.copy(),
            "num_recomputes": self.num_recomputes,
        }
