"""A micro-batch of padded token rows (:class:`MicroBatch`) and the one collate that makes it."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
import torch

from curriculum_ds.core.loss import IGNORE_INDEX

__all__ = ["MicroBatch", "collate", "collate_flat"]


@dataclass(frozen=True)
class MicroBatch:
    """One micro-batch on one rank.

    Attributes:
        input_ids: int64 ``(micro_batch_size, seq_len)``, right-padded with 0.
        attention_mask: int64 ``(micro_batch_size, seq_len)``, 1 on real tokens.
        labels: int64 ``(micro_batch_size, seq_len)``, ``IGNORE_INDEX`` on padding.
        positions: the micro-batch's positions in the global batch, int64 ``(micro_batch_size,)``.
    """

    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    labels: torch.Tensor
    positions: npt.NDArray[np.int64]

    @classmethod
    def of_arrays(
        cls,
        input_ids: npt.NDArray[np.int64],
        attention_mask: npt.NDArray[np.int64],
        labels: npt.NDArray[np.int64],
        positions: npt.NDArray[np.int64],
    ) -> MicroBatch:
        """The micro-batch of int64 ``(micro_batch_size, seq_len)`` arrays (shared, not copied)."""
        return cls(
            torch.from_numpy(input_ids),
            torch.from_numpy(attention_mask),
            torch.from_numpy(labels),
            positions,
        )

    @property
    def loss_mask(self) -> torch.Tensor:
        """Where the shifted labels bear a loss: bool ``(micro_batch_size, seq_len - 1)``.

        ``labels[:, 1:] != IGNORE_INDEX``, aligned with per-token losses (position t predicts
        token t+1).
        """
        return self.labels[:, 1:] != IGNORE_INDEX

    def to(self, device: torch.device | str, *, non_blocking: bool = False) -> MicroBatch:
        """The same micro-batch with its tensors on ``device`` (itself when already there).

        ``non_blocking`` copies asynchronously from pinned memory (:meth:`pin_memory`) to CUDA.
        """
        if self.input_ids.device == torch.device(device):
            return self
        return MicroBatch(
            self.input_ids.to(device, non_blocking=non_blocking),
            self.attention_mask.to(device, non_blocking=non_blocking),
            self.labels.to(device, non_blocking=non_blocking),
            self.positions,
        )

    def pin_memory(self) -> MicroBatch:
        """The same micro-batch in page-locked host memory (for a ``non_blocking`` copy)."""
        return MicroBatch(
            self.input_ids.pin_memory(),
            self.attention_mask.pin_memory(),
            self.labels.pin_memory(),
            self.positions,
        )


def collate(
    samples: Sequence[npt.NDArray[np.integer[Any]]], positions: npt.NDArray[np.int64]
) -> MicroBatch:
    """Right-pad token arrays to the longest one; padding bears no loss and no attention.

    Vectorised: one concatenation and one masked assignment for the whole micro-batch.
    """
    lengths = np.fromiter((len(s) for s in samples), dtype=np.int64, count=len(samples))
    values = (
        np.concatenate([np.asarray(s).reshape(-1) for s in samples])
        if len(samples)
        else np.zeros(0, dtype=np.int64)
    )
    return collate_flat(values, lengths, positions)


def collate_flat(
    values: npt.NDArray[np.integer[Any]],
    lengths: npt.NDArray[np.int64],
    positions: npt.NDArray[np.int64],
) -> MicroBatch:
    """:func:`collate` of samples given concatenated: ``values`` holds ``lengths[i]`` of each.

    Args:
        values: 1-D integer token ids of every sample in order (``lengths.sum()`` of them).
        lengths: int64 ``(micro_batch_size,)`` tokens per sample.
        positions: the micro-batch's positions in the global batch.
    """
    seq_len = max(1, int(lengths.max(initial=0)))
    mask = np.arange(seq_len) < lengths[:, None]
    ids = np.zeros((len(lengths), seq_len), dtype=np.int64)
    if len(lengths):
        ids[mask] = values
    input_ids = torch.from_numpy(ids)
    attention_mask = torch.from_numpy(mask.astype(np.int64))
    labels = input_ids.masked_fill(~torch.from_numpy(mask), IGNORE_INDEX)
    return MicroBatch(input_ids, attention_mask, labels, positions)
