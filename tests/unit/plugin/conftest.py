"""A small in-process stand-in for ``deepspeed.DeepSpeedEngine``: the ``EngineLike`` surface.

``FakeEngine`` wraps a torch module and an SGD optimizer the way DeepSpeed's engine does for one
rank at ZeRO 0 in fp32: ``backward`` (dividing by GAS unless ``scale_wrt_gas=False``), ``step``
(the optimizer update at every GAS-th call), ``micro_steps``, ``global_steps``,
``was_step_applied``. Enough to build a ``Step`` with no curriculum and no ranks.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch

from curriculum_ds.core.microbatch import collate

VOCAB = 11


class TinyLM(torch.nn.Module):
    """Embedding + linear head: logits ``(batch, seq_len, VOCAB)``."""

    def __init__(self, seed: int = 0) -> None:
        super().__init__()
        torch.manual_seed(seed)
        self.embed = torch.nn.Embedding(VOCAB, 8)
        self.head = torch.nn.Linear(8, VOCAB)

    def forward(self, input_ids: torch.Tensor, attention_mask: Any = None) -> torch.Tensor:
        return self.head(self.embed(input_ids))


class FakeEngine:
    """The ``EngineLike`` surface over a module and SGD, one rank, ZeRO 0, fp32."""

    def __init__(self, module: torch.nn.Module, *, gas: int, lr: float = 0.5) -> None:
        self.module = module
        self.optimizer = torch.optim.SGD(module.parameters(), lr=lr)
        self.device = torch.device("cpu")
        self.dp_world_size = 1
        self.gradient_average = True
        self.global_steps = 0
        self.micro_steps = 0
        self.gas = gas
        self.backward_calls: list[tuple[float, bool]] = []
        self._applied = False

    def __call__(self, *inputs: Any, **kwargs: Any) -> Any:
        return self.module(*inputs, **kwargs)

    def backward(self, loss: torch.Tensor, *, scale_wrt_gas: bool = True) -> None:
        self.backward_calls.append((float(loss.detach()), scale_wrt_gas))
        (loss / self.gas if scale_wrt_gas else loss).backward()

    def step(self) -> None:
        self.micro_steps += 1
        if self.micro_steps % self.gas == 0:
            self.optimizer.overflow = False  # type: ignore[attr-defined]
            self.optimizer.step()
            self._applied = not self.optimizer.overflow  # type: ignore[attr-defined]
            self.optimizer.zero_grad()
            self.global_steps += 1

    def was_step_applied(self) -> bool:
        return self._applied

    def fp16_enabled(self) -> bool:
        return False

    def get_lr(self) -> list[float]:
        return [float(g["lr"]) for g in self.optimizer.param_groups]

    def zero_optimization_stage(self) -> int:
        return 0

    def postscale_gradients(self) -> bool:
        return True

    def gradient_predivide_factor(self) -> float:
        return 1.0

    def train_micro_batch_size_per_gpu(self) -> int:
        return 2

    def gradient_accumulation_steps(self) -> int:
        return self.gas

    def train_batch_size(self) -> int:
        return 2 * self.gas

    def train(self, mode: bool = True) -> None:
        self.module.train(mode)

    def eval(self) -> None:
        self.module.train(False)

    def save_checkpoint(self, save_dir: str, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError("FakeEngine writes no checkpoints")

    def load_checkpoint(self, load_dir: str, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError("FakeEngine reads no checkpoints")


SEQUENCES = [
    [1, 2, 3, 4, 5, 0],
    [3, 3, 7],
    [9, 8, 7, 6],
    [2, 10],
]
"""Four samples of one stream: two micro-batches of two, ragged (padding bears no loss)."""


@pytest.fixture
def fake_engine() -> FakeEngine:
    """A fresh FakeEngine over a seeded TinyLM, GAS 2."""
    return FakeEngine(TinyLM(), gas=2)


@pytest.fixture
def batch() -> dict[str, Any]:
    """The global batch of :data:`SEQUENCES` in the shape a curriculum hands a Step."""
    arrays = [np.asarray(s, dtype=np.int64) for s in SEQUENCES]
    micro_batches = [
        collate(arrays[0:2], np.arange(0, 2, dtype=np.int64)),
        collate(arrays[2:4], np.arange(2, 4, dtype=np.int64)),
    ]
    samples = np.stack([np.zeros(4, dtype=np.int64), np.arange(4, dtype=np.int64)], axis=1)
    return {
        "global_step": 1,
        "phase_idx": 0,
        "phase_name": "only",
        "samples": samples,
        "micro_batches": micro_batches,
        "stream_tokens": np.asarray([sum(len(s) for s in SEQUENCES)], dtype=np.int64),
        "stream_names": ["web"],
    }
