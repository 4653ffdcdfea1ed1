"""``proportion_unit: "tokens"`` in a real 2-rank run, killed-free resume.

Two streams whose mean sample lengths differ by ~10x are mixed 1:1 in tokens. From the run's
``sample_trace.jsonl`` and the streams' recorded token counts, the realised token shares after
every step (and every slot) are within one sample's tokens of 50%; a run resumed from the
step-4 checkpoint draws exactly the uninterrupted run's batches.

From issue 12, item 4.
"""

from __future__ import annotations

from collections.abc import Generator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from helpers import make_dataset, metrics, ragged_docs, trace, write_ds_config
from shared_job import Outputs, Run, shared_runs

from curriculum_ds.data import read_stream_info

pytestmark = pytest.mark.distributed

MAX_SEQ_LEN = 128


@shared_runs
def _token_mix_runs(root: Path) -> Generator[list[Run], Outputs, tuple[Path, Path, Any]]:
    paths = {
        "short": make_dataset(root, "short", ragged_docs(200, seed=1, min_len=4, max_len=14)),
        "long": make_dataset(
            root,
            "long",
            ragged_docs(60, seed=2, min_len=70, max_len=130),
            max_seq_len=MAX_SEQ_LEN,
        ),
    }
    loader = {
        "streams": [{"local": str(p), "proportion": 1} for p in paths.values()],
        "max_seq_len": MAX_SEQ_LEN,
        "proportion_unit": "tokens",
    }
    phase = {"name": "mix", "duration": "6000tok", "train_loader": loader}
    batch_sizes = {"train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 2}
    curriculum = {"max_duration": "6000tok", "seed": 3, "schedule": [phase]}
    cfg = write_ds_config(root / "ds.json", curriculum, **batch_sizes)
    run_dir = root / "run"
    resumed_dir = root / "resumed"
    # in the session's shared launched job (tests/shared_job.py): the run, then a run of its own
    # resumed from the run's step-4 checkpoint (the folder of that tag, which the first run keeps)
    step4 = run_dir / "checkpoints" / "global_step4"
    yield [
        Run(cfg, run_dir, ("--save-interval", "4", "--trace-samples")),
        Run(cfg, resumed_dir, ("--trace-samples", "--resume", str(step4))),
    ]
    lengths = {
        name: np.minimum(read_stream_info(p).metrics["num_tokens"], MAX_SEQ_LEN)
        for name, p in paths.items()
    }
    return run_dir, resumed_dir, lengths


@pytest.fixture(scope="module")
def token_mix_run(shared_job):
    return shared_job(_token_mix_runs)


def test_token_shares_within_one_sample_after_every_step(token_mix_run):
    run_dir, _, lengths = token_mix_run
    assert lengths["long"].mean() / lengths["short"].mean() >= 9
    longest = max(int(v.max()) for v in lengths.values())
    placed = {"short": 0, "long": 0}
    slots = {"short": 0, "long": 0}
    rows = trace(run_dir)
    assert len(rows) >= 8
    for row, step in zip(rows, metrics(run_dir), strict=True):
        step_tokens = 0
        for name, index in row["samples"]:
            placed[name] += int(lengths[name][index])
            slots[name] += 1
            step_tokens += int(lengths[name][index])
            total = placed["short"] + placed["long"]
            assert abs(placed["short"] - total / 2) <= longest, (row["step"], placed)
        # the run counted the same non-padding tokens as the trace and the recorded lengths
        assert step["step_tokens"] == step_tokens
        total = placed["short"] + placed["long"]
        assert abs(placed["short"] - total / 2) <= longest
    # 1:1 in tokens is ~10:1 in samples
    assert slots["short"] > 5 * slots["long"]


def test_resumed_run_draws_the_same_batches(token_mix_run):
    run_dir, resumed_dir, _ = token_mix_run
    uninterrupted = {r["step"]: r["samples"] for r in trace(run_dir)}
    resumed = {r["step"]: r["samples"] for r in trace(resumed_dir)}
    assert min(resumed) == 5
    assert resumed == {s: b for s, b in uninterrupted.items() if s >= 5}
