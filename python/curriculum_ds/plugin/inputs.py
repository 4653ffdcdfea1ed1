"""What a loop hands ``step.backward``, checked before anything goes backward.

Each check raises ``ValueError`` with one line that names the argument, the shape expected for
the micro-batch and what was given, so that a wrong call leaves the step, the engine and the
gradients untouched.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

if TYPE_CHECKING:
    from curriculum_ds.core.loader import MicroBatch

__all__ = ["check_aux", "check_differentiable", "check_token_losses", "logits_tensor"]


def logits_tensor(logits: Any, mb: MicroBatch) -> torch.Tensor:
    """The logits tensor of a model's output for ``mb``, checked.

    Args:
        logits: a float tensor ``(micro_batch_size, seq_len, vocab)``, or an object with
            ``.logits`` (HF ``CausalLMOutput``).
        mb: the micro-batch it was computed from.

    Returns:
        The tensor itself (not copied).

    Raises:
        ValueError: it is not a 3-d tensor whose first two sizes are ``mb.labels``' shape, not a
            floating-point tensor, or does not require grad.
    """
    tensor = logits.logits if hasattr(logits, "logits") else logits
    if (
        not isinstance(tensor, torch.Tensor)
        or tensor.dim() != 3
        or tuple(tensor.shape[:2]) != tuple(mb.labels.shape)
    ):
        shape = tuple(tensor.shape) if isinstance(tensor, torch.Tensor) else type(tensor)
        raise ValueError(
            f"step.backward: logits must be (batch, seq_len, vocab) = "
            f"({mb.labels.shape[0]}, {mb.labels.shape[1]}, vocab) for this micro-batch, "
            f"got {shape}"
        )
    check_differentiable("step.backward: logits", tensor)
    return tensor


def check_token_losses(token_losses: torch.Tensor, loss_mask: torch.Tensor, mb: MicroBatch) -> None:
    """Per-token losses and their mask have ``mb.loss_mask``'s shape; the losses require grad.

    Raises:
        ValueError: a shape is not ``(micro_batch_size, seq_len - 1)``, or ``token_losses`` is
            not a floating-point tensor that requires grad.
    """
    expected = tuple(mb.loss_mask.shape)
    for name, t in (("token_losses", token_losses), ("loss_mask", loss_mask)):
        if tuple(t.shape) != expected:
            raise ValueError(
                f"step.backward_token_losses: {name} must be (batch, seq_len - 1) = "
                f"{expected} for this micro-batch, got {tuple(t.shape)}"
            )
    check_differentiable("step.backward_token_losses: token_losses", token_losses)


def check_differentiable(what: str, tensor: torch.Tensor) -> None:
    """A loss input must be a float tensor in the autograd graph (not detached, not no_grad).

    Raises:
        ValueError: ``tensor`` is not floating-point, or does not require grad.
    """
    if not tensor.is_floating_point():
        raise ValueError(f"{what} must be a floating-point tensor, got {tensor.dtype}")
    if not tensor.requires_grad:
        raise ValueError(
            f"{what} does not require grad: computed under torch.no_grad() or detached, so "
            "nothing could go backward"
        )


def check_aux(aux_loss: object) -> None:
    """``aux_loss`` is None or a one-element tensor (a Python number has no gradient).

    Raises:
        ValueError: it is anything else.
    """
    if aux_loss is None:
        return
    if not isinstance(aux_loss, torch.Tensor) or aux_loss.numel() != 1:
        got = tuple(aux_loss.shape) if isinstance(aux_loss, torch.Tensor) else type(aux_loss)
        raise ValueError(
            f"aux_loss must be a one-element tensor (this micro-batch's auxiliary term), got {got}"
        )
