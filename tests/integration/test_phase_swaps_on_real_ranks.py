"""Phase swaps through real DeepSpeed runs on CPU ranks (gloo).

* Rank-split invariance: 1 rank x GAS 4 and 2 ranks x GAS 2 (same micro-batch size) give the
  same sample trace over a multi-phase schedule.
* Exact boundaries: over a 3-phase ``tok`` schedule each phase ends at the first step whose
  cumulative token count reaches the sum of the durations so far; the run ends within one global
  batch of ``max_duration``; the counted tokens are the traced samples' tokens.
* Epochs: an ``ep`` schedule switches phase at the first step whose passes reach the boundary,
  each pass visits every sample once and the next pass is reshuffled; a ``tok`` phase longer
  than one pass of its data goes on into further passes.

From issue 4, items 2-4.
"""

from __future__ import annotations

from collections.abc import Generator
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from helpers import make_dataset, metrics, ragged_docs, trace, write_ds_config
from shared_job import Outputs, Run, shared_runs

from curriculum_ds.data import read_stream_info

pytestmark = pytest.mark.distributed

MICRO = 2
GLOBAL_BATCH = 8  # 2 ranks x micro 2 x GAS 2 == 1 rank x micro 2 x GAS 4
MAX_SEQ_LEN = 64
ENDS = (2000, 3500, 5000)  # cumulative phase ends of the tok schedule


def _num_tokens(local: Path, max_seq_len: int) -> np.ndarray:
    info = read_stream_info(str(local))
    return np.minimum(np.asarray(info.metrics["num_tokens"], dtype=np.int64), max_seq_len)


@shared_runs
def _tok_runs(base: Path) -> Generator[list[Run], Outputs, dict[str, Any]]:
    """The same 3-phase tok schedule on 2 ranks x GAS 2 and on 1 rank x GAS 4; and the run of
    :func:`ep_run`, in the session's shared launched jobs (tests/shared_job.py: the 2-rank runs
    in its 2-rank job, the 1-rank run in its 1-rank job)."""
    ep_config, ep_run_dir = _ep_config(base / "sched_ep")
    root = base / "sched_tok"
    root.mkdir()
    small = make_dataset(root, "small", ragged_docs(30, seed=1, min_len=10, max_len=40))
    big = make_dataset(
        root, "big", ragged_docs(200, seed=2, min_len=20, max_len=90), max_seq_len=MAX_SEQ_LEN
    )
    curriculum = {
        "max_duration": f"{ENDS[-1]}tok",
        "seed": 11,
        "schedule": [
            # ~800 tokens per pass of `small`: this phase runs through more than two passes
            {
                "name": "warm",
                "duration": f"{ENDS[0]}tok",
                "train_loader": {"streams": [{"local": str(small)}], "max_seq_len": MAX_SEQ_LEN},
            },
            {
                "name": "mix",
                "duration": f"{ENDS[1] - ENDS[0]}tok",
                "train_loader": {
                    "streams": [
                        {"local": str(small), "proportion": 0.5},
                        {"local": str(big), "proportion": 0.5},
                    ],
                    "max_seq_len": MAX_SEQ_LEN,
                },
            },
            {
                "name": "hard",
                "duration": f"{ENDS[2] - ENDS[1]}tok",
                "train_loader": {"streams": [{"local": str(big)}], "max_seq_len": 48},
            },
        ],
    }
    cfg2 = write_ds_config(
        root / "ds2.json",
        curriculum,
        train_micro_batch_size_per_gpu=MICRO,
        gradient_accumulation_steps=2,
    )
    cfg1 = write_ds_config(
        root / "ds1.json",
        curriculum,
        train_micro_batch_size_per_gpu=MICRO,
        gradient_accumulation_steps=4,
    )
    two = root / "two_ranks"
    one = root / "one_rank"
    yield [
        Run(cfg2, two, ("--trace-samples",)),
        Run(ep_config, ep_run_dir, ("--trace-samples",)),
        Run(cfg1, one, ("--trace-samples",), num_gpus=1),
    ]
    return {
        "two": two,
        "one": one,
        "small": small,
        "big": big,
        "curriculum": curriculum,
        "ep_run": ep_run_dir,
    }


@pytest.fixture(scope="module")
def tok_runs(shared_job: Any) -> dict[str, Any]:
    return shared_job(_tok_runs)


def test_trace_independent_of_rank_split(tok_runs):
    two, one = trace(tok_runs["two"]), trace(tok_runs["one"])
    assert len(two) > 10
    assert two == one  # step, phase and every (stream, index) pair, in order
    assert {r["phase"] for r in two} == {0, 1, 2}
    assert all(len(r["samples"]) == GLOBAL_BATCH for r in two)
    # the token counts (hence the boundaries) agree too
    m2, m1 = metrics(tok_runs["two"]), metrics(tok_runs["one"])
    assert [(r["step"], r["phase"], r["tokens"], r["samples"]) for r in m2] == [
        (r["step"], r["phase"], r["tokens"], r["samples"]) for r in m1
    ]


def test_tok_boundaries_are_cumulative_and_exact(tok_runs):
    rows = metrics(tok_runs["two"])
    assert [r["step"] for r in rows] == list(range(1, len(rows) + 1))
    # each step runs in the phase in progress before it: the first k with tokens_before < ENDS[k]
    before = 0
    for r in rows:
        expected_phase = next(k for k, end in enumerate(ENDS) if before < end)
        assert r["phase"] == expected_phase, (r, before)
        before = r["tokens"]
    # phase k's last step is the first whose cumulative count reaches ENDS[k] (overshoot carried)
    for k, end in enumerate(ENDS):
        last = max(i for i, r in enumerate(rows) if r["phase"] == k)
        assert rows[last]["tokens"] >= end
        assert last == 0 or rows[last - 1]["tokens"] < end
    # the run ends within one global batch of max_duration
    assert ENDS[-1] <= rows[-1]["tokens"] < ENDS[-1] + GLOBAL_BATCH * MAX_SEQ_LEN
    assert rows[-1]["samples"] == len(rows) * GLOBAL_BATCH


def test_tok_counts_are_the_traced_samples_tokens(tok_runs):
    rows = {r["step"]: r for r in metrics(tok_runs["two"])}
    seq_lens = [MAX_SEQ_LEN, MAX_SEQ_LEN, 48]
    tokens = {
        name: {L: _num_tokens(tok_runs[name], L) for L in set(seq_lens)}
        for name in ("small", "big")
    }
    for rec in trace(tok_runs["two"]):
        L = seq_lens[rec["phase"]]
        expected = sum(int(tokens[stream][L][idx]) for stream, idx in rec["samples"])
        assert rows[rec["step"]]["step_tokens"] == expected


def test_tok_phase_longer_than_one_pass_keeps_going(tok_runs):
    warm = [tuple(s) for r in trace(tok_runs["two"]) if r["phase"] == 0 for s in r["samples"]]
    num_samples = 30
    assert {s for s, _ in warm} == {"small"}
    assert len(warm) > 2 * num_samples  # more than two passes of the stream's data
    passes = [[i for _, i in warm[p : p + num_samples]] for p in range(0, len(warm), num_samples)]
    for full in passes[:-1]:
        assert sorted(full) == list(range(num_samples))  # every sample exactly once per pass
    assert passes[0] != passes[1]  # the next pass is reshuffled
    assert len(set(passes[-1])) == len(passes[-1])


# ------------------------------------------------------------------------------------- epochs

A_SAMPLES = 20
B_SAMPLES = 20


def _ep_config(root: Path) -> tuple[Path, Path]:
    """ep schedule [first "1ep" over a, second "1.5ep" over b], 2 ranks, global batch 8: the
    config and the run dir."""
    root.mkdir()
    a = make_dataset(root, "a", ragged_docs(A_SAMPLES, seed=3, min_len=10, max_len=30))
    b = make_dataset(root, "b", ragged_docs(B_SAMPLES, seed=4, min_len=10, max_len=30))
    assert read_stream_info(str(a)).num_samples == A_SAMPLES
    assert read_stream_info(str(b)).num_samples == B_SAMPLES
    curriculum = {
        "max_duration": "2.5ep",
        "seed": 5,
        "schedule": [
            {
                "name": "first",
                "duration": "1ep",
                "train_loader": {"streams": [{"local": str(a)}], "max_seq_len": 32},
            },
            {
                "name": "second",
                "duration": "1.5ep",
                "train_loader": {"streams": [{"local": str(b)}], "max_seq_len": 32},
            },
        ],
    }
    cfg = write_ds_config(
        root / "ds.json",
        curriculum,
        train_micro_batch_size_per_gpu=MICRO,
        gradient_accumulation_steps=2,
    )
    return cfg, root / "run"


@pytest.fixture(scope="module")
def ep_run(tok_runs):
    """The run of :func:`_ep_config` (run by :func:`tok_runs`)."""
    return tok_runs["ep_run"]


def test_ep_phase_switch_at_first_step_reaching_the_boundary(ep_run):
    rows = metrics(ep_run)
    # progress (cumulative passes, exact): phase 0 takes 8/20 passes per step -> 3 steps (1.2 >= 1);
    # its 0.2 overshoot is carried, so phase 1 ends at the first step reaching 2.5 -> 4 more steps
    progress = [Fraction(r["progress"]) for r in rows]
    assert [r["phase_name"] for r in rows] == ["first"] * 3 + ["second"] * 4
    assert progress == [Fraction(8 * k, 20) for k in (1, 2, 3)] + [
        Fraction(6, 5) + Fraction(8 * k, 20) for k in (1, 2, 3, 4)
    ]
    assert progress[2] >= 1 > progress[1]
    assert progress[-1] >= Fraction(5, 2) > progress[-2]
    assert [r["phase_epochs"] for r in rows] == pytest.approx([0.4, 0.8, 1.2, 0.4, 0.8, 1.2, 1.6])


def test_ep_each_pass_visits_every_sample_once_and_is_reshuffled(ep_run):
    recs = trace(ep_run)
    first = [tuple(s) for r in recs if r["phase"] == 0 for s in r["samples"]]
    second = [tuple(s) for r in recs if r["phase"] == 1 for s in r["samples"]]
    assert {s for s, _ in first} == {"a"}
    assert {s for s, _ in second} == {"b"}
    assert len(first) == 24
    assert len(second) == 32
    assert sorted(i for _, i in first[:A_SAMPLES]) == list(range(A_SAMPLES))
    assert sorted(i for _, i in second[:B_SAMPLES]) == list(range(B_SAMPLES))
    rest_a = [i for _, i in first[A_SAMPLES:]]
    rest_b = [i for _, i in second[B_SAMPLES:]]
    assert len(set(rest_a)) == len(rest_a)
    assert len(set(rest_b)) == len(rest_b)
    # the second pass is a different permutation: its first 12 samples are not pass 1's first 12
    assert rest_b != [i for _, i in second[: len(rest_b)]]
