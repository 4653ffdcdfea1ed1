"""The default model: a local HF model folder, or a small GPT-2 sized to the data.

The reference loop (:mod:`curriculum_ds.train`) trains it and :mod:`curriculum_ds.checkpoint.export`
rebuilds it from a run's config; it lives in the library so that ``export`` does not import the
loop.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["MODEL_PRESETS", "ModelPreset", "build_model"]


@dataclass(frozen=True)
class ModelPreset:
    """A size of the default GPT-2 (the rest of its config is :func:`build_model`'s)."""

    n_layer: int
    n_embd: int
    n_head: int


MODEL_PRESETS: dict[str, ModelPreset] = {
    "proxy": ModelPreset(n_layer=2, n_embd=128, n_head=4),
    "proxy_10x": ModelPreset(n_layer=6, n_embd=256, n_head=4),
}
"""The named sizes of the default model (``--model-preset``, an experiment's ``model``):
``proxy`` is the default (462,464 parameters with the byte vocabulary of 257 and 256
positions), ``proxy_10x`` about 10.5 times as many (4,870,400 at the same vocabulary and
positions), to check that a small proxy's ranking of arms holds at a larger size."""


def build_model(model: str | None, cfg: Any, max_seq_len: int, preset: str = "proxy") -> Any:
    """A HF causal LM: a local model folder, or a small GPT-2 built from a config (no download).

    The default model (``preset`` ``"proxy"``) has 2 layers, width 128, 4 heads, no dropout
    (modern pre-training practice, and it makes micro-batch splits exactly comparable), a
    vocabulary sized to the data (the largest ``vocab_size`` recorded by ``prepare`` over all
    streams of the schedule) and positions for the longest ``max_seq_len`` of the schedule;
    another :data:`MODEL_PRESETS` name changes its layers, width and heads only.

    Raises:
        ConfigError: ``model`` is not a local folder, no stream records its vocabulary, or
            ``preset`` names no preset.
    """
    from transformers import AutoModelForCausalLM, GPT2Config, GPT2LMHeadModel

    from curriculum_ds.data import read_stream_info
    from curriculum_ds.errors import ConfigError

    vocab_sizes = [
        read_stream_info(s.local, remote=s.remote).vocab_size
        for p in cfg.schedule
        for s in p.train_loader.streams
    ]
    if model is not None:
        if not Path(model).is_dir():
            raise ConfigError(
                f"--model {model}: not a local model folder (no download at run time)"
            )
        # trust_remote_code off: a folder whose model needs its own code is refused, never run
        return AutoModelForCausalLM.from_pretrained(model, trust_remote_code=False)
    if preset not in MODEL_PRESETS:
        raise ConfigError(f"model preset {preset!r}: expected one of {', '.join(MODEL_PRESETS)}")
    size = MODEL_PRESETS[preset]
    known = [v for v in vocab_sizes if v is not None]
    if not known:
        raise ConfigError("curriculum.schedule: no stream records its vocab_size; pass --model")
    config = GPT2Config(
        vocab_size=max(known),
        n_positions=max_seq_len,
        n_embd=size.n_embd,
        n_layer=size.n_layer,
        n_head=size.n_head,
        resid_pdrop=0.0,
        embd_pdrop=0.0,
        attn_pdrop=0.0,
    )
    return GPT2LMHeadModel(config)
