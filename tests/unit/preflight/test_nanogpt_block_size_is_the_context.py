"""nanoGPT's ``block_size`` is read as the model's context (issue 24, item 5).

A nanoGPT ``GPT`` keeps its context in ``config.block_size`` (a ``GPTConfig`` dataclass); a phase
longer than that failed at step 1 with nanoGPT's ``AssertionError``, after the log files were
created. The model preflight now reads ``config.block_size``, and a bare ``block_size`` attribute
of a user's module, so ``initialize`` refuses it in one line before distributed starts.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import torch
from helpers import two_phase_curriculum

import curriculum_ds
from curriculum_ds.config import parse_curriculum
from curriculum_ds.errors import ConfigError
from curriculum_ds.preflight import check_model_context, model_max_positions

MIX = 'curriculum.schedule[1] ("mix").train_loader.max_seq_len'


@dataclass
class GPTConfig:
    """nanoGPT's config, as in its model.py (the fields the preflight may see)."""

    block_size: int = 1024
    vocab_size: int = 50304
    n_layer: int = 1
    n_head: int = 1
    n_embd: int = 8


class GPT(torch.nn.Module):
    """A model in nanoGPT's convention: its context is ``config.block_size``."""

    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        self.config = config
        self.wpe = torch.nn.Embedding(config.block_size, config.n_embd)


class Bare(torch.nn.Module):
    """A user's module declaring only a ``block_size`` attribute."""

    def __init__(self, block_size: int) -> None:
        super().__init__()
        self.block_size = block_size
        self.lm = torch.nn.Linear(2, 2)


def _curriculum(two_streams: tuple[Path, Path], seq: int = 128) -> dict[str, Any]:
    curriculum = two_phase_curriculum(*two_streams)
    curriculum["schedule"][1]["train_loader"]["max_seq_len"] = seq
    return curriculum


def test_config_block_size_and_a_bare_block_size_are_read() -> None:
    assert model_max_positions(GPT(GPTConfig(block_size=96))) == (96, "block_size of GPT.config")
    assert model_max_positions(Bare(48)) == (48, "Bare.block_size")


def test_initialize_refuses_a_nanogpt_model_with_too_small_a_context(
    two_streams: tuple[Path, Path],
) -> None:
    import torch.distributed as dist

    config = {"train_micro_batch_size_per_gpu": 2, "curriculum": _curriculum(two_streams)}
    with pytest.raises(ConfigError) as info:
        curriculum_ds.initialize(model=GPT(GPTConfig(block_size=96)), config=config)
    assert str(info.value) == (
        f"{MIX}: 128 exceeds the model's 96 positions (block_size of GPT.config)"
    )
    with pytest.raises(ConfigError) as info:
        curriculum_ds.initialize(model=Bare(100), config=config)
    assert str(info.value) == f"{MIX}: 128 exceeds the model's 100 positions (Bare.block_size)"
    assert not dist.is_initialized()


def test_a_nanogpt_model_with_enough_context_passes(two_streams: tuple[Path, Path]) -> None:
    curriculum = parse_curriculum(_curriculum(two_streams))
    check_model_context(curriculum, GPT(GPTConfig(block_size=128)))
    check_model_context(curriculum, Bare(256))
