"""``dynamic.method: "file"`` through the one ``Curriculum`` of every front door (issue 33, item 6).

The journal lives in ``Curriculum.run_dir``: ``RunDir`` (the reference loop; the launched test
``test_steering_the_mix_on_two_ranks``) and ``CurriculumTrainer`` (its ``output_dir``) set it,
a loop of one's own sets it itself. In process (conftest's engine): a plugin loop steered by a
file, a loop without a run dir refused in one line at its first draw, and the Trainer's
callback handing the curriculum its ``output_dir``.
"""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from helpers import make_dataset, ragged_docs, write_ds_config
from tiny_models import ByteLM

import curriculum_ds
from curriculum_ds.errors import ConfigError
from curriculum_ds.hf.callbacks import CurriculumCallback
from curriculum_ds.plugin.engine import load_run_config
from curriculum_ds.records.journal import JOURNAL_NAME
from curriculum_ds.records.jsonl import read_jsonl


def _curriculum(tmp_path: Path, fake_engine: Any) -> Any:
    streams = [
        make_dataset(tmp_path, name, ragged_docs(60, seed=i, min_len=8, max_len=30))
        for i, name in enumerate(("a", "b"))
    ]
    section = {
        "max_duration": "100000tok",
        "seed": 3,
        "schedule": [
            {
                "name": "only",
                "duration": "100000tok",
                "train_loader": {
                    "streams": [{"local": str(p), "proportion": 0.5} for p in streams],
                    "max_seq_len": 32,
                },
            }
        ],
        "dynamic": {
            "enabled": True,
            "unit": "streams",
            "method": "file",
            "recompute_every_n_steps": 2,
            "file": {"path": str(tmp_path / "mix.json")},
        },
    }
    cfg = write_ds_config(tmp_path / "ds.json", section)
    engine = type(fake_engine)(ByteLM(), gas=2)
    return curriculum_ds.attach(engine, load_run_config(cfg, check_data=False), check_data=False)


def test_a_loop_of_ones_own_is_steered_with_its_run_dir(tmp_path, fake_engine):
    curriculum = _curriculum(tmp_path, fake_engine)
    curriculum.run_dir = tmp_path / "run"
    (tmp_path / "mix.json").write_text(json.dumps({"a": 1, "b": 3}))
    rows = []
    for step in curriculum:
        for mb in step.micro_batches:
            step.backward(curriculum.engine(mb.input_ids), mb)
        record = step.finish()
        if record.history is not None:
            rows.append(record.history)
        if curriculum.global_step == 4:
            break
    weights = curriculum.loader.stream_weights.tolist()
    curriculum.close()
    assert [r["step"] for r in rows] == [2, 4]
    assert [r["weights"] for r in rows] == [[0.25, 0.75], [0.25, 0.75]]
    assert weights == [0.25, 0.75]  # the loader draws with the file's weights
    journal = read_jsonl(tmp_path / "run" / JOURNAL_NAME)
    assert [(r["step"], r["weights"]) for r in journal] == [(2, [0.25, 0.75]), (4, [0.25, 0.75])]


def test_a_loop_without_a_run_dir_is_refused_in_one_line_at_its_first_draw(tmp_path, fake_engine):
    curriculum = _curriculum(tmp_path, fake_engine)
    with pytest.raises(ConfigError, match=r"set curriculum\.run_dir \(RunDir and") as err:
        next(curriculum)
    assert len(str(err.value).splitlines()) == 1
    curriculum.close()


def test_the_trainers_callback_gives_the_curriculum_its_output_dir(tmp_path):
    curriculum = SimpleNamespace(run_dir=None, global_step=0, dynamic=None, evaluator=None)
    trainer = SimpleNamespace(feed=SimpleNamespace(start=lambda: curriculum))
    callback = CurriculumCallback(trainer)  # type: ignore[arg-type]
    state = SimpleNamespace(is_world_process_zero=False)
    args = SimpleNamespace(output_dir=str(tmp_path / "hf"))
    callback.on_train_begin(args, state, None)  # type: ignore[arg-type]
    assert curriculum.run_dir == tmp_path / "hf"
