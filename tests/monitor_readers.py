"""Read back what DeepSpeed's monitors wrote: TensorBoard event files, CSV files, offline W&B runs.

Each reader returns ``{tag: {step: value}}``. TensorBoard through the tensorboard package's own
``EventAccumulator``; W&B from the offline run's ``run-<id>.wandb`` transaction log, decoded with
wandb's own protobuf schema (``wandb.proto.wandb_internal_pb2.Record``): the log is LevelDB's
log format (wandb's ``:W&B`` header of 7 bytes, then 32 KiB blocks of records with a 7-byte
header: crc32, length, type FULL/FIRST/MIDDLE/LAST), the format ``wandb sync`` reads.
"""

from __future__ import annotations

import csv
import json
import struct
from pathlib import Path

Series = dict[str, dict[int, float]]

_WANDB_HEADER = 7  # ":W&B", 2 magic bytes, 1 version byte
_BLOCK = 32 * 1024
_FULL, _FIRST, _MIDDLE, _LAST = 1, 2, 3, 4


def assert_monitors_hold(
    expected: Series, *, tensorboard: Path, csv_dir: Path, wandb_dir: Path
) -> Series:
    """Every tag of ``expected`` has exactly its values in the three monitors' files.

    TensorBoard stores float32 scalars, so there both sides are compared as float32; the CSV
    files and the W&B run hold the float64 values. Returns the TensorBoard series (all tags).
    """
    import numpy as np

    tb = read_tensorboard(tensorboard)
    csv_series = read_csv_monitor(csv_dir)
    wb = read_wandb_offline(wandb_dir, step_key="curriculum/step")
    for tag, series in expected.items():
        as_f32 = {s: np.float32(v) for s, v in series.items()}
        assert {s: np.float32(v) for s, v in tb[tag].items()} == as_f32, tag
        assert csv_series[tag.replace("/", "_")] == series, tag
        assert wb[tag] == series, tag
    return tb


def read_tensorboard(log_dir: Path) -> Series:
    """Every scalar of the event files under ``log_dir`` (tensorboard's EventAccumulator)."""
    from tensorboard.backend.event_processing import event_accumulator

    acc = event_accumulator.EventAccumulator(
        str(log_dir), size_guidance={event_accumulator.SCALARS: 0}
    )
    acc.Reload()
    return {
        tag: {event.step: event.value for event in acc.Scalars(tag)}
        for tag in acc.Tags()["scalars"]
    }


def read_csv_monitor(log_dir: Path) -> Series:
    """DeepSpeed's csv_monitor files (``<tag with / as _>.csv``: header ``step,<last part>``)."""
    out: Series = {}
    for path in sorted(log_dir.glob("*.csv")):
        with open(path, newline="", encoding="utf-8") as f:
            rows = list(csv.reader(f))
        out[path.stem] = {int(step): float(value) for step, value in rows[1:]}
    return out


def wandb_records(path: Path) -> list[object]:
    """The protobuf records of an offline W&B transaction log (``run-<id>.wandb``)."""
    from wandb.proto import wandb_internal_pb2 as pb

    data = path.read_bytes()
    assert data[:4] == b":W&B", f"{path}: not a W&B transaction log"
    records, parts, pos = [], [], _WANDB_HEADER
    while pos + 7 <= len(data):
        left = _BLOCK - pos % _BLOCK
        if left < 7:  # a block's tail too short for a record header is zero padding
            pos += left
            continue
        _crc, length, kind = struct.unpack("<IHB", data[pos : pos + 7])
        if kind == 0:  # zero padding up to the end of the block
            pos += left
            continue
        parts.append(data[pos + 7 : pos + 7 + length])
        pos += 7 + length
        if kind in (_FULL, _LAST):
            record = pb.Record()
            record.ParseFromString(b"".join(parts))
            records.append(record)
            parts = []
    return records


def read_wandb_offline(wandb_dir: Path, *, step_key: str) -> Series:
    """The history of the one offline run under ``wandb_dir``, x = the value of ``step_key``."""
    (log,) = sorted(wandb_dir.rglob("offline-run-*/run-*.wandb"))
    out: Series = {}
    for record in wandb_records(log):
        if record.WhichOneof("record_type") != "history":  # type: ignore[attr-defined]
            continue
        row = {}
        for item in record.history.item:  # type: ignore[attr-defined]
            key = item.key or "/".join(item.nested_key)
            row[key] = json.loads(item.value_json)
        if step_key in row:
            step = int(row[step_key])
            for key, value in row.items():
                if not key.startswith("_") and key != step_key:
                    out.setdefault(key, {})[step] = float(value)
    return out
