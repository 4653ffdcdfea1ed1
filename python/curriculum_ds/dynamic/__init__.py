"""Adaptive mixing: re-weighting over difficulty buckets or over streams, from a signal.

Module map:

* ``protocol.py``: :class:`Reweighter`, the surface of every method (``start_phase``,
  ``observe``, ``observe_eval``, ``maybe_recompute``, ``state``);
* ``registry.py``: methods by name (``dynamic.method``) and the units each supports;
  :func:`make_reweighter` builds the one a config asks for;
* ``update.py``: :class:`PhaseView` (what a method reads of a phase) and :class:`MixtureUpdate`
  (what it hands back: buckets and bucket probabilities, stream proportions, loss weights, a
  temporary mixture, the ``curriculum_history.jsonl`` record), which the loader applies in one
  place (``PhaseLoader.apply``);
* ``state.py``: each method's typed state, one model per (unit, method) in a tagged union
  (:data:`DynamicState`, read by :func:`parse_dynamic_state`; ``to_dict`` is the saved form):
  softmax's there, the published methods' in ``method_states.py``, what they share (the rolling
  windows, the common keys) in ``state_common.py``;
* ``weights.py``: ``mixture_probs``, the one formula ``floor + (1 - K·floor)·softmax(s / T)``;
* ``signals.py``: the per-sample and per-stream signals (``loss``, ``excess_loss`` over a
  reference model's metric column, ``learnability``) and the metric columns they read;
* ``buckets.py``: :class:`BucketReweighter`, ``method: "softmax"`` over ``unit: "buckets"``
  (percentile buckets of the signal inside each stream; the Rust rolling window and bucketing
  kernels);
* ``aioli.py`` + ``aioli_rule.py``, ``skillit.py`` + ``skillit_rule.py``: ``"aioli"`` and
  ``"skillit"`` over ``"streams"``, which steer by held-out losses evaluated at their own steps
  (:class:`ProbingReweighter`; ``eval_losses.py`` reads them by stream name);
* ``streams.py`` + ``window.py``: :class:`StreamReweighter`, ``"softmax"`` over ``"streams"``
  (weights over the phase's streams that replace its proportions), and its rolling window of
  signals by stream;
* ``doremi.py``: :class:`DoReMiReweighter`, ``"doremi"`` over ``"streams"`` (DoReMi's
  exponentiated-gradient step on the clipped excess loss, and the running mean of its weights);
* ``steering.py``: :class:`FileReweighter`, ``"file"``: an operator's weights file, read on
  rank 0 at each boundary, journaled (``mixture_journal.jsonl``) and replayed on a resume;
* ``rank0.py``: :func:`decide_on_rank0`, a decision of global rank 0 broadcast to every rank;
* ``odm.py``: :class:`ODMReweighter`, ``"odm"`` (online data mixing's smoothed-mean EXP3);
* ``ado.py`` + ``ado_fit.py``: :class:`ADOReweighter`, ``"ado"`` (a scaling law per stream,
  fitted on rank 0 and broadcast with ``rank0.broadcast_from_rank0``, and ADO's policy).
"""

from __future__ import annotations

from curriculum_ds.dynamic.ado import ADOReweighter
from curriculum_ds.dynamic.aioli import AioliReweighter
from curriculum_ds.dynamic.buckets import BucketReweighter, bucket_scores
from curriculum_ds.dynamic.doremi import DoReMiReweighter
from curriculum_ds.dynamic.odm import ODMReweighter
from curriculum_ds.dynamic.protocol import ProbingReweighter, Reweighter
from curriculum_ds.dynamic.rank0 import decide_on_rank0
from curriculum_ds.dynamic.registry import make_reweighter, methods, register
from curriculum_ds.dynamic.skillit import SkillitReweighter
from curriculum_ds.dynamic.state import DynamicState, parse_dynamic_state
from curriculum_ds.dynamic.steering import FileReweighter
from curriculum_ds.dynamic.streams import StreamReweighter
from curriculum_ds.dynamic.update import MixtureUpdate, PhaseView
from curriculum_ds.dynamic.weights import FLOOR_SLACK, bucket_probs, mixture_probs

__all__ = [
    "FLOOR_SLACK",
    "ADOReweighter",
    "AioliReweighter",
    "BucketReweighter",
    "DoReMiReweighter",
    "DynamicState",
    "FileReweighter",
    "MixtureUpdate",
    "ODMReweighter",
    "PhaseView",
    "ProbingReweighter",
    "Reweighter",
    "SkillitReweighter",
    "StreamReweighter",
    "bucket_probs",
    "bucket_scores",
    "decide_on_rank0",
    "make_reweighter",
    "methods",
    "mixture_probs",
    "parse_dynamic_state",
    "register",
]
