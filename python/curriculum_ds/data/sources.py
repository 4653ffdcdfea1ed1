"""Streaming readers behind :mod:`curriculum_ds.data.documents`: compressed files, Parquet, HF.

Every reader here holds a bounded amount of the input in memory, whatever the input's size:

* :func:`open_binary` decompresses gzip (Python's ``gzip``) and zstd (``zstandard``'s streaming
  reader) on the fly, chosen by the last suffix (:data:`COMPRESSION_SUFFIXES`);
* :func:`iter_parquet` reads one record batch of :data:`ROWS_PER_BATCH` rows of the text column
  at a time (``pyarrow.parquet.ParquetFile.iter_batches``);
* :func:`iter_saved_dataset` iterates a folder written by ``datasets.Dataset.save_to_disk``
  (``datasets.load_from_disk``: memory-mapped Arrow files, read in batches of the same size,
  never materialised).

A bad row is one :class:`~curriculum_ds.errors.DataError` line naming the file (or folder) and
the row, ``path[row]`` with 0-based rows.
"""

from __future__ import annotations

import gzip
import io
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any, BinaryIO

from curriculum_ds.errors import DataError

__all__ = [
    "COMPRESSION_SUFFIXES",
    "ROWS_PER_BATCH",
    "checked_text",
    "compression_of",
    "is_saved_dataset",
    "iter_parquet",
    "iter_saved_dataset",
    "open_binary",
]

COMPRESSION_SUFFIXES: dict[str, str] = {".gz": "gzip", ".zst": "zstd", ".zstd": "zstd"}
"""A last suffix (lower case) that names a compression: the file is decompressed while read and
its format comes from the suffix before (``d.jsonl.gz`` is gzip-compressed JSONL)."""

ROWS_PER_BATCH = 1024
"""Rows of a Parquet file or saved dataset held at once (one record batch of the text column)."""

_STRING_TYPES = ("string", "large_string", "string_view")
_BINARY_TYPES = ("binary", "large_binary", "binary_view")


def compression_of(path: Path) -> str | None:
    """``"gzip"``, ``"zstd"`` or ``None``, from the last suffix of ``path`` (any case)."""
    return COMPRESSION_SUFFIXES.get(path.suffix.lower())


def open_binary(path: Path) -> BinaryIO:
    """Open ``path`` for reading bytes, decompressing gzip or zstd by its suffix.

    The result is a file object to use in a ``with`` block; reading it streams (bounded memory).
    Decompression errors surface while reading, as ``OSError``/``EOFError`` (gzip) or
    ``zstandard.ZstdError``; :func:`decompression_error` turns them into one line.

    Raises:
        OSError: the file cannot be opened.
    """
    compression = compression_of(path)
    if compression == "gzip":
        return gzip.open(path, "rb")  # type: ignore[return-value]
    if compression == "zstd":
        import zstandard

        fh = open(path, "rb")  # noqa: SIM115 - closed with the reader (closefd)
        reader = zstandard.ZstdDecompressor().stream_reader(fh, closefd=True)
        # the stream reader has no readline: a buffered reader over it iterates by line
        return io.BufferedReader(reader)
    return path.open("rb")


def decompression_error(path: Path, err: BaseException) -> DataError | None:
    """One line for a corrupt or truncated compressed file, or ``None`` if ``err`` is another."""
    compression = compression_of(path)
    if compression is None:
        return None
    if compression == "zstd":
        import zstandard

        if not isinstance(err, zstandard.ZstdError):
            return None
    elif not isinstance(err, (gzip.BadGzipFile, EOFError, OSError)) or isinstance(
        err, (FileNotFoundError, PermissionError)
    ):
        return None
    detail = str(err).splitlines()[0] if str(err) else type(err).__name__
    return DataError(f"{path}: corrupt or truncated {compression} data ({detail})")


def checked_text(value: str, where: str, what: str) -> str:
    """``value`` if it encodes as UTF-8 (a JSON escape of a lone surrogate decodes to one).

    Raises:
        DataError: ``where: what is not valid Unicode (lone surrogate ...)``.
    """
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as err:
        bad = value[err.start]
        raise DataError(
            f"{where}: {what} is not valid Unicode (lone surrogate "
            f"U+{ord(bad):04X} at character {err.start})"
        ) from err
    return value


def _column_texts(column: Any, path: Path, first_row: int, text_field: str) -> Iterator[str]:
    """The strings of one Arrow column chunk; a null or non-UTF-8 value names its row."""
    kind = str(column.type)
    values = column.to_pylist() if kind in _STRING_TYPES else None
    if values is None:  # a binary column: decode each value, naming the row that fails
        values = column.to_pylist()
        for offset, raw in enumerate(values):
            if raw is None:
                continue
            try:
                values[offset] = raw.decode("utf-8")
            except UnicodeDecodeError as err:
                raise DataError(
                    f"{path}[{first_row + offset}]: field {text_field!r} is not UTF-8 text "
                    f"(invalid byte at offset {err.start})"
                ) from None
    for offset, value in enumerate(values):
        if value is None:
            raise DataError(f"{path}[{first_row + offset}]: field {text_field!r} is null")
        yield value


def _check_column_type(path: Path, text_field: str, names: list[str], types: list[Any]) -> None:
    if text_field not in names:
        keys = ", ".join(sorted(names)) or "none"
        raise DataError(f"{path}: missing field {text_field!r} in every row (fields: {keys})")
    kind = str(types[names.index(text_field)])
    if kind not in _STRING_TYPES + _BINARY_TYPES:
        raise DataError(f"{path}: field {text_field!r} must be a string column, got {kind}")


def iter_parquet(path: Path, text_field: str) -> Iterator[str]:
    """The ``text_field`` strings of a Parquet file, row by row, one record batch at a time.

    Args:
        path: A Parquet file.
        text_field: The column holding the text: a string or binary (UTF-8) column.

    Yields:
        Each row's text, in file order. Deterministic.

    Raises:
        DataError: not a Parquet file, no such column or not a string column (naming the file),
            a null or non-UTF-8 value (``path[row]``).
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        parquet = pq.ParquetFile(path)
    except (pa.ArrowException, OSError) as err:
        detail = str(err).splitlines()[0] if str(err) else type(err).__name__
        raise DataError(f"{path}: not a readable Parquet file ({detail})") from None
    with parquet:
        schema = parquet.schema_arrow
        _check_column_type(path, text_field, list(schema.names), list(schema.types))
        row = 0
        try:
            for batch in parquet.iter_batches(batch_size=ROWS_PER_BATCH, columns=[text_field]):
                yield from _column_texts(batch.column(0), path, row, text_field)
                row += batch.num_rows
        except (pa.ArrowException, OSError) as err:
            detail = str(err).splitlines()[0] if str(err) else type(err).__name__
            raise DataError(f"{path}[{row}]: unreadable Parquet data ({detail})") from None


def is_saved_dataset(folder: Path) -> bool:
    """Whether ``folder`` was written by ``save_to_disk`` (of a ``Dataset`` or ``DatasetDict``)."""
    return (folder / "dataset_dict.json").is_file() or (
        (folder / "state.json").is_file() and (folder / "dataset_info.json").is_file()
    )


def iter_saved_dataset(folder: Path, text_field: str) -> Iterator[str]:
    """The ``text_field`` strings of a saved HF ``datasets`` folder, row by row.

    ``datasets.load_from_disk`` memory-maps the Arrow files; rows are read in batches of
    :data:`ROWS_PER_BATCH` (``Dataset.with_format("arrow").iter``), never materialised whole.

    Raises:
        DataError: a ``DatasetDict`` folder (name one split's folder instead), an unreadable
            folder, no such column or not a string column, a null value (``folder[row]``).
    """
    if (folder / "dataset_dict.json").is_file():
        try:
            splits = json.loads((folder / "dataset_dict.json").read_text("utf-8")).get("splits")
        except (OSError, ValueError, AttributeError):
            splits = None
        shown = ", ".join(map(str, splits)) if isinstance(splits, list) else "?"
        first = splits[0] if isinstance(splits, list) and splits else "train"
        raise DataError(
            f"{folder}: a saved DatasetDict (splits: {shown}); name one split's folder, "
            f"e.g. {folder / str(first)}"
        )
    import datasets

    try:
        ds = datasets.load_from_disk(str(folder))
    except (OSError, ValueError, FileNotFoundError) as err:
        detail = str(err).splitlines()[0] if str(err) else type(err).__name__
        raise DataError(f"{folder}: not a readable saved dataset ({detail})") from None
    table = ds.data.table
    _check_column_type(folder, text_field, list(table.schema.names), list(table.schema.types))
    row = 0
    for chunk in ds.select_columns([text_field]).with_format("arrow").iter(ROWS_PER_BATCH):
        column = chunk.column(0)
        for piece in column.chunks:
            yield from _column_texts(piece, folder, row, text_field)
            row += len(piece)
