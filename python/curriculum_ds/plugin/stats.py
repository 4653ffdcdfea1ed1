"""The statistics of one optimizer step, and the step's one all-reduce that sums them.

While a step's micro-batches go backward, each rank keeps, on the engine's device (no host
sync), every one of its samples' token-loss sum and loss-bearing tokens, and a float64 vector
of its own ``[mean-loss sum, aux sum, aux count, stop flag]``. At ``Step.finish`` that vector
and the per-stream sums (:class:`~curriculum_ds.plugin.accounting.StreamAccounting`) are summed
over the ranks in **one** all-reduce and copied to the host once (:meth:`StepStats.all_reduce`);
with dynamic re-weighting on, the per-sample losses are gathered by one all-gather
(:meth:`StepStats.sample_losses`). Those are the step's only collectives besides the
token count when it is drawn and the non-finite flag at its accumulation boundary.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch
import torch.distributed as dist

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

__all__ = ["StepStats", "StepTotals"]

# this rank's slots at the head of the all-reduced vector (float64):
_MEAN_LOSS = 0  # sum over its micro-batches of (token-mean loss / GAS), nats
_AUX_SUM = 1  # sum of its aux_loss values
_AUX_COUNT = 2  # number of aux_loss values given
_STOP = 3  # 1 if this rank was asked to stop (SIGTERM)
_NUM_SLOTS = 4


@dataclass(frozen=True)
class StepTotals:
    """What :meth:`StepStats.all_reduce` reads back: the step's figures over every rank.

    Attributes:
        sample_mean_loss: the mean over every micro-batch of every rank of the micro-batch's
            token-mean loss (nats): the loss of ``sample`` weighting.
        aux_loss: the mean of the ``aux_loss`` terms over every micro-batch of every rank (a
            micro-batch without one counting 0); None when no micro-batch had one.
        stop_requested: whether any rank was asked to stop; the same on every rank.
        tail: the vector passed to :meth:`StepStats.all_reduce` as ``tail``, summed over the
            ranks, float64 on the CPU (for its owner to read, e.g. ``StreamAccounting.records``).
    """

    sample_mean_loss: float
    aux_loss: float | None
    stop_requested: bool
    tail: torch.Tensor


class StepStats:
    """One step's statistics on this rank, and their sum over the ranks.

    Args:
        samples_per_rank: this rank's samples in the step (GAS x micro-batch size).
        num_micro_batches: this rank's micro-batches in the step (GAS).
        dp_world_size: data-parallel ranks.
        collective: whether to all-reduce / all-gather (False in a world of one).
        device: where the statistics live (the engine's device).

    Attributes:
        sample_sums: float64 ``(samples_per_rank,)``, each of this rank's samples' sum of token
            losses (nats), in the order of its micro-batches' rows.
        sample_valid: float64 ``(samples_per_rank,)``, their loss-bearing tokens.
    """

    def __init__(
        self,
        *,
        samples_per_rank: int,
        num_micro_batches: int,
        dp_world_size: int,
        collective: bool,
        device: torch.device | str,
    ) -> None:
        self.sample_sums = torch.zeros(samples_per_rank, dtype=torch.float64, device=device)
        self.sample_valid = torch.zeros(samples_per_rank, dtype=torch.float64, device=device)
        self._vector = torch.zeros(_NUM_SLOTS, dtype=torch.float64, device=device)
        self._num_micro_batches = num_micro_batches
        self._dp_world_size = dp_world_size
        self._collective = collective
        self._device = device

    def add_micro_batch(
        self,
        mb_idx: int,
        loss_sums: torch.Tensor,
        num_valid: torch.Tensor,
        aux_loss: torch.Tensor | None,
        *,
        loss_sum: torch.Tensor,
        count: torch.Tensor,
    ) -> torch.Tensor:
        """Record one micro-batch (no host sync, no autograd).

        Args:
            mb_idx: its index in the step, in ``[0, num_micro_batches)``.
            loss_sums: float ``(micro_batch_size,)``, each sample's sum of token losses (nats).
            num_valid: ``(micro_batch_size,)``, each sample's loss-bearing tokens.
            aux_loss: its one-element auxiliary term, or None.
            loss_sum: ``loss_sums.sum()`` (the caller has it, from the backward).
            count: ``num_valid.sum()``.

        Returns:
            The micro-batch's token-mean loss (nats), a detached fp32 scalar (NaN when it has no
            loss-bearing token).
        """
        with torch.no_grad():
            lo = mb_idx * len(num_valid)
            self.sample_sums[lo : lo + len(num_valid)] = loss_sums.double()
            self.sample_valid[lo : lo + len(num_valid)] = num_valid.double()
            self._vector[_MEAN_LOSS] += (
                loss_sum / count.clamp(min=1)
            ).double() / self._num_micro_batches
            if aux_loss is not None:
                self._vector[_AUX_SUM] += aux_loss.detach().double().to(self._device).sum()
                self._vector[_AUX_COUNT] += 1
            return (loss_sum / count).detach().float()

    def all_reduce(self, tail: torch.Tensor, *, stop: bool) -> StepTotals:
        """Sum this rank's statistics and ``tail`` over the ranks: one all-reduce, one host copy.

        Collective when ``collective`` (every rank calls it once per step).

        Args:
            tail: float64 on the device, more sums to ride on the same all-reduce (the step's
                per-stream sums, ``StreamAccounting.local_sums``).
            stop: whether this rank was asked to stop.

        Returns:
            The step's :class:`StepTotals`, the same on every rank.
        """
        self._vector[_STOP] = float(stop)
        summed = torch.cat([self._vector, tail])
        if self._collective:
            dist.all_reduce(summed)
        summed = summed.cpu()
        num_terms = self._num_micro_batches * self._dp_world_size
        has_aux = float(summed[_AUX_COUNT]) > 0
        return StepTotals(
            sample_mean_loss=float(summed[_MEAN_LOSS]) / self._dp_world_size,
            aux_loss=float(summed[_AUX_SUM]) / num_terms if has_aux else None,
            stop_requested=float(summed[_STOP]) > 0,
            tail=summed[_NUM_SLOTS:],
        )

    def sample_losses(self) -> npt.NDArray[np.float64]:
        """Every sample's token-mean loss (nats) of the global batch, in global order.

        Collective when ``collective`` (one all-gather); the same on every rank. NaN for a
        sample without loss-bearing tokens.

        Returns:
            float64 ``(global_batch_size,)``.
        """
        local = torch.where(
            self.sample_valid > 0,
            self.sample_sums / self.sample_valid.clamp(min=1),
            float("nan"),
        )
        if self._collective:
            parts = [torch.empty_like(local) for _ in range(self._dp_world_size)]
            dist.all_gather(parts, local)
            return torch.cat(parts).cpu().numpy()
        return local.cpu().numpy()
