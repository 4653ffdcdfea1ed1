"""The MDS ``index.json`` of a dataset folder, and the names of the sidecar files of ``prepare``.

:func:`read_index` is the one reader of ``index.json``: it checks every shard entry the other
readers rely on (types, ranges) and that each listed shard file is on disk with its recorded size.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any

from curriculum_ds.data.documents import json_limit_reason
from curriculum_ds.errors import DataError

__all__ = [
    "DATASET_FORMAT",
    "DOC_STARTS_COLUMN",
    "META_FILENAME",
    "METRICS_FILENAME",
    "is_int",
    "is_plain_file_name",
    "read_index",
    "read_json",
]

DATASET_FORMAT = "curriculum_ds/1"
"""Value of ``format`` in ``curriculum_meta.json``; bumped when the layout changes."""

META_FILENAME = "curriculum_meta.json"
"""The dataset's metadata written by :func:`curriculum_ds.data.prepare` (see the package doc)."""
METRICS_FILENAME = "metrics.npz"
"""One array per metric column, in sample order (see the package doc)."""
DOC_STARTS_COLUMN = "doc_starts"
"""The MDS column of packed rows (``prepare --pack``) holding where each document starts in
the row (``ndarray:int32`` offsets, increasing, the first 0). Absent from streams packed before
it was written: their rows are then one document each for document masking (as then)."""


def read_index(local: Path, *, require_shards: bool = True) -> dict[str, Any]:
    """Validate that ``local`` is an MDS dataset and return its parsed ``index.json``.

    Every shard file name must be a plain file name (:func:`is_plain_file_name`: the folder
    reads nothing outside itself). Every shard needs one of its listed files (``raw_data`` or
    ``zip_data``) on disk (unless ``require_shards`` is False: the cache folder of a remote
    stream, whose shards are downloaded on first use), and every listed file on disk must be a
    regular file (not a symbolic link) of the size ``index.json`` records (one ``lstat`` per
    file).

    Raises:
        DataError: no folder or index, an unreadable index, no shards, a malformed shard entry
            (a shard name with a path in it included), a missing shard file, a shard that is a
            symbolic link or not a regular file, or a shard file of another size (truncated or
            corrupt).
    """
    if not local.is_dir():
        raise DataError(f"dataset folder not found: {local}")
    index_path = local / "index.json"
    if not index_path.is_file():
        raise DataError(f"not an MDS dataset (no index.json): {local}")
    index = read_json(index_path, f"MDS index {index_path}")
    shards = index.get("shards") if isinstance(index, dict) else None
    if not isinstance(shards, list) or not shards:
        raise DataError(f"MDS index lists no shards: {index_path}")
    for i, shard in enumerate(shards):
        _check_shard_entry(index_path, i, shard)
        found = False
        for key in ("raw_data", "zip_data"):
            info = shard.get(key)
            if not isinstance(info, dict):
                continue
            name = info["basename"]
            mode_size = _lstat(local / name)
            if mode_size is None:
                continue
            mode, actual = mode_size
            if stat.S_ISLNK(mode) or not stat.S_ISREG(mode):
                what = "a symbolic link" if stat.S_ISLNK(mode) else "not a regular file"
                raise DataError(f"MDS dataset {local}: shard file {name} is {what}")
            found = True
            expected = info.get("bytes")
            if isinstance(expected, int) and actual != expected:
                raise DataError(
                    f"MDS dataset {local}: shard file {name} has {actual} bytes "
                    f"but index.json records {expected} (truncated or corrupt)"
                )
        if require_shards and not found:
            names = [shard[k]["basename"] for k in ("raw_data", "zip_data") if shard.get(k)]
            raise DataError(f"MDS dataset {local}: shard file missing: {names[0]}")
    return index


def read_json(path: Path, label: str) -> Any:
    """Parse a JSON file of a dataset folder.

    Raises:
        DataError: ``cannot read <label>: <why>``: unreadable, not UTF-8, invalid JSON, or beyond
            Python's JSON limits (see :func:`~curriculum_ds.data.json_limit_reason`).
    """
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise DataError(f"cannot read {label}: {err}") from err
    except (ValueError, RecursionError) as err:
        raise DataError(f"cannot read {label}: {json_limit_reason(err)}") from None


_MAX_SHARD_SAMPLES = 2**32 - 2  # an MDS shard header stores num_samples + 1 offsets as uint32


def is_plain_file_name(name: str) -> bool:
    r"""Whether ``name`` names a file directly inside a folder, and nothing else.

    Not empty, no ``/`` or ``\`` (so never absolute nor in another folder), not ``.`` or
    ``..``, no NUL. The one rule for the shard names of an ``index.json``, local or remote (a
    received dataset folder reads and deletes nothing outside itself).
    """
    return bool(name) and name not in (".", "..") and not any(c in name for c in "/\\\0")


def _lstat(path: Path) -> tuple[int, int] | None:
    """``(st_mode, st_size)`` of ``path`` itself (a symbolic link not followed), None if absent."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return None
    except OSError as err:
        raise DataError(f"MDS shard {path}: cannot be read ({err.strerror})") from None
    return st.st_mode, st.st_size


def is_int(value: Any) -> bool:
    """Whether a parsed JSON value is an integer (``true``/``false`` are not)."""
    return isinstance(value, int) and not isinstance(value, bool)


def _check_shard_entry(index_path: Path, i: int, shard: Any) -> None:
    """Check the types and ranges of ``index.json``'s ``shards[i]`` that the readers rely on.

    Raises:
        DataError: one line naming ``index_path``, the shard index and the key.
    """
    where = f"MDS index {index_path}: shards[{i}]"
    if not isinstance(shard, dict):
        raise DataError(f"{where} is malformed: expected an object, got {type(shard).__name__}")
    samples = shard.get("samples")
    if not isinstance(samples, int) or isinstance(samples, bool):
        samples_ok = False
    else:
        samples_ok = 0 <= samples <= _MAX_SHARD_SAMPLES
    if not samples_ok:
        raise DataError(
            f"{where}.samples must be an integer in [0, {_MAX_SHARD_SAMPLES}], got {samples!r:.60}"
        )
    fmt = shard.get("format")
    if fmt != "mds":
        raise DataError(f"{where}.format must be 'mds' (only MDS shards are read), got {fmt!r:.60}")
    if shard.get("raw_data") is None and shard.get("zip_data") is None:
        raise DataError(f"{where} is malformed: neither raw_data nor zip_data is given")
    for key in ("raw_data", "zip_data"):
        info = shard.get(key)
        if info is None:
            continue
        if not isinstance(info, dict):
            raise DataError(f"{where}.{key} must be an object or null, got {type(info).__name__}")
        name = info.get("basename")
        if not isinstance(name, str) or not name or "\0" in name:
            raise DataError(f"{where}.{key}.basename must be a file name, got {name!r:.60}")
        if not is_plain_file_name(name):
            raise DataError(
                f"{where}.{key}.basename must be a plain file name inside the dataset folder "
                f"(no '/' or '\\', not '.' or '..'), got {name!r:.200}"
            )
        size = info.get("bytes")
        if size is not None and (not is_int(size) or size < 0):
            raise DataError(f"{where}.{key}.bytes must be a non-negative integer, got {size!r:.60}")
        hashes = info.get("hashes")
        if hashes is not None and not (
            isinstance(hashes, dict)
            and all(isinstance(k, str) and isinstance(v, str) for k, v in hashes.items())
        ):
            raise DataError(f"{where}.{key}.hashes must map algorithm names to hex digests")
    names, encodings, sizes = (
        shard.get(key) for key in ("column_names", "column_encodings", "column_sizes")
    )
    if not (
        isinstance(names, list)
        and isinstance(encodings, list)
        and isinstance(sizes, list)
        and len(names) == len(encodings) == len(sizes)
    ):
        raise DataError(
            f"{where}: column_names, column_encodings and column_sizes must be lists of one length"
        )
    if not all(isinstance(n, str) for n in names):
        raise DataError(f"{where}.column_names must be strings")
    if not all(isinstance(e, str) for e in encodings):
        raise DataError(f"{where}.column_encodings must be strings")
    for k, size in enumerate(sizes):
        if size is not None and (not is_int(size) or not 0 <= size < 2**32):
            raise DataError(
                f"{where}.column_sizes[{k}] must be null or a non-negative integer, "
                f"got {size!r:.60}"
            )
