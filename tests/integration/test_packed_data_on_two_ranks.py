"""A 2-rank run trains on packed data with dynamic re-weighting on, documents masked.

Two packed streams (rows of 32 and of 64 tokens) over a 2-phase schedule (``max_seq_len`` 32,
then 64) under the deepspeed launcher on 2 CPU gloo ranks, re-weighting every 2 steps. A packed
row is one sample: every traced sample is a full row (or the dataset's last row), the step's
counted tokens are the traced rows' tokens, and the loss covers every token of every row but
the first of each document after the row's first (document masking, on by default: each row of
L tokens with D document starts past its first token bears L - 1 - D loss tokens).

A second run, killed (SIGKILL) after step 11, inside the second phase, and resumed from its
step-9 checkpoint, continues to the uninterrupted run's trace and records exactly.

From issue 12, part 1, and issue 32 (item 6).
"""

from __future__ import annotations

from collections.abc import Generator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from helpers import history, make_dataset, metrics, ragged_docs, trace, write_ds_config
from shared_job import Outputs, Run, shared_runs

from curriculum_ds.data import close_stream, open_stream, read_stream_info
from curriculum_ds.data.streams import streaming_registration

pytestmark = pytest.mark.distributed

ROWS = {"short": 32, "long": 64}
SAME = ("step", "phase", "tokens", "samples", "loss", "token_loss", "valid_tokens",
        "step_tokens", "lr", "streams")  # fmt: skip
"""Every metrics field but the timings, compared between the killed run and the other."""


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
    run, killed = tmp_path / "run", tmp_path / "killed"
    common = ("--trace-samples", "--save-interval", "3")
    yield [Run(cfg, run, common), Run(cfg, killed, (*common, "--kill-after-step", "11"))]
    killed_at = [r["step"] for r in metrics(killed)]
    yield [Run(cfg, killed, (*common, "--resume", "auto"))]
    return {"streams": streams, "run": run, "killed": killed, "killed_at": killed_at}


@pytest.fixture(scope="module")
def packed(shared_job: Any) -> dict[str, Any]:
    return shared_job(_packed_run)


def _boundaries(local: Path) -> list[int]:
    """Per row of a packed stream, its document starts past the row's first token."""
    with streaming_registration():  # other jobs on this node may open streams at the same time
        ds = open_stream(local)
    try:
        return [int((np.asarray(ds[i]["doc_starts"]) > 0).sum()) for i in range(ds.num_samples)]
    finally:
        close_stream(ds)


def test_packed_streams_train_on_two_ranks_with_dynamic_reweighting(packed) -> None:
    streams, run = packed["streams"], packed["run"]
    lengths = {
        name: np.asarray(read_stream_info(local).metrics["num_tokens"])
        for name, local in streams.items()
    }
    boundaries = {name: _boundaries(local) for name, local in streams.items()}
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
        cut = sum(boundaries[name][idx] for name, idx in traced["samples"])
        assert cut > 0
        # loss on every token of a row but a document's first (not predicted across documents)
        assert row["valid_tokens"] == sum(sizes) - len(sizes) - cut
        assert row["loss"] is not None
        assert np.isfinite(row["loss"])
    assert rows[-1]["tokens"] >= 6000
    assert any(name == "long" for t in steps for name, _ in t["samples"])
    recomputes = history(run)
    assert len(recomputes) >= 2
    for entry in recomputes:
        assert sum(entry["weights"]) == pytest.approx(1.0)
        assert min(entry["weights"]) >= 0.1 - 1e-9


def test_a_masked_packed_run_killed_mid_phase_resumes_exactly(packed) -> None:
    assert packed["killed_at"] == list(range(1, 12))  # SIGKILL after step 11
    uninterrupted, resumed = metrics(packed["run"]), metrics(packed["killed"])
    assert uninterrupted[10]["phase"] == 1  # the kill and the step-9 save: inside phase 1
    assert uninterrupted[8]["phase"] == 1
    assert trace(packed["killed"]) == trace(packed["run"])
    assert [{k: r[k] for k in SAME} for r in resumed] == [
        {k: r[k] for k in SAME} for r in uninterrupted
    ]
    assert history(packed["killed"]) == history(packed["run"])
