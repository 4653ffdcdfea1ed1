"""Document masking of packed rows: positions that restart per document, boundary labels ignored.

A packed row (``prepare --pack``) holds several documents; its ``doc_starts`` column says where
each begins. With ``train_loader.document_masking`` on, a micro-batch of such rows carries
``position_ids`` that restart at 0 at every document start, at the row's first token and at the
first padding token (padding is a segment of its own), Hugging Face's flattening convention
(``DataCollatorWithFlattening``, Megatron-LM's ``reset_position_ids``). A token then attends
only to the earlier tokens of its own segment:

* HF causal LMs (transformers >= 4.54) build that block-diagonal causal mask themselves from
  ``position_ids`` when ``attention_mask`` is None and no KV cache is in use
  (``masking_utils.find_packed_sequence_indices``);
* a model of one's own takes :func:`block_causal_mask` (bool, ``(batch, 1, seq_len, seq_len)``)
  or derives the segments from ``position_ids`` (a segment starts where the position is 0).

The label of each document's first token (but the row's first) is ``IGNORE_INDEX``: the last
token of the previous document never learns to predict it (Megatron-LM's ``eod_mask_loss`` does
the same for the EOS side). Pure numpy/torch, deterministic.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
import torch

__all__ = ["block_causal_mask", "document_positions"]


def document_positions(
    starts: npt.NDArray[np.integer],
    counts: npt.NDArray[np.int64],
    lengths: npt.NDArray[np.int64],
    seq_len: int,
) -> tuple[npt.NDArray[np.int64], tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]]:
    """Positions restarting at each document, and where a label must be ignored.

    Args:
        starts: every row's document starts concatenated (offsets in the row, increasing within
            a row; those at or past the row's length after truncation are dropped).
        counts: int64 ``(batch,)``: how many of ``starts`` belong to each row, in order.
        lengths: int64 ``(batch,)``: each row's tokens (after truncation), ``<= seq_len``.
        seq_len: the micro-batch's padded length.

    Returns:
        ``(position_ids, boundary)``: int64 ``(batch, seq_len)`` positions, 0 at the row's first
        token, at every start and at the first padding token, counting up by 1 in between; and
        ``(rows, cols)``: the document starts past a row's first token (their labels are to be
        ignored). Deterministic.
    """
    batch = len(lengths)
    rows = np.repeat(np.arange(batch, dtype=np.int64), counts)
    cols = np.asarray(starts, dtype=np.int64)
    keep = (cols > 0) & (cols < lengths[rows])
    rows, cols = rows[keep], cols[keep]
    reset = np.zeros((batch, seq_len), dtype=bool)
    reset[:, 0] = True
    reset[rows, cols] = True
    padded = np.flatnonzero(lengths < seq_len)
    reset[padded, lengths[padded]] = True  # padding: a segment of its own
    t = np.arange(seq_len, dtype=np.int64)
    segment_start = np.maximum.accumulate(np.where(reset, t, 0), axis=1)
    return t - segment_start, (rows, cols)


def block_causal_mask(position_ids: torch.Tensor, dtype: torch.dtype | None = None) -> torch.Tensor:
    """The block-diagonal causal mask of ``position_ids`` (a segment starts at each 0).

    Args:
        position_ids: int64 ``(batch, seq_len)`` as :func:`document_positions` makes them.
        dtype: None for a bool mask (True: may attend; what
            ``torch.nn.functional.scaled_dot_product_attention`` takes); a float dtype for an
            additive one (0 where a token may attend, the dtype's lowest value elsewhere; what
            HF's eager attention adds to its scores).

    Returns:
        ``(batch, 1, seq_len, seq_len)`` on ``position_ids``' device: query ``i`` may attend key
        ``j`` when ``j <= i`` and both are in the same segment. Every row allows its own token.
    """
    segments = torch.cumsum(position_ids == 0, dim=1)
    seq_len = position_ids.shape[1]
    causal = torch.ones(seq_len, seq_len, dtype=torch.bool, device=position_ids.device).tril()
    allowed = (segments[:, :, None] == segments[:, None, :]) & causal
    allowed = allowed[:, None]
    if dtype is None:
        return allowed
    zero = torch.zeros((), dtype=dtype, device=position_ids.device)
    return torch.where(allowed, zero, torch.finfo(dtype).min)
