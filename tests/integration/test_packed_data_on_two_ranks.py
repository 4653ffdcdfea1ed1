"""A 2-rank run trains on packed data with dynamic re-weighting on.

Two packed streams (rows of 32 and of 64 tokens) over a 2-phase schedule (``max_seq_len`` 32,
then 64) under the deepspeed launcher on 2 CPU gloo ranks, re-weighting every 2 steps. A packed
row is one sample: every traced sample is a full row (or the dataset's last row), the step's
counted tokens are the traced rows' tokens, and the loss covers every token of every row (each
row of L tokens bears L - 1 loss tokens: no padding, no mask inside the row).

From issue 12, part 1.
"""

from __future__ import annotations

from collections.abc import Generator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from helpers import history, make_dataset, metrics, ragged_docs, trace, write_ds_config
from shared_job import Outputs, Run, shared_runs

from curriculum_ds.data import read_stream_info

pytestmark = pytest.mark.distributed

ROWS = {"short": 32, "long": 64}


@shared_runs
def _packed_run(tmp_path: Path) -> Generator[list[Run], Outputs, dict[str, Any]]:
    """The packed run, in the session's shared launched job."""
    streams = {
        "short": make_dataset(
            tmp_path,
            "short",
            ragged_docs(200, seed=1, min_len=5, max_len=40),
            max_seq_len=32,
            pack=True,
        ),
        "long": make_dataset(
            tmp_path,
            "long",
            ragged_docs(200, seed=2, min_len=30, max_len=200),
            max_seq_len=64,
            pack=True,
        ),
    }
    curriculum = {
        "max_duration": "6000tok",
        "seed": 3,
        "schedule": [
            {
                "name": "short",
                "duration": "2000tok",
                "train_loader": {
                    "streams": [{"local": str(streams["short"]), "name": "short"}],
                    "max_seq_len": 32,
                },
            },
            {
                "name": "mix",
                "duration": "4000tok",
                "train_loader": {
                    "streams": [
                        {"local": str(streams["short"]), "name": "short", "proportion": 0.3},
                        {"local": str(streams["long"]), "name": "long", "proportion": 0.7},
                    ],
                    "max_seq_len": 64,
                },
            },
        ],
        "dynamic": {
            "enabled": True,
            "num_buckets": 2,
            "window": 64,
            "recompute_every_n_steps": 2,
            "temperature": 1.0,
            "floor": 0.1,
            "static_metric": "compression_ratio",  # num_tokens is refused for packed rows
        },
    }
    cfg = write_ds_config(tmp_path / "ds.json", curriculum, train_micro_batch_size_per_gpu=2)
    run = tmp_path / "run"
    yield [Run(cfg, run, ("--trace-samples",))]
    return {"streams": streams, "run": run}


@pytest.fixture(scope="module")
def packed(shared_job: Any) -> dict[str, Any]:
    return shared_job(_packed_run)


def test_packed_streams_train_on_two_ranks_with_dynamic_reweighting(packed) -> None:
    streams, run = packed["streams"], packed["run"]
    lengths = {
        name: np.asarray(read_stream_info(local).metrics["num_tokens"])
        for name, local in streams.items()
    }
    for name, row_len in ROWS.items():  # packed: every row but the last is full
        assert (lengths[name][:-1] == row_len).all()
    rows = metrics(run)
    steps = trace(run)
    assert [r["step"] for r in rows] == [t["step"] for t in steps]
    assert {r["phase"] for r in rows} == {0, 1}
    for row, traced in zip(rows, steps, strict=True):
        sizes = [int(lengths[name][idx]) for name, idx in traced["samples"]]
        for (name, idx), size in zip(traced["samples"], sizes, strict=True):
            assert size == ROWS[name] or idx == len(lengths[name]) - 1  # a full row, or the last
        assert row["step_tokens"] == sum(sizes)
        assert row["valid_tokens"] == sum(sizes) - len(sizes)  # loss on every token of a row
        assert row["loss"] is not None
        assert np.isfinite(row["loss"])
    assert rows[-1]["tokens"] >= 6000
    assert any(name == "long" for t in steps for name, _ in t["samples"])
    recomputes = history(run)
    assert len(recomputes) >= 2
    for entry in recomputes:
        assert sum(entry["weights"]) == pytest.approx(1.0)
        assert min(entry["weights"]) >= 0.1 - 1e-9
