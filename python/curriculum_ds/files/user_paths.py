"""A user's path refused by the operating system, as one line naming the option or field.

A path from a command line or a config reaches the file system in many places (``--run-dir``,
``--out``, a stream's ``local``, an ablate arm's run folder). The system can refuse it in ways no
earlier check sees: a read-only file system, a file where a folder is expected, a component over
255 bytes (``ENAMETOOLONG``), a NUL byte (Python's ``ValueError: embedded null byte``). Each
becomes one line ``<field> "<path>": cannot be <what> (<the system's reason>)`` through
:func:`os_reason` and :func:`path_error`. Deterministic.
"""

from __future__ import annotations

import errno
import json
import os
from pathlib import Path

from curriculum_ds.errors import ConfigError

__all__ = ["make_folder", "os_reason", "path_error", "show_path"]

_SHOWN_CHARS = 160
"""Characters of a path shown in a message; a longer one is cut in the middle."""


def os_reason(exc: OSError | ValueError) -> str:
    """The system's reason in words: ``"Read-only file system"``, ``"File name too long"``.

    An ``OSError`` gives its ``strerror`` (its class name when it has none); a ``ValueError``
    (``"embedded null byte"``, raised by every ``os`` call on a path holding NUL) its text.
    """
    if isinstance(exc, OSError):
        return exc.strerror or type(exc).__name__
    return str(exc) or type(exc).__name__


def path_error(
    field: str, path: str | os.PathLike[str], exc: OSError | ValueError, *, what: str = "read"
) -> ConfigError:
    """One line ``<field> "<path>": cannot be <what> (<reason>)``, to raise ``from None``.

    The path is shown by :func:`show_path`, so a 10,000-character or NUL-holding path stays one
    short line.
    """
    return ConfigError(f"{field} {show_path(path)}: cannot be {what} ({os_reason(exc)})")


def show_path(path: str | os.PathLike[str]) -> str:
    """``path`` quoted as JSON (a NUL or newline escaped), cut in the middle past 160 characters.

    ``"aaaa…aaaa" (300 characters)`` for a long one: the message stays one short line.
    """
    text = os.fspath(path)
    if len(text) <= _SHOWN_CHARS:
        return json.dumps(text, ensure_ascii=False)
    half = _SHOWN_CHARS // 2
    cut = json.dumps(text[:half] + "…" + text[-half:], ensure_ascii=False)
    return f"{cut} ({len(text)} characters)"


def make_folder(path: Path, *, field: str) -> None:
    """Create the folder ``path`` and its parents if needed (an existing folder is fine).

    Raises:
        ConfigError: ``<field> "<path>": cannot be created (<reason>)``: a file in the way
            (``Not a directory``), a read-only file system, no permission, a component over 255
            bytes, a NUL byte.
    """
    try:
        if path.exists() and not path.is_dir():
            raise NotADirectoryError(errno.ENOTDIR, os.strerror(errno.ENOTDIR), str(path))
        path.mkdir(parents=True, exist_ok=True)
    except (OSError, ValueError) as exc:
        raise path_error(field, path, exc, what="created") from None
