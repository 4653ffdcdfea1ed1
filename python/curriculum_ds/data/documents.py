"""Reading documents for :func:`curriculum_ds.data.prepare`: files, saved datasets, folders.

Text, JSONL, JSON and Parquet files, saved HF ``datasets`` folders, and folders of them.

The format of a file comes from its suffix (:data:`SUFFIX_FORMATS`, after a compression suffix
of :data:`~curriculum_ds.data.sources.COMPRESSION_SUFFIXES`: ``d.jsonl.gz``, ``d.jsonl.zst``)
unless one is given for all inputs (``format=``, the CLI's ``--format``). A folder written by
``datasets``' ``save_to_disk`` is read as one dataset wherever it is met.

Memory: JSONL is streamed line by line, Parquet and saved datasets batch by batch
(:mod:`curriculum_ds.data.sources`), so their size does not bound the memory prepare needs; a
``text`` file is one document and a ``json`` file one array, each read whole.

A named file whose suffix names no format is refused before anything is read; inside a folder
such a file is read by its content (:func:`folder_format_of`): as ``text`` when it is UTF-8
text, whatever its suffix (``.h``, ``.pm``, ``LICENSE``, ``changelog.Debian.gz`` decompressed).
Errors name the file and line (``path:line``), or the array element of a JSON file
(``path[index]``); files met inside a folder walk that are binary (a NUL byte in their first
:data:`SNIFF_BYTES`, or a compressed stream that does not decompress), not UTF-8 or unreadable
are skipped and counted by suffix instead (:class:`ReadStats`). Deterministic: a folder is read
in the order of its files' relative paths.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from curriculum_ds.data.jsonl_reading import (
    field_text,
    json_limit_reason,
    jsonl_objects,
    parse_json,
)
from curriculum_ds.data.sources import (
    checked_text,
    compression_of,
    decompression_error,
    is_saved_dataset,
    iter_parquet,
    iter_saved_dataset,
    open_binary,
)
from curriculum_ds.errors import DataError

__all__ = [
    "ACCEPTED_FORMATS",
    "FORMATS",
    "SUFFIX_FORMATS",
    "InputFile",
    "ReadStats",
    "batched",
    "check_inputs",
    "describe_skipped",
    "field_text",
    "folder_format_of",
    "iter_documents",
    "iter_jsonl_records",
    "json_limit_reason",
    "read_bytes",
]

SNIFF_BYTES = 8000
"""Leading bytes of a folder's file searched for a NUL byte, the mark of a binary file (git's
heuristic, ``buffer_is_binary``); a binary file's remaining bytes are never read."""

FORMATS: tuple[str, ...] = ("text", "jsonl", "json", "parquet")
"""The file formats: ``text`` (the whole UTF-8 file is one document), ``jsonl`` (one JSON object
per non-blank line, its text field is a document), ``json`` (one JSON array whose elements are
documents: strings, or objects with the text field), ``parquet`` (each row's text column is a
document). A saved HF ``datasets`` folder is recognised by its files (format ``hf``)."""

SUFFIX_FORMATS: dict[str, str] = {
    ".txt": "text",
    ".md": "text",
    ".jsonl": "jsonl",
    ".json": "json",
    ".parquet": "parquet",
}
"""The format each known suffix (compared in lower case) stands for; a named file of another
suffix needs an explicit format (in a folder it is read by content). A compression suffix
(``.gz``, ``.zst``, ``.zstd``) after it is decompressed."""

ACCEPTED_FORMATS = (
    ".txt and .md (plain text), .jsonl (JSON lines), .json (an array of documents), "
    ".parquet, saved HF datasets folders; .gz/.zst compressed; inside folders, any other "
    "UTF-8 text file"
)
"""The known inputs in words, for error messages and help."""


@dataclass
class ReadStats:
    """What reading skipped, filled in by :func:`check_inputs` and :func:`iter_documents`."""

    num_skipped_files: int = 0
    """Files skipped inside folders for their content (binary, not UTF-8, unreadable)."""

    skipped_suffixes: Counter[str] = field(default_factory=Counter)
    """The same files by lower-case suffix (``""`` for none, ``".tar.gz"`` for a compressed
    one); the counts sum to :attr:`num_skipped_files`."""

    def skip(self, path: Path) -> None:
        """Count ``path`` as skipped for its content."""
        self.num_skipped_files += 1
        self.skipped_suffixes[_suffix_of(path)] += 1


@dataclass(frozen=True)
class InputFile:
    """One file to read, with its format."""

    path: Path
    format: str
    """One of :data:`FORMATS`, or ``"hf"`` for a saved ``datasets`` folder."""
    named: bool
    """Named by the user (errors are raised) rather than met in a folder walk (skipped)."""
    by_content: bool = False
    """Met in a folder walk with a suffix of no format: read as ``text`` if its content is
    text, skipped (and counted) when it does not decompress."""


def describe_skipped(stats: ReadStats) -> str:
    """What folder walks skipped, in one line; ``""`` when nothing was.

    E.g. ``"3 binary, not UTF-8 or unreadable files (.png 2, (no suffix) 1)"``.
    """
    num = stats.num_skipped_files
    if not num:
        return ""
    by_suffix = ", ".join(
        f"{suffix or '(no suffix)'} {count}"
        for suffix, count in sorted(stats.skipped_suffixes.items(), key=lambda kv: kv[0])
    )
    return f"{num} binary, not UTF-8 or unreadable file{'s' if num != 1 else ''} ({by_suffix})"


def _suffix_of(path: Path) -> str:
    """The lower-case suffix, with the one before a compression suffix (``.tar.gz``)."""
    return "".join(path.suffixes[-2:]).lower() if compression_of(path) else path.suffix.lower()


def read_bytes(path: Path) -> bytes:
    """The bytes of a file the user named; ``DataError`` (one line naming it) when unreadable."""
    try:
        return path.read_bytes()
    except OSError as err:
        raise _read_error(path, err) from err


def _read_error(path: Path, err: OSError) -> DataError:
    if isinstance(err, PermissionError):
        return DataError(f"cannot read {path}: permission denied")
    return DataError(f"cannot read {path}: {err.strerror or err}")


def _decode_text(path: Path, data: bytes) -> str:
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as err:
        line = data.count(b"\n", 0, err.start) + 1
        raise DataError(
            f"{path}:{line}: not UTF-8 text (invalid byte at offset {err.start})"
        ) from err


def _iter_jsonl(path: Path, text_field: str) -> Iterator[str]:
    """The documents of a JSONL file (compressed or not), streamed one line at a time."""
    for where, obj in jsonl_objects(path, f"a {text_field!r} field"):
        yield field_text(obj, where, text_field)


def iter_jsonl_records(
    files: Sequence[InputFile], stats: ReadStats, *, expected: str
) -> Iterator[tuple[str, dict[str, Any]]]:
    """Every JSON object of JSONL files, in order, with where it is (``path:line``).

    What ``prepare --format qa`` reads (:mod:`curriculum_ds.data.qa`); the files are read as
    :func:`iter_documents` reads JSONL (streamed, compressed or not, one line per error).

    Raises:
        DataError: a file is unreadable, not UTF-8, or a line is not a JSON object (naming
            ``expected``, what it must hold).
    """
    for file in files:
        yield from _streamed(file, stats, jsonl_objects(file.path, expected))


def _iter_json(path: Path, data: bytes, text_field: str) -> Iterator[str]:
    """The documents of a JSON array: each element a string, or an object with ``text_field``."""
    doc = parse_json(_decode_text(path, data), path, None)
    if not isinstance(doc, list):
        raise DataError(
            f"{path}: expected a JSON array of documents (strings or objects with a "
            f"{text_field!r} field), got {type(doc).__name__}"
        )
    for idx, item in enumerate(doc):
        where = f"{path}[{idx}]"
        if isinstance(item, str):
            yield checked_text(item, where, "the document")
        elif isinstance(item, dict):
            yield field_text(item, where, text_field)
        else:
            raise DataError(
                f"{where}: expected a string or an object with a {text_field!r} field, "
                f"got {type(item).__name__}"
            )


def _read_whole(file: InputFile, stats: ReadStats) -> bytes | None:
    """The (decompressed) bytes of a text or JSON file; ``None`` when a walk skips it."""
    sniff = not file.named and file.format == "text"
    whole = list(_streamed(file, stats, _read_all(file.path, sniff=sniff)))
    if sniff and whole and whole[0] is None:
        stats.skip(file.path)
    return whole[0] if whole else None


def _read_all(path: Path, *, sniff: bool) -> Iterator[bytes | None]:
    """The file's (decompressed) bytes; ``None`` when ``sniff`` finds a NUL byte at its start."""
    with open_binary(path) as fh:
        head = fh.read(SNIFF_BYTES)
        if sniff and b"\0" in head:
            yield None  # binary: the rest is never read
            return
        yield head + fh.read()


def _streamed(file: InputFile, stats: ReadStats, items: Iterator[Any]) -> Iterator[Any]:
    """``items``, with a decompression error or an unreadable file turned into one line.

    A file met in a folder walk that cannot be opened, or read by content and does not
    decompress, is skipped and counted instead.
    """
    started = False
    try:
        for item in items:
            started = True
            yield item
    except DataError:
        raise
    except Exception as err:
        bad = decompression_error(file.path, err)
        if bad is not None:  # a file read by content that does not decompress is binary
            if not file.by_content:
                raise bad from None
        elif not isinstance(err, OSError):
            raise
        elif file.named or started:
            raise _read_error(file.path, err) from None
        stats.skip(file.path)


def _iter_file(file: InputFile, stats: ReadStats, text_field: str) -> Iterator[str]:
    """Documents of one file; in a folder walk, binary/undecodable/unreadable text is skipped."""
    if file.format == "hf":
        yield from iter_saved_dataset(file.path, text_field)
        return
    if file.format == "parquet":
        yield from iter_parquet(file.path, text_field)
        return
    if file.format == "jsonl":
        yield from _streamed(file, stats, _iter_jsonl(file.path, text_field))
        return
    data = _read_whole(file, stats)
    if data is None:
        return
    if file.format == "json":
        yield from _iter_json(file.path, data, text_field)
    elif file.named:
        yield _decode_text(file.path, data)
    elif b"\0" in data:
        stats.skip(file.path)
    else:
        try:
            yield data.decode("utf-8-sig")
        except UnicodeDecodeError:
            stats.skip(file.path)


def _walk_folder(folder: Path) -> list[tuple[Path, bool]]:
    """Files and saved datasets under ``folder`` (recursively), as ``(path, is_dataset)``.

    Hidden entries skipped, sorted by relative path; a saved dataset's own files are not listed.
    """
    entries: list[tuple[Path, bool]] = []
    for dirpath, dirnames, filenames in os.walk(folder, followlinks=False):
        here = Path(dirpath)
        if is_saved_dataset(here):
            entries.append((here, True))
            dirnames[:] = []
            continue
        dirnames[:] = [d for d in dirnames if not d.startswith(".")]
        for name in filenames:
            if name.startswith("."):
                continue
            path = here / name
            if path.is_file():
                entries.append((path, False))
    entries.sort(key=lambda entry: entry[0].relative_to(folder).as_posix())
    return entries


def format_of(path: Path) -> str | None:
    """The format a file's suffix names (after a compression suffix), or ``None``."""
    name = path.name.lower()
    if compression_of(path) is not None:
        name = name[: -len(path.suffix)]
    fmt = SUFFIX_FORMATS.get(Path(name).suffix)
    if fmt == "parquet" and compression_of(path) is not None:
        return None  # Parquet compresses inside; a .parquet.gz is not read
    return fmt


def folder_format_of(path: Path) -> str:
    """The format of a file met in a folder walk: by suffix, else ``text`` (read by content).

    Source and notice files carry any suffix or none (``.h``, ``.pm``, ``LICENSE``, Debian's
    ``changelog.Debian.gz``, decompressed); the walk reads them as plain text, and skips one
    that is binary (a NUL byte) or not UTF-8 (counted in :class:`ReadStats`).
    """
    return format_of(path) or "text"


def _unknown_format(path: Path) -> DataError:
    suffix = "".join(path.suffixes[-2:]).lower() if compression_of(path) else path.suffix.lower()
    kind = f"suffix {suffix!r}" if suffix else "no suffix"
    return DataError(
        f"{path}: unknown input format ({kind}); prepare reads {ACCEPTED_FORMATS}; "
        "to read it anyway, name its format with --format text, jsonl, json or parquet"
    )


def check_inputs(inputs: Sequence[Path], *, format: str | None = None) -> list[InputFile]:
    """The files to read, each with its format, checked before anything is read or written.

    Folders are listed here (recursively, hidden entries skipped, sorted by relative path). Without
    ``format``, a file inside a folder whose suffix names no format is read as ``text`` by its
    content (:func:`folder_format_of`; skipped and counted in ``stats`` when binary or not UTF-8).

    Args:
        inputs: Files and folders, in the order given.
        format: One of :data:`FORMATS` for every file, or ``None`` to decide by suffix
            (:data:`SUFFIX_FORMATS`).

    Returns:
        The files, in reading order. Deterministic.

    Raises:
        DataError: no inputs, an unknown ``format``, an input missing or not a file/folder, or a
            named file whose suffix names no format (without ``format``).
    """
    if format is not None and format not in FORMATS:
        raise DataError(f"unknown format {format!r}: expected one of {', '.join(FORMATS)}")
    paths = [Path(p) for p in inputs]
    if not paths:
        raise DataError(
            "no inputs given: pass text, JSONL, JSON or Parquet files, saved datasets, or folders"
        )
    files: list[InputFile] = []
    for path in paths:
        if not path.exists():
            raise DataError(f"input not found: {path}")
        if path.is_dir() and is_saved_dataset(path):
            files.append(InputFile(path, "hf", named=True))
        elif path.is_dir():
            for file, is_dataset in _walk_folder(path):
                if is_dataset:
                    files.append(InputFile(file, "hf", named=False))
                    continue
                by_content = format is None and format_of(file) is None
                walked = format or folder_format_of(file)
                files.append(InputFile(file, walked, named=False, by_content=by_content))
        elif path.is_file():
            file_format = format or format_of(path)
            if file_format is None:
                raise _unknown_format(path)
            files.append(InputFile(path, file_format, named=True))
        else:
            raise DataError(f"input is neither a file nor a folder: {path}")
    return files


def iter_documents(
    files: Sequence[InputFile], stats: ReadStats, *, text_field: str = "text"
) -> Iterator[str]:
    """Every document of the files, in order (see :func:`curriculum_ds.data.prepare`).

    Raises:
        DataError: a named file is unreadable or not UTF-8; a JSONL line is not an object with a
            string ``text_field`` (``path:line``); a JSON file is not an array of strings or such
            objects (``path`` or ``path[index]``); a document holds a lone surrogate.
    """
    for file in files:
        yield from _iter_file(file, stats, text_field)


def batched(docs: Iterator[str], size: int) -> Iterator[list[str]]:
    """Lists of up to ``size`` consecutive non-empty documents (empty ones are dropped)."""
    batch: list[str] = []
    for doc in docs:
        if not doc:
            continue  # an empty document has no content tokens
        batch.append(doc)
        if len(batch) == size:
            yield batch
            batch = []
    if batch:
        yield batch
