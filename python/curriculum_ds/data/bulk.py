"""Bulk reads of a micro-batch's samples: the MDS shards memory-mapped, one Rust call per batch.

mosaicml-streaming's ``StreamingDataset.__getitem__`` reads one sample at a time in Python (open
the shard file, seek to the offsets table, read, decode a dict of columns): ~40 µs per sample,
most of a fetch. :class:`BulkReader` reads the ``input_ids`` of a whole micro-batch in one call of
the Rust kernel ``curriculum_ds._native.MdsShards`` (``rust/src/mds.rs``): each shard file is
memory-mapped once, each sample's offsets are read straight from the mapped table, its column
found by the MDS size header, and the values of every sample copied into one buffer, with the
GIL released. The values are the bytes streaming decodes (same dtype, same order), so the
samples are byte-identical to ``StreamingDataset.__getitem__`` (tested on plain, packed and
remote streams).

Streaming keeps what it is good at: the index, download, cache and hash checks. A shard file that
is not in the cache yet (a remote shard not downloaded), or anything the reader does not expect
(a sample that is not a 1-D array, a file shorter than its offsets), makes the call hand back
``None``, and the caller reads that micro-batch through streaming, which downloads and verifies
the shard, or raises its own error.

A shard file changed on disk while the run reads it (truncated or rewritten in place: ``rsync
--inplace``, a copy over it, a full shared cache) raises
:class:`~curriculum_ds.errors.DownloadError` ``stream 'S': shard F changed while the run was
reading it (...)``, never a SIGBUS: the reader maps a file only at the size ``index.json``
records, turns the SIGBUS of a page cut off under the mapping into that error, and checks each
file it read (size, inode, modification time) after every call, so that a rewrite of the same
size is caught too.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

__all__ = ["BulkReader"]

COLUMN = "input_ids"
# streaming's NDArray value dtypes (encodings.py, _int2value_dtype)
_DTYPES = {
    "uint8",
    "int8",
    "uint16",
    "int16",
    "float16",
    "uint32",
    "int32",
    "float32",
    "uint64",
    "int64",
    "float64",
}


def _layout(shards: Sequence[Any], name: str) -> tuple[list[int], int, str, bool] | None:
    """``(column_sizes, column, dtype, fixed_shape)`` of column ``name`` in every shard, or None."""
    from streaming.base.format.mds.reader import MDSReader

    first = shards[0] if shards else None
    if not isinstance(first, MDSReader) or name not in first.column_names:
        return None
    for shard in shards:
        if not isinstance(shard, MDSReader) or (
            shard.column_names,
            shard.column_encodings,
            shard.column_sizes,
        ) != (first.column_names, first.column_encodings, first.column_sizes):
            return None
    column = first.column_names.index(name)
    parts = first.column_encodings[column].split(":")
    if parts[0] != "ndarray" or len(parts) not in (2, 3) or parts[1] not in _DTYPES:
        return None  # a dynamic dtype, or another encoding: streaming decodes it
    if len(parts) == 3 and "," in parts[2]:
        return None  # a fixed shape of more than one axis
    sizes = [-1 if s is None else int(s) for s in first.column_sizes]
    return sizes, column, parts[1], len(parts) == 3


def _recorded_bytes(info: Any) -> int:
    """A shard file's size as ``index.json`` records it, ``-1`` when it does not."""
    size = getattr(info, "bytes", None)
    return size if isinstance(size, int) and not isinstance(size, bool) and size >= 0 else -1


class BulkReader:
    """The ``input_ids`` of ``(stream, sample)`` pairs, read in bulk from the mapped shards.

    Args:
        datasets: one ``StreamingDataset`` per stream (as :func:`~curriculum_ds.data.open_stream`
            opens them), the stream index being the position in this list.
        names: the streams' names, for messages (default: each stream's folder name).

    Use :meth:`of`, which returns None when a stream's shards are not ``ndarray`` columns of one
    dtype that this reader handles (the caller then reads every sample through streaming).
    """

    def __init__(self, specs: list[tuple[Any, ...]], dtype: np.dtype[Any]) -> None:
        from curriculum_ds import _native

        self._shards = _native.MdsShards(specs)
        self.dtype = dtype

    @classmethod
    def of(
        cls, datasets: Sequence[Any], names: Sequence[str] | None = None, column: str = COLUMN
    ) -> BulkReader | None:
        """A reader over ``datasets``, or None when one of them does not fit (see the class).

        ``column``: the ndarray column read (default ``input_ids``; ``doc_starts`` for packed
        rows' document starts), which every stream must have.
        """
        specs: list[tuple[Any, ...]] = []
        dtypes = set()
        for j, ds in enumerate(datasets):
            shards = list(getattr(ds, "shards", []))
            layout = _layout(shards, column)
            if layout is None:
                return None
            sizes, column_idx, dtype, fixed_shape = layout
            paths = [str(Path(s.dirname, s.split, s.raw_data.basename)) for s in shards]
            sizes_on_disk = [_recorded_bytes(s.raw_data) for s in shards]
            counts = [int(s.samples) for s in shards]
            if counts != [int(c) for c in ds.samples_per_shard]:
                return None
            itemsize = np.dtype(dtype).itemsize
            name = names[j] if names is not None else Path(shards[0].dirname).name
            specs.append(
                (name, paths, sizes_on_disk, counts, sizes, column_idx, itemsize, fixed_shape)
            )
            dtypes.add(dtype)
        if len(dtypes) != 1:
            return None
        return cls(specs, np.dtype(dtypes.pop()))

    def read(
        self, pairs: npt.NDArray[np.int64], limit: int
    ) -> tuple[npt.NDArray[Any], npt.NDArray[np.int64]] | None:
        """The samples of ``pairs``, each cut to its first ``limit`` values, concatenated.

        Args:
            pairs: int64 ``(n, 2)`` of ``(stream_idx, sample_idx)``.
            limit: the most values kept of a sample (``max_seq_len`` or a warmup step's length).

        Returns:
            ``(values, lengths)``: the values of every sample in order (the dtype streaming
            decodes, e.g. int32) and int64 ``(n,)`` values per sample; or None when streaming
            must read this batch (a shard not in the cache, an unexpected layout).

        Raises:
            DownloadError: a shard file this read touched changed on disk since the reader
                mapped it, or does not have the size ``index.json`` records (names the stream
                and the file).
        """
        flat = np.ascontiguousarray(pairs, dtype=np.int64).reshape(-1)
        read = self._shards.gather(flat, int(limit))
        if read is None:
            return None
        raw, lengths = read
        return raw.view(self.dtype), lengths

    def read_padded(
        self, pairs: npt.NDArray[np.int64], limit: int, ignore_index: int
    ) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64], npt.NDArray[np.int64]] | None:
        """The samples of ``pairs`` right-padded, as ``core.microbatch.collate`` pads them.

        Returns:
            int64 ``(n, seq_len)`` ``input_ids`` (0 on padding), ``attention_mask`` (1 on
            tokens) and ``labels`` (``ignore_index`` on padding), ``seq_len`` the longest
            sample's (at least 1); or None as :meth:`read` (also for a float dtype).

        Raises:
            DownloadError: as :meth:`read`.
        """
        if self.dtype.kind not in "iu":
            return None
        flat = np.ascontiguousarray(pairs, dtype=np.int64).reshape(-1)
        read = self._shards.gather_padded(
            flat, int(limit), self.dtype.kind == "i", int(ignore_index)
        )
        if read is None:
            return None
        ids, mask, labels, seq_len = read
        shape = (len(flat) // 2, seq_len)
        return ids.reshape(shape), mask.reshape(shape), labels.reshape(shape)

    def forget(self) -> None:
        """Drop every mapping (a cached shard was removed; it is mapped again when back)."""
        self._shards.unmap_all()
