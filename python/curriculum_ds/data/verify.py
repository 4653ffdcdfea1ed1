"""Checking a dataset's shard files against its ``index.json`` before any rank opens it.

:func:`verify_stream` reads the shards directly (no ``StreamingDataset``, no shared memory): the
data check of ``curriculum-ds validate`` and of every launch (:mod:`curriculum_ds.preflight`).
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

from curriculum_ds.data.documents import read_bytes
from curriculum_ds.data.index import read_index
from curriculum_ds.errors import DataError

__all__ = ["verify_stream"]

_DECODE_ERRORS = (ValueError, TypeError, KeyError, IndexError, AssertionError, OverflowError)
"""What decoding arbitrary (corrupt) shard bytes with mosaicml-streaming's coders can raise."""


def verify_stream(
    local: str | Path, *, num_probe_samples: int = 16, verify_hashes: bool = False
) -> tuple[int, int] | None:
    """Check an MDS dataset's shard files against its ``index.json`` and decode a probe of samples.

    Catches, before any rank starts, what mosaicml-streaming would only report inside training:

    * every shard needs one of the files ``index.json`` lists for it (``raw_data``, else
      ``zip_data``), and each listed file on disk must have the recorded size;
    * with ``verify_hashes``, each such file must have the hashes ``index.json`` records for it
      (mosaicml-streaming records none unless its writer was given ``hashes``; each hashed file
      is read once, and a compressed-only shard is decompressed to check its raw hashes);
    * each MDS shard's header must agree with the index: its sample count, offsets that increase
      and end at the file's size;
    * ``num_probe_samples`` samples spread evenly over the dataset (the first and the last
      included) must decode, and their ``input_ids`` must be an integer array.

    Reads the shards directly (no ``StreamingDataset``, no shared memory), so it is safe before
    ``torch.distributed`` is initialized. Non-MDS shards (JSON, CSV) get the file checks only.
    Deterministic.

    Args:
        local: A local MDS dataset folder.
        num_probe_samples: Samples to decode, at most the dataset's size; ``>= 1``.
        verify_hashes: Also check the recorded shard hashes (reads every hashed file once).

    Returns:
        ``(min_id, max_id)``: the smallest and largest token id of the probed samples'
        ``input_ids``, or ``None`` when they hold no token.

    Raises:
        DataError: one line naming the dataset folder and the shard file: missing, another size
            or hash than recorded, a header that disagrees with the index, a sample that does not
            decode, or no integer ``input_ids`` column.
        ValueError: ``num_probe_samples`` < 1.
    """
    if num_probe_samples < 1:
        raise ValueError(f"num_probe_samples must be >= 1, got {num_probe_samples}")
    local = Path(local)
    index = read_index(local)
    shards = index["shards"]
    counts = np.array([shard["samples"] for shard in shards], dtype=np.int64)
    total = int(counts.sum())
    if total:
        spread = np.linspace(0, total - 1, min(total, num_probe_samples))
        probe = np.unique(np.rint(spread).astype(np.int64))
    else:
        probe = np.empty(0, dtype=np.int64)
    starts = np.concatenate([[0], np.cumsum(counts)])
    low: int | None = None
    high: int | None = None
    for i, shard in enumerate(shards):
        name, source = _shard_source(local, shard, verify_hashes=verify_hashes)
        if shard.get("format", "mds") != "mds":
            continue
        where = f"MDS dataset {local}: shard file {name}"
        mine = (probe[(probe >= starts[i]) & (probe < starts[i + 1])] - starts[i]).tolist()
        if isinstance(source, bytes):
            read = functools.partial(_slice, source)
            found = _probe_mds_shard(read, len(source), shard, mine, where)
        else:
            with open(source, "rb") as fh:
                read = functools.partial(_read_range, fh)
                found = _probe_mds_shard(read, os.fstat(fh.fileno()).st_size, shard, mine, where)
        for lo, hi in found:
            low = lo if low is None else min(low, lo)
            high = hi if high is None else max(high, hi)
    if low is None or high is None:
        return None
    return low, high


def _slice(data: bytes, start: int, stop: int) -> bytes:
    return data[start:stop]


def _read_range(fh: BinaryIO, start: int, stop: int) -> bytes:
    fh.seek(start)
    return fh.read(stop - start)


def _probe_mds_shard(
    read: Callable[[int, int], bytes],
    size: int,
    shard: dict[str, Any],
    sample_idxs: list[int],
    where: str,
) -> list[tuple[int, int]]:
    """Check an MDS shard's header and decode the given samples' ``input_ids``.

    An MDS shard is ``uint32 num_samples``, ``uint32 offsets[num_samples + 1]`` (absolute, the
    last one the file size), the writer's config, then the samples (mosaicml-streaming
    ``MDSWriter.encode_joint_shard``). ``read(start, stop)`` returns those bytes of the shard.

    Returns:
        ``(min_id, max_id)`` of each probed sample that holds a token.
    """
    num_samples = int(shard["samples"])
    header = 4 * (num_samples + 2)
    if size < header:
        raise DataError(f"{where}: {size} bytes, too short for {num_samples} samples")
    head = read(0, header)
    found = int(np.frombuffer(head, dtype="<u4", count=1)[0])
    if found != num_samples:
        raise DataError(f"{where}: holds {found} samples but index.json records {num_samples}")
    offsets = np.frombuffer(head, dtype="<u4", count=num_samples + 1, offset=4).astype(np.int64)
    if offsets[0] < header or offsets[-1] != size or np.any(np.diff(offsets) < 0):
        raise DataError(f"{where}: corrupt sample offsets (truncated or overwritten)")
    ranges = []
    for j in sample_idxs:
        sample = read(int(offsets[j]), int(offsets[j + 1]))
        try:
            ids = np.asarray(_decode_column(shard, sample, "input_ids"))
        except _DECODE_ERRORS as err:
            detail = str(err).splitlines()[0] if str(err) else type(err).__name__
            raise DataError(f"{where}: sample {j} cannot be decoded ({detail})") from None
        if not np.issubdtype(ids.dtype, np.integer):
            raise DataError(f"{where}: sample {j}: input_ids are {ids.dtype}, not integers")
        if ids.size:
            ranges.append((int(ids.min()), int(ids.max())))
    return ranges


def _shard_source(
    local: Path, shard: dict[str, Any], *, verify_hashes: bool
) -> tuple[str, bytes | Path]:
    """The name of a shard's file and where to read its raw bytes; hashes checked on request.

    The raw file's path when it is on disk, else the decompressed bytes of the compressed file
    (or, for a shard that is not MDS and has no hash to check, its compressed file's path).
    """
    from streaming.base.compression import decompress
    from streaming.base.hashing import get_hash, is_hash

    raw = shard.get("raw_data") if isinstance(shard.get("raw_data"), dict) else None
    packed = shard.get("zip_data") if isinstance(shard.get("zip_data"), dict) else None

    def check_hashes(info: dict[str, Any] | None, data: bytes) -> None:
        recorded = (info or {}).get("hashes") or {}
        for algo, digest in sorted(recorded.items()):
            if is_hash(algo) and get_hash(algo, data) != digest:
                raise DataError(
                    f"MDS dataset {local}: shard file {(info or {}).get('basename')} fails its "
                    f"{algo} hash recorded in index.json (corrupt)"
                )

    def hashed(info: dict[str, Any] | None) -> bool:
        return verify_hashes and bool((info or {}).get("hashes"))

    raw_path = local / raw["basename"] if raw and isinstance(raw.get("basename"), str) else None
    zip_path = (
        local / packed["basename"] if packed and isinstance(packed.get("basename"), str) else None
    )
    if zip_path is not None and zip_path.is_file() and hashed(packed):
        check_hashes(packed, read_bytes(zip_path))
    if raw_path is not None and raw_path.is_file():
        if hashed(raw):
            check_hashes(raw, read_bytes(raw_path))
        return raw_path.name, raw_path
    if zip_path is None or not zip_path.is_file():
        shown = raw_path.name if raw_path is not None else "?"
        raise DataError(f"MDS dataset {local}: shard file missing: {shown}")
    if shard.get("format", "mds") != "mds" and not hashed(raw):
        return zip_path.name, zip_path
    try:
        data = decompress(shard.get("compression"), read_bytes(zip_path))
    except Exception as err:  # every codec raises its own error type on corrupt input
        detail = str(err).splitlines()[0] if str(err) else type(err).__name__
        raise DataError(
            f"MDS dataset {local}: shard file {zip_path.name} cannot be decompressed ({detail})"
        ) from None
    expected = (raw or {}).get("bytes")
    if isinstance(expected, int) and len(data) != expected:
        raise DataError(
            f"MDS dataset {local}: shard file {zip_path.name} decompresses to {len(data)} bytes "
            f"but index.json records {expected} (corrupt)"
        )
    if hashed(raw):
        check_hashes(raw, data)
    return zip_path.name, data


def _decode_column(shard: dict[str, Any], sample: bytes, column: str) -> Any:
    """Decode one column of an MDS sample (mosaicml-streaming ``MDSReader.decode_sample``).

    Only ``column`` is decoded, so a pickle column of foreign data is never unpickled.
    """
    from streaming.base.format.mds.encodings import is_mds_encoding_safe, mds_decode

    names, encodings, sizes = (
        shard["column_names"],
        shard["column_encodings"],
        shard["column_sizes"],
    )
    if column not in names:
        raise ValueError(f"no {column!r} column")
    pos = 0
    lengths: list[int] = []
    for size in sizes:
        if size:
            lengths.append(int(size))
        else:
            lengths.append(int(np.frombuffer(sample, dtype="<u4", count=1, offset=pos)[0]))
            pos += 4
    k = names.index(column)
    if not is_mds_encoding_safe(encodings[k]):  # pickle: decoding would run arbitrary code
        raise ValueError(f"column {column!r} has the unsafe encoding {encodings[k]!r}")
    start = pos + sum(lengths[:k])
    if pos + sum(lengths) != len(sample):
        raise ValueError(f"{len(sample)} bytes but its columns take {pos + sum(lengths)}")
    return mds_decode(encodings[k], sample[start : start + lengths[k]])
