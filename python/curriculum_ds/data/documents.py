"""Reading documents for :func:`curriculum_ds.data.prepare`: text, JSONL and JSON files, folders.

The format of a file comes from its suffix (:data:`SUFFIX_FORMATS`) unless one is given for all
inputs (``format=``, the CLI's ``--format``). A named file whose suffix names no format is
refused before anything is read; inside a folder such files are skipped and counted by suffix
(:attr:`ReadStats.skipped_suffixes`). Errors name the file and line (``path:line``), or the
array element of a JSON file (``path[index]``); files met inside a folder walk that are binary,
not UTF-8 or unreadable are skipped and counted instead. Deterministic: a folder is read in the
order of its files' relative paths.
"""

from __future__ import annotations

import json
import os
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

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
    "iter_documents",
    "json_limit_reason",
    "read_bytes",
]

FORMATS: tuple[str, ...] = ("text", "jsonl", "json")
"""The input formats: ``text`` (the whole UTF-8 file is one document), ``jsonl`` (one JSON object
per non-blank line, its text field is a document), ``json`` (one JSON array whose elements are
documents: strings, or objects with the text field)."""

SUFFIX_FORMATS: dict[str, str] = {".txt": "text", ".md": "text", ".jsonl": "jsonl", ".json": "json"}
"""The format each known suffix (compared in lower case) stands for; other suffixes need an
explicit format."""

ACCEPTED_FORMATS = ".txt and .md (plain text), .jsonl (JSON lines), .json (an array of documents)"
"""The known suffixes in words, for error messages and help."""


@dataclass
class ReadStats:
    """What reading skipped, filled in by :func:`check_inputs` and :func:`iter_documents`."""

    num_skipped_files: int = 0
    """Files skipped inside folders for their content (binary, not UTF-8, unreadable)."""

    skipped_suffixes: Counter[str] = field(default_factory=Counter)
    """Files skipped inside folders because their suffix names no format, by lower-case suffix
    (``""`` for none); only without an explicit format."""


@dataclass(frozen=True)
class InputFile:
    """One file to read, with its format."""

    path: Path
    format: str
    """One of :data:`FORMATS`."""
    named: bool
    """Named by the user (errors are raised) rather than met in a folder walk (skipped)."""


def describe_skipped(stats: ReadStats) -> str:
    """What folder walks skipped, in one line; ``""`` when nothing was.

    E.g. ``"3 files with other suffixes (.csv 2, .py 1), 1 binary, not UTF-8 or unreadable file"``.
    """
    parts = []
    if stats.skipped_suffixes:
        num = sum(stats.skipped_suffixes.values())
        by_suffix = ", ".join(
            f"{suffix or '(no suffix)'} {count}"
            for suffix, count in sorted(stats.skipped_suffixes.items(), key=lambda kv: kv[0])
        )
        parts.append(f"{num} file{'s' if num != 1 else ''} with other suffixes ({by_suffix})")
    if stats.num_skipped_files:
        num = stats.num_skipped_files
        parts.append(f"{num} binary, not UTF-8 or unreadable file{'s' if num != 1 else ''}")
    return ", ".join(parts)


def read_bytes(path: Path) -> bytes:
    """The bytes of a file the user named; ``DataError`` (one line naming it) when unreadable."""
    try:
        return path.read_bytes()
    except PermissionError as err:
        raise DataError(f"cannot read {path}: permission denied") from err
    except OSError as err:
        raise DataError(f"cannot read {path}: {err.strerror or err}") from err


def _decode_text(path: Path, data: bytes) -> str:
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as err:
        line = data.count(b"\n", 0, err.start) + 1
        raise DataError(
            f"{path}:{line}: not UTF-8 text (invalid byte at offset {err.start})"
        ) from err


def json_limit_reason(err: ValueError | RecursionError) -> str:
    """Why ``json.loads`` refused a text for a reason other than its syntax, in a few words.

    Python's parser recurses once per nesting level (``RecursionError``) and refuses integer
    literals longer than ``sys.get_int_max_str_digits()`` digits (a ``ValueError``).
    """
    if isinstance(err, RecursionError):
        return "nested too deeply"
    detail = str(err).splitlines()[0] if str(err) else type(err).__name__
    if "integer string conversion" in detail:
        return "an integer literal of more than 4300 digits"
    return detail


def _checked_text(value: str, where: str, what: str) -> str:
    """``value`` if it encodes as UTF-8 (a JSON escape of a lone surrogate decodes to one)."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as err:
        bad = value[err.start]
        raise DataError(
            f"{where}: {what} is not valid Unicode (lone surrogate "
            f"U+{ord(bad):04X} at character {err.start})"
        ) from err
    return value


def _field_text(obj: dict[str, Any], where: str, text_field: str) -> str:
    """The string under ``text_field`` of one JSON object (``where`` names it in errors)."""
    if text_field not in obj:
        keys = ", ".join(sorted(map(str, obj))) or "none"
        raise DataError(f"{where}: missing field {text_field!r} (fields: {keys})")
    value = obj[text_field]
    if not isinstance(value, str):
        raise DataError(
            f"{where}: field {text_field!r} must be a string, got {type(value).__name__}"
        )
    return _checked_text(value, where, f"field {text_field!r}")


def _parse_json(text: str, path: Path, lineno: int | None) -> Any:
    """``json.loads(text)``; ``DataError`` naming ``path`` and line (``lineno`` or the parser's)."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as err:
        raise DataError(f"{path}:{lineno or err.lineno}: invalid JSON ({err.msg})") from err
    except (ValueError, RecursionError) as err:
        where = f"{path}:{lineno}" if lineno is not None else str(path)
        raise DataError(f"{where}: invalid JSON ({json_limit_reason(err)})") from None


def _iter_jsonl(path: Path, data: bytes, text_field: str) -> Iterator[str]:
    text = _decode_text(path, data)
    # Split on "\n" only: str.splitlines() would also cut at U+2028, U+0085, ..., which
    # json.dumps(ensure_ascii=False) leaves unescaped inside strings.
    for lineno, line in enumerate(text.split("\n"), start=1):
        if not line.strip():
            continue
        obj = _parse_json(line, path, lineno)
        if not isinstance(obj, dict):
            raise DataError(
                f"{path}:{lineno}: expected a JSON object with a {text_field!r} field, "
                f"got {type(obj).__name__}"
            )
        yield _field_text(obj, f"{path}:{lineno}", text_field)


def _iter_json(path: Path, data: bytes, text_field: str) -> Iterator[str]:
    """The documents of a JSON array: each element a string, or an object with ``text_field``."""
    doc = _parse_json(_decode_text(path, data), path, None)
    if not isinstance(doc, list):
        raise DataError(
            f"{path}: expected a JSON array of documents (strings or objects with a "
            f"{text_field!r} field), got {type(doc).__name__}"
        )
    for idx, item in enumerate(doc):
        where = f"{path}[{idx}]"
        if isinstance(item, str):
            yield _checked_text(item, where, "the document")
        elif isinstance(item, dict):
            yield _field_text(item, where, text_field)
        else:
            raise DataError(
                f"{where}: expected a string or an object with a {text_field!r} field, "
                f"got {type(item).__name__}"
            )


def _iter_file(file: InputFile, stats: ReadStats, text_field: str) -> Iterator[str]:
    """Documents of one file; in a folder walk, binary/undecodable/unreadable text is skipped."""
    if file.named:
        data = read_bytes(file.path)
    else:
        try:
            data = file.path.read_bytes()
        except OSError:
            stats.num_skipped_files += 1
            return
    if file.format == "jsonl":
        yield from _iter_jsonl(file.path, data, text_field)
    elif file.format == "json":
        yield from _iter_json(file.path, data, text_field)
    elif file.named:
        yield _decode_text(file.path, data)
    elif b"\0" in data:
        stats.num_skipped_files += 1
    else:
        try:
            yield data.decode("utf-8-sig")
        except UnicodeDecodeError:
            stats.num_skipped_files += 1


def _walk_folder(folder: Path) -> list[Path]:
    """All files under ``folder`` (recursively), hidden entries skipped, sorted by relative path."""
    files = []
    for dirpath, dirnames, filenames in os.walk(folder, followlinks=False):
        dirnames[:] = [d for d in dirnames if not d.startswith(".")]
        for name in filenames:
            if name.startswith("."):
                continue
            path = Path(dirpath) / name
            if path.is_file():
                files.append(path)
    files.sort(key=lambda p: p.relative_to(folder).as_posix())
    return files


def _unknown_format(path: Path) -> DataError:
    suffix = path.suffix.lower()
    kind = f"suffix {suffix!r}" if suffix else "no suffix"
    return DataError(
        f"{path}: unknown input format ({kind}); prepare reads {ACCEPTED_FORMATS}; "
        "to read it anyway, name its format with --format text, jsonl or json"
    )


def check_inputs(
    inputs: Sequence[Path], *, format: str | None = None, stats: ReadStats
) -> list[InputFile]:
    """The files to read, each with its format, checked before anything is read or written.

    Folders are listed here (recursively, hidden entries skipped, sorted by relative path). Without
    ``format``, a file inside a folder whose suffix names no format is skipped and counted in
    ``stats.skipped_suffixes``.

    Args:
        inputs: Files and folders, in the order given.
        format: One of :data:`FORMATS` for every file, or ``None`` to decide by suffix
            (:data:`SUFFIX_FORMATS`).
        stats: Filled in with what folder listings skipped.

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
        raise DataError("no inputs given: pass text, JSONL or JSON files, or folders")
    files: list[InputFile] = []
    for path in paths:
        if not path.exists():
            raise DataError(f"input not found: {path}")
        if path.is_dir():
            for file in _walk_folder(path):
                file_format = format or SUFFIX_FORMATS.get(file.suffix.lower())
                if file_format is None:
                    stats.skipped_suffixes[file.suffix.lower()] += 1
                else:
                    files.append(InputFile(file, file_format, named=False))
        elif path.is_file():
            file_format = format or SUFFIX_FORMATS.get(path.suffix.lower())
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
