"""``curriculum-ds merge OUT PART...``: the parts of a ``prepare --shard`` joined into one stream.

mosaicml-streaming merges the ``index.json`` files of sub-folders into a top-level index whose
shard names carry the sub-folder (``streaming.base.util.merge_index``); our index keeps shard
names plain file names inside the dataset folder (:func:`~curriculum_ds.data.index.
is_plain_file_name`, the rule that keeps a received folder from reading outside itself), and a
prepared stream also has its sidecar files to join. So :func:`merge_parts` does the same join
its own way: the parts' shard files, in part order, become ``shard.00000.mds``, ... of ``OUT``
(hard links when ``OUT`` is on the parts' file system, else copies; the parts are left as they
are), their ``index.json`` entries are concatenated with the new names (sizes and hashes
unchanged: a shard file does not hold its own name), the metric columns of ``metrics.npz`` are
concatenated, and ``curriculum_meta.json`` sums the counts and takes the largest
``max_token_id``.

The merged stream holds exactly the samples, in the same order, with the same columns, as a
one-process ``prepare`` of the same inputs: its ``metrics.npz``, ``curriculum_meta.json`` and
tokenizer files are byte-identical to that one's; only where the shard files split the samples
differs (each part ends its last shard early). With ``--pack`` each part packs its own
documents, so the merged stream holds the same documents and tokens in the same order, in at
most N − 1 more rows (each part's last row may be short).

Everything is checked before anything is written (one line each): every part was written by
``prepare --shard`` (its ``curriculum_meta.json`` has the ``part`` record), every part of the
N is given once (a missing or repeated part, or document ranges that overlap or leave a gap),
and the parts agree on what makes one stream: the tokenizer, ``max_seq_len``, ``min_tokens``,
``packed``, the metric columns and the inputs' document count.
"""

from __future__ import annotations

import json
import os
import shutil
import zipfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from curriculum_ds.data.index import (
    DATASET_FORMAT,
    META_FILENAME,
    METRICS_FILENAME,
    read_index,
    read_json,
)
from curriculum_ds.data.parts import PART_KEY
from curriculum_ds.data.staging import check_out_empty, staged_folder, write_npz
from curriculum_ds.errors import DataError

__all__ = ["MergeSummary", "merge_parts"]

_INDEX = "index.json"
_SAME = ("tokenizer", "vocab_size", "eos_id", "max_seq_len", "min_tokens", "packed")
"""The ``curriculum_meta.json`` fields every part of one stream shares."""
_SUMMED = ("num_documents", "num_samples", "num_tokens")


@dataclass(frozen=True)
class MergeSummary:
    """What :func:`merge_parts` wrote.

    Attributes:
        out: The merged folder.
        num_parts: Parts joined.
        num_documents: Documents over the parts (non-empty documents read).
        num_samples: Samples (rows) over the parts.
        num_tokens: Tokens over the parts, EOS included.
        num_shards: Shard files of the merged stream.
    """

    out: Path
    num_parts: int
    num_documents: int
    num_samples: int
    num_tokens: int
    num_shards: int

    def describe(self) -> str:
        """One line: ``merged 3 parts: 1,234 samples (56,789 tokens) from 100 documents ...``."""
        return (
            f"merged {self.num_parts} parts: {self.num_samples:,} samples ({self.num_tokens:,} "
            f"tokens) from {self.num_documents:,} documents in {self.num_shards} shard files "
            f"to {self.out}"
        )


@dataclass(frozen=True)
class _Part:
    folder: Path
    meta: dict[str, Any]
    record: dict[str, Any]
    shards: list[dict[str, Any]]
    index_version: Any


def _read_part(folder: Path) -> _Part:
    """A part's meta, its ``part`` record and its shard entries, checked.

    Raises:
        DataError: one line naming the folder.
    """
    meta_path = folder / META_FILENAME
    if not folder.is_dir():
        raise DataError(f"merge: part {folder} is not a folder")
    if not meta_path.is_file() or not (folder / _INDEX).is_file():
        raise DataError(
            f"merge: {folder} is not a part written by `curriculum-ds prepare --shard` "
            f"(no {META_FILENAME} or {_INDEX})"
        )
    meta = read_json(meta_path, str(meta_path))
    if not isinstance(meta, dict) or meta.get("format") != DATASET_FORMAT:
        raise DataError(f"merge: {meta_path}: format must be {DATASET_FORMAT!r}")
    record = meta.get(PART_KEY)
    if not isinstance(record, dict) or not _is_record(record):
        raise DataError(
            f"merge: {folder} is not a part written by `curriculum-ds prepare --shard` (its "
            f"{META_FILENAME} has no valid {PART_KEY!r} record); a whole stream needs no merge"
        )
    index = read_json(folder / _INDEX, f"MDS index {folder / _INDEX}")
    shards = index.get("shards") if isinstance(index, dict) else None
    if not isinstance(shards, list):
        raise DataError(f"merge: MDS index {folder / _INDEX} has no shard list")
    if shards:  # a part may be empty (no document of its range made a sample)
        read_index(folder)  # every entry and shard file checked (names, sizes)
    if sum(int(s["samples"]) for s in shards) != meta.get("num_samples"):
        raise DataError(
            f"merge: {meta_path}: num_samples {meta.get('num_samples')} disagrees with "
            f"{_INDEX}; prepare that part again"
        )
    return _Part(folder, meta, record, shards, index.get("version"))


def _is_record(record: Any) -> bool:
    if not isinstance(record, dict):
        return False
    ints = [record.get(k) for k in ("index", "count", "total_documents")]
    docs = record.get("documents")
    if not isinstance(docs, list) or len(docs) != 2:
        return False
    return all(isinstance(v, int) and not isinstance(v, bool) for v in (*ints, *docs))


def _check_parts(parts: Sequence[_Part], span: tuple[int, int] | None) -> None:
    """Every part once, contiguous over the documents, all of one stream.

    Raises:
        DataError: one line naming the part(s) and the field.
    """
    first = parts[0]
    for part in parts[1:]:
        for key in (*_SAME, "metric_columns"):
            if _compared(part.meta, key) != _compared(first.meta, key):
                what = "tokenizers" if key == "tokenizer" else key
                raise DataError(
                    f"merge: the parts were prepared with different {what}: "
                    f"{first.meta.get(key)!r} in {first.folder}, {part.meta.get(key)!r} in "
                    f"{part.folder}; prepare every part with the same options"
                )
        for key in ("count", "total_documents"):
            if part.record[key] != first.record[key]:
                noun = "part counts N" if key == "count" else "input document counts"
                raise DataError(
                    f"merge: the parts disagree on their {noun} ({first.record[key]} in "
                    f"{first.folder}, {part.record[key]} in {part.folder}): they are not parts "
                    "of one prepare of the same inputs"
                )
    count = first.record["count"]
    by_index: dict[int, _Part] = {}
    for part in parts:
        index = part.record["index"]
        if index in by_index:
            raise DataError(
                f"merge: part {index}/{count} is given twice ({by_index[index].folder} and "
                f"{part.folder})"
            )
        by_index[index] = part
    missing = [i for i in range(count) if i not in by_index]
    if missing:
        shown = ", ".join(f"{i}/{count}" for i in missing[:5]) + (", ..." if missing[5:] else "")
        raise DataError(
            f"merge: part{'s' if len(missing) > 1 else ''} {shown} of {count} "
            f"{'are' if len(missing) > 1 else 'is'} missing; give every part once"
        )
    start, stop = span if span is not None else (0, first.record["total_documents"])
    expected = start
    for i in range(count):
        lo, hi = by_index[i].record["documents"]
        if lo != expected or hi < lo:
            raise DataError(
                f"merge: part {i}/{count} ({by_index[i].folder}) covers documents [{lo}, {hi}), "
                f"but the parts before it end at document {expected}: the parts overlap or "
                "leave a gap"
            )
        expected = hi
    if expected != stop:
        raise DataError(
            f"merge: the parts cover documents [{start}, {expected}), not the inputs' "
            f"[{start}, {stop})"
        )


def _compared(meta: dict[str, Any], key: str) -> Any:
    """The value of ``key`` that parts must share.

    A tokenizer file counts by its sha256, not its path: the parts of one stream may read the
    same tokenizer.json from different folders.
    """
    value = meta.get(key)
    if key == "tokenizer" and isinstance(value, dict) and "sha256" in value:
        return {k: v for k, v in value.items() if k != "path"}
    return value


def _place(src: Path, dst: Path) -> None:
    """``dst`` as a hard link to ``src`` when the file system allows, else a copy."""
    try:
        os.link(src, dst)
    except OSError:
        shutil.copyfile(src, dst)


def _metrics(part: _Part) -> dict[str, np.ndarray]:
    path = part.folder / METRICS_FILENAME
    try:
        with np.load(path, allow_pickle=False) as npz:
            arrays = {name: npz[name] for name in npz.files}
    except (OSError, ValueError, zipfile.BadZipFile) as err:
        raise DataError(f"merge: cannot read {path}: {err}") from err
    n = part.meta["num_samples"]
    for name in part.meta["metric_columns"]:
        if name not in arrays or arrays[name].shape != (n,):
            raise DataError(f"merge: {path}: metric column {name!r} missing or not ({n},)")
    return arrays


def merge_parts(
    out: str | Path,
    parts: Sequence[str | Path],
    *,
    span: tuple[int, int] | None = None,
    record: dict[str, Any] | None = None,
) -> MergeSummary:
    """Join the parts of a ``prepare --shard`` into one stream at ``out`` (see the module doc).

    Args:
        out: The merged folder; must not exist or be empty. Written to a temporary folder
            beside it and renamed into place: an error leaves nothing under ``out``.
        parts: The part folders, in any order (they are joined in part order).
        span: The documents ``(first, stop)`` the parts must cover; ``None``: all the inputs'
            (``[0, total_documents)``). With ``record``, the merged folder is itself a part
            (``prepare --shard I/N --num-workers M`` joins its M sub-parts this way).
        record: The ``part`` record of the merged folder; ``None``: a whole stream.

    Returns:
        A :class:`MergeSummary`.

    Raises:
        DataError: no part, a folder that is not a part, a part missing or given twice,
            document ranges that overlap or leave a gap, parts prepared with different
            tokenizers or options, parts holding no sample at all (a whole stream), a
            non-empty ``out``; nothing is written.
    """
    out = Path(out).resolve()
    if not parts:
        raise DataError("merge: no PART folder given")
    read = [_read_part(Path(p)) for p in parts]
    _check_parts(read, span)
    read.sort(key=lambda part: part.record["index"])
    metrics = [_metrics(part) for part in read]
    totals = {key: sum(int(part.meta[key]) for part in read) for key in _SUMMED}
    if totals["num_samples"] == 0 and record is None:
        raise DataError(
            "merge: the parts hold no sample (every document is shorter than min_tokens)"
        )
    check_out_empty(out)
    with staged_folder(out) as tmp:
        entries: list[dict[str, Any]] = []
        for part in read:
            for shard in part.shards:
                entry = json.loads(json.dumps(shard))  # a deep copy
                name = f"shard.{len(entries):05d}.mds"
                _place(part.folder / shard["raw_data"]["basename"], tmp / name)
                entry["raw_data"]["basename"] = name
                entries.append(entry)
        index = {"shards": entries, "version": read[0].index_version}
        (tmp / _INDEX).write_text(json.dumps(index, sort_keys=True), encoding="utf-8")
        columns = read[0].meta["metric_columns"]
        write_npz(
            tmp / METRICS_FILENAME,
            {name: np.concatenate([m[name] for m in metrics]) for name in columns},
        )
        meta = {k: v for k, v in read[0].meta.items() if k != PART_KEY} | totals
        ids = [part.meta.get("max_token_id") for part in read]
        known = [i for i in ids if isinstance(i, int)]
        meta["max_token_id"] = max(known) if len(known) == len(ids) else None
        if record is not None:
            meta[PART_KEY] = record
        (tmp / META_FILENAME).write_text(json.dumps(meta, indent=2) + "\n", encoding="utf-8")
        own = {_INDEX, META_FILENAME, METRICS_FILENAME}
        own |= {s["raw_data"]["basename"] for s in read[0].shards}
        for extra in sorted(read[0].folder.iterdir()):  # the tokenizer files
            if extra.is_file() and extra.name not in own:
                shutil.copyfile(extra, tmp / extra.name)
    return MergeSummary(
        out=out,
        num_parts=len(read),
        num_documents=totals["num_documents"],
        num_samples=totals["num_samples"],
        num_tokens=totals["num_tokens"],
        num_shards=len(entries),
    )
