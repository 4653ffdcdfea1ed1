"""Compare every record a run dir holds with another run's: the JSONL files and the CSV monitor.

:func:`assert_same_records` is what "the resumed run's records equal the uninterrupted run's"
means in the launched tests: each record file of the uninterrupted run has one row per step in
both run dirs, the rows are equal but for wall times and float losses (within ``rel_tol``), and
each ``csv_monitor`` file (``RUN_DIR/monitors/csv/<job>/``) has one header and one row per x,
with the same values. It returns the largest relative loss difference found, for the tests to
assert and report.
"""

from __future__ import annotations

import csv
import math
from pathlib import Path
from typing import Any

from curriculum_ds.records.jsonl import RECORD_FILES, read_jsonl

RESUME_REL_TOL = 1e-7
"""A resumed run's losses against the uninterrupted run's: the bound docs/resume-and-faults.md
states, asserted by the kill -9 and SIGTERM tests (which measure 0 on one machine)."""

TIMES = frozenset({"tokens_per_s", "data_wait_s", "eval_time_s"})
"""Row fields that are wall times: never equal between two runs."""

PROCESS_LOCAL = frozenset({"prefetched"})
"""Row fields of the process that ran the step: the first step after a resume read its
micro-batches when drawn (nothing was read ahead in the new process)."""

NOT_COMPARED = TIMES | PROCESS_LOCAL


def _rel(a: float, b: float) -> float:
    return 0.0 if a == b else abs(a - b) / max(abs(a), abs(b))


def _compare(a: Any, b: Any, where: str, worst: list[float], rel_tol: float) -> None:
    """Equal, except floats within ``rel_tol`` (the worst difference kept in ``worst``)."""
    if isinstance(a, dict) and isinstance(b, dict):
        keys = set(a) - NOT_COMPARED
        assert keys == set(b) - NOT_COMPARED, (where, sorted(keys ^ (set(b) - NOT_COMPARED)))
        for key in sorted(keys):
            _compare(a[key], b[key], f"{where}.{key}", worst, rel_tol)
    elif isinstance(a, float) and isinstance(b, float):
        worst[0] = max(worst[0], _rel(a, b))
        assert math.isclose(a, b, rel_tol=rel_tol), (where, a, b)
    else:
        assert a == b, (where, a, b)


def read_csv_rows(path: Path) -> tuple[list[str], list[tuple[float, float]]]:
    """A csv_monitor file: its header rows (every non-numeric row) and its ``(x, value)`` rows."""
    headers, rows = [], []
    with open(path, newline="", encoding="utf-8") as f:
        for row in csv.reader(f):
            try:
                rows.append((float(row[0]), float(row[1])))
            except ValueError:
                headers.append(",".join(row))
    return headers, rows


def csv_dir(run_dir: Path) -> Path:
    """The run's csv_monitor folder (``monitors/csv/<job_name>``, the default output path)."""
    (found,) = (run_dir / "monitors" / "csv").iterdir()
    return found


def assert_same_records(a: Path, b: Path, *, rel_tol: float) -> float:
    """Run dir ``b`` holds the records of run dir ``a``, one row per step; returns the largest
    relative difference of a float (the losses) over every file."""
    worst = [0.0]
    names = [n for n in RECORD_FILES if (a / n).is_file()]
    assert names, a
    for name in names:
        ra, rb = read_jsonl(a / name), read_jsonl(b / name)
        steps = [r["step"] for r in ra]
        assert steps == sorted(set(steps)), (name, steps)  # one row per step
        assert [r["step"] for r in rb] == steps, (name, [r["step"] for r in rb])
        for x, y in zip(ra, rb, strict=True):
            _compare(x, y, f"{name}@{x['step']}", worst, rel_tol)
    files_a = sorted(p.name for p in csv_dir(a).glob("*.csv"))
    assert files_a == sorted(p.name for p in csv_dir(b).glob("*.csv"))
    assert "curriculum_loss.csv" in files_a
    for name in files_a:
        ha, rows_a = read_csv_rows(csv_dir(a) / name)
        hb, rows_b = read_csv_rows(csv_dir(b) / name)
        assert len(ha) == 1, (name, ha)  # one header
        assert hb == ha, (name, ha, hb)
        xs = [x for x, _ in rows_b]
        assert xs == sorted(set(xs)), (name, xs)  # one row per step
        assert xs == [x for x, _ in rows_a], name
        if name.removeprefix("curriculum_").removesuffix(".csv") in TIMES:
            continue  # a wall time (curriculum/data_wait_s): one row per step, any value
        for (x, va), (_, vb) in zip(rows_a, rows_b, strict=True):
            worst[0] = max(worst[0], _rel(va, vb))
            assert math.isclose(va, vb, rel_tol=rel_tol), (name, x, va, vb)
    return worst[0]
