"""Token-weighted loss: every loss-bearing token of an optimizer step weighs the same.

This module is the ONE place that owns the normalisation of the loss (torchtitan's rule).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F

__all__ = [
    "IGNORE_INDEX",
    "count_valid_tokens",
    "deepspeed_grad_divisor",
    "engine_grad_divisor",
    "global_valid_tokens",
    "global_valid_tokens_of_rows",
    "global_weighted_valid_tokens",
    "global_weighted_valid_tokens_of_rows",
    "per_sample_token_losses",
    "rows_valid_tokens",
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
    grad_divisor: float | None = None,
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
    over micro-batches and averaging over ranks gives exactly the token mean. Where a config makes
    DeepSpeed divide by something else, ``grad_divisor`` (from ``engine_grad_divisor``, the one
    place that models DeepSpeed's reduction) takes the place of ``dp_world_size``. The fp16 loss
    scaler multiplies this scalar by S inside ``engine.backward`` and unscales the gradients by
    1/S before the step, so it composes with the normalisation; gradient clipping then sees the
    token-mean gradient. Measured through the real engine, ZeRO 0-3, in
    ``tests/integration/test_token_loss_through_the_engine.py``.

    In ``"sample"`` mode this returns DeepSpeed's usual micro-batch mean ``loss_sum / num_valid``
    (to be used with ``scale_wrt_gas=True``), for comparison.

    Args:
        loss_sum: Scalar fp32 tensor, sum of the micro-batch's token losses (nats).
        num_valid: Scalar int64 tensor, the micro-batch's loss-bearing tokens.
        mode: ``"token"`` or ``"sample"``.
        global_valid_tokens: Scalar int64 tensor (on device, no host sync), loss-bearing tokens of
            the whole optimizer step over all dp ranks. Must be > 0 (the caller skips empty steps).
        dp_world_size: Number of data-parallel ranks that DeepSpeed averages gradients over.
        grad_divisor: What DeepSpeed really divides the summed gradients by, when the config makes
            it differ from ``dp_world_size`` (``engine_grad_divisor``: 1 with
            ``"gradient_allreduce_op": "sum"``, ``dp_world_size**2`` in one ZeRO-3 corner). It
            replaces ``dp_world_size`` in the factor; None means ``dp_world_size``.

    Returns:
        A scalar tensor. A micro-batch without loss-bearing tokens gives an exact 0 that still
        carries the graph (no NaN, no warning).

    Raises:
        ValueError: If ``mode`` is not ``"token"`` or ``"sample"``.
    """
    if mode == "token":
        # nats * ranks / tokens: cancels DeepSpeed's 1/dp average (its divisor, in general);
        # 1/GAS is off (scale_wrt_gas=False)
        divisor = dp_world_size if grad_divisor is None else grad_divisor
        return loss_sum * (divisor / global_valid_tokens.to(loss_sum.dtype))
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
        of the step. Kept on device so normalisation adds no host sync per micro-batch. No
        collective runs in a world of one.
    """
    return global_valid_tokens_of_rows(
        [rows_valid_tokens(labels.to(device)) for labels in micro_batch_labels], device=device
    )


def rows_valid_tokens(labels: torch.Tensor) -> torch.Tensor:
    """Loss-bearing tokens of each row of a micro-batch: int64 ``(batch,)``, on its device."""
    return (labels[:, 1:] != IGNORE_INDEX).sum(dim=1)


def global_valid_tokens_of_rows(
    row_counts: Sequence[torch.Tensor], *, device: torch.device | str
) -> torch.Tensor:
    """:func:`global_valid_tokens` of each micro-batch's per-row counts (known before a read).

    Args:
        row_counts: per micro-batch of the step on this rank, int64 ``(batch,)`` loss-bearing
            tokens of each row (:func:`rows_valid_tokens`, or its rows' lengths less one).
        device: where the count lives.
    """
    import torch.distributed as dist

    local = torch.zeros((), dtype=torch.int64, device=device)
    for rows in row_counts:
        local += rows.to(device).sum()
    if dist.is_initialized() and dist.get_world_size() > 1:
        dist.all_reduce(local)
    return local


def global_weighted_valid_tokens(
    micro_batch_labels: list[torch.Tensor],
    row_weights: list[torch.Tensor],
    *,
    device: torch.device | str,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The step's loss-bearing tokens and their weighted sum, all-reduced together once.

    The denominators of per-stream ``loss_weight`` (``sum(w * loss) / sum(w)`` over the step's
    loss-bearing tokens, NeMo-Automodel's separate loss weights): the plain count, as
    :func:`global_valid_tokens`, and ``sum(w)`` over the same tokens, summed over every
    micro-batch and data-parallel rank in ONE all-reduce of a float64 2-vector (counts stay exact
    below 2^53).

    Args:
        micro_batch_labels: this rank's labels of every micro-batch of the step, int64
            ``(micro_batch_size, seq_len)``.
        row_weights: per micro-batch, float ``(micro_batch_size,)`` the weight of each row's
            tokens (its stream's ``loss_weight``, > 0).
        device: where the sums live (the engine's device).

    Returns:
        ``(count, weighted)``: a scalar int64 tensor (loss-bearing tokens, global) and a scalar
        float64 tensor (their summed weights, global), both on ``device``.
    """
    rows = [rows_valid_tokens(labels.to(device)) for labels in micro_batch_labels]
    return global_weighted_valid_tokens_of_rows(rows, row_weights, device=device)


def global_weighted_valid_tokens_of_rows(
    row_counts: Sequence[torch.Tensor],
    row_weights: Sequence[torch.Tensor],
    *,
    device: torch.device | str,
) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`global_weighted_valid_tokens` of each micro-batch's per-row counts."""
    import torch.distributed as dist

    local = torch.zeros(2, dtype=torch.float64, device=device)
    for counts, weights in zip(row_counts, row_weights, strict=True):
        per_row = counts.to(device).double()
        local[0] += per_row.sum()
        local[1] += (per_row * weights.to(device=device, dtype=torch.float64)).sum()
    if dist.is_initialized() and dist.get_world_size() > 1:
        dist.all_reduce(local)
    return local[0].round().to(torch.int64), local[1]


def deepspeed_grad_divisor(
    *,
    dp_world_size: int,
    zero_stage: int,
    gradient_average: bool,
    postscale_gradients: bool,
    gradient_predivide_factor: float,
) -> float:
    """What DeepSpeed divides the sum over ranks of the local gradients by, for a given config.

    Read from DeepSpeed 0.19.8's reduction code, stage by stage (CPU and CUDA accelerators alike):

    * ZeRO 0 (``engine.allreduce_bucket``) and ZeRO 1/2 (``gradient_reduction_w_predivide``,
      ``average_tensor``, ``allreduce_bucket``): with ``gradient_predivide_factor`` p and
      postscaling, ``g / p``, all-reduce, then ``* p / dp_world_size`` unless p equals
      ``dp_world_size`` — net ``1 / dp_world_size`` for every p; with ``"prescale_gradients": true``
      ``g / dp_world_size`` then all-reduce, the same. (Reduce-scatter, the ZeRO 1/2/3 default,
      refuses p != 1.)
    * ZeRO 3 (``__avg_scatter_contiguous_grads`` / ``__avg_scatter_grads``, ``reduce_scatter:
      false``): ``g / p``, ``/ dp_world_size`` (explicitly or inside ``reduce_scatter_coalesced``),
      reduce, then ``* p`` unless p equals ``dp_world_size``. So when p == ``dp_world_size`` != 1
      the net divisor is ``dp_world_size ** 2`` (the skipped ``* p`` was only right for ZeRO 0-2,
      which did not divide twice). We follow what DeepSpeed does, so the optimizer still sees the
      token mean.
    * ``"gradient_allreduce_op": "sum"`` (``engine.gradient_average`` false; refused by DeepSpeed
      with ZeRO 3): no division, divisor 1.

    Sequence parallelism (which divides by ``dp_world_size / sequence_parallel_size``) needs an
    ``mpu``; the trainer passes none, so it is not modelled (``engine_grad_divisor`` refuses it).

    Args:
        dp_world_size: Data-parallel ranks (≥ 1).
        zero_stage: 0-3.
        gradient_average: DeepSpeed's ``engine.gradient_average`` (``gradient_allreduce_op`` mean).
        postscale_gradients: ``engine.postscale_gradients()`` (not ``prescale_gradients``).
        gradient_predivide_factor: ``engine.gradient_predivide_factor()``.

    Returns:
        The divisor (a positive float). Deterministic.
    """
    if not gradient_average:
        return 1.0
    p = float(gradient_predivide_factor)
    if zero_stage == 3 and postscale_gradients and p != 1.0 and p == dp_world_size:
        return float(dp_world_size) ** 2  # DeepSpeed's ZeRO-3 divides twice here (see above)
    return float(dp_world_size)


def engine_grad_divisor(engine: object, *, dp_world_size: int) -> float:
    """``deepspeed_grad_divisor`` for a live ``DeepSpeedEngine`` (read once per step, no sync).

    Raises:
        ValueError: If the engine runs sequence parallelism (not supported by the trainer).
    """
    sequence_parallel_size = int(getattr(engine, "sequence_parallel_size", 1))
    if sequence_parallel_size != 1:
        raise ValueError(
            f"sequence_parallel_size={sequence_parallel_size}: token-weighted loss supports data "
            "parallelism only"
        )
    return deepspeed_grad_divisor(
        dp_world_size=dp_world_size,
        zero_stage=int(engine.zero_optimization_stage()),  # type: ignore[attr-defined]
        gradient_average=bool(getattr(engine, "gradient_average", True)),
        postscale_gradients=bool(engine.postscale_gradients()),  # type: ignore[attr-defined]
        gradient_predivide_factor=float(engine.gradient_predivide_factor()),  # type: ignore[attr-defined]
    )
