"""``prepare --shard I/N`` and ``prepare --num-workers M``: one prepare spread over processes.

:func:`prepare_parts` counts the inputs' non-empty documents once
(:func:`~curriculum_ds.data.parts.count_documents`), takes the contiguous range of documents of
part ``I`` of ``N`` (:func:`~curriculum_ds.data.parts.document_range`; all of them without
``--shard``) and prepares it:

* with one worker, in this process, into ``out`` (a part records itself in its
  ``curriculum_meta.json``, for ``curriculum-ds merge``);
* with ``M`` workers, in ``M`` processes (the platform's default start method: ``fork`` on
  Linux, as ``datasets``' ``map(num_proc=...)`` and streaming's conversion examples; the parent
  has only counted documents, no tokenizer or torch thread is running), each preparing a
  contiguous sub-range into a temporary folder beside ``out``, joined by
  :func:`~curriculum_ds.data.merge.merge_parts` into ``out`` and removed. Without ``--pack``
  the result is byte-identical to one worker's in its samples, ``metrics.npz``,
  ``curriculum_meta.json`` and tokenizer files (the shard files split the samples elsewhere);
  with ``--pack`` each worker packs its own documents (at most M − 1 more rows, the same
  documents and tokens in the same order).

``--val-fraction F`` draws the held-out documents from the inputs' document count and
``--seed`` (:func:`~curriculum_ds.data.split.held_out_documents`), which every part and worker
computes alike, so the parts agree on the split and the merged train and held-out folders are a
one-process ``prepare --val-fraction F`` 's.
"""

from __future__ import annotations

import dataclasses
import multiprocessing
import shutil
import tempfile
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

from curriculum_ds.data.documents import ReadStats, check_inputs, describe_skipped
from curriculum_ds.data.merge import merge_parts
from curriculum_ds.data.packing import PaddingTally
from curriculum_ds.data.parts import Shard, count_documents, document_range, part_record
from curriculum_ds.data.split import check_val_fraction, held_out_documents, val_folder
from curriculum_ds.data.staging import check_out_empty
from curriculum_ds.data.writer import PrepareSummary, prepare
from curriculum_ds.errors import DataError

__all__ = ["check_num_workers", "prepare_parts"]


def check_num_workers(num_workers: Any) -> int:
    """``num_workers`` as an integer ≥ 1.

    Raises:
        DataError: ``--num-workers 0: must be an integer >= 1 ...``.
    """
    if isinstance(num_workers, bool) or not isinstance(num_workers, int) or num_workers < 1:
        raise DataError(
            f"--num-workers {num_workers}: must be an integer >= 1 (processes on this machine)"
        )
    return num_workers


def _prepare_range(
    inputs: Sequence[Path],
    outs: tuple[Path, Path | None],
    documents: tuple[int, int],
    record: dict[str, Any] | None,
    val: tuple[int, float, int] | None,
    kwargs: dict[str, Any],
) -> list[PrepareSummary]:
    """Prepare the documents ``[first, stop)`` into ``outs[0]``; runs in a worker.

    With ``val`` (``(total_documents, fraction, seed)``) the held-out ones go to ``outs[1]``.
    """
    common = {"documents": documents, "part": record, **kwargs}
    if val is None:
        return [prepare(inputs, outs[0], **common)]
    held = held_out_documents(*val)
    val_out = outs[1] if outs[1] is not None else Path(val_folder(str(outs[0])))
    train = prepare(inputs, outs[0], select=lambda i: i not in held, **common)
    try:
        return [train, prepare(inputs, val_out, select=held.__contains__, **common)]
    except BaseException:
        shutil.rmtree(outs[0], ignore_errors=True)
        raise


def _sub_ranges(span: tuple[int, int], count: int) -> list[tuple[int, int]]:
    first, stop = span
    return [
        (first + j * (stop - first) // count, first + (j + 1) * (stop - first) // count)
        for j in range(count)
    ]


def _joined(parts: Sequence[PrepareSummary], out: Path, stats: ReadStats) -> PrepareSummary:
    """One summary for the joined parts (their padding counts added up)."""
    first = parts[0]
    tally = PaddingTally(first.max_seq_len, first.tally.min_tokens if first.tally else 1)
    for part in parts:
        if part.tally is not None:
            for key in ("num_documents", "num_tokens", "unpacked_rows", "unpacked_tokens"):
                setattr(tally, key, getattr(tally, key) + getattr(part.tally, key))
    return dataclasses.replace(
        first,
        out=out,
        num_documents=sum(p.num_documents for p in parts),
        num_samples=sum(p.num_samples for p in parts),
        num_tokens=sum(p.num_tokens for p in parts),
        num_skipped_files=stats.num_skipped_files,
        skipped_suffixes=dict(sorted(stats.skipped_suffixes.items())),
        padding_unpacked=tally.unpacked,
        padding_packed=tally.packed,
        tally=tally,
    )


def prepare_parts(
    inputs: Sequence[Path],
    out: Path,
    *,
    shard: Shard | None = None,
    num_workers: int = 1,
    val_fraction: float | None = None,
    val_out: Path | None = None,
    seed: int = 0,
    format: str | None = None,
    text_field: str = "text",
    **prepare_kwargs: Any,
) -> list[PrepareSummary]:
    """Prepare part ``shard`` of the inputs (all of them when None) with ``num_workers`` processes.

    Args:
        inputs: Files and folders, as for :func:`~curriculum_ds.data.prepare`.
        out: The part's (or the whole stream's) folder; must not exist or be empty.
        shard: ``Shard(I, N)``: the documents ``[⌊I·n/N⌋, ⌊(I+1)·n/N⌋)`` of the ``n``
            non-empty documents, written as a part for ``curriculum-ds merge``; None: all, a
            whole stream.
        num_workers: Processes on this machine, ≥ 1.
        val_fraction: Hold out this share of the documents (as ``prepare_split``), or None.
        val_out: The held-out folder (default ``OUT_val``).
        seed: Draws the held-out documents.
        format: As for :func:`~curriculum_ds.data.prepare`.
        text_field: As for :func:`~curriculum_ds.data.prepare`.
        **prepare_kwargs: ``tokenizer``, ``max_seq_len``, ``min_tokens``, ``pack``, ... (the
            progress bar is off with several workers).

    Returns:
        The training folder's summary, then the held-out folder's with ``val_fraction``.

    Raises:
        DataError: a bad ``num_workers`` or ``val_fraction``, a non-empty output folder, inputs
            without a document, or what :func:`~curriculum_ds.data.prepare` and
            :func:`~curriculum_ds.data.merge.merge_parts` raise; no output folder is left.
    """
    workers = check_num_workers(num_workers)
    fraction = None if val_fraction is None else check_val_fraction(val_fraction)
    out = Path(out)
    held_out = None if fraction is None else Path(val_out or val_folder(str(out)))
    for folder in (out, held_out):
        if folder is not None:
            check_out_empty(folder.resolve())
    files = check_inputs(inputs, format=format)
    stats = ReadStats()
    total = count_documents(files, text_field=text_field, stats=stats)
    if total == 0:
        skipped = describe_skipped(stats)
        raise DataError(
            "no documents found in inputs: "
            + ", ".join(str(p) for p in list(inputs)[:3])
            + (f" (skipped {skipped})" if skipped else "")
        )
    span = document_range(shard, total) if shard is not None else (0, total)
    record = part_record(shard, span, total) if shard is not None else None
    val = None if fraction is None else (total, fraction, int(seed))
    kwargs = {"format": format, "text_field": text_field, **prepare_kwargs}
    if workers == 1:
        done = _prepare_range(inputs, (out, held_out), span, record, val, kwargs)
        return [_joined([summary], summary.out, stats) for summary in done]
    kwargs["progress"] = False
    out.resolve().parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.parts-", dir=out.resolve().parent))
    written: list[Path] = []
    try:
        ranges = _sub_ranges(span, workers)
        with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context()) as pool:
            futures = [
                pool.submit(
                    _prepare_range,
                    list(inputs),
                    (tmp / f"{j}", tmp / f"{j}_val"),
                    sub,
                    part_record(Shard(j, workers), sub, total),
                    val,
                    kwargs,
                )
                for j, sub in enumerate(ranges)
            ]
            try:
                results = [future.result() for future in futures]
            except BaseException:
                pool.shutdown(cancel_futures=True)
                raise
        summaries = []
        targets = [out] if held_out is None else [out, held_out]
        for k, target in enumerate(targets):
            suffix = "" if k == 0 else "_val"
            merge_parts(
                target, [tmp / f"{j}{suffix}" for j in range(workers)], span=span, record=record
            )
            written.append(target)
            summaries.append(_joined([r[k] for r in results], target, stats))
        return summaries
    except BaseException:
        for target in written:  # the training folder, when the held-out one failed
            shutil.rmtree(target, ignore_errors=True)
        raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
