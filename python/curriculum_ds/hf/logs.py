"""What a ``CurriculumTrainer`` logs through HF's ``log``: true values, at HF's log steps.

HF's ``Trainer`` computes its logged numbers from what it can see: the values
``training_step`` returns, its own ``max_steps`` and its dataloader's length. For a curriculum
those are a step bound the run never reaches and a feed without length, so
:class:`TrainerLogs` keeps the run's own figures, from each finished step's metrics row, and
puts them into the dicts HF logs (``CurriculumTrainer.log``, the documented extension point):

- ``loss``: the mean of the token-weighted objectives of the steps since the last log (what was
  back-propagated), exact (HF's is rounded to 4 decimals); a non-finite step is left out, as
  HF's ``logging_nan_inf_filter`` leaves it out;
- the ``curriculum/...`` values (:func:`~curriculum_ds.hf.callbacks.curriculum_logs`) follow
  ``logging_steps``: the callback hands them over every step, and they go out with HF's next
  log of the step (the latest step values, and every re-weighting or evaluation since the last
  log);
- ``epoch``: passes over the current phase's datamix (``metrics.jsonl``'s ``phase_epochs``),
  not HF's estimate from the step bound;
- the summary at the end of ``train()``: ``train_samples_per_second`` and
  ``train_steps_per_second`` over the steps' own wall time (``metrics.jsonl``'s
  ``step_tokens / tokens_per_s``; start-up, evaluations and saves left out; ``train_runtime``
  stays HF's wall time of ``train()``), and ``train_loss``, the mean objective of every finite
  step of the run, a resumed run's steps before its checkpoint included (:data:`STATS_FILE` in
  each ``checkpoint-N/`` carries their sum).
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from curriculum_ds.files.atomic import write_text_atomically

if TYPE_CHECKING:
    from curriculum_ds.records.schema import MetricsRow

__all__ = ["STATS_FILE", "TrainerLogs"]

STATS_FILE = "curriculum_train_stats.json"
"""In a ``checkpoint-N/`` folder: the sum and count of the finite step losses up to N."""


class TrainerLogs:
    """The run's own numbers for HF's logs (see the module docstring)."""

    def __init__(self) -> None:
        self._unlogged: list[float] = []
        """Step objectives since the last training log (NaN: not finite)."""
        self._pending: dict[str, float] = {}
        """``curriculum/...`` values waiting for HF's next log."""
        self._losses: list[float] = []
        """Finite step objectives of this process's ``train()`` (since its start or resume)."""
        self._loss_sum_before = 0.0
        self._steps_before = 0
        """A resumed run: the finite steps' loss sum and count up to its checkpoint."""
        self._samples = 0
        self._steps = 0
        self._seconds = 0.0
        self.epoch: float | None = None
        """Passes over the current phase's datamix after the last step (None: no step yet)."""

    # ------------------------------------------------------------------------- inputs
    def step_finished(self, row: MetricsRow, *, num_samples: int) -> float:
        """Count a finished step; its objective (NaN when not finite).

        Args:
            row: the step's metrics row (its ``phase_epochs`` becomes :attr:`epoch`).
            num_samples: the step's samples (the global batch size).
        """
        value = row["loss"]
        objective = float("nan") if value is None else float(value)
        self._unlogged.append(objective)
        if math.isfinite(objective):
            self._losses.append(objective)
        self._steps += 1
        self._samples += num_samples
        if row["tokens_per_s"] > 0:
            self._seconds += row["step_tokens"] / row["tokens_per_s"]
        self.epoch = float(row["phase_epochs"])
        return objective

    def defer(self, values: dict[str, float]) -> None:
        """``curriculum/...`` values of a step, for HF's next log (newer values win)."""
        self._pending.update(values)

    # ------------------------------------------------------------------------ outputs
    def complete(self, logs: dict[str, float]) -> None:
        """Put the run's own values into a dict HF is about to log (in place).

        A training log (with ``loss``) gets the exact mean objective and the deferred
        ``curriculum/...`` values; the summary (with ``train_runtime``) gets the speeds over the
        steps' wall time and the run's ``train_loss``.
        """
        if "loss" in logs and "train_runtime" not in logs:
            finite = [x for x in self._unlogged if math.isfinite(x)]
            if finite:
                logs["loss"] = math.fsum(finite) / len(finite)
            self._unlogged = []
            logs.update(self._pending)
            self._pending = {}
        if "train_runtime" in logs:
            if self._seconds > 0:
                logs["train_samples_per_second"] = round(self._samples / self._seconds, 3)
                logs["train_steps_per_second"] = round(self._steps / self._seconds, 3)
            count = self._steps_before + len(self._losses)
            if count:
                total = math.fsum([self._loss_sum_before, *self._losses])
                logs["train_loss"] = total / count

    # --------------------------------------------------------------------- checkpoints
    def save(self, folder: str | os.PathLike[str]) -> Path:
        """Write :data:`STATS_FILE` into ``folder`` (atomically): the run's loss sum so far."""
        path = Path(folder) / STATS_FILE
        stats = {
            "loss_sum": math.fsum([self._loss_sum_before, *self._losses]),
            "loss_steps": self._steps_before + len(self._losses),
        }
        write_text_atomically(path, json.dumps(stats))
        return path

    def restore(self, folder: str | os.PathLike[str]) -> None:
        """Continue from ``folder``'s :data:`STATS_FILE`.

        Absent (a checkpoint saved before it existed) or malformed: ``train_loss`` covers the
        steps since the resume only.
        """
        try:
            stats: Any = json.loads((Path(folder) / STATS_FILE).read_text())
            loss_sum, steps = float(stats["loss_sum"]), int(stats["loss_steps"])
        except (OSError, ValueError, TypeError, KeyError):
            return
        if math.isfinite(loss_sum) and steps >= 0:
            self._loss_sum_before, self._steps_before = loss_sum, steps
