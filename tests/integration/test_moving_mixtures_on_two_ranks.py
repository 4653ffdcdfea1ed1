"""Mixtures that move, through real 2-rank DeepSpeed runs on CPU (gloo): issue 22 items 1 and 2.

One schedule, two phases, global batch 8 (2 ranks × micro 2 × GAS 2), streams whose samples
differ ~10× in length: phase ``ramp`` moves its token shares 0.9→0.1 and 0.1→0.9 in
``proportion_unit: "tokens"``; phase ``warmup`` ramps ``max_seq_len`` 16→128 as well. Run A goes
uninterrupted; run B is killed (SIGKILL) after step 8, mid-ramp, and resumed from its step-6
checkpoint. In the session's shared launched job (``tests/shared_job.py``), in two rounds.

* after every step of the ramp phase, each stream's cumulative tokens are within one maximum
  sample length of the integral of its target (the shares at each step's start × its tokens);
* B's sample trace equals A's, step for step;
* every warmup step is truncated to the ramp's value at its start (a multiple of 8; ``seq_len``
  in its row), its tokens counting what was trained; phase boundaries exact, the run ending at
  ``max_duration``.
"""

from __future__ import annotations

from collections.abc import Generator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from helpers import make_dataset, metrics, ragged_docs, trace, write_ds_config
from shared_job import Outputs, Run, shared_runs

from curriculum_ds.config.ramps import value_at
from curriculum_ds.data import read_stream_info

pytestmark = pytest.mark.distributed

RAMP = ([[0.0, 0.9], [1.0, 0.1]], [[0.0, 0.1], [1.0, 0.9]])
WARMUP = [[0.0, 16], [0.5, 64], [1.0, 128]]
DURATIONS = (6000, 4000)


def _curriculum(short: Path, long: Path) -> dict[str, Any]:
    def phase(name: str, tokens: int, max_seq_len: Any) -> dict[str, Any]:
        streams = [
            {"local": str(p), "proportion": r} for p, r in zip((short, long), RAMP, strict=True)
        ]
        loader = {"streams": streams, "proportion_unit": "tokens", "max_seq_len": max_seq_len}
        return {"name": name, "duration": f"{tokens}tok", "train_loader": loader}

    return {
        "max_duration": f"{sum(DURATIONS)}tok",
        "seed": 7,
        "schedule": [phase("ramp", DURATIONS[0], 128), phase("warmup", DURATIONS[1], WARMUP)],
    }


@shared_runs
def _runs(root: Path) -> Generator[list[Run], Outputs, dict[str, Any]]:
    """A and B's kill in round 1 of the session's shared launched job, B's resume in round 2."""
    short = make_dataset(root, "short", ragged_docs(200, seed=1, min_len=6, max_len=16))
    long = make_dataset(
        root, "long", ragged_docs(120, seed=2, min_len=90, max_len=130), max_seq_len=128
    )
    cfg = write_ds_config(
        root / "ds.json",
        _curriculum(short, long),
        train_micro_batch_size_per_gpu=2,
        gradient_accumulation_steps=2,
        optimizer={"type": "AdamW", "params": {"lr": 1e-3}},
    )
    a, b = root / "A", root / "B"
    common = ("--save-interval", "3", "--trace-samples")
    yield [Run(cfg, a, common), Run(cfg, b, (*common, "--kill-after-step", "8"))]
    killed_at = [r["step"] for r in metrics(b)]
    yield [Run(cfg, b, (*common, "--resume", "auto"))]
    lengths = {
        name: np.asarray(read_stream_info(str(p)).metrics["num_tokens"])
        for name, p in (("short", short), ("long", long))
    }
    return {"A": a, "B": b, "killed_at": killed_at, "lengths": lengths}


@pytest.fixture(scope="module")
def runs(shared_job: Any) -> dict[str, Any]:
    return shared_job(_runs)


def _phase_rows(rows: list[dict[str, Any]], phase: int) -> list[dict[str, Any]]:
    return [r for r in rows if r["phase"] == phase]


def test_ramp_tokens_track_the_integral_of_the_target_after_every_step(runs):
    rows = _phase_rows(metrics(runs["A"]), 0)
    assert len(rows) >= 8
    longest = max(int(np.minimum(t, 128).max()) for t in runs["lengths"].values())
    done = 0
    integral = np.zeros(2)
    counted = np.zeros(2)
    first_share = []
    for row in rows:
        shares = np.array([value_at(r, done / DURATIONS[0]) for r in RAMP])
        shares /= shares.sum()
        step = np.array([row["streams"][n]["tokens"] for n in ("short", "long")])
        integral += shares * row["step_tokens"]
        counted += step
        done += row["step_tokens"]
        assert np.abs(counted - integral).max() <= longest, (row["step"], counted, integral)
        first_share.append(step[0] / step.sum())
    assert np.mean(first_share[:3]) > 0.6  # the mix moved: short first, long at the end
    assert np.mean(first_share[-3:]) < 0.4


def test_a_run_killed_mid_ramp_resumes_to_the_same_trace(runs):
    assert runs["killed_at"] == list(range(1, 9))  # SIGKILL after step 8, in the ramp phase
    a, b = trace(runs["A"]), trace(runs["B"])
    assert [r["phase"] for r in a][7] == 0
    assert b == a


def test_warmup_steps_are_truncated_to_the_ramp_and_end_at_max_duration(runs):
    rows = metrics(runs["A"])
    samples = {r["step"]: r["samples"] for r in trace(runs["A"])}
    start = sum(r["step_tokens"] for r in _phase_rows(rows, 0)) - DURATIONS[0]  # the overshoot
    seen = set()
    for row in _phase_rows(rows, 1):
        expected = max(8, int(value_at(WARMUP, start / DURATIONS[1])) // 8 * 8)
        assert row["seq_len"] == expected
        seen.add(expected)
        trained = sum(
            min(int(runs["lengths"][name][i]), expected) for name, i in samples[row["step"]]
        )
        assert row["step_tokens"] == trained  # no sample longer than the step's seq_len
        start += row["step_tokens"]
    # the ramp starts where phase 0's last step left it: less than one step past its start
    first = _phase_rows(rows, 1)[0]["seq_len"]
    assert min(seen) == first
    overshoot = max(r["step_tokens"] for r in _phase_rows(rows, 0))
    assert first <= value_at(WARMUP, overshoot / DURATIONS[1]) < 64
    assert max(seen) >= 64
    assert "seq_len" not in _phase_rows(rows, 0)[0]  # a constant max_seq_len: no column
    # exact boundaries: each phase ends at the first step reaching its cumulative end
    cumulative = [r["tokens"] for r in rows]
    first_warmup = next(i for i, r in enumerate(rows) if r["phase"] == 1)
    assert cumulative[first_warmup - 1] >= DURATIONS[0] > cumulative[first_warmup - 2]
    assert cumulative[-1] >= sum(DURATIONS) > cumulative[-2]
