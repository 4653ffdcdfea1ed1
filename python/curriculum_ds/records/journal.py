"""``mixture_journal.jsonl``: each read of an operator's weights file, written before it applies.

The ``file`` mixing method (:mod:`curriculum_ds.dynamic.steering`) reads its weights file at
each recompute boundary; global rank 0 appends what it decided (the weights and the file's
sha256, or that the previous weights were kept, and why) to this journal, flushed and fsynced,
before any rank applies it. A resume does not cut the journal back (it is not one of
:data:`~curriculum_ds.records.jsonl.RECORD_FILES`): the steps a resumed run re-runs take their
decision from it instead of from the file as it is now, so the run is the uninterrupted one.
A fresh start in a used run directory empties it (:meth:`MixtureJournal.open` ``fresh``).

One JSON object per line: ``step``, ``phase``, ``path``, ``streams``, ``weights``, ``sha256``
(None: the file could not be read), ``kept_previous`` (with ``reason``) and ``time`` (UTC,
ISO 8601; the only field that is not part of the decision). When a step has several lines (a
stale line re-decided), the last one counts.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from curriculum_ds.records.jsonl import read_jsonl

__all__ = ["JOURNAL_NAME", "MixtureJournal"]

JOURNAL_NAME = "mixture_journal.jsonl"
"""The journal's file name in the run directory."""


class MixtureJournal:
    """The journal of one run directory (global rank 0 only): its lines by step, and appends.

    Build it with :meth:`open`.

    Attributes:
        path: ``run_dir / mixture_journal.jsonl``.
        entries: the last line of each step, by step.
    """

    def __init__(self, path: Path, entries: dict[int, dict[str, Any]]) -> None:
        self.path = path
        self.entries = entries

    @classmethod
    def open(cls, run_dir: Path, *, fresh: bool) -> MixtureJournal:
        """Open the journal of ``run_dir`` (created, with the folder, when absent).

        Args:
            run_dir: the run directory.
            fresh: a fresh start: the journal is emptied (a run that started over replays
                nothing of an earlier one). Otherwise (a resume) its lines are read, and a
                partial last line (a crash during its write) is cut off so the next append
                starts a line of its own.

        Raises:
            OSError: the folder or the file cannot be made, read or written.
        """
        run_dir.mkdir(parents=True, exist_ok=True)
        path = run_dir / JOURNAL_NAME
        if fresh or not path.is_file():
            with open(path, "w", encoding="utf-8") as f:
                os.fsync(f.fileno())
            _fsync_folder(run_dir)
            return cls(path, {})
        data = path.read_bytes()
        end = data.rfind(b"\n") + 1
        if end != len(data):  # a partial last line: the write a crash cut short
            with open(path, "r+b") as f:
                f.truncate(end)
                os.fsync(f.fileno())
        entries: dict[int, dict[str, Any]] = {}
        for row in read_jsonl(path, skip_corrupt=True):
            step = row.get("step")
            if isinstance(step, int) and not isinstance(step, bool):
                entries[step] = row
        return cls(path, entries)

    def entry(self, step: int) -> dict[str, Any] | None:
        """The journal's decision for ``step`` (its last line), or None."""
        return self.entries.get(step)

    def append(self, entry: dict[str, Any]) -> None:
        """Append ``entry`` (with an integer ``step``) as one line: written, flushed, fsynced.

        Raises:
            OSError: the write or the fsync failed (the entry is then not in :attr:`entries`).
        """
        line = json.dumps(entry, separators=(",", ":"), allow_nan=False) + "\n"
        with open(self.path, "a", encoding="utf-8") as f:
            f.write(line)
            f.flush()
            os.fsync(f.fileno())
        self.entries[int(entry["step"])] = entry


def _fsync_folder(folder: Path) -> None:
    """Make a new file's name in ``folder`` durable (POSIX; a no-op where folders cannot open)."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
