"""What the plugin needs from a DeepSpeed engine: the :class:`EngineLike` surface and its ranks.

The curriculum, its steps and its evaluation use a small part of ``deepspeed.DeepSpeedEngine``;
:class:`EngineLike` names that part, as torchtitan's storage Protocol names what a checkpointer
needs from storage, so that a unit test can hand them a small fake instead of a real engine.
The data-parallel layout read from such an engine is :class:`curriculum_ds.distributed.Topology`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    import torch

__all__ = ["EngineLike"]


class EngineLike(Protocol):
    """The operations the curriculum, a step and an evaluation need from a DeepSpeed engine.

    This protocol is the whole of that surface: ``deepspeed.DeepSpeedEngine`` has all of it, and
    a fake with these members (``tests/unit/plugin/fake_engine.py``) can stand in for it. Read
    with ``getattr`` where present, and not required: ``seq_dp_world_size``,
    ``data_parallel_group`` / ``seq_data_parallel_group`` (:meth:`Topology.from_engine`),
    ``module`` (the wrapped model, for its train/eval mode), ``monitor`` (DeepSpeed's
    ``MonitorMaster``), ``basic_optimizer``, ``gradient_average`` and ``sequence_parallel_size``
    (the loss divisor, :func:`curriculum_ds.core.loss.engine_grad_divisor`).
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
