"""A micro-batch of padded token rows (:class:`MicroBatch`) and the one collate that makes it.

Under document masking (packed rows, :mod:`curriculum_ds.core.documents`) a micro-batch also
carries ``position_ids`` restarting per document (:meth:`MicroBatch.with_documents`); its
forward goes ``engine(mb.input_ids, **mb.forward_kwargs())`` (HF's convention) or takes
:meth:`MicroBatch.block_causal_mask`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import numpy.typing as npt
import torch

from curriculum_ds.core.documents import block_causal_mask, document_positions
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
        position_ids: int64 ``(micro_batch_size, seq_len)`` restarting at 0 at every document of
            a packed row (and at its padding), when ``train_loader.document_masking`` is on and
            a stream of the phase records its rows' document starts; None otherwise (the model's
            own positions, 0..seq_len-1). When set, the label of each document's first token
            is ``IGNORE_INDEX`` (:mod:`curriculum_ds.core.documents`).
    """

    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    labels: torch.Tensor
    positions: npt.NDArray[np.int64]
    position_ids: torch.Tensor | None = None

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

    def with_documents(
        self, starts: npt.NDArray[np.integer[Any]], counts: npt.NDArray[np.int64]
    ) -> MicroBatch:
        """This micro-batch with document masking: ``position_ids`` and boundary labels ignored.

        Args:
            starts: every row's document starts (offsets in the row) concatenated; those past a
                row's tokens (cut by a shorter ``seq_len``) are ignored.
            counts: int64 ``(micro_batch_size,)``: how many of ``starts`` are each row's.

        Returns:
            A new micro-batch (``input_ids`` and ``attention_mask`` shared, ``labels`` copied).
        """
        lengths = self.attention_mask.sum(dim=1).numpy().astype(np.int64)
        positions, (rows, cols) = document_positions(
            starts, counts, lengths, int(self.input_ids.shape[1])
        )
        labels = self.labels.clone()
        labels[torch.from_numpy(rows), torch.from_numpy(cols)] = IGNORE_INDEX
        return replace(self, labels=labels, position_ids=torch.from_numpy(positions))

    def with_prompts(self, prompt_lens: npt.NDArray[np.integer[Any]]) -> MicroBatch:
        """This micro-batch with each row's first ``prompt_lens[i]`` labels ``IGNORE_INDEX``.

        A QA record's prompt (:mod:`curriculum_ds.data.qa`) bears no loss: the shifted labels
        that remain are its answer's tokens (position ``prompt_len - 1`` predicts the first).
        The inputs and the attention are unchanged.

        Args:
            prompt_lens: int ``(micro_batch_size,)``; 0 leaves a row as it is.

        Returns:
            A new micro-batch (``labels`` copied; the rest shared).
        """
        lens = torch.as_tensor(np.asarray(prompt_lens, dtype=np.int64), device=self.labels.device)
        cols = torch.arange(self.labels.shape[1], device=self.labels.device)
        return replace(
            self, labels=self.labels.masked_fill(cols[None, :] < lens[:, None], IGNORE_INDEX)
        )

    def forward_kwargs(self) -> dict[str, torch.Tensor | None]:
        """The keyword arguments of the model's forward beside ``input_ids``, HF's convention.

        ``{"attention_mask": attention_mask}`` without document masking; with it
        ``{"attention_mask": None, "position_ids": position_ids}``: transformers builds the
        block-diagonal causal mask from ``position_ids`` only when ``attention_mask`` is None
        (and no KV cache is used: give a HF model ``use_cache=False`` too). Usage:
        ``engine(mb.input_ids, **mb.forward_kwargs())``.
        """
        if self.position_ids is None:
            return {"attention_mask": self.attention_mask}
        return {"attention_mask": None, "position_ids": self.position_ids}

    def block_causal_mask(self, dtype: torch.dtype | None = None) -> torch.Tensor:
        """The 4-D attention mask of this micro-batch, ``(micro_batch_size, 1, seq_len, seq_len)``.

        Causal within each document (block-diagonal) under document masking; causal within the
        row's real tokens otherwise (the padding a segment of its own). Bool (True: may attend)
        when ``dtype`` is None, else additive (0 / the dtype's lowest value). For a model of
        one's own; :func:`curriculum_ds.core.documents.block_causal_mask`.
        """
        position_ids = self.position_ids
        if position_ids is None:
            length = self.attention_mask.sum(dim=1, keepdim=True)
            t = torch.arange(self.input_ids.shape[1], device=self.input_ids.device)
            position_ids = torch.where(t < length, t, t - length)
        return block_causal_mask(position_ids, dtype)

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
        position_ids = self.position_ids
        return MicroBatch(
            self.input_ids.to(device, non_blocking=non_blocking),
            self.attention_mask.to(device, non_blocking=non_blocking),
            self.labels.to(device, non_blocking=non_blocking),
            self.positions,
            None if position_ids is None else position_ids.to(device, non_blocking=non_blocking),
        )

    def pin_memory(self) -> MicroBatch:
        """The same micro-batch in page-locked host memory (for a ``non_blocking`` copy)."""
        return MicroBatch(
            self.input_ids.pin_memory(),
            self.attention_mask.pin_memory(),
            self.labels.pin_memory(),
            self.positions,
            None if self.position_ids is None else self.position_ids.pin_memory(),
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
