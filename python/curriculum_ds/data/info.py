"""What training needs to know about a prepared stream (:class:`StreamInfo`), without a scan.

A dataset made by :func:`curriculum_ds.data.prepare` is described by its sidecar files
(``curriculum_meta.json``, ``metrics.npz``), checked against its ``index.json``; any other MDS
dataset with an integer ``input_ids`` column is read whole once.
"""

from __future__ import annotations

import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from curriculum_ds.data.index import (
    DATASET_FORMAT,
    DOC_STARTS_COLUMN,
    META_FILENAME,
    METRICS_FILENAME,
    is_int,
    read_index,
    read_json,
)
from curriculum_ds.data.qa import PROMPT_LEN_COLUMN
from curriculum_ds.data.streams import close_stream, open_stream
from curriculum_ds.data.tokenizers import MAX_VOCAB_SIZE
from curriculum_ds.errors import DataError

__all__ = ["StreamInfo", "read_stream_info"]


@dataclass(frozen=True, eq=False)
class StreamInfo:
    """What training needs to know about one prepared stream, read without scanning shards.

    Attributes:
        local: The dataset folder.
        num_samples: Samples in the dataset.
        num_tokens: Tokens over all samples (EOS included).
        vocab_size: Tokenizer vocabulary size; ``None`` for an MDS dataset not made by
            :func:`curriculum_ds.data.prepare`.
        eos_id: End-of-document id, or ``None``.
        max_seq_len: Longest sample allowed when prepared, in tokens; ``None`` if unknown.
        tokenizer: ``"byte"``, the tokenizer file path, or ``None`` if unknown.
        metrics: Column name → read-only array of shape ``(num_samples,)``, in sample order:
            ``num_tokens`` (int64) always, plus the float64 metrics of prepared datasets (and
            the int64 ``prompt_len`` of QA records).
        min_token_id: Smallest token id of any sample, when known (foreign datasets, which are
            read whole); ``None`` otherwise.
        max_token_id: Largest token id of any sample, when known (``curriculum_meta.json`` of
            datasets prepared since it is recorded, or foreign datasets); ``None`` otherwise.
        tokenizer_sha256: sha256 of the ``tokenizer.json`` the dataset was prepared with, when
            recorded (not for the byte tokenizer); ``None`` otherwise.
        packed: Prepared with ``pack``: every row but the last holds exactly ``max_seq_len``
            tokens, spanning documents (``False`` for datasets prepared before it was recorded
            and for foreign datasets).
        doc_starts: Its shards have the ``doc_starts`` column (packed rows' document starts,
            written by ``prepare --pack`` since document masking exists); ``False`` for streams
            packed before, whose rows then count as one document each.
    """

    local: Path
    num_samples: int
    num_tokens: int
    vocab_size: int | None
    eos_id: int | None
    max_seq_len: int | None
    tokenizer: str | None
    metrics: dict[str, np.ndarray]
    min_token_id: int | None = None
    max_token_id: int | None = None
    tokenizer_sha256: str | None = None
    packed: bool = False
    doc_starts: bool = False

    @property
    def qa(self) -> bool:
        """Whether the samples are question-answer records (``prepare --format qa``).

        Each sample's ``prompt_len`` leading tokens bear no loss (:mod:`curriculum_ds.data.qa`).
        """
        return PROMPT_LEN_COLUMN in self.metrics


def _frozen(arr: np.ndarray) -> np.ndarray:
    arr.setflags(write=False)
    return arr


def read_stream_info(local: str | Path, *, remote: str | None = None) -> StreamInfo:
    """Read the metadata and per-sample metrics of an MDS dataset folder.

    For a dataset made by :func:`curriculum_ds.data.prepare`, everything comes from
    ``curriculum_meta.json`` and ``metrics.npz`` (checked against ``index.json``). For any
    other MDS dataset with an ``input_ids`` ndarray column, ``num_tokens`` is computed by reading
    every sample through :func:`~curriculum_ds.data.open_stream` (slow for large datasets) and
    the tokenizer fields are ``None``. Nothing is cached.

    Args:
        local: A local MDS dataset folder, or the cache folder of ``remote`` holding its
            ``index.json`` and sidecar files (:func:`~curriculum_ds.data.sync_stream_metadata`);
            a foreign dataset's shards are then downloaded to be read.
        remote: The stream's remote, or None for a local dataset.

    Returns:
        A :class:`StreamInfo`.

    Raises:
        DataError: ``local`` is not a readable MDS dataset, its sidecar files disagree with the
            index, or (foreign datasets) it has no ``input_ids`` column.
    """
    local = Path(local)
    index = read_index(local, require_shards=remote is None)
    num_samples = int(sum(shard["samples"] for shard in index["shards"]))
    if num_samples == 0:
        raise DataError(f"MDS dataset {local} holds no samples (every shard is empty)")
    meta_path = local / META_FILENAME
    if not meta_path.exists():
        return _read_foreign_info(local, index, num_samples, remote)
    meta = read_json(meta_path, str(meta_path))
    if not isinstance(meta, dict) or meta.get("format") != DATASET_FORMAT:
        found = meta.get("format") if isinstance(meta, dict) else None
        raise DataError(f"{meta_path}: format must be {DATASET_FORMAT!r}, got {found!r}")
    for key in ("vocab_size", "num_samples", "num_tokens", "max_seq_len"):
        if not is_int(meta.get(key)):
            raise DataError(f"{meta_path}: field {key!r} missing or not an integer")
    if not 1 <= meta["vocab_size"] <= MAX_VOCAB_SIZE:
        raise DataError(
            f"{meta_path}: field 'vocab_size' must be in [1, {MAX_VOCAB_SIZE}] (int32 token ids), "
            f"got {meta['vocab_size']:.6g}"
        )
    max_token_id = meta.get("max_token_id")  # absent in datasets prepared before it was recorded
    if max_token_id is not None and (
        isinstance(max_token_id, bool) or not isinstance(max_token_id, int)
    ):
        raise DataError(f"{meta_path}: field 'max_token_id' must be an integer")
    packed = meta.get("packed", False)  # absent in datasets prepared before it was recorded
    if not isinstance(packed, bool):
        raise DataError(f"{meta_path}: field 'packed' must be true or false")
    if meta["num_samples"] != num_samples:
        raise DataError(
            f"{meta_path}: num_samples {meta['num_samples']} disagrees with index.json "
            f"({num_samples}); re-run prepare"
        )
    columns = meta.get("metric_columns")
    if not isinstance(columns, list) or "num_tokens" not in columns:
        raise DataError(f"{meta_path}: field 'metric_columns' must list 'num_tokens'")
    metrics_path = local / METRICS_FILENAME
    try:
        with np.load(metrics_path, allow_pickle=False) as npz:
            loaded = {name: npz[name] for name in npz.files}  # each read is a fresh array
    except (OSError, ValueError, zipfile.BadZipFile) as err:
        raise DataError(f"cannot read {metrics_path}: {err}") from err
    metrics: dict[str, np.ndarray] = {}
    for name in columns:
        if name not in loaded:
            raise DataError(f"{metrics_path}: metric column {name!r} missing")
        arr = loaded[name]
        if arr.shape != (num_samples,):
            raise DataError(
                f"{metrics_path}: column {name!r} has shape {arr.shape}, expected ({num_samples},)"
            )
        dtype = np.int64 if name in ("num_tokens", PROMPT_LEN_COLUMN) else np.float64
        with np.errstate(invalid="ignore", over="ignore"):  # a NaN count fails the sum below
            metrics[name] = _frozen(arr.astype(dtype, copy=False))
    if int(metrics["num_tokens"].sum()) != meta["num_tokens"]:
        raise DataError(f"{metrics_path}: num_tokens column does not sum to meta num_tokens")
    tok = meta.get("tokenizer")
    tok_fields = tok if isinstance(tok, dict) else {}
    tokenizer = tok if isinstance(tok, str) else tok_fields.get("path")
    sha = tok_fields.get("sha256")
    eos = meta.get("eos_id")
    return StreamInfo(
        local=local,
        num_samples=num_samples,
        num_tokens=int(meta["num_tokens"]),
        vocab_size=int(meta["vocab_size"]),
        eos_id=int(eos) if isinstance(eos, int) else None,
        max_seq_len=int(meta["max_seq_len"]),
        tokenizer=tokenizer if isinstance(tokenizer, str) else None,
        metrics=metrics,
        max_token_id=max_token_id,
        tokenizer_sha256=sha if isinstance(sha, str) else None,
        packed=packed,
        doc_starts=all(
            DOC_STARTS_COLUMN in (shard.get("column_names") or []) for shard in index["shards"]
        ),
    )


def _read_foreign_info(
    local: Path, index: dict[str, Any], num_samples: int, remote: str | None
) -> StreamInfo:
    for i, shard in enumerate(index["shards"]):
        names = shard.get("column_names") or []
        encodings = shard.get("column_encodings") or []
        if "input_ids" not in names:
            raise DataError(f"MDS dataset {local}: shards[{i}] has no 'input_ids' column")
        encoding = encodings[names.index("input_ids")] if len(encodings) == len(names) else ""
        if not str(encoding).startswith("ndarray"):
            raise DataError(
                f"MDS dataset {local}: column 'input_ids' must be an ndarray, got {encoding!r}"
            )
    ds = open_stream(local, remote)
    lengths = np.empty(num_samples, dtype=np.int64)
    low: int | None = None
    high: int | None = None
    for i in range(num_samples):
        ids = np.asarray(ds[i]["input_ids"])
        lengths[i] = ids.size
        if ids.size and np.issubdtype(ids.dtype, np.integer):
            low = int(ids.min()) if low is None else min(low, int(ids.min()))
            high = int(ids.max()) if high is None else max(high, int(ids.max()))
    close_stream(ds)
    return StreamInfo(
        local=local,
        num_samples=num_samples,
        num_tokens=int(lengths.sum()),
        vocab_size=None,
        eos_id=None,
        max_seq_len=None,
        tokenizer=None,
        metrics={"num_tokens": _frozen(lengths)},
        min_token_id=low,
        max_token_id=high,
    )
