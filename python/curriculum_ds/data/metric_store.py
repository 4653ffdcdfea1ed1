"""Adding a metric column to a prepared dataset's metric store, atomically.

A prepared dataset's metric columns live in ``metrics.npz`` (one ``NAME.npy`` member per column,
in sample order) and are listed in ``curriculum_meta.json``'s ``metric_columns``
(:mod:`curriculum_ds.data`); :func:`~curriculum_ds.data.read_stream_info` reads the listed ones.
:func:`write_metric_column` adds (or replaces) one column written by another tool
(``curriculum-ds score``) without touching the shards, ``index.json`` or any other column.
"""

from __future__ import annotations

import json
import zipfile
from pathlib import Path
from typing import IO

import numpy as np
import numpy.typing as npt

from curriculum_ds.data.index import META_FILENAME, METRICS_FILENAME, read_json
from curriculum_ds.errors import DataError
from curriculum_ds.files.atomic import replace_atomically

__all__ = ["write_metric_column"]


def write_metric_column(folder: str | Path, name: str, values: npt.ArrayLike) -> None:
    """Add (or replace) the float64 metric column ``name`` of a prepared dataset.

    ``metrics.npz`` is rewritten through a temporary file in ``folder`` and ``os.replace``: every
    other member is copied byte for byte (the same zip entry and bytes), the new ``name.npy``
    member is appended (replacing one of that name). Then ``curriculum_meta.json`` gets ``name``
    appended to ``metric_columns`` (the same way, and only if it was not listed), so a reader
    never sees a listed column without its values. The shards and ``index.json`` are not touched.

    Args:
        folder: a dataset folder written by :func:`~curriculum_ds.data.prepare`.
        name: the column's name (the caller checks it is a plain identifier, not one of
            prepare's own columns).
        values: float ``(num_samples,)``, in sample order; stored as float64.

    Raises:
        DataError: ``folder`` has no readable ``curriculum_meta.json`` or ``metrics.npz``, or
            ``values`` is not ``(num_samples,)``; nothing is written. Or a file cannot be
            written (read-only folder, disk full): the file is unchanged.
    """
    folder = Path(folder)
    meta_path, metrics_path = folder / META_FILENAME, folder / METRICS_FILENAME
    meta = read_json(meta_path, str(meta_path))
    columns = meta.get("metric_columns") if isinstance(meta, dict) else None
    if not isinstance(columns, list) or not isinstance(meta.get("num_samples"), int):
        raise DataError(f"{meta_path}: not a dataset written by `curriculum-ds prepare`")
    column = np.ascontiguousarray(values, dtype=np.float64)
    if column.shape != (meta["num_samples"],):
        raise DataError(
            f"{folder}: column {name!r} has shape {column.shape}, expected ({meta['num_samples']},)"
        )
    member = f"{name}.npy"
    try:
        with zipfile.ZipFile(metrics_path) as old:
            kept = [(info, old.read(info)) for info in old.infolist() if info.filename != member]
    except (OSError, zipfile.BadZipFile) as err:
        raise DataError(f"cannot read {metrics_path}: {err}") from err

    def write_npz(fh: IO[bytes]) -> None:
        with zipfile.ZipFile(fh, "w", compression=zipfile.ZIP_STORED) as new:
            for info, data in kept:
                new.writestr(info, data)
            info = zipfile.ZipInfo(member, date_time=(1980, 1, 1, 0, 0, 0))  # as prepare's
            info.external_attr = 0o644 << 16
            with new.open(info, "w", force_zip64=True) as out:
                np.lib.format.write_array(out, column, allow_pickle=False)

    try:
        replace_atomically(metrics_path, write_npz)
    except OSError as err:
        raise DataError(f"cannot write {metrics_path}: {err}; it is unchanged") from None
    if name not in columns:
        meta["metric_columns"] = [*columns, name]
        text = json.dumps(meta, indent=2) + "\n"  # prepare's layout

        def write_meta(fh: IO[bytes]) -> None:
            fh.write(text.encode("utf-8"))

        try:
            replace_atomically(meta_path, write_meta)
        except OSError as err:  # the new member is there, unlisted: readers do not see it
            raise DataError(
                f"cannot write {meta_path}: {err}; column {name!r} is not listed (run again)"
            ) from None
