"""Parts of one ``prepare``: ``prepare --shard I/N`` and the record a part keeps of itself.

A corpus too large for one process is prepared in N parts, one per worker or machine (a Slurm
array, the DeepSpeed launcher's hosts, a Ray or Kubernetes job), then joined by
:func:`curriculum_ds.data.merge.merge_parts` (``curriculum-ds merge OUT PART...``). Part ``I``
(0-based) of ``N`` holds the contiguous range of documents ``[⌊I·n/N⌋, ⌊(I+1)·n/N⌋)`` of the
``n`` non-empty documents of the inputs in reading order (:func:`document_range`), so the parts
joined in order hold every document once, in the order a one-process ``prepare`` reads them.

Finding ``n`` costs each part one reading pass over the inputs (decompressing and parsing, no
tokenizing; :func:`count_documents`), and reading stops after the part's last document; the
tokenizing, the metrics and the writing, most of prepare's time, are split N ways.

A part records itself in its ``curriculum_meta.json`` under :data:`PART_KEY`: ``{"index": I,
"count": N, "documents": [first, stop], "total_documents": n}``, which ``merge`` checks (every
part once, contiguous, the same inputs' count) and drops from the merged stream's.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from curriculum_ds.data.documents import InputFile, ReadStats, iter_documents
from curriculum_ds.errors import DataError

__all__ = [
    "PART_KEY",
    "Shard",
    "count_documents",
    "document_range",
    "parse_shard",
    "part_record",
]

PART_KEY = "part"
"""The key of ``curriculum_meta.json`` under which a part (``prepare --shard``) records itself;
absent from a whole stream (one-process ``prepare``, or ``merge``'s output)."""


@dataclass(frozen=True)
class Shard:
    """Part ``index`` (0-based) of ``count``: ``prepare --shard index/count``."""

    index: int
    count: int

    def __str__(self) -> str:
        return f"{self.index}/{self.count}"


def parse_shard(text: str) -> Shard:
    """``"I/N"`` as a :class:`Shard`: integers with ``0 <= I < N``.

    Raises:
        DataError: one line naming the value (``--shard 3/3: ...``).
    """
    index_text, sep, count_text = str(text).partition("/")
    try:
        index, count = int(index_text), int(count_text)
    except ValueError:
        index = count = -1
    if not sep or count < 1:
        raise DataError(
            f"--shard {text}: must be I/N with integers 0 <= I < N (part I of N, 0-based), e.g. 0/4"
        )
    if not 0 <= index < count:
        raise DataError(
            f"--shard {text}: part index {index} is out of range for {count} parts; "
            f"the parts are 0/{count} to {count - 1}/{count} (0-based)"
        )
    return Shard(index, count)


def document_range(shard: Shard, num_documents: int) -> tuple[int, int]:
    """``(first, stop)``: the half-open range of document indices of ``shard``.

    ``[⌊I·n/N⌋, ⌊(I+1)·n/N⌋)``: contiguous, the ranges of ``0/N`` to ``N-1/N`` partition
    ``[0, n)``, their sizes differ by at most 1 (empty when ``N > n``). Deterministic.
    """
    return (
        shard.index * num_documents // shard.count,
        (shard.index + 1) * num_documents // shard.count,
    )


def count_documents(
    files: Sequence[InputFile], *, text_field: str, stats: ReadStats | None = None
) -> int:
    """The non-empty documents of ``files`` (as ``check_inputs`` lists them), in one pass.

    ``stats`` (when given) counts the files a folder walk skipped, as prepare's own pass does.

    Raises:
        DataError: what reading them raises (see :func:`~curriculum_ds.data.prepare`).
    """
    read = iter_documents(files, stats or ReadStats(), text_field=text_field)
    return sum(1 for doc in read if doc)


def part_record(shard: Shard, documents: tuple[int, int], total: int) -> dict[str, Any]:
    """The :data:`PART_KEY` value of a part's ``curriculum_meta.json``."""
    return {
        "index": shard.index,
        "count": shard.count,
        "documents": [documents[0], documents[1]],
        "total_documents": total,
    }
