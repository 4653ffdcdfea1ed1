"""Append-only JSONL files of the run directory (metrics, history, sample trace, evaluations).

A line is written with one ``write`` of a complete newline-terminated string and flushed, so a
crash leaves at most one partial last line; :func:`truncate_jsonl` removes such a line (and, on
resume, every line past the checkpoint's step) so that what remains always reads as valid JSON.

A resumed run continues from its checkpoint's step N, so every row a killed or preempted run
wrote after step N is written again by the continuation: before it writes anything,
:func:`truncate_records` cuts the run directory's record files (``metrics.jsonl``,
``eval.jsonl``, ``curriculum_history.jsonl``, ``sample_trace.jsonl``, and any file a user loop
names) back to the rows of steps ≤ N, an atomic rewrite each (DeepSpeed's monitors are cut by
:func:`curriculum_ds.records.monitors.resume_monitors`). The readers (``report``, ``curve``) keep
the last row per step (:func:`last_row_per_step`), so a run dir written before these cuts
existed still reads as one row per step.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from curriculum_ds.errors import DataError

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping

    from curriculum_ds.records.schema import EvalRow, HistoryRow, MetricsRow, TraceRow

__all__ = [
    "RECORD_FILES",
    "JsonlWriter",
    "RunLog",
    "last_row_per_step",
    "read_jsonl",
    "truncate_jsonl",
    "truncate_records",
]

RECORD_FILES = ("metrics.jsonl", "eval.jsonl", "curriculum_history.jsonl", "sample_trace.jsonl")
"""The JSONL files of a run directory with one row per step (or per recompute/evaluation)."""


class JsonlWriter:
    """Appends one JSON object per line to ``path`` (created with its parent folder)."""

    def __init__(self, path: Path):
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        self._file = open(path, "a", encoding="utf-8")  # noqa: SIM115  (closed in close())

    def write(self, record: Mapping[str, Any]) -> None:
        """Append ``record`` as one line and flush it to the OS."""
        self._file.write(json.dumps(record, separators=(",", ":")) + "\n")
        self._file.flush()

    def close(self) -> None:
        """Flush, fsync and close."""
        self._file.flush()
        os.fsync(self._file.fileno())
        self._file.close()


def read_jsonl(path: Path, *, skip_corrupt: bool = False) -> list[dict[str, Any]]:
    """Read all complete JSON lines of ``path``; a partial or corrupt last line is ignored.

    A crash leaves at most a partial last line. A corrupt line with complete lines after it
    (a failed write the run went on past, an edit) is not a crash's: it is refused, naming the
    file and the line, so that a reader never shows the rows before it as the whole file.

    Args:
        path: the JSONL file.
        skip_corrupt: leave such a line out and keep reading (a resume's cut-back) instead.

    Raises:
        DataError: a corrupt line before the last one (unless ``skip_corrupt``).
    """
    records = []
    bad: int | None = None  # the first corrupt line, refused once a complete line follows it
    with open(path, encoding="utf-8", errors="replace") as f:
        for number, line in enumerate(f, start=1):
            if not line.endswith("\n"):
                break
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                record = None
            if not isinstance(record, dict):
                bad = number if bad is None else bad
                continue
            if bad is not None and not skip_corrupt:
                raise DataError(
                    f"{path} line {bad}: not a JSON object, with complete lines after it (a "
                    "damaged file, not a crash's partial last line); repair or remove that line"
                )
            records.append(record)
    return records


def truncate_jsonl(path: Path, max_step: int) -> None:
    """Keep the complete lines of ``path`` whose ``step`` is ≤ ``max_step`` (atomic rewrite).

    A corrupt line is dropped, the lines after it are kept (:func:`read_jsonl`'s
    ``skip_corrupt``).
    """
    if not path.exists():
        return
    kept = [r for r in read_jsonl(path, skip_corrupt=True) if int(r.get("step", 0)) <= max_step]
    tmp = path.with_suffix(path.suffix + ".tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        f.writelines(json.dumps(r, separators=(",", ":")) + "\n" for r in kept)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


class RunLog:
    """The run directory's JSONL files, written by global rank 0 of the reference loop.

    ``metrics.jsonl`` (one row per optimizer step), ``curriculum_history.jsonl`` (one row per
    weight recompute, when ``history``) and ``sample_trace.jsonl`` (one row per step, when
    ``trace``) and ``eval.jsonl`` (one row per held-out evaluation, when ``evaluation``). On a
    fresh start the files are emptied; on a resume they keep the rows up to the
    checkpoint's step (:func:`truncate_records`), so that they
    read as one uninterrupted run.

    Args:
        run_dir: the run directory (created if needed).
        resumed_step: the step of the checkpoint resumed from, or None for a fresh start.
        history: write ``curriculum_history.jsonl``.
        trace: write ``sample_trace.jsonl``.
        evaluation: write ``eval.jsonl`` (:meth:`write_eval`).
    """

    def __init__(
        self,
        run_dir: Path,
        *,
        resumed_step: int | None,
        history: bool,
        trace: bool,
        evaluation: bool = False,
    ) -> None:
        run_dir.mkdir(parents=True, exist_ok=True)
        truncate_records(run_dir, resumed_step if resumed_step is not None else -1)
        self.metrics = JsonlWriter(run_dir / "metrics.jsonl")
        self.history = JsonlWriter(run_dir / "curriculum_history.jsonl") if history else None
        self.trace = JsonlWriter(run_dir / "sample_trace.jsonl") if trace else None
        self.eval = JsonlWriter(run_dir / "eval.jsonl") if evaluation else None

    def write(
        self,
        record: MetricsRow,
        *,
        reweighting: HistoryRow | None = None,
        trace: TraceRow | None = None,
    ) -> None:
        """Append a step's metrics row, its history row (if it recomputed) and its trace row."""
        self.metrics.write(record)
        if self.trace is not None and trace is not None:
            self.trace.write(trace)
        if self.history is not None and reweighting is not None:
            self.history.write(reweighting)

    def write_eval(self, row: EvalRow) -> None:
        """Append an evaluation's row (``curriculum.evaluate()``) to ``eval.jsonl``."""
        if self.eval is not None:
            self.eval.write(row)

    def close(self) -> None:
        """Flush, fsync and close every file."""
        for writer in (self.metrics, self.history, self.trace, self.eval):
            if writer is not None:
                writer.close()


def truncate_records(
    run_dir: str | os.PathLike[str], step: int, *, extra: Iterable[str] = ()
) -> list[Path]:
    """Cut every record file of ``run_dir`` back to the rows of steps ≤ ``step``.

    Each file is rewritten atomically (a temporary file renamed over it); a partial last line is
    dropped with the rows past ``step``. A file that does not exist is left absent.

    Args:
        run_dir: the run directory.
        step: the checkpoint's optimizer step (rows with ``step`` > it go); -1 empties the
            files (a fresh start in a used run dir).
        extra: more JSONL file names under ``run_dir`` with a ``step`` field per row (a user
            loop's own records).

    Returns:
        The files that exist and were rewritten.
    """
    root = Path(run_dir)
    done = []
    for name in (*RECORD_FILES, *extra):
        path = root / name
        if path.is_file():
            truncate_jsonl(path, step)
            done.append(path)
    return done


def last_row_per_step(rows: Iterable[Mapping[str, Any]]) -> list[Any]:
    """The last row of each step, by step (what a reader of a run's records keeps).

    Args:
        rows: records with an integer ``step`` (rows without one are left out), in file order.

    Returns:
        One row per step, the last one written for it, sorted by step.
    """
    last: dict[int, Mapping[str, Any]] = {}
    for row in rows:
        step = row.get("step")
        if isinstance(step, int) and not isinstance(step, bool):
            last[step] = row
    return [last[s] for s in sorted(last)]
