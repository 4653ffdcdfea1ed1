"""Non-finite steps: every rank agrees on one flag, then DeepSpeed's step applies no update.

A step whose global loss is NaN or infinite must leave the weights and the optimizer state as
they were, on every rank, and its gradients must go. DeepSpeed already has a path that does
exactly that: a fp16 overflow (or, under ZeRO and bf16, a non-finite gradient norm) makes its
optimizer wrapper discard the step's gradients, :meth:`DeepSpeedEngine._take_model_step` count
``skipped_steps``, leave the lr scheduler alone and report ``was_step_applied() == False``. But it
decides from the gradients alone, and not under every configuration (ZeRO-0 in fp32 has no check
at all; ZeRO-1/2 in bf16 only with ``bf16.check_grad_overflow``). :func:`update_skipped` takes
that path on purpose for one ``engine.step()`` at the accumulation boundary, whatever the stage
and precision:

* the torch optimizer that updates the weights (``engine.optimizer`` itself at ZeRO-0 in fp32,
  else the one DeepSpeed's wrapper holds as ``.optimizer``) gets a no-op ``step``: no weight, no
  moment, no step count moves. The wrapper around it still runs the rest of its step: it clears
  the step's gradients and buffers as after any update, and copies its fp32 master weights
  (unchanged) back into the model's parameters (the same values);
* ``overflow`` reads True when the engine looks at it after the step, so DeepSpeed's own
  counters (``skipped_steps``, ``global_steps``, the lr scheduler, ``was_step_applied``) treat the
  step as the overflow step it is. Everything patched is put back when the context ends.

The flag itself is one all-reduce (max) of a scalar per step (:func:`any_rank`), so every rank
takes the same branch and DeepSpeed's collectives inside ``step()`` stay matched.
"""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, Any

import torch
import torch.distributed as dist

from curriculum_ds.errors import NonFiniteLossError

if TYPE_CHECKING:
    from collections.abc import Iterator

    from curriculum_ds.plugin.engine_like import EngineLike

__all__ = ["any_rank", "check_nonfinite_limit", "update_skipped"]

_ABSENT = object()


def any_rank(flag: torch.Tensor, *, collective: bool) -> bool:
    """Whether ``flag`` (a scalar, > 0 meaning yes) is set on any data-parallel rank.

    Collective when ``collective`` (one all-reduce, max); every rank gets the same answer. One
    host sync.
    """
    if collective:
        dist.all_reduce(flag, op=dist.ReduceOp.MAX)
    return bool(flag.item() > 0)


def _torch_optimizers(engine: EngineLike) -> list[torch.optim.Optimizer]:
    """The torch optimizers whose ``step`` would move weights or optimizer state."""
    found: dict[int, torch.optim.Optimizer] = {}
    wrapper = engine.optimizer
    for candidate in (
        wrapper,
        getattr(wrapper, "optimizer", None),
        getattr(engine, "basic_optimizer", None),
    ):
        if isinstance(candidate, torch.optim.Optimizer):
            found[id(candidate)] = candidate
    return list(found.values())


@contextlib.contextmanager
def update_skipped(engine: EngineLike) -> Iterator[None]:
    """Within the context, ``engine.step()`` at the accumulation boundary applies no update.

    The step's gradients are discarded as DeepSpeed discards an overflow step's; weights and
    optimizer state stay bit-identical; ``engine.skipped_steps`` grows by one and
    ``engine.was_step_applied()`` is False. Works for ZeRO 0–3 in fp32, bf16 and fp16 (where
    DeepSpeed's loss scaler sees the step as it would without this). Deterministic.

    Args:
        engine: a ``deepspeed.DeepSpeedEngine`` with an optimizer.
    """
    patched: list[tuple[Any, str, Any]] = []

    def patch(obj: Any, name: str, value: Any) -> None:
        patched.append((obj, name, obj.__dict__.get(name, _ABSENT)))
        setattr(obj, name, value)

    def no_update(*args: Any, **kwargs: Any) -> None:
        return None

    wrapper = engine.optimizer
    optimizers = _torch_optimizers(engine)
    for optimizer in optimizers:
        patch(optimizer, "step", no_update)
    if any(wrapper is optimizer for optimizer in optimizers):
        patch(wrapper, "overflow", True)  # read by the engine after optimizer.step()
    else:
        wrapper_step = wrapper.step
        patch(wrapper, "overflow", getattr(wrapper, "overflow", False))

        def step_as_overflow(*args: Any, **kwargs: Any) -> Any:
            out = wrapper_step(*args, **kwargs)
            wrapper.overflow = True  # read by the engine right after
            return out

        patch(wrapper, "step", step_as_overflow)
    try:
        yield
    finally:
        for obj, name, old in reversed(patched):
            if old is _ABSENT:
                obj.__dict__.pop(name, None)
            else:
                setattr(obj, name, old)


def check_nonfinite_limit(count: int, limit: int, *, global_step: int) -> None:
    """Refuse to go on after ``limit`` non-finite steps in a row.

    Args:
        count: non-finite steps in a row, the last of them ``global_step``.
        limit: ``curriculum.max_consecutive_nonfinite`` (>= 1).
        global_step: optimizer steps finished.

    Raises:
        NonFiniteLossError: ``count >= limit``; one line naming the steps and the setting.
    """
    if count >= limit:
        first = global_step - count + 1
        raise NonFiniteLossError(
            f"steps {first}-{global_step}: {count} optimizer steps in a row had a NaN/inf loss "
            f"or gradient norm (curriculum.max_consecutive_nonfinite = {limit}); none updated "
            "the model, the run stops and the last checkpoint written stays `latest`"
        )
