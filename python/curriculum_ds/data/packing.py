"""Rows for :func:`curriculum_ds.data.prepare`: documents split one by one, or packed together.

* Unpacked (the default): each document is cut into consecutive samples of at most
  ``max_seq_len`` tokens (:func:`split_document`); samples never span two documents, so short
  documents leave most of a row as padding once batched.
* Packed (``prepare --pack``): the documents, each ending with its EOS, are concatenated into one
  token stream cut into rows of exactly ``max_seq_len`` tokens (:func:`pack_rows`); only the last
  row of the dataset may be shorter. No token is lost or duplicated. This is llm-foundry's
  ``concat_tokens`` conversion (``ConcatTokensDataset``), without its BOS and with the trailing
  partial row kept. :func:`pack_documents` also gives each row's document starts (the offsets
  where a document begins), which ``prepare --pack`` writes as the ``doc_starts`` column so that
  training can keep a token from attending across a document boundary
  (:mod:`curriculum_ds.core.documents`).

:class:`PaddingTally` counts, while the documents stream by, the padding fraction both layouts
would have: the share of token slots that are padding when every row is padded to
``max_seq_len`` (fixed-shape batches; the trainer's collator pads a micro-batch only to its
longest row, so it wastes at most this share).

:func:`check_packed_rows` refuses a packed stream whose rows are longer than a phase's
``max_seq_len`` (the preflight and the loader both call it).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from curriculum_ds.errors import ConfigError
from curriculum_ds.files.user_paths import show_path

__all__ = [
    "PaddingTally",
    "check_packed_rows",
    "pack_documents",
    "pack_rows",
    "padding_fraction",
    "split_document",
]


def split_document(ids: np.ndarray, max_seq_len: int, min_tokens: int) -> list[np.ndarray]:
    """Cut one tokenized document into consecutive samples.

    Args:
        ids: The document's token ids (EOS included), shape ``(n,)``.
        max_seq_len: Longest sample, in tokens (``>= 1``).
        min_tokens: A trailing piece shorter than this is dropped.

    Returns:
        Views into ``ids``: all but the last have exactly ``max_seq_len`` tokens, and their
        concatenation is ``ids`` minus at most ``min_tokens - 1`` trailing tokens. Deterministic.
    """
    pieces = [ids[start : start + max_seq_len] for start in range(0, ids.size, max_seq_len)]
    if pieces and pieces[-1].size < min_tokens:
        pieces.pop()
    return pieces


def pack_rows(docs: Iterable[np.ndarray], row_len: int) -> Iterator[np.ndarray]:
    """Concatenate token arrays in order and cut the stream into rows of ``row_len`` tokens.

    The rows of :func:`pack_documents`, without their document starts.
    """
    for row, _ in pack_documents(docs, row_len):
        yield row


def pack_documents(
    docs: Iterable[np.ndarray], row_len: int
) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """Concatenate token arrays in order, cut into rows of ``row_len`` tokens, with their starts.

    Holds at most one row plus one document in memory.

    Args:
        docs: Token id arrays, shape ``(n,)`` each, one dtype; each should end with its EOS.
            Empty arrays are skipped.
        row_len: Tokens per row, ``>= 1``.

    Yields:
        ``(row, starts)``: ``row`` holds exactly ``row_len`` tokens (the last one ``1 ..
        row_len`` when the total is not a multiple of ``row_len``), and the rows concatenate to
        the concatenation of ``docs``; ``starts`` (int32, increasing, in ``[0, len(row))``) are
        the offsets in ``row`` where a segment begins: 0 (a document begins there, or the rest
        of the previous row's last document continues; either way the row's first token sees
        no earlier one) and every offset where a document begins. Never empty (MDS cannot
        store an empty array). Deterministic.
    """
    pending: list[np.ndarray] = []
    pending_starts: list[int] = []  # offsets in the pending tokens where a document begins
    num_pending = 0
    for ids in docs:
        if ids.size == 0:
            continue
        pending.append(ids)
        pending_starts.append(num_pending)
        num_pending += ids.size
        if num_pending < row_len:
            continue
        flat = np.concatenate(pending) if len(pending) > 1 else pending[0]
        starts = np.asarray(pending_starts, dtype=np.int64)
        num_full = flat.size // row_len * row_len
        cuts = np.searchsorted(starts, np.arange(0, num_full + 1, row_len))
        for k, start in enumerate(range(0, num_full, row_len)):
            yield flat[start : start + row_len], _with_zero(starts[cuts[k] : cuts[k + 1]] - start)
        rest = flat[num_full:]
        pending = [rest] if rest.size else []
        pending_starts = (starts[cuts[-1] :] - num_full).tolist()
        num_pending = int(rest.size)
    if num_pending:
        flat = np.concatenate(pending) if len(pending) > 1 else pending[0]
        yield flat, _with_zero(np.asarray(pending_starts, dtype=np.int64))


def _with_zero(starts: np.ndarray) -> np.ndarray:
    """``starts`` as int32, beginning with 0."""
    if starts.size and starts[0] == 0:
        return starts.astype(np.int32)
    return np.concatenate([np.zeros(1, dtype=np.int32), starts.astype(np.int32)])


def padding_fraction(num_tokens: int, num_rows: int, row_len: int) -> float:
    """Share of the ``num_rows * row_len`` token slots that hold no token, in ``[0, 1)``.

    ``0.0`` when there are no rows.
    """
    slots = num_rows * row_len
    return 1.0 - num_tokens / slots if slots else 0.0


@dataclass
class PaddingTally:
    """Running counts for the padding fraction of both layouts at one ``max_seq_len``.

    Attributes:
        max_seq_len: The row length, in tokens.
        min_tokens: The unpacked layout's shortest kept piece, in tokens.
        num_documents: Documents counted so far.
        num_tokens: Tokens of all documents so far (EOS included).
        unpacked_rows / unpacked_tokens: Rows and tokens the unpacked layout has so far (a
            trailing piece shorter than ``min_tokens`` is dropped there).
    """

    max_seq_len: int
    min_tokens: int
    num_documents: int = 0
    num_tokens: int = 0
    unpacked_rows: int = 0
    unpacked_tokens: int = 0

    def add(self, num_tokens: int) -> None:
        """Count one document of ``num_tokens`` tokens (EOS included)."""
        self.num_documents += 1
        self.num_tokens += num_tokens
        full, rest = divmod(num_tokens, self.max_seq_len)
        kept = rest if rest >= self.min_tokens else 0
        self.unpacked_rows += full + (1 if kept else 0)
        self.unpacked_tokens += full * self.max_seq_len + kept

    @property
    def unpacked(self) -> float:
        """Padding fraction of the unpacked layout, rows padded to ``max_seq_len``."""
        return padding_fraction(self.unpacked_tokens, self.unpacked_rows, self.max_seq_len)

    @property
    def packed(self) -> float:
        """Padding fraction of the packed layout (only its last row can be short)."""
        rows = -(-self.num_tokens // self.max_seq_len)
        return padding_fraction(self.num_tokens, rows, self.max_seq_len)


def check_packed_rows(info: Any, max_seq_len: int, where: str) -> None:
    """Refuse a packed stream whose rows are longer than the phase's ``max_seq_len``.

    A packed row (``prepare --pack``) spans documents; cutting it to a shorter ``max_seq_len``
    would drop the rest of the row's tokens, so it is refused rather than truncated. Rows shorter
    than ``max_seq_len`` are fine (a micro-batch is padded to its longest row).

    Args:
        info: The stream's :class:`~curriculum_ds.data.StreamInfo` (``packed``, ``max_seq_len``).
        max_seq_len: The phase's ``train_loader.max_seq_len``, tokens.
        where: The stream's JSON path and phase, for the message.

    Raises:
        ConfigError: one line naming the stream, its row length and the phase's max_seq_len.
    """
    row_len = getattr(info, "max_seq_len", None)
    if getattr(info, "packed", False) and isinstance(row_len, int) and row_len > max_seq_len:
        local = getattr(info, "local", "?")
        raise ConfigError(
            f"{where}.local: {show_path(str(local))} is packed into rows of {row_len} tokens, "
            f"longer than the phase's max_seq_len {max_seq_len} (a packed row is never cut); "
            f"raise max_seq_len to {row_len} or re-run `curriculum-ds prepare --pack "
            f"--max-seq-len {max_seq_len}`"
        )
