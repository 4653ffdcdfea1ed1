"""A user's own model for the reference loop: ``--model-factory module:function``.

The function is called as ``function(vocab_size=V, max_seq_len=L)`` (the data's vocabulary, the
largest ``vocab_size`` ``prepare`` recorded over the schedule's streams, and the schedule's
longest ``max_seq_len``) and returns a ``torch.nn.Module``, or a pair ``(module, forward)``
where ``forward(engine, mb) -> logits`` of shape ``(batch, seq_len, vocab)`` is how a
micro-batch goes through the engine. Without a ``forward`` the engine is called as
``engine(mb.input_ids, attention_mask=mb.attention_mask)``. For a model in nanoGPT's convention
(``forward(idx, targets=None) -> (logits, loss)``, with logits of the last position only when
``targets`` is None) return ``(model, nanogpt_forward)``; its context, ``config.block_size``, is
read by the preflight like any model's.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from curriculum_ds.errors import ConfigError

if TYPE_CHECKING:
    from collections.abc import Callable

    from curriculum_ds.config import CurriculumConfig
    from curriculum_ds.plugin import MicroBatch

__all__ = ["build_from_factory", "data_vocab_size", "load_factory", "nanogpt_forward"]


def load_factory(spec: str) -> Callable[..., Any]:
    """The function ``module:function`` names (the module imported from ``sys.path``).

    Raises:
        ConfigError: ``spec`` is not ``module:function``, the module cannot be imported or has no
            such callable (one line naming ``--model-factory`` and the value).
    """
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise ConfigError(f"--model-factory {spec}: expected module:function")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ConfigError(f"--model-factory {spec}: cannot import {module_name}: {exc}") from None
    function = getattr(module, attr, None)
    if not callable(function):
        raise ConfigError(f"--model-factory {spec}: {module_name} has no function {attr}")
    return function


def data_vocab_size(cfg: CurriculumConfig) -> int:
    """The largest ``vocab_size`` ``prepare`` recorded over the schedule's streams.

    Raises:
        ConfigError: No stream records one.
    """
    from curriculum_ds.data import read_stream_info

    known = [
        v
        for p in cfg.schedule
        for s in p.train_loader.streams
        if (v := read_stream_info(s.local, remote=s.remote).vocab_size) is not None
    ]
    if not known:
        raise ConfigError("curriculum.schedule: no stream records its vocab_size; pass --model")
    return max(known)


def build_from_factory(
    spec: str, cfg: CurriculumConfig, max_seq_len: int
) -> tuple[Any, Callable[[Any, MicroBatch], Any] | None]:
    """Call the factory ``spec`` names: ``(module, forward or None)``.

    Raises:
        ConfigError: The factory cannot be loaded, or returns neither a ``torch.nn.Module`` nor
            a ``(module, forward)`` pair.
    """
    from torch import nn

    made = load_factory(spec)(vocab_size=data_vocab_size(cfg), max_seq_len=max_seq_len)
    model, forward = made if isinstance(made, tuple) and len(made) == 2 else (made, None)
    if not isinstance(model, nn.Module) or (forward is not None and not callable(forward)):
        raise ConfigError(
            f"--model-factory {spec}: returned {type(made).__name__}, expected a torch.nn.Module "
            "or (module, forward)"
        )
    return model, forward


def nanogpt_forward(engine: Any, mb: MicroBatch) -> Any:
    """Logits of every position from a model in nanoGPT's convention, through ``engine``.

    nanoGPT's ``GPT.forward(idx, targets=None)`` returns ``(logits, loss)`` and, when
    ``targets`` is None, the logits of the last position only; given targets, those of every
    position. The targets passed are the input ids themselves (always in range; the model's own
    loss is discarded: the curriculum's token-weighted loss is computed from the logits).
    nanoGPT attends causally, so right padding leaves the other positions' logits unchanged.

    Returns:
        Logits, ``(batch, seq_len, vocab)``.
    """
    logits, _ = engine(mb.input_ids, mb.input_ids)
    return logits
