"""A user's own loop resumes exactly through the public API.

``user_loop_script.py`` (its own ``TinyLM``, no HF) trains on 2 CPU gloo ranks under the
deepspeed launcher, ZeRO-2, AdamW, a 2-phase token schedule (1000 + 2000 tokens) with dynamic
re-weighting on (2 buckets by ``num_tokens``, recomputed every 2 steps). Run A is uninterrupted.
Run B checkpoints every 3 steps with ``curriculum.save_checkpoint`` and SIGKILLs itself after step
5; its checkpoint, step 3, lies between two recomputes of the first phase (the recompute at step 4
needs the restored rolling window) and before the phase boundary (the resumed run swaps the
loader). Launched again, the same script's ``curriculum.load_checkpoint`` continues it from step 4
to the end. Every step B logged, before
and after the kill, must have A's global batch (``step.trace_record()``) exactly, A's bucket
weights when it recomputed them, and A's loss to 1e-5 relative.

From issue 10.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from helpers import make_dataset, ragged_docs, two_phase_curriculum, write_ds_config
from userloop_launch import launch_script

from curriculum_ds.records.jsonl import read_jsonl

pytestmark = pytest.mark.distributed

SCRIPT = Path(__file__).resolve().parent / "user_loop_script.py"
SAVE_INTERVAL = 3
KILL_AFTER = 5
RECOMPUTE_EVERY = 2
LOSS_RTOL = 1e-5


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("user_resume")
    short = make_dataset(root, "short", ragged_docs(200, seed=1, min_len=10, max_len=40))
    long = make_dataset(root, "long", ragged_docs(200, seed=2, min_len=30, max_len=63))
    curriculum = two_phase_curriculum(short, long, static_metric="num_tokens")
    curriculum["seed"] = 11
    curriculum["dynamic"] |= {"recompute_every_n_steps": RECOMPUTE_EVERY, "temperature": 0.05}
    cfg = write_ds_config(root / "ds.json", curriculum, zero_optimization={"stage": 2})

    launch_script(SCRIPT, cfg, "--run-dir", "a", "--log", "a.jsonl")
    b = ("--run-dir", "b", "--save-interval", str(SAVE_INTERVAL))
    killed = launch_script(
        SCRIPT,
        cfg,
        *b,
        "--log",
        "b_killed.jsonl",
        "--kill-after-step",
        str(KILL_AFTER),
        check=False,
    )
    latest_at_kill = (root / "b/checkpoints/latest").read_text()
    launch_script(SCRIPT, cfg, *b, "--log", "b_resumed.jsonl")
    return {
        "a": read_jsonl(root / "a.jsonl"),
        "killed": read_jsonl(root / "b_killed.jsonl"),
        "resumed": read_jsonl(root / "b_resumed.jsonl"),
        "killed_proc": killed,
        "latest_at_kill": latest_at_kill,
    }


def test_run_a_covers_both_phases_with_dynamic_reweighting(runs):
    a = runs["a"]
    records = [row["record"] for row in a]
    assert [r["step"] for r in records] == list(range(1, len(a) + 1))
    assert len(a) > KILL_AFTER + 3
    phases = [r["phase_name"] for r in records]
    first_mix = phases.index("mix")
    assert set(phases[:first_mix]) == {"short"}
    assert set(phases[first_mix:]) == {"mix"}
    assert records[first_mix - 1]["tokens"] >= 1000 > records[first_mix - 2]["tokens"]
    assert records[-1]["tokens"] >= 3000 > records[-2]["tokens"]
    assert all(math.isfinite(r["loss"]) and r["step_applied"] for r in records)
    recomputed = [row["record"]["step"] for row in a if row["reweighting"] is not None]
    assert recomputed == [s for s in range(1, len(a) + 1) if s % RECOMPUTE_EVERY == 0]
    weights = [row["reweighting"]["weights"] for row in a if row["reweighting"] is not None]
    assert all(math.isclose(sum(w), 1.0) for w in weights)
    assert any(abs(w[0] - w[1]) > 0.1 for w in weights)  # the re-weighting moves the sampler
    # the second phase draws from both of its streams
    mix_streams = {name for row in a[first_mix:] for name, _ in row["trace"]["samples"]}
    assert mix_streams == {"short", "long"}


def test_killed_run_stopped_after_its_step_with_the_earlier_checkpoint(runs):
    assert runs["killed_proc"].returncode != 0
    assert [row["record"]["step"] for row in runs["killed"]] == list(range(1, KILL_AFTER + 1))
    assert runs["latest_at_kill"] == f"global_step{SAVE_INTERVAL}"
    # what the continuation has to get right: a recompute of the checkpoint's phase (from the
    # restored window), then the phase swap
    a = [row["record"] for row in runs["a"]]
    next_recompute = SAVE_INTERVAL + RECOMPUTE_EVERY - SAVE_INTERVAL % RECOMPUTE_EVERY
    assert a[next_recompute - 1]["phase_name"] == a[SAVE_INTERVAL - 1]["phase_name"] == "short"
    assert a[-1]["phase_name"] == "mix"
    resumed_steps = [row["record"]["step"] for row in runs["resumed"]]
    assert resumed_steps == list(range(SAVE_INTERVAL + 1, len(runs["a"]) + 1))


@pytest.mark.parametrize("part", ["killed", "resumed"])
def test_every_step_of_the_interrupted_run_matches_the_uninterrupted_one(runs, part):
    a = {row["record"]["step"]: row for row in runs["a"]}
    for row in runs[part]:
        step = row["record"]["step"]
        ref = a[step]
        assert row["trace"] == ref["trace"], f"step {step}: another global batch"
        assert row["reweighting"] == ref["reweighting"], f"step {step}: other bucket weights"
        for key in ("phase", "phase_name", "tokens", "samples", "valid_tokens", "lr"):
            assert row["record"][key] == ref["record"][key], (step, key)
        assert row["record"]["loss"] == pytest.approx(ref["record"]["loss"], rel=LOSS_RTOL), step
