"""Reading a swarm's results from CSV files in RegMix's layout, and the prior/token JSON files.

RegMix (sail-sg/regmix, ``data/``) publishes a swarm as two CSV files: one row per run, joined on
their first column (``index``): the mixture file's other columns are the training share of each
domain, the results file's are the eval loss per domain. :func:`read_swarm_csv` reads that
layout; every mistake is a :class:`~curriculum_ds.errors.DataError` of one line naming the file,
the row or the column, raised before anything is written.
"""

from __future__ import annotations

import csv
import json
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from curriculum_ds.errors import DataError

__all__ = [
    "SUM_TOLERANCE",
    "CsvTable",
    "SwarmData",
    "read_csv_table",
    "read_mixtures",
    "read_stream_json",
    "read_swarm_csv",
]

SUM_TOLERANCE = 1e-2
"""A mixture row summing to within this of 1 is renormalised; further off it is refused.

RegMix's own rows are rounded to 3 decimals and sum to 0.996–1.003."""


@dataclass(frozen=True)
class CsvTable:
    """A numeric CSV file: its key column, and a float matrix of the other columns.

    Attributes:
        path: the file read.
        key_name: the header of the first column (``index`` in RegMix's files).
        keys: the first column's values, as written, one per row.
        columns: the headers of the other columns, in file order.
        values: float64, shape ``(len(keys), len(columns))``.
    """

    path: Path
    key_name: str
    keys: tuple[str, ...]
    columns: tuple[str, ...]
    values: np.ndarray


@dataclass(frozen=True)
class SwarmData:
    """The runs of a swarm joined on their key: mixtures (rows sum to 1) and eval losses.

    Attributes:
        keys: run keys present in both files, in the results file's order.
        streams: the mixture's streams (mixture file columns).
        mixtures: float64 ``(runs, streams)``, each row on the simplex.
        loss_names: the eval loss columns of the results file.
        losses: float64 ``(runs, loss columns)``, finite and > 0.
    """

    keys: tuple[str, ...]
    streams: tuple[str, ...]
    mixtures: np.ndarray
    loss_names: tuple[str, ...]
    losses: np.ndarray


def read_csv_table(path: Path, what: str) -> CsvTable:
    """Read a CSV file whose first column is a key and whose other columns are numbers.

    Args:
        path: the file.
        what: the option or role naming it in errors (``"--mixtures"``).

    Raises:
        DataError: unreadable, empty, no data column, a duplicate key or header, a cell that is
            not a finite number (one line naming the file, row and column).
    """
    try:
        with path.open(newline="", encoding="utf-8") as fh:
            rows = list(csv.reader(fh))
    except (OSError, UnicodeDecodeError) as exc:
        raise DataError(f"{what} {path}: cannot be read ({exc})") from None
    rows = [row for row in rows if any(cell.strip() for cell in row)]
    if len(rows) < 2 or len(rows[0]) < 2:
        raise DataError(
            f"{what} {path}: needs a header and one row per run, with a key column first"
        )
    header = [cell.strip() for cell in rows[0]]
    if len(set(header)) != len(header):
        raise DataError(f"{what} {path}: duplicate column names in the header")
    keys: list[str] = []
    values = np.empty((len(rows) - 1, len(header) - 1), dtype=np.float64)
    for i, row in enumerate(rows[1:]):
        if len(row) != len(header):
            raise DataError(
                f"{what} {path}: row {i + 2} has {len(row)} cells, the header {len(header)}"
            )
        keys.append(row[0].strip())
        for j, cell in enumerate(row[1:]):
            try:
                value = float(cell)
            except ValueError:
                value = math.nan
            if not math.isfinite(value):
                raise DataError(
                    f"{what} {path}: row {i + 2}, column {header[j + 1]!r}: {cell!r} is not a "
                    "finite number"
                )
            values[i, j] = value
    if len(set(keys)) != len(keys):
        raise DataError(f"{what} {path}: the key column {header[0]!r} has duplicate values")
    return CsvTable(path, header[0], tuple(keys), tuple(header[1:]), values)


def read_mixtures(path: Path, what: str = "--mixtures") -> CsvTable:
    """Read a mixtures CSV file: rows within :data:`SUM_TOLERANCE` of 1 are renormalised to 1.

    Raises:
        DataError: as :func:`read_csv_table`, a negative share, or a row whose sum is further
            than :data:`SUM_TOLERANCE` from 1 (names the row's key and its sum).
    """
    table = read_csv_table(path, what)
    negative = np.argwhere(table.values < 0)
    if negative.size:
        i, j = negative[0]
        raise DataError(
            f"{what} {path}: run {table.keys[i]!r}, column {table.columns[j]!r}: a share is "
            f"negative ({table.values[i, j]})"
        )
    sums = table.values.sum(axis=1)
    off = np.flatnonzero(np.abs(sums - 1.0) > SUM_TOLERANCE)
    if off.size:
        i = int(off[0])
        raise DataError(
            f"{what} {path}: run {table.keys[i]!r}'s shares sum to {sums[i]:.6g}, not 1 within "
            f"{SUM_TOLERANCE} ({off.size} such rows)"
        )
    return CsvTable(
        table.path, table.key_name, table.keys, table.columns, table.values / sums[:, None]
    )


def read_swarm_csv(results: Path, mixtures: Path) -> SwarmData:
    """Join a results CSV and a mixtures CSV on their first columns (RegMix's layout).

    Runs present in only one of the two files are left out (RegMix's 1B loss file lacks one of
    its mixtures' rows); at least two joined runs are required.

    Raises:
        DataError: as :func:`read_csv_table` / :func:`read_mixtures`, a loss that is not > 0, or
            fewer than 2 runs in common.
    """
    loss_table = read_csv_table(results, "RESULTS")
    mix_table = read_mixtures(mixtures)
    bad = np.argwhere(loss_table.values <= 0)
    if bad.size:
        i, j = bad[0]
        raise DataError(
            f"RESULTS {results}: run {loss_table.keys[i]!r}, column {loss_table.columns[j]!r}: a "
            f"loss must be > 0 (got {loss_table.values[i, j]})"
        )
    mix_row = {key: i for i, key in enumerate(mix_table.keys)}
    joined = [(i, mix_row[key]) for i, key in enumerate(loss_table.keys) if key in mix_row]
    if len(joined) < 2:
        raise DataError(
            f"RESULTS {results} and --mixtures {mixtures}: {len(joined)} run(s) in common on their "
            "first columns; at least 2 are needed"
        )
    loss_idx = np.array([i for i, _ in joined])
    mix_idx = np.array([j for _, j in joined])
    return SwarmData(
        keys=tuple(loss_table.keys[i] for i in loss_idx),
        streams=mix_table.columns,
        mixtures=mix_table.values[mix_idx],
        loss_names=loss_table.columns,
        losses=loss_table.values[loss_idx],
    )


def read_stream_json(path: Path, what: str, streams: tuple[str, ...]) -> np.ndarray:
    """Read a JSON object ``{stream: positive number}`` naming every stream, in ``streams`` order.

    Used for ``--prior`` (shares, renormalised) and ``--tokens`` (token counts).

    Raises:
        DataError: unreadable, not such an object, a stream missing or unknown, a value that is
            not a finite number > 0 (one line naming the stream).
    """
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise DataError(f"{what} {path}: cannot be read as JSON ({exc})") from None
    if not isinstance(raw, dict):
        raise DataError(f"{what} {path}: must be a JSON object {{stream: number}}")
    unknown = sorted(set(raw) - set(streams))
    if unknown:
        raise DataError(f"{what} {path}: {unknown[0]!r} is not a stream of the mixtures file")
    missing = [name for name in streams if name not in raw]
    if missing:
        raise DataError(f"{what} {path}: stream {missing[0]!r} is missing")
    out = np.empty(len(streams), dtype=np.float64)
    for j, name in enumerate(streams):
        value = raw[name]
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise DataError(f"{what} {path}: {name!r}: {value!r} is not a number")
        if not math.isfinite(value) or value <= 0:
            raise DataError(f"{what} {path}: {name!r}: {value!r} must be a finite number > 0")
        out[j] = float(value)
    return out
