"""The types of the DeepSpeed keys curriculum_ds reads: a number, or ``"auto"``.

curriculum_ds reads a few DeepSpeed keys itself (:data:`READ_KEYS`: the peak learning rate and
the batch sizes); DeepSpeed does not check their types before ``deepspeed.initialize``, and a
string such as ``"0.001"`` would reach the optimizer. :func:`deepspeed_type_errors` refuses,
one line per key, anything but a finite number of the key's kind or exactly the string
``"auto"`` (the HF Trainer's placeholder). Whether ``"auto"`` is accepted where the value is
used is decided there (the reference loop needs a value); this is only the type check.
Deterministic; reads no file.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from curriculum_ds.config.messages import show_value

__all__ = ["READ_KEYS", "deepspeed_type_errors", "is_number_or_auto"]

AUTO = "auto"
"""The HF Trainer's placeholder for a value it fills in from its ``TrainingArguments``."""

READ_KEYS: tuple[tuple[str, bool], ...] = (
    ("optimizer.params.lr", False),
    ("train_micro_batch_size_per_gpu", True),
    ("gradient_accumulation_steps", True),
    ("train_batch_size", True),
)
"""``(JSON path, integer)`` of each DeepSpeed key curriculum_ds reads; ``integer``: the key
counts samples or micro-batches (an int), else any finite real number."""


def is_number_or_auto(value: Any, *, integer: bool) -> bool:
    """True for a finite number (an int when ``integer``; never a bool) or exactly ``"auto"``.

    ``"0.001"``, ``[["0.001"]]``, NaN, ±inf, ``true`` and ``4.0`` for an integer key are False.
    """
    if value == AUTO and isinstance(value, str):
        return True
    if isinstance(value, bool):
        return False
    if integer:
        return isinstance(value, int)
    return isinstance(value, int) or (isinstance(value, float) and math.isfinite(value))


def _lookup(ds_config: Mapping[str, Any], path: str) -> tuple[bool, Any]:
    """``(found, value)`` at a dotted ``path`` through nested objects."""
    node: Any = ds_config
    for part in path.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return False, None
        node = node[part]
    return True, node


def deepspeed_type_errors(ds_config: Mapping[str, Any]) -> dict[str, str]:
    """The :data:`READ_KEYS` whose value is neither a number of their kind nor ``"auto"``.

    Args:
        ds_config: the ds_config (parsed JSON; the ``curriculum`` key is ignored). Not modified.

    Returns:
        JSON path → one line ``<path>: expected a number or "auto", got <value>`` (``an
        integer`` for the batch-size keys), in :data:`READ_KEYS` order; empty when every key
        present is well typed. A missing key is not this check's concern.
    """
    errors: dict[str, str] = {}
    for path, integer in READ_KEYS:
        found, value = _lookup(ds_config, path)
        if found and not is_number_or_auto(value, integer=integer):
            kind = "an integer" if integer else "a number"
            errors[path] = f'{path}: expected {kind} or "{AUTO}", got {_shown(value)}'
    return errors


def _shown(value: Any) -> str:
    """The value as JSON, cut past 60 characters (a fuzzed value may be huge or deep)."""
    try:
        text = show_value(value)
    except RecursionError:
        text = type(value).__name__
    return text if len(text) <= 60 else text[:57] + "..."
