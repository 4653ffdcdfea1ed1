"""A step's loss denominators and per-stream loss weights (``loss_weight``), in one place.

Without loss weights (every stream at 1.0) the step divides by its global count of loss-bearing
tokens (:func:`curriculum_ds.core.loss.global_valid_tokens`, one all-reduce). With them the
objective is ``sum(w * loss) / sum(w)`` over the step's loss-bearing tokens, ``w`` the token's
stream's ``loss_weight`` (NeMo-Automodel's separate sampling and loss weights): the numerator
of each micro-batch is its rows' loss sums times their weights, the denominator ``sum(w)`` over
every micro-batch and rank, all-reduced together with the count
(:func:`curriculum_ds.core.loss.global_weighted_valid_tokens`). Per-stream losses and the
per-sample losses the dynamic re-weighting sees stay unweighted.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from curriculum_ds.core.loss import (
    global_valid_tokens_of_rows,
    global_weighted_valid_tokens_of_rows,
    rows_valid_tokens,
)

if TYPE_CHECKING:
    from collections.abc import Sequence

    import numpy as np
    import numpy.typing as npt

    from curriculum_ds.plugin.micro_batches import StepMicroBatches

__all__ = ["StepNormaliser"]


class StepNormaliser:
    """The denominators of one step (counted when it is drawn) and its micro-batch numerators.

    Args:
        micro_batches: this rank's micro-batches of the step: their loss-bearing tokens per row
            are known before they are read (:attr:`StepMicroBatches.row_counts`), or, under
            document masking, counted from their labels (every micro-batch is then taken).
        samples: the global batch, int64 ``(global_batch_size, 2)`` of ``(stream_idx,
            sample_idx)``.
        loss_weights: float64 ``(num_streams,)`` each stream's ``loss_weight``, or None (all 1).
        device: the engine's device.

    Attributes:
        global_valid: scalar int64 tensor, loss-bearing tokens of the step over every rank.
        denominator: what a micro-batch's numerator is divided by: ``global_valid``, or the
            step's global ``sum(w)`` (float64) with loss weights.
    """

    def __init__(
        self,
        micro_batches: StepMicroBatches,
        samples: npt.NDArray[np.int64],
        loss_weights: npt.NDArray[np.float64] | None,
        device: torch.device | str,
    ) -> None:
        self.loss_weights = loss_weights
        known = micro_batches.row_counts
        counts = (
            [rows_valid_tokens(mb.labels) for mb in micro_batches]
            if known is None
            else [torch.from_numpy(rows) for rows in known]
        )
        self._rows: list[torch.Tensor] = []
        if loss_weights is None:
            self.global_valid = global_valid_tokens_of_rows(counts, device=device)
            self.denominator = self.global_valid
        else:
            self._rows = [
                torch.from_numpy(loss_weights[samples[p, 0]]).to(device)
                for p in micro_batches.positions
            ]
            self.global_valid, self.denominator = global_weighted_valid_tokens_of_rows(
                counts, self._rows, device=device
            )

    def numerator(
        self, mb_idx: int, loss_sums: torch.Tensor, loss_sum: torch.Tensor
    ) -> torch.Tensor:
        """A micro-batch's ``sum(w * loss)`` (its ``loss_sum`` without weights), same dtype."""
        if self.loss_weights is None:
            return loss_sum
        return (loss_sums * self._rows[mb_idx].to(loss_sums.dtype)).sum()

    def objective(
        self, stream_loss_sums: Sequence[float], token_loss: float | None
    ) -> float | None:
        """The step's loss over every rank: ``token_loss``, or ``sum_s w_s L_s / sum(w)``.

        Args:
            stream_loss_sums: each stream's global sum of token losses (nats) of the step.
            token_loss: the unweighted token mean (None for a step without loss tokens).
        """
        if self.loss_weights is None or token_loss is None:
            return token_loss
        weighted = sum(
            float(w) * x for w, x in zip(self.loss_weights, stream_loss_sums, strict=True)
        )
        return weighted / float(self.denominator.item())
