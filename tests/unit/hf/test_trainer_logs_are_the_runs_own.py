"""``TrainerLogs``: the numbers a ``CurriculumTrainer`` puts into HF's logs (issue 32, item 4).

The exact mean objective per log, the ``curriculum/...`` values at HF's log steps only, the
summary's speeds over the steps' own wall time, and ``train_loss`` over the whole run, a
resumed run's earlier steps included through the checkpoint's stats file.
"""

from __future__ import annotations

import math
from typing import Any

from curriculum_ds.hf.logs import STATS_FILE, TrainerLogs


def _row(loss: float | None, step_tokens: int, seconds: float, epochs: float = 0.0) -> Any:
    return {
        "loss": loss,
        "step_tokens": step_tokens,
        "tokens_per_s": step_tokens / seconds,
        "phase_epochs": epochs,
    }


def test_a_training_log_gets_the_exact_mean_and_the_deferred_curriculum_values():
    logs = TrainerLogs()
    for i, loss in enumerate([2.5, float("nan"), 2.25]):
        logs.step_finished(_row(loss, 100, 0.5, 0.1 * (i + 1)), num_samples=8)
        logs.defer({"curriculum/loss": loss, f"curriculum/only_{i}": 1.0})
    hf = {"loss": 1.2346, "learning_rate": 1e-3}
    logs.complete(hf)
    assert hf["loss"] == (2.5 + 2.25) / 2  # the NaN step left out, as HF's filter does
    assert hf["curriculum/loss"] == 2.25  # the latest step's value
    assert {"curriculum/only_0", "curriculum/only_1", "curriculum/only_2"} <= set(hf)
    assert math.isclose(logs.epoch or 0.0, 0.3)
    after = {"loss": 9.0}
    logs.complete(after)  # nothing new since: HF's value stays, nothing deferred is repeated
    assert after == {"loss": 9.0}


def test_an_eval_log_is_left_as_it_is():
    logs = TrainerLogs()
    logs.step_finished(_row(3.0, 10, 1.0), num_samples=2)
    logs.defer({"curriculum/loss": 3.0})
    hf = {"eval_loss": 2.0}
    logs.complete(hf)
    assert hf == {"eval_loss": 2.0}


def test_the_summary_has_the_steps_speeds_and_the_runs_mean_loss():
    logs = TrainerLogs()
    logs.step_finished(_row(4.0, 300, 2.0), num_samples=16)
    logs.step_finished(_row(2.0, 100, 0.5), num_samples=16)
    summary = {"train_runtime": 60.0, "train_samples_per_second": 0.01, "train_loss": 0.5}
    logs.complete(summary)
    assert summary["train_samples_per_second"] == round(32 / 2.5, 3)
    assert summary["train_steps_per_second"] == round(2 / 2.5, 3)
    assert summary["train_loss"] == 3.0
    assert summary["train_runtime"] == 60.0  # HF's wall time of train() stays


def test_train_loss_after_a_resume_counts_the_steps_before_the_checkpoint(tmp_path):
    losses = [3.1, 2.9, 2.7, 2.6, 2.4]
    whole = TrainerLogs()
    for x in losses:
        whole.step_finished(_row(x, 10, 1.0), num_samples=1)
    first = TrainerLogs()
    for x in losses[:2]:
        first.step_finished(_row(x, 10, 1.0), num_samples=1)
    first.save(tmp_path)
    assert (tmp_path / STATS_FILE).is_file()
    resumed = TrainerLogs()
    resumed.restore(tmp_path)
    for x in losses[2:]:
        resumed.step_finished(_row(x, 10, 1.0), num_samples=1)
    a, b = {"train_runtime": 1.0}, {"train_runtime": 1.0}
    whole.complete(a)
    resumed.complete(b)
    assert math.isclose(b["train_loss"], a["train_loss"], rel_tol=1e-12)


def test_a_checkpoint_without_stats_counts_the_steps_since_the_resume(tmp_path):
    (tmp_path / STATS_FILE).write_text("{not json")
    resumed = TrainerLogs()
    resumed.restore(tmp_path)  # malformed: ignored
    resumed.restore(tmp_path / "missing")  # absent: ignored
    resumed.step_finished(_row(1.5, 10, 1.0), num_samples=1)
    summary = {"train_runtime": 1.0}
    resumed.complete(summary)
    assert summary["train_loss"] == 1.5
