"""A checkpoint written before issue 30 resumes bit-identically with today's code, both units.

``tests/data/checkpoint_v1`` (made by its ``make_fixture.py`` with the code before the core's
state types moved) holds, per unit, the step-3 tag of a 6-step 1-rank run with dynamic
re-weighting on, and that uninterrupted run's records. Resumed from the tag in one process
(both units in one job), the run's steps 4-6 draw the same samples, give the same losses and
the same re-weighting history, to the last bit.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from helpers import history, launch_many, metrics, trace

pytestmark = pytest.mark.distributed

FIXTURE = Path(__file__).resolve().parents[1] / "data" / "checkpoint_v1"
SAVED_AT, STEPS = 3, 6
SAME = ("step", "tokens", "samples", "progress", "loss", "token_loss", "valid_tokens",
        "step_tokens", "lr", "phase_epochs", "streams")  # fmt: skip
"""Every metrics field but the timings (``tokens_per_s``, ``data_wait_s``, ``prefetched``)."""


def _cut(path: Path, out: Path) -> None:
    """``path``'s rows up to the saved step, as the run dir held them when the tag was taken."""
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    out.write_text("".join(json.dumps(r) + "\n" for r in rows if r["step"] <= SAVED_AT))


@pytest.fixture(scope="module")
def resumed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("v1")
    shutil.copytree(FIXTURE / "data", root / "data")
    runs = []
    for unit in ("buckets", "streams"):
        shutil.copy(FIXTURE / f"ds_{unit}.json", root / f"ds_{unit}.json")
        run = root / unit
        shutil.copytree(FIXTURE / unit / "checkpoints", run / "checkpoints")
        for name in ("metrics.jsonl", "sample_trace.jsonl", "curriculum_history.jsonl"):
            _cut(FIXTURE / unit / name, run / name)
        extra = ("--model-factory", "nanogpt_model:build", "--resume", "auto",
                 "--max-steps", str(STEPS), "--trace-samples", "--save-interval", "0")  # fmt: skip
        runs.append((root / f"ds_{unit}.json", run, extra))
    launch_many(runs, num_gpus=1, launcher=False)
    return root


@pytest.mark.parametrize("unit", ["buckets", "streams"])
def test_the_v1_tag_resumes_to_the_uninterrupted_run(resumed: Path, unit: str) -> None:
    stored, run = FIXTURE / unit, resumed / unit
    assert trace(run) == trace(stored)
    assert [r["step"] for r in trace(run)] == list(range(1, STEPS + 1))
    assert [{k: r[k] for k in SAME} for r in metrics(run)] == [
        {k: r[k] for k in SAME} for r in metrics(stored)
    ]
    assert history(run) == history(stored)
    assert [r["step"] for r in history(run)] == [2, 4, 6]
