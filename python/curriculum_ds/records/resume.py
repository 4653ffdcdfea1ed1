"""A run's records after a resume: one row per step, as an uninterrupted run's.

A resumed run continues from its checkpoint's step N, so every row a killed or preempted run
wrote after step N is written again by the continuation. Before it writes anything:

* :func:`truncate_records` cuts the run directory's JSONL record files (``metrics.jsonl``,
  ``eval.jsonl``, ``curriculum_history.jsonl``, ``sample_trace.jsonl``, and any file a user loop
  names) back to the rows of steps ≤ N (an atomic rewrite each);
* :func:`resume_monitors` does the same to DeepSpeed's monitors: each ``csv_monitor`` file is cut
  back atomically, keeping its one header, and the monitor is told the file has its header (so
  DeepSpeed does not write a second one); the TensorBoard writer is reopened with
  ``purge_step=N + 1``, TensorBoard's own way to hide the events a crashed run logged past the
  step it restarts from (``torch.utils.tensorboard.SummaryWriter``'s ``purge_step``).
  :meth:`Curriculum.load_checkpoint <curriculum_ds.plugin.Curriculum.load_checkpoint>` calls it
  on global rank 0, so a user loop gets it without a call of its own.

The readers (``report``, ``curve``) keep the last row per step (:func:`last_row_per_step`), so a
run dir written before these cuts existed still reads as one row per step.

The x-axis of a record: the optimizer step, except DeepSpeed's own ``Train/Samples/*`` monitor
tags, whose x is the global sample count (cut at the checkpoint's ``engine.global_samples``).
TensorBoard's purge is one step number for the whole event file: it hides every event at
x ≥ N + 1, so the ``Train/Samples/*`` curves from before the resume are hidden too (their x are
sample counts, mostly above N); the ``curriculum/*`` tags, whose x is the step, are exact.
"""

from __future__ import annotations

import csv
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from curriculum_ds.records.jsonl import truncate_jsonl

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping

__all__ = [
    "RECORD_FILES",
    "last_row_per_step",
    "resume_monitors",
    "truncate_csv",
    "truncate_records",
]

RECORD_FILES = ("metrics.jsonl", "eval.jsonl", "curriculum_history.jsonl", "sample_trace.jsonl")
"""The JSONL files of a run directory with one row per step (or per recompute/evaluation)."""

_SAMPLES_PREFIX = "Train_Samples_"
"""DeepSpeed's own CSV monitor files whose x-axis is the global sample count."""


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


def truncate_csv(path: Path, max_x: float) -> bool:
    """Keep the header and the rows of a ``step,value`` CSV file whose x is ≤ ``max_x``.

    The header is the first row whose first cell is not a number (DeepSpeed writes ``step,<tag>``
    whenever its monitor opens a file it has not written in this process, so a resumed run used
    to add a second one); later non-numeric rows are dropped. Atomic rewrite.

    Args:
        path: a ``csv_monitor`` file.
        max_x: the last x (the step, or the sample count for ``Train_Samples_*``) to keep.

    Returns:
        Whether the file has a header now.
    """
    header: list[str] | None = None
    kept: list[list[str]] = []
    with open(path, newline="", encoding="utf-8") as f:
        for row in csv.reader(f):
            if not row:
                continue
            try:
                x = float(row[0])
            except ValueError:
                if header is None and not kept:
                    header = row
                continue
            if x <= max_x:
                kept.append(row)
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        if header is not None:
            writer.writerow(header)
        writer.writerows(kept)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    return header is not None


def resume_monitors(monitor: Any, step: int, samples: int) -> None:
    """Cut DeepSpeed's CSV and TensorBoard monitors back to a resumed checkpoint.

    Args:
        monitor: ``engine.monitor`` (a ``deepspeed.monitor.monitor.MonitorMaster``) with its
            writers built (global rank 0); None or one without writers is a no-op.
        step: the checkpoint's optimizer step.
        samples: the checkpoint's global sample count (``engine.global_samples``): the cut of
            DeepSpeed's own ``Train/Samples/*`` CSV files.
    """
    if monitor is None or not getattr(monitor, "enabled", False):
        return
    csv_monitor = getattr(monitor, "csv_monitor", None)
    log_dir = getattr(csv_monitor, "log_dir", None)
    if csv_monitor is not None and log_dir is not None and Path(log_dir).is_dir():
        for path in sorted(Path(log_dir).glob("*.csv")):
            cut = samples if path.stem.startswith(_SAMPLES_PREFIX) else step
            if truncate_csv(path, cut) and path.stem not in csv_monitor.filenames:
                csv_monitor.filenames.append(path.stem)  # its header is there: not again
    tb = getattr(monitor, "tb_monitor", None)
    writer = getattr(tb, "summary_writer", None)
    if tb is not None and writer is not None:
        from torch.utils.tensorboard import SummaryWriter

        log_dir = writer.log_dir
        writer.close()
        tb.summary_writer = SummaryWriter(log_dir=log_dir, purge_step=step + 1)


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
