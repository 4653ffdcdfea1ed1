"""Adaptive mixing: re-weighting over difficulty buckets or over streams, from a signal.

Module map:

* ``weights.py``: ``mixture_probs``, the one formula ``floor + (1 - K·floor)·softmax(s / T)``;
* ``signals.py``: the per-sample and per-stream signals (``loss``, ``excess_loss`` over a
  reference model's metric column, ``learnability``) and the metric columns they read;
* ``buckets.py``: ``DynamicReweighter``, ``unit: "buckets"`` (percentile buckets of the signal
  inside each stream; the Rust rolling window and bucketing kernels);
* ``streams.py`` + ``window.py``: ``StreamReweighter``, ``unit: "streams"`` (weights over the
  phase's streams that replace its proportions), and its rolling window of signals by stream;
* ``update.py``: ``MixtureUpdate``, what a recompute hands back (the loader's new buckets or
  proportions, and the ``curriculum_history.jsonl`` record).

:func:`make_reweighter` builds the one the config asks for. Both have the same surface:
``start_phase(loader, saved)``, ``observe(batch, losses)``, ``maybe_recompute(step)``,
``state_dict()``, ``sampler_probs``, ``num_buckets``, ``probs``, ``num_recomputes``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from curriculum_ds.dynamic.buckets import DynamicReweighter, bucket_scores
from curriculum_ds.dynamic.streams import StreamReweighter
from curriculum_ds.dynamic.update import BucketUpdate, MixtureUpdate
from curriculum_ds.dynamic.weights import FLOOR_SLACK, bucket_probs, mixture_probs

if TYPE_CHECKING:
    from curriculum_ds.config import DynamicConfig

__all__ = [
    "FLOOR_SLACK",
    "BucketUpdate",
    "DynamicReweighter",
    "MixtureUpdate",
    "Reweighter",
    "StreamReweighter",
    "bucket_probs",
    "bucket_scores",
    "make_reweighter",
    "mixture_probs",
]

Reweighter = DynamicReweighter | StreamReweighter
"""Either re-weighting (``dynamic.unit``)."""


def make_reweighter(cfg: DynamicConfig, *, seed: int) -> Reweighter:
    """The re-weighting of ``cfg.unit``: :class:`DynamicReweighter` or :class:`StreamReweighter`."""
    if cfg.unit == "streams":
        return StreamReweighter(cfg, seed=seed)
    return DynamicReweighter(cfg, seed=seed)
