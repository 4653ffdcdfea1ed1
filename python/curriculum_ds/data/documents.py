"""Reading documents for :func:`curriculum_ds.data.prepare`: text files, JSONL files and folders.

Errors name the file and line (``path:line``); files met inside a folder walk that are binary,
not UTF-8 or unreadable are skipped and counted instead. Deterministic: a folder is read in the
order of its files' relative paths.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from curriculum_ds.errors import DataError

__all__ = [
    "ReadStats",
    "batched",
    "check_inputs",
    "iter_documents",
    "json_limit_reason",
    "read_bytes",
]

_JSONL_SUFFIXES = frozenset({".jsonl"})


@dataclass
class ReadStats:
    """What reading skipped, filled in while :func:`iter_documents` runs."""

    num_skipped_files: int = 0
    """Files skipped inside folders (binary, not UTF-8, unreadable)."""


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


def _iter_jsonl(path: Path, data: bytes) -> Iterator[str]:
    text = _decode_text(path, data)
    # Split on "\n" only: str.splitlines() would also cut at U+2028, U+0085, ..., which
    # json.dumps(ensure_ascii=False) leaves unescaped inside strings.
    for lineno, line in enumerate(text.split("\n"), start=1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as err:
            raise DataError(f"{path}:{lineno}: invalid JSON ({err.msg})") from err
        except (ValueError, RecursionError) as err:
            raise DataError(f"{path}:{lineno}: invalid JSON ({json_limit_reason(err)})") from None
        if not isinstance(obj, dict):
            raise DataError(
                f"{path}:{lineno}: expected a JSON object with a 'text' field, "
                f"got {type(obj).__name__}"
            )
        if "text" not in obj:
            keys = ", ".join(sorted(map(str, obj))) or "none"
            raise DataError(f"{path}:{lineno}: missing field 'text' (fields: {keys})")
        value = obj["text"]
        if not isinstance(value, str):
            raise DataError(
                f"{path}:{lineno}: field 'text' must be a string, got {type(value).__name__}"
            )
        try:
            value.encode("utf-8")  # a "\ud800" escape decodes to a lone surrogate
        except UnicodeEncodeError as err:
            bad = value[err.start]
            raise DataError(
                f"{path}:{lineno}: field 'text' is not valid Unicode (lone surrogate "
                f"U+{ord(bad):04X} at character {err.start})"
            ) from err
        yield value


def _iter_file(path: Path, *, explicit: bool, stats: ReadStats) -> Iterator[str]:
    """Documents of one file; in a folder walk, binary/undecodable/unreadable files are skipped."""
    if explicit:
        data = read_bytes(path)
    else:
        try:
            data = path.read_bytes()
        except OSError:
            stats.num_skipped_files += 1
            return
    if path.suffix.lower() in _JSONL_SUFFIXES:
        yield from _iter_jsonl(path, data)
        return
    if not explicit:
        if b"\0" in data:
            stats.num_skipped_files += 1
            return
        try:
            text = data.decode("utf-8-sig")
        except UnicodeDecodeError:
            stats.num_skipped_files += 1
            return
    else:
        text = _decode_text(path, data)
    yield text


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


def check_inputs(inputs: Sequence[Path]) -> list[Path]:
    """The inputs as paths; ``DataError`` for none given, or one missing or not a file/folder."""
    paths = [Path(p) for p in inputs]
    if not paths:
        raise DataError("no inputs given: pass text files, JSONL files or folders")
    for path in paths:
        if not path.exists():
            raise DataError(f"input not found: {path}")
        if not (path.is_file() or path.is_dir()):
            raise DataError(f"input is neither a file nor a folder: {path}")
    return paths


def iter_documents(paths: Sequence[Path], stats: ReadStats) -> Iterator[str]:
    """Every document of the inputs, in order (see :func:`curriculum_ds.data.prepare`).

    Raises:
        DataError: a named file is unreadable or not UTF-8, or a JSONL line is not an object with
            a string ``text`` field (``path:line``).
    """
    for path in paths:
        if path.is_dir():
            for file in _walk_folder(path):
                yield from _iter_file(file, explicit=False, stats=stats)
        else:
            yield from _iter_file(path, explicit=True, stats=stats)


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
