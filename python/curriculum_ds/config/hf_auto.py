"""HF's ``"auto"`` values in a ds_config: accepted where the HF Trainer runs, refused elsewhere.

``transformers``' DeepSpeed integration (``HfTrainerDeepSpeedConfig``) fills a fixed set of
ds_config keys that say ``"auto"``: the batch sizes and GAS, gradient clipping, the optimizer's
lr/betas/eps/weight decay, the warmup scheduler's params and steps, fp16/bf16/amp, and ZeRO's
hidden-size buckets (:data:`HF_AUTO_STAND_INS`). ``curriculum-ds validate`` and ``launch
--script`` accept them: DeepSpeed's structural checks see a stand-in value
(:func:`without_hf_auto`) and :func:`hf_auto_note` says the checks that need the real value are
deferred to the Trainer. The reference loop and the plugin hand the ds_config to DeepSpeed as
it is, which cannot resolve ``"auto"``: :func:`hf_auto_refusals` gives one line per key there.
An ``"auto"`` anywhere else is not HF's and goes to the usual checks. Deterministic.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

__all__ = [
    "BATCH_KEYS",
    "HF_AUTO_STAND_INS",
    "hf_auto_keys",
    "hf_auto_note",
    "hf_auto_refusals",
    "without_hf_auto",
]

_REMOVED = object()

BATCH_KEYS = ("train_micro_batch_size_per_gpu", "gradient_accumulation_steps", "train_batch_size")
"""The batch-size keys: with one of them ``"auto"`` the global batch is the Trainer's to know."""

HF_AUTO_STAND_INS: Mapping[str, Any] = {
    "train_micro_batch_size_per_gpu": 1,
    "gradient_accumulation_steps": 1,
    "train_batch_size": _REMOVED,
    "gradient_clipping": 1.0,
    "optimizer.params.lr": 1e-3,
    "optimizer.params.betas": [0.9, 0.999],
    "optimizer.params.eps": 1e-8,
    "optimizer.params.weight_decay": 0.0,
    "scheduler.params.warmup_min_lr": 0.0,
    "scheduler.params.warmup_max_lr": 1e-3,
    "scheduler.params.warmup_num_steps": 1,
    "scheduler.params.total_num_steps": 2,
    "fp16.enabled": False,
    "bf16.enabled": False,
    "amp.enabled": False,
    "amp.opt_level": "O1",
    "zero_optimization.reduce_bucket_size": _REMOVED,
    "zero_optimization.stage3_prefetch_bucket_size": _REMOVED,
    "zero_optimization.stage3_param_persistence_threshold": _REMOVED,
}
"""The keys HF's Trainer fills in when they are ``"auto"`` (``transformers.integrations.
deepspeed.HfTrainerDeepSpeedConfig``: from ``TrainingArguments``, the model's hidden size and
the run's steps), each with the stand-in DeepSpeed's structural checks see instead
(``_REMOVED``: DeepSpeed's default). The checks that need the real value are the Trainer's."""


def hf_auto_keys(ds_config: Mapping[str, Any]) -> list[str]:
    """The keys of :data:`HF_AUTO_STAND_INS` whose value is exactly ``"auto"``, dotted, in order."""
    return [key for key in HF_AUTO_STAND_INS if _get(ds_config, key) == "auto"]


def without_hf_auto(ds_config: Mapping[str, Any]) -> dict[str, Any]:
    """A deep copy with each HF ``"auto"`` value (:func:`hf_auto_keys`) replaced by its stand-in."""
    out = copy.deepcopy(dict(ds_config))
    for key in hf_auto_keys(ds_config):
        *parents, leaf = key.split(".")
        node = out
        for name in parents:
            node = node[name]
        if HF_AUTO_STAND_INS[key] is _REMOVED:
            del node[leaf]
        else:
            node[leaf] = copy.deepcopy(HF_AUTO_STAND_INS[key])
    return out


def hf_auto_refusals(ds_config: Mapping[str, Any]) -> list[str]:
    """One line per HF ``"auto"`` value, for the loops that read the ds_config as it is."""
    return [
        f'{key}: "auto" is filled in only by the HF Trainer\'s DeepSpeed integration; give a '
        "value (the reference loop and the plugin read the ds_config as it is)"
        for key in hf_auto_keys(ds_config)
    ]


def hf_auto_note(keys: list[str]) -> str:
    """The note for accepted HF ``"auto"`` values: the checks that need them are the Trainer's."""
    return (
        f'"auto" in {", ".join(keys)}: the checks that need these values are deferred to the HF '
        "Trainer (CurriculumTrainer fills them from TrainingArguments as HF does, then checks "
        'them); the reference loop and the plugin refuse "auto"'
    )


def _get(ds_config: Mapping[str, Any], key: str) -> Any:
    node: Any = ds_config
    for name in key.split("."):
        if not isinstance(node, Mapping):
            return None
        node = node.get(name)
    return node
