"""Replacing a small file atomically: a reader never sees it half written.

:func:`replace_atomically` writes through a temporary file in the same folder, fsyncs it and
``os.replace``-s it into place; a kill or a full disk mid-write leaves the old file (or none),
never a partial one. The metric store (``metrics.npz``, ``curriculum_meta.json``) and ablate's
bookkeeping (``result.json``, ``ablate.json``, ``results.jsonl``) are written this way.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import IO

__all__ = ["replace_atomically", "write_text_atomically"]


def replace_atomically(path: Path, write: Callable[[IO[bytes]], None]) -> None:
    """Write ``path`` through a temporary file in its folder, then ``os.replace`` it into place.

    A reader sees the old file or the new one, never a partial one; on an error the temporary
    file is removed and ``path`` is unchanged. The new file keeps the old one's permissions.

    Args:
        path: the file to replace (its folder must exist).
        write: writes the whole new content to the open binary file it is given.

    Raises:
        OSError: the folder cannot be written (read-only, full); ``path`` is unchanged.
    """
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            write(fh)
            fh.flush()
            os.fsync(fh.fileno())
        with contextlib.suppress(OSError):
            Path(tmp).chmod(path.stat().st_mode & 0o777)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def write_text_atomically(path: Path, text: str) -> None:
    """:func:`replace_atomically` with ``text`` encoded as UTF-8."""
    data = text.encode("utf-8")

    def write(fh: IO[bytes]) -> None:
        fh.write(data)

    replace_atomically(path, write)
