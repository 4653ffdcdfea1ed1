"""Preflight: the checks every run's config, model and data pass before any rank starts.

One package that ``curriculum-ds validate``, ``curriculum-ds launch``, the plugin API
(``curriculum_ds.initialize``/``attach``) and training itself reach through
:func:`curriculum_ds.config.load_config`:

* the DeepSpeed part of the ds_config, by DeepSpeed's own config models, unknown top-level keys
  with a did-you-mean, scheduler parameters, monitor packages
  (:func:`deepspeed_config_errors`, implemented in :mod:`curriculum_ds.config.deepspeed`);
* the model's context: every phase's ``max_seq_len`` against the positions the model can embed
  (:func:`check_model_context`, from ``--model``'s ``config.json`` or a live module;
  :mod:`~curriculum_ds.preflight.model`);
* with ``check_data=True``, the data: :func:`check_streams` checks each stream of a validated
  curriculum (shard files against ``index.json``, a decoded probe, one tokenizer and vocabulary
  for all streams, token ids within the model's vocabulary, finite values in the dynamic
  re-weighting's metric column; :mod:`~curriculum_ds.preflight.data`), and :func:`stream_infos`
  reads each distinct stream's :class:`~curriculum_ds.data.StreamInfo` once
  (:mod:`~curriculum_ds.preflight.streams`).

Every refusal is a :class:`~curriculum_ds.errors.ConfigError` of one line per problem naming the
JSON path (and phase). Reads the model's config.json, the streams' metadata, shard headers and a
few samples; touches no RNG; deterministic.
"""

from __future__ import annotations

from curriculum_ds.config.deepspeed import deepspeed_config_errors
from curriculum_ds.preflight.data import check_streams
from curriculum_ds.preflight.model import POSITION_KEYS, check_model_context, model_max_positions
from curriculum_ds.preflight.run import check_run
from curriculum_ds.preflight.streams import (
    read_stream_info_checked,
    stream_infos,
    verify_stream_checked,
)

__all__ = [
    "POSITION_KEYS",
    "check_model_context",
    "check_run",
    "check_streams",
    "deepspeed_config_errors",
    "model_max_positions",
    "read_stream_info_checked",
    "stream_infos",
    "verify_stream_checked",
]
