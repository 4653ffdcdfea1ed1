"""A migrated DeepSpeed curriculum trains DeepSpeed's length at every step (issue 32, item 7).

DeepSpeed's own curriculum-scheduler test vectors (``tests/unit/runtime/test_data_efficiency.py``:
``fixed_linear`` 2…10 with ``difficulty_step`` 2, ``fixed_root`` at degrees 1 and 2; train batch
2, 10 steps) go through ``curriculum-ds migrate``, and the migrated ds_config runs in a real
:class:`~curriculum_ds.plugin.curriculum.Curriculum` over a prepared MDS stream whose samples are
all longer than 10 tokens, on conftest's in-process engine. Each step's trained length (its
non-padding tokens over the global batch of 2, and its ``seq_len`` while the ramp moves) equals
what the installed DeepSpeed ``CurriculumScheduler`` gives that step, and the run ends after as
many steps. (The ``fixed_discrete`` vector, 1…5, is refused: tests/unit/config.)
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from helpers import make_dataset, ragged_docs
from tiny_models import ByteLM

from curriculum_ds.cli import main as cli_main
from curriculum_ds.config import load_config
from curriculum_ds.plugin.curriculum import Curriculum

STEPS, GLOBAL_BATCH = 10, 2


def _vector(kind: str, schedule_config: dict[str, Any]) -> dict[str, Any]:
    return {
        "train_batch_size": GLOBAL_BATCH,
        "train_micro_batch_size_per_gpu": GLOBAL_BATCH,
        "optimizer": {"type": "AdamW", "params": {"lr": 1e-3, "torch_adam": True}},
        "curriculum_learning": {
            "enabled": True,
            "curriculum_type": "seqlen",
            "min_difficulty": 2,
            "max_difficulty": 10,
            "schedule_type": kind,
            "schedule_config": {
                "total_curriculum_step": 8,
                "difficulty_step": 2,
                **schedule_config,
            },
        },
    }


VECTORS = {
    "fixed_linear": _vector("fixed_linear", {}),
    "fixed_root_1": _vector("fixed_root", {"root_degree": 1}),
    "fixed_root_2": _vector("fixed_root", {"root_degree": 2}),
}


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("migrated")
    return make_dataset(root, "train", ragged_docs(40, seed=5, min_len=12, max_len=30))


@pytest.mark.parametrize("name", list(VECTORS))
def test_the_migrated_run_trains_deepspeeds_length_at_every_step(
    tmp_path: Path, data: Path, fake_engine: Any, name: str
) -> None:
    from deepspeed.runtime.data_pipeline.curriculum_scheduler import CurriculumScheduler

    legacy = VECTORS[name]
    scheduler = CurriculumScheduler(copy.deepcopy(legacy["curriculum_learning"]))
    theirs = [int(scheduler.update_difficulty(k)) for k in range(1, STEPS + 1)]
    src, out = tmp_path / "legacy.json", tmp_path / "ds.json"
    src.write_text(json.dumps(legacy))
    args = ["migrate", str(src), "--out", str(out), "--data", str(data), "--total-steps", "10"]
    result = CliRunner().invoke(cli_main, args)
    assert result.exit_code == 0, result.output
    engine = type(fake_engine)(ByteLM(), gas=1)
    curriculum = Curriculum(engine, load_config(out, check_data=True))
    trained, seq_lens = [], []
    try:
        for step in curriculum:
            for mb in step.micro_batches:
                step.backward(engine(mb.input_ids), mb)
            row = step.finish()
            assert row["step_tokens"] % GLOBAL_BATCH == 0
            trained.append(row["step_tokens"] // GLOBAL_BATCH)  # every sample is longer than 10
            seq_lens.append(row.get("seq_len"))
    finally:
        curriculum.close()  # its prefetch thread too
    assert trained == theirs
    ramp = [n for n in seq_lens if n is not None]  # the ramp's steps carry their seq_len
    assert ramp == theirs[: len(ramp)]
    assert min(theirs) < 8  # starts below today's default multiple
