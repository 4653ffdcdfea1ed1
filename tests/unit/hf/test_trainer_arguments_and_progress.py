"""``CurriculumTrainer`` works on a copy of the caller's ``TrainingArguments`` (its
``ignore_data_skip`` and ``max_steps`` bound are the copy's), and its progress bar counts the
schedule's unit up to ``max_duration``, not HF's steps up to that bound. One process, no
DeepSpeed: the copy is made from arguments without a ds_config (the run config from a second
object holding it), the bar from a stand-in of the trainer's feed.

From issue 21.
"""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path
from types import SimpleNamespace

import pytest
from helpers import fixed_docs, make_dataset, write_ds_config
from transformers import TrainingArguments

from curriculum_ds.hf.arguments import curriculum_run, trainer_arguments
from curriculum_ds.hf.callbacks import CurriculumProgress


def _arguments(tmp_path: Path, **kw) -> TrainingArguments:
    kw = {"per_device_train_batch_size": 2, "gradient_accumulation_steps": 2} | kw
    return TrainingArguments(output_dir=str(tmp_path / "out"), use_cpu=True, report_to=[], **kw)


@pytest.fixture
def run(tmp_path):
    data = make_dataset(tmp_path, "d", fixed_docs(32, 16))
    section = {
        "max_duration": "640tok",
        "schedule": [{"name": "all", "duration": "640tok",
                      "train_loader": {"streams": [{"local": str(data)}], "max_seq_len": 16}}],
    }  # fmt: skip
    holder = _arguments(tmp_path)
    holder.deepspeed = str(write_ds_config(tmp_path / "ds.json", section))  # no HF set-up
    return curriculum_run(holder)


def test_the_callers_arguments_are_left_as_they_were(tmp_path, run):
    user = _arguments(tmp_path)
    before = user.to_dict()
    copy, horizon = trainer_arguments(user, run)
    assert user.to_dict() == before
    assert (user.max_steps, user.ignore_data_skip) == (-1, False)
    assert copy is not user
    # 640 tokens of 16-token samples over a global batch of 4: 10 steps (HF's scheduler's
    # horizon); the Trainer's bound, never reached, is 161
    assert (copy.max_steps, copy.ignore_data_skip, horizon) == (161, True, 10)
    assert {
        k: v for k, v in copy.to_dict().items() if k not in ("max_steps", "ignore_data_skip")
    } == {k: v for k, v in before.items() if k not in ("max_steps", "ignore_data_skip")}


def test_a_max_steps_of_the_caller_is_kept_and_is_the_horizon(tmp_path, run):
    user = _arguments(tmp_path, max_steps=3)
    copy, horizon = trainer_arguments(user, run)
    assert (copy.max_steps, horizon, user.ignore_data_skip) == (3, 3, False)


@pytest.mark.parametrize(
    ("unit", "total", "start", "after"),
    [("tok", 640, 128, 300), ("ep", Fraction(2), Fraction(1, 2), Fraction(3, 4))],
)
def test_the_progress_bar_counts_the_schedule_up_to_max_duration(unit, total, start, after):
    schedule = SimpleNamespace(unit=unit, total=total)
    curriculum = SimpleNamespace(schedule=schedule, progress=start)  # a resumed run
    progress = CurriculumProgress(SimpleNamespace(feed=SimpleNamespace(curriculum=curriculum)))
    state = SimpleNamespace(is_world_process_zero=True, global_step=4, max_steps=10**9)
    progress.on_train_begin(None, state, None)
    bar = progress.training_bar
    assert (bar.total, bar.n, bar.unit) == (float(total) if unit == "ep" else total, start, unit)
    curriculum.progress = after
    progress.on_step_end(None, state, None)
    assert bar.n == (float(after) if unit == "ep" else after)
    progress.on_train_end(None, state, None)  # HF's: closes the bar
    assert progress.training_bar is None


def test_other_ranks_have_no_bar():
    curriculum = SimpleNamespace(schedule=SimpleNamespace(unit="tok", total=8), progress=0)
    progress = CurriculumProgress(SimpleNamespace(feed=SimpleNamespace(curriculum=curriculum)))
    state = SimpleNamespace(is_world_process_zero=False, global_step=1)
    progress.on_train_begin(None, state, None)
    progress.on_step_end(None, state, None)
    assert progress.training_bar is None
