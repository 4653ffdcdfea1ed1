"""A held-out split for :func:`curriculum_ds.data.prepare`: ``prepare --val-fraction F``.

The non-empty documents of the inputs (in reading order) are counted once; a permutation drawn
from ``seed`` picks ``round(F × n)`` of them (at least 1, at most ``n - 1``) for the held-out
folder, the rest go to ``out``. The split is by document, so no document has samples on both
sides, and it depends only on the inputs, ``F`` and ``seed``: the same call writes
byte-identical folders. The held-out folder is ``OUT_val`` beside ``out``
(:func:`val_folder`) unless named.
"""

from __future__ import annotations

import math
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from curriculum_ds.data.documents import ReadStats, check_inputs, iter_documents
from curriculum_ds.data.writer import PrepareSummary, prepare
from curriculum_ds.errors import DataError

__all__ = [
    "DEFAULT_SPLIT_SEED",
    "VAL_SUFFIX",
    "check_val_fraction",
    "held_out_documents",
    "prepare_split",
    "val_folder",
]

VAL_SUFFIX = "_val"
"""What the held-out folder's name adds to ``out``'s: ``data/web`` → ``data/web_val``."""

DEFAULT_SPLIT_SEED = 0
"""The seed of the held-out draw when none is given (``prepare --seed``)."""


def val_folder(out: str) -> str:
    """The held-out folder beside ``out``: ``out`` (trailing ``/`` dropped) + ``_val``."""
    return out.rstrip("/") + VAL_SUFFIX


def check_val_fraction(val_fraction: Any) -> float:
    """``val_fraction`` as a float in the open interval (0, 1).

    Raises:
        DataError: ``--val-fraction F: must be a number in (0, 1) ...``.
    """
    ok = isinstance(val_fraction, int | float) and not isinstance(val_fraction, bool)
    if not ok or not 0.0 < float(val_fraction) < 1.0 or math.isnan(float(val_fraction)):
        raise DataError(
            f"--val-fraction {val_fraction}: must be a number in (0, 1), the share of documents "
            "held out (e.g. 0.05)"
        )
    return float(val_fraction)


def held_out_documents(num_docs: int, val_fraction: float, seed: int) -> frozenset[int]:
    """The indices (among ``num_docs`` documents) of the held-out ones."""
    if num_docs < 2:
        raise DataError(
            f"--val-fraction: the inputs hold {num_docs} non-empty document"
            f"{'s' if num_docs != 1 else ''}; a split by document needs at least 2"
        )
    k = min(max(1, round(val_fraction * num_docs)), num_docs - 1)
    order = np.random.default_rng(seed).permutation(num_docs)
    return frozenset(int(i) for i in order[:k])


def prepare_split(
    inputs: Sequence[Path],
    out: Path,
    *,
    val_fraction: float,
    val_out: Path | None = None,
    seed: int = DEFAULT_SPLIT_SEED,
    format: str | None = None,
    text_field: str = "text",
    **prepare_kwargs: Any,
) -> tuple[PrepareSummary, PrepareSummary]:
    """:func:`~curriculum_ds.data.prepare` into ``out`` and a held-out folder, split by document.

    Args:
        inputs: Files and folders, as for :func:`~curriculum_ds.data.prepare`.
        out: The training folder; must not exist or be empty.
        val_fraction: The share of non-empty documents held out, in (0, 1); ``round(F × n)``
            documents, at least 1 and at most ``n - 1``.
        val_out: The held-out folder; default ``OUT_val`` beside ``out`` (:func:`val_folder`).
            Must not exist or be empty.
        seed: Draws which documents are held out (a NumPy ``default_rng`` permutation).
        format: As for :func:`~curriculum_ds.data.prepare`.
        text_field: As for :func:`~curriculum_ds.data.prepare`.
        **prepare_kwargs: The other arguments of :func:`~curriculum_ds.data.prepare`
            (``tokenizer``, ``max_seq_len``, ``pack``, ...), the same for both folders.

    Returns:
        ``(training summary, held-out summary)``.

    Raises:
        DataError: ``val_fraction`` outside (0, 1) or fewer than 2 documents (before anything
            is written), a non-empty ``out`` or ``val_out``, or what
            :func:`~curriculum_ds.data.prepare` raises. Neither folder is left on an error.
    """
    fraction = check_val_fraction(val_fraction)
    val = Path(val_folder(str(out))) if val_out is None else Path(val_out)
    for folder in (Path(out), val):
        if folder.exists() and (not folder.is_dir() or any(folder.iterdir())):
            raise DataError(f"output folder is not empty: {folder}")
    files = check_inputs(inputs, format=format)
    num_docs = sum(1 for doc in iter_documents(files, ReadStats(), text_field=text_field) if doc)
    held = held_out_documents(num_docs, fraction, int(seed))
    common = {"format": format, "text_field": text_field, **prepare_kwargs}
    train = prepare(inputs, out, select=lambda i: i not in held, **common)
    try:
        held_out = prepare(inputs, val, select=held.__contains__, **common)
    except BaseException:
        shutil.rmtree(out, ignore_errors=True)
        raise
    return train, held_out
