"""What the plugin needs from a DeepSpeed engine: the :class:`EngineLike` surface and its ranks.

The curriculum, its steps and its evaluation use a small part of ``deepspeed.DeepSpeedEngine``;
:class:`EngineLike` names that part, as torchtitan's storage Protocol names what a checkpointer
needs from storage, so that a unit test can hand them a small fake instead of a real engine.
:class:`Topology` is the data-parallel layout read once from the engine: the curriculum, its
steps, its evaluation and the universal-checkpoint conversion all take their ranks from it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

import torch.distributed as dist

if TYPE_CHECKING:
    import torch

__all__ = ["EngineLike", "Topology"]


class EngineLike(Protocol):
    """The operations the curriculum, a step and an evaluation need from a DeepSpeed engine.

    This protocol is the whole of that surface: ``deepspeed.DeepSpeedEngine`` has all of it, and
    a fake with these members (``tests/unit/plugin/fake_engine.py``) can stand in for it. Read
    with ``getattr`` where present, and not required: ``seq_dp_world_size``,
    ``data_parallel_group`` / ``seq_data_parallel_group`` (:meth:`Topology.from_engine`),
    ``module`` (the wrapped model, for its train/eval mode), ``monitor`` (DeepSpeed's
    ``MonitorMaster``), ``basic_optimizer``, ``gradient_average`` and ``sequence_parallel_size``
    (the loss divisor, :func:`curriculum_ds.loss.engine_grad_divisor`).
    """

    @property
    def device(self) -> torch.device:
        """Where the model's parameters live; micro-batches are moved there."""
        ...

    @property
    def dp_world_size(self) -> int:
        """Data-parallel ranks (DeepSpeed's data-parallel group)."""
        ...

    @property
    def global_steps(self) -> int:
        """Optimizer steps DeepSpeed has taken (read on a resume without curriculum state)."""
        ...

    @property
    def micro_steps(self) -> int:
        """``step()`` calls so far: one per micro-batch (a step checks nobody else called it)."""
        ...

    @property
    def optimizer(self) -> Any:
        """The (wrapped) optimizer; its ``param_groups[0]["lr"]`` is the next update's lr."""
        ...

    def __call__(self, *inputs: Any, **kwargs: Any) -> Any:
        """The model's forward (``engine(input_ids, attention_mask=...)`` gives logits)."""
        ...

    def backward(self, loss: torch.Tensor, *, scale_wrt_gas: bool = True) -> Any:
        """Backpropagate ``loss``; ``scale_wrt_gas=False`` turns DeepSpeed's 1/GAS off."""
        ...

    def step(self) -> None:
        """One micro-step; the optimizer update at the accumulation boundary."""
        ...

    def was_step_applied(self) -> bool:
        """Whether the last ``step()`` updated the weights (False for an overflow step)."""
        ...

    def fp16_enabled(self) -> bool:
        """Whether the engine trains in fp16 (with a loss scaler)."""
        ...

    def get_lr(self) -> list[float]:
        """The scheduler's learning rates (used only without an optimizer's ``param_groups``)."""
        ...

    def zero_optimization_stage(self) -> int:
        """The ZeRO stage, 0-3."""
        ...

    def postscale_gradients(self) -> bool:
        """Whether gradients are divided after the reduction (DeepSpeed's default)."""
        ...

    def gradient_predivide_factor(self) -> float:
        """DeepSpeed's ``gradient_predivide_factor``."""
        ...

    def train_micro_batch_size_per_gpu(self) -> int:
        """Samples per micro-batch per rank (checked against the config by ``attach``)."""
        ...

    def gradient_accumulation_steps(self) -> int:
        """Micro-batches per optimizer step per rank."""
        ...

    def train_batch_size(self) -> int:
        """Samples per optimizer step over all ranks."""
        ...

    def train(self, mode: bool = True) -> Any:
        """Put the model in train (or, with False, eval) mode."""
        ...

    def eval(self) -> Any:
        """Put the model in eval mode."""
        ...

    def save_checkpoint(self, save_dir: str, *args: Any, **kwargs: Any) -> Any:
        """Write a checkpoint tag under ``save_dir`` (collective)."""
        ...

    def load_checkpoint(self, load_dir: str, *args: Any, **kwargs: Any) -> Any:
        """Read a checkpoint tag; returns ``(load_path, client_state)``."""
        ...


@dataclass(frozen=True, kw_only=True)
class Topology:
    """This process's place among the data-parallel ranks.

    Attributes:
        dp_rank: this rank, in ``[0, dp_world_size)``.
        dp_world_size: data-parallel ranks (>= 1). Every rank draws the same global batch and
            takes the slice at ``dp_rank``.
    """

    dp_rank: int = 0
    dp_world_size: int = 1

    @classmethod
    def from_engine(cls, engine: EngineLike) -> Topology:
        """The topology of ``engine``: its data-parallel world and this rank in it.

        ``dp_world_size`` is ``engine.seq_dp_world_size`` when the engine has one, else
        ``engine.dp_world_size``; ``dp_rank`` is this process's rank in the engine's
        (sequence-)data-parallel group, 0 when ``torch.distributed`` is not initialised. Under
        plain data parallelism (what the plugin supports) the group is the whole world, so
        these are ``torch.distributed``'s rank and world size. Reads only; no collective.
        """
        world = int(getattr(engine, "seq_dp_world_size", None) or engine.dp_world_size)
        rank = 0
        if dist.is_available() and dist.is_initialized():
            group = getattr(engine, "seq_data_parallel_group", None) or getattr(
                engine, "data_parallel_group", None
            )
            rank = int(dist.get_rank(group=group))
        return cls(dp_rank=rank, dp_world_size=world)

    @property
    def collective(self) -> bool:
        """Whether the ranks must communicate: ``torch.distributed`` is up and there are > 1."""
        return self.dp_world_size > 1 and dist.is_available() and dist.is_initialized()
