"""JSON and JSONL reading for :mod:`curriculum_ds.data.documents`: objects, fields, one-line errors.

Errors name the file and line (``path:line``); a text the parser refuses for a reason other
than its syntax (nesting, a huge integer literal) is said in words (:func:`json_limit_reason`).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from curriculum_ds.data.sources import checked_text, open_binary
from curriculum_ds.errors import DataError

__all__ = ["field_text", "json_limit_reason", "jsonl_objects", "parse_json"]


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


def field_text(obj: dict[str, Any], where: str, text_field: str) -> str:
    """The string under ``text_field`` of one JSON object (``where`` names it in errors).

    Raises:
        DataError: the field is missing, not a string, or holds a lone surrogate.
    """
    if text_field not in obj:
        keys = ", ".join(sorted(map(str, obj))) or "none"
        raise DataError(f"{where}: missing field {text_field!r} (fields: {keys})")
    value = obj[text_field]
    if not isinstance(value, str):
        raise DataError(
            f"{where}: field {text_field!r} must be a string, got {type(value).__name__}"
        )
    return checked_text(value, where, f"field {text_field!r}")


def parse_json(text: str, path: Path, lineno: int | None) -> Any:
    """``json.loads(text)``; ``DataError`` naming ``path`` and line (``lineno`` or the parser's)."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as err:
        raise DataError(f"{path}:{lineno or err.lineno}: invalid JSON ({err.msg})") from err
    except (ValueError, RecursionError) as err:
        where = f"{path}:{lineno}" if lineno is not None else str(path)
        raise DataError(f"{where}: invalid JSON ({json_limit_reason(err)})") from None


def jsonl_objects(path: Path, expected: str) -> Iterator[tuple[str, dict[str, Any]]]:
    """Each non-blank line's JSON object of a JSONL file (compressed or not), with its place.

    Streamed one line at a time; the place is ``path:line``. ``expected`` names in an error
    what a line must hold (``"a 'text' field"``).
    """
    offset = 0  # of the line in the (decompressed) file, for the error message
    with open_binary(path) as fh:
        # binary lines end at b"\n" only: str.splitlines() would also cut at U+2028, U+0085,
        # ..., which json.dumps(ensure_ascii=False) leaves unescaped inside strings.
        for lineno, raw in enumerate(fh, start=1):
            try:
                line = raw.decode("utf-8-sig" if lineno == 1 else "utf-8")
            except UnicodeDecodeError as err:
                bom = 3 if lineno == 1 and raw.startswith(b"\xef\xbb\xbf") else 0
                raise DataError(
                    f"{path}:{lineno}: not UTF-8 text (invalid byte at offset "
                    f"{offset + err.start + bom})"
                ) from None
            offset += len(raw)
            if not line.strip():
                continue
            obj = parse_json(line, path, lineno)
            if not isinstance(obj, dict):
                raise DataError(
                    f"{path}:{lineno}: expected a JSON object with {expected}, "
                    f"got {type(obj).__name__}"
                )
            yield f"{path}:{lineno}", obj
