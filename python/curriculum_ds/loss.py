"""Token-weighted loss: every loss-bearing token of an optimizer step weighs the same.

This module is the ONE place that owns the normalisation of the loss (torchtitan's rule).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F  # noqa: N812

__all__ = [
    "IGNORE_INDEX",
    "count_valid_tokens",
    "global_valid_tokens",
    "per_sample_token_losses",
    "scale_micro_batch_loss",
]

IGNORE_INDEX = -100
"""Label value of a position that bears no loss (padding), as in HF transformers and torch."""


def per_sample_token_losses(
    logits: torch.Tensor, labels: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Sum of next-token cross-entropy and count of loss-bearing tokens, per sample.

    The labels are shifted inside (position t predicts token t+1), so a sample of L real tokens
    carries L - 1 loss-bearing tokens; positions whose shifted label is ``IGNORE_INDEX`` (padding)
    contribute neither loss nor count.

    Args:
        logits: Model output, shape ``(batch, seq_len, vocab)``, any float dtype (computed in fp32).
        labels: Token ids, shape ``(batch, seq_len)``, int64, ``IGNORE_INDEX`` at padding.

    Returns:
        ``(loss_sums, num_valid)``: fp32 ``(batch,)`` sums of token losses in nats, and int64
        ``(batch,)`` counts of loss-bearing tokens. A fully padded sample gives ``(0.0, 0)``.
        Deterministic for deterministic kernels.
    """
    shift_logits = logits[:, :-1, :].float()
    shift_labels = labels[:, 1:]
    token_losses = F.cross_entropy(
        shift_logits.reshape(-1, shift_logits.size(-1)),
        shift_labels.reshape(-1),
        ignore_index=IGNORE_INDEX,
        reduction="none",
    ).view(shift_labels.shape)
    return token_losses.sum(dim=1), (shift_labels != IGNORE_INDEX).sum(dim=1)


def scale_micro_batch_loss(
    loss_sum: torch.Tensor,
    num_valid: torch.Tensor,
    *,
    mode: str,
    global_valid_tokens: torch.Tensor,
    dp_world_size: int,
) -> torch.Tensor:
    """The scalar a micro-batch backpropagates, given how DeepSpeed will rescale it.

    DeepSpeed divides each micro-batch loss by ``gradient_accumulation_steps`` (unless
    ``backward(..., scale_wrt_gas=False)``) and averages gradients over the ``dp_world_size`` ranks
    (ZeRO 0-3 alike). For the optimizer to see the full-batch token mean
    ``sum over all tokens of the step / global_valid_tokens`` we therefore backpropagate, per
    micro-batch and with ``scale_wrt_gas=False``::

        loss_mb = (sum of the micro-batch's token losses) * dp_world_size / global_valid_tokens

    The ``dp_world_size`` factor cancels DeepSpeed's average over ranks; dividing by the global
    count (all ranks, all micro-batches, all-reduced once per step) instead of a per-micro-batch
    or per-rank count is what makes a token weigh the same wherever it sits. Summing ``loss_mb``
    over micro-batches and averaging over ranks gives exactly the token mean.

    In ``"sample"`` mode this returns DeepSpeed's usual micro-batch mean ``loss_sum / num_valid``
    (to be used with ``scale_wrt_gas=True``), for comparison.

    Args:
        loss_sum: Scalar fp32 tensor, sum of the micro-batch's token losses (nats).
        num_valid: Scalar int64 tensor, the micro-batch's loss-bearing tokens.
        mode: ``"token"`` or ``"sample"``.
        global_valid_tokens: Scalar int64 tensor (on device, no host sync), loss-bearing tokens of
            the whole optimizer step over all dp ranks. Must be > 0 (the caller skips empty steps).
        dp_world_size: Number of data-parallel ranks that DeepSpeed averages gradients over.

    Returns:
        A scalar tensor. A micro-batch without loss-bearing tokens gives an exact 0 that still
        carries the graph (no NaN, no warning).

    Raises:
        ValueError: If ``mode`` is not ``"token"`` or ``"sample"``.
    """
    if mode == "token":
        # nats * ranks / tokens: cancels DeepSpeed's 1/dp average; 1/GAS is off (scale_wrt_gas=False)
        return loss_sum * (dp_world_size / global_valid_tokens.to(loss_sum.dtype))
    if mode == "sample":
        # mean over this micro-batch's tokens; clamp keeps a 0-token micro-batch at 0 instead of NaN
        return loss_sum / num_valid.clamp(min=1).to(loss_sum.dtype)
    raise ValueError(f"loss_weighting must be 'token' or 'sample', got {mode!r}")


def count_valid_tokens(labels: torch.Tensor) -> torch.Tensor:
    """Loss-bearing tokens of a micro-batch: shifted labels not equal to ``IGNORE_INDEX``.

    Args:
        labels: int64 ``(batch, seq_len)``.

    Returns:
        A scalar int64 tensor on ``labels``' device (no host sync).
    """
    return (labels[:, 1:] != IGNORE_INDEX).sum()


def global_valid_tokens(
    micro_batch_labels: list[torch.Tensor], *, device: torch.device | str
) -> torch.Tensor:
    """All-reduce (sum) the step's loss-bearing tokens over the data-parallel group, once.

    Args:
        micro_batch_labels: This rank's labels of every micro-batch of the optimizer step.
        device: Where the count lives (the engine's device; NCCL needs CUDA, gloo CPU).

    Returns:
        Scalar int64 tensor on ``device``: loss-bearing tokens over all ranks and micro-batches
        of the step. Kept on device so normalisation adds no host sync per micro-batch.
    """
    import torch.distributed as dist  # noqa: PLC0415

    local = torch.zeros((), dtype=torch.int64, device=device)
    for labels in micro_batch_labels:
        local += count_valid_tokens(labels.to(device))
    if dist.is_initialized():
        dist.all_reduce(local)
    return local
