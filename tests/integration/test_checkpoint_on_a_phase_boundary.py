"""Case C02 (../shared/cases/README.md): a checkpoint exactly on a phase boundary.

Schedule [A "1000tok", B "1000tok"], samples of exactly 25 tokens, 2 ranks x micro 1 x GAS 2 =
4 samples = 100 tokens per optimizer step, so A is steps 1-10 and B steps 11-20. The run saves
every step and is killed (SIGKILL) right after step 11, before its save: ``latest`` is step 10,
on the boundary. Resumed, it continues with B's first batch, replays nothing of A and ends after
step 20 at 2000 tokens. Variant: resumed from step 9, it runs one more A step, then B.

Dynamic re-weighting is on (weights recomputed at steps 3, 6, 9, ...), so the phase-boundary
checkpoint must also carry the bucket probabilities into B as the uninterrupted run does.
"""

from __future__ import annotations

import shutil
from collections.abc import Generator
from pathlib import Path
from typing import Any

import pytest
from helpers import fixed_docs, make_dataset, metrics, trace, write_ds_config
from shared_job import Outputs, Run, shared_runs

from curriculum_ds.checkpoint.files import read_curriculum_state
from curriculum_ds.config import load_config
from curriculum_ds.core.loader import PhaseLoader
from curriculum_ds.dynamic import BucketReweighter
from curriculum_ds.dynamic.state import parse_dynamic_state

pytestmark = pytest.mark.distributed

TOKENS_PER_SAMPLE = 25
GLOBAL_BATCH = 4  # 2 ranks x micro 1 x GAS 2


@shared_runs
def _c02_runs(root: Path) -> Generator[list[Run], Outputs, dict[str, Any]]:
    """The kill in round 1 of the session's shared launched job (tests/shared_job.py), both
    resumes in round 2."""
    a = make_dataset(root, "a", fixed_docs(40, TOKENS_PER_SAMPLE))
    b = make_dataset(root, "b", [d.upper() for d in fixed_docs(40, TOKENS_PER_SAMPLE)])
    curriculum = {
        "max_duration": "2000tok",
        "seed": 99,
        "schedule": [
            {
                "name": "A",
                "duration": "1000tok",
                "train_loader": {"streams": [{"local": str(a)}], "max_seq_len": 32},
            },
            {
                "name": "B",
                "duration": "1000tok",
                "train_loader": {"streams": [{"local": str(b)}], "max_seq_len": 32},
            },
        ],
        "dynamic": {
            "enabled": True,
            "num_buckets": 2,
            "window": 32,
            "recompute_every_n_steps": 3,
            "temperature": 0.2,
            "floor": 0.1,
        },
    }
    cfg = write_ds_config(
        root / "ds.json",
        curriculum,
        train_micro_batch_size_per_gpu=1,
        gradient_accumulation_steps=2,
    )
    run_dir = root / "run"
    outputs = yield [
        Run(cfg, run_dir, ("--save-interval", "1", "--trace-samples", "--kill-after-step", "11"))
    ]
    killed = outputs[run_dir]
    assert (run_dir / "checkpoints" / "latest").is_file(), killed.output[-4000:]
    uninterrupted = {r["step"]: r for r in trace(run_dir)}  # steps 1..11, written before the kill
    killed_metrics = metrics(run_dir)
    latest_after_kill = (run_dir / "checkpoints" / "latest").read_text()
    # the variant resumes from step 9: a copy of that checkpoint, taken before the run goes on
    variant_dir = root / "variant"
    (variant_dir / "checkpoints").mkdir(parents=True)
    shutil.copytree(
        run_dir / "checkpoints" / "global_step9", variant_dir / "checkpoints" / "global_step9"
    )
    (variant_dir / "checkpoints" / "latest").write_text("global_step9")
    boundary_ckpt = root / "boundary_ckpt"
    shutil.copytree(run_dir / "checkpoints" / "global_step10", boundary_ckpt / "global_step10")
    (boundary_ckpt / "latest").write_text("global_step10")

    # both resumes in round 2
    outputs = yield [
        Run(cfg, run_dir, ("--save-interval", "5", "--trace-samples", "--resume", "auto")),
        Run(cfg, variant_dir, ("--trace-samples", "--resume", "auto")),
    ]
    resumed = outputs[run_dir]
    return {
        "cfg": cfg,
        "run": run_dir,
        "variant": variant_dir,
        "killed": killed,
        "resumed": resumed,
        "uninterrupted": uninterrupted,
        "killed_metrics": killed_metrics,
        "latest_after_kill": latest_after_kill,
        "boundary_ckpt": boundary_ckpt,
    }


@pytest.fixture(scope="module")
def c02(shared_job):
    return shared_job(_c02_runs)


def test_phase_a_is_steps_1_to_10(c02):
    assert c02["killed"].returncode != 0
    rows = c02["killed_metrics"]
    assert [r["step"] for r in rows] == list(range(1, 12))
    assert all(r["step_tokens"] == 100 for r in rows)
    assert [r["phase_name"] for r in rows] == ["A"] * 10 + ["B"]
    assert c02["latest_after_kill"] == "global_step10"
    _, saved = read_curriculum_state(c02["boundary_ckpt"])
    assert saved["progress"] == "1000"
    assert saved["phase_idx"] == 1
    assert saved["global_step"] == 10


def test_boundary_checkpoint_resumes_into_b(c02):
    assert "Traceback" not in c02["resumed"].output
    assert "curriculum_ds: error" not in c02["resumed"].output
    rows = metrics(c02["run"])
    assert [r["step"] for r in rows] == list(range(1, 21))
    assert [r["phase_name"] for r in rows] == ["A"] * 10 + ["B"] * 10
    assert [r["tokens"] for r in rows] == [100 * s for s in range(1, 21)]  # ends at 2000 tokens
    recs = {r["step"]: r for r in trace(c02["run"])}
    # step 11 is the uninterrupted run's step 11 ...
    assert recs[11] == c02["uninterrupted"][11]
    # ... which is B's loader at B's first sample: a fresh B loader with the weights of step 10
    run = load_config(c02["cfg"])
    cfg = run.curriculum
    _, saved = read_curriculum_state(c02["boundary_ckpt"])
    loader = PhaseLoader(cfg.schedule[1], 1, seed=cfg.seed, num_buckets=cfg.dynamic.num_buckets)
    dynamic = BucketReweighter(cfg.dynamic)
    loader.apply(dynamic.start_phase(loader.view(), parse_dynamic_state(saved["dynamic"])))
    first_b = loader.next_global_batch(GLOBAL_BATCH, dynamic.probs)
    assert recs[11]["samples"] == [["b", int(i)] for _, i in first_b]
    # nothing of A is replayed: steps 11-20 draw only from B
    assert all(s == "b" for step in range(11, 21) for s, _ in recs[step]["samples"])
    assert all(s == "a" for step in range(1, 11) for s, _ in recs[step]["samples"])
    b_indices = [i for step in range(11, 21) for _, i in recs[step]["samples"]]
    assert all(0 <= i < 40 for i in b_indices)
    assert (c02["run"] / "checkpoints" / "latest").read_text() == "global_step20"


def test_variant_checkpoint_before_the_boundary(c02):
    rows = metrics(c02["variant"])
    assert [r["step"] for r in rows] == list(range(10, 21))  # one more A step, then B
    assert [r["phase_name"] for r in rows] == ["A"] + ["B"] * 10
    assert rows[-1]["tokens"] == 2000
    recs = {r["step"]: r for r in trace(c02["variant"])}
    assert recs[10] == c02["uninterrupted"][10]
    assert recs[11] == c02["uninterrupted"][11]
    full = {r["step"]: r for r in trace(c02["run"])}
    assert [recs[s] for s in range(10, 21)] == [full[s] for s in range(10, 21)]
