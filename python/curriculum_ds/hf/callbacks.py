"""What happens between two optimizer steps of a ``CurriculumTrainer``: a ``TrainerCallback``.

The Trainer's callback extension point (``transformers.TrainerCallback``), added by
``CurriculumTrainer`` to its callbacks:

- ``on_train_begin``: the engine is built and a resumed checkpoint loaded, so the curriculum is
  built (:meth:`~curriculum_ds.hf.feed.CurriculumFeed.start`) and, on the world's first process,
  the run's records opened (:class:`~curriculum_ds.records.jsonl.RunLog` in ``output_dir``: a
  resume keeps the rows up to its step);
- ``on_step_end`` (after the step's ``Step.finish``): the ``metrics.jsonl`` /
  ``curriculum_history.jsonl`` / ``sample_trace.jsonl`` rows, the evaluation when one is due (an
  eval interval or a phase end; ``eval.jsonl``), the ``curriculum/...`` values for the Trainer's
  next log (``logging_steps``; so ``report_to`` shows them; :mod:`curriculum_ds.hf.logs`), and
  the stop: at ``max_duration``, and after a SIGTERM (then a checkpoint first), through
  ``TrainerControl``, with a log of that last step;
- ``on_save`` (HF's ``checkpoint-N/`` is written): the run's loss sum
  (:data:`~curriculum_ds.hf.logs.STATS_FILE`, for ``train_loss`` after a resume), then the
  curriculum state into it (:mod:`curriculum_ds.hf.checkpoint`);
- ``on_train_end``: the records closed, the curriculum's streams and SIGTERM handler released
  (after a SIGTERM, one line naming the checkpoint to resume from).

:class:`CurriculumProgress` replaces HF's ``ProgressCallback`` (``remove_callback`` /
``add_callback``; a subclass overriding its documented hooks): the training bar counts the
schedule's unit up to ``max_duration`` (as the reference loop's bar), not up to the step bound
the Trainer's ``max_steps`` holds.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from transformers import ProgressCallback, TrainerCallback

from curriculum_ds.hf.checkpoint import write_state
from curriculum_ds.records.jsonl import RunLog
from curriculum_ds.records.monitors import bucket_events, eval_events, step_events

if TYPE_CHECKING:
    from transformers import TrainerControl, TrainerState, TrainingArguments

    from curriculum_ds.hf.trainer import CurriculumTrainer
    from curriculum_ds.records.schema import EvalRow, HistoryRow, MetricsRow

__all__ = ["CurriculumCallback", "CurriculumProgress", "curriculum_logs"]


def curriculum_logs(
    record: MetricsRow | None = None,
    *,
    reweighting: HistoryRow | None = None,
    eval_row: EvalRow | None = None,
) -> dict[str, float]:
    """The ``curriculum/...`` values of a step for HF's ``log``: the DeepSpeed monitors' tags.

    ``curriculum/loss``, ``/lr``, ``/tokens``, ``/phase``, ``/streams/<name>/{loss,tokens}``
    (:func:`~curriculum_ds.records.monitors.step_events`), ``curriculum/bucket_probs/<i>`` after
    a re-weighting (``curriculum/stream_weights/<name>`` with ``dynamic.unit: "streams"``;
    :func:`~curriculum_ds.records.monitors.bucket_events`), ``curriculum/eval/loss`` and
    ``curriculum/eval/<name>/loss`` after an evaluation. HF's TensorBoard and W&B callbacks
    file them under ``train/``.
    """
    events = step_events(record) if record is not None else []
    if reweighting is not None:
        events += bucket_events(reweighting)
    if eval_row is not None:
        events += eval_events(eval_row)
    return {tag: value for tag, value, _ in events}


class CurriculumCallback(TrainerCallback):
    """The curriculum's part of the Trainer's control flow (see the module docstring).

    Args:
        trainer: the ``CurriculumTrainer`` it belongs to (its feed, ``log`` and options).
    """

    def __init__(self, trainer: CurriculumTrainer) -> None:
        self._trainer = trainer
        self._log: RunLog | None = None

    def on_train_begin(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **_: Any
    ) -> None:
        """Build the curriculum (engine ready, checkpoint loaded) and open the records."""
        curriculum = self._trainer.feed.start()
        curriculum.run_dir = Path(str(args.output_dir))  # where file's journal is kept
        if state.is_world_process_zero:
            self._log = RunLog(
                Path(str(args.output_dir)),
                resumed_step=curriculum.global_step or None,
                history=curriculum.dynamic is not None,
                trace=self._trainer.trace_samples,
                evaluation=curriculum.evaluator is not None,
            )

    def on_step_end(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **_: Any
    ) -> None:
        """Record the finished step, evaluate when due, log ``curriculum/...``, stop at the end."""
        trainer = self._trainer
        finished = trainer.finished_record
        curriculum = trainer.feed.curriculum
        if finished is None or curriculum is None:
            return
        trainer.finished_record = None
        record, step = finished
        if self._log is not None:
            trace = step.trace_record() if trainer.trace_samples else None
            self._log.write(record.row, reweighting=record.history, trace=trace)
        eval_row = None
        if curriculum.eval_due:  # an eval interval or a phase ended: before any save of it
            eval_row = curriculum.evaluate()
            if self._log is not None:
                self._log.write_eval(eval_row)
        # out with HF's next log of a step (logging_steps), the last step's included
        trainer.train_logs.defer(
            curriculum_logs(record.row, reweighting=record.history, eval_row=eval_row)
        )
        if curriculum.stop_requested:  # SIGTERM on some rank: every rank saves and stops here
            control.should_save = True
            control.should_training_stop = True
            control.should_log = True
        elif curriculum.is_done:  # max_duration: the end of the run
            control.should_save = args.save_strategy != "no"
            control.should_training_stop = True
            control.should_log = args.logging_strategy != "no"

    def on_save(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **_: Any
    ) -> None:
        """Write the curriculum state into the ``checkpoint-N/`` HF has just written."""
        curriculum = self._trainer.feed.curriculum
        if curriculum is None or not state.is_world_process_zero:
            return
        folder = Path(str(args.output_dir)) / f"checkpoint-{state.global_step}"
        if folder.is_dir():
            self._trainer.train_logs.save(folder)  # before the state: it marks the folder done
            write_state(folder, curriculum.state_dict())

    def on_train_end(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **_: Any
    ) -> None:
        """Close the records; release the curriculum's streams and SIGTERM handler.

        After a SIGTERM, the world's first process says so in one line, naming the checkpoint.
        """
        if self._log is not None:
            self._log.close()
            self._log = None
        curriculum = self._trainer.feed.curriculum
        if curriculum is None:
            return
        if curriculum.stop_requested and state.is_world_process_zero:
            folder = Path(str(args.output_dir)) / f"checkpoint-{state.global_step}"
            print(
                f"curriculum_ds: SIGTERM: stopped after step {state.global_step} with its "
                f"checkpoint {folder}; continue with train(resume_from_checkpoint=True)",
                flush=True,
            )
        curriculum.close()


class CurriculumProgress(ProgressCallback):
    """HF's progress bar in the schedule's unit: tokens (or passes) done of ``max_duration``.

    HF's ``ProgressCallback`` counts optimizer steps up to ``state.max_steps``, which for a
    ``CurriculumTrainer`` is a bound the run never reaches; this bar counts what the curriculum
    counts, starting at a resumed run's progress. Evaluation bars and log lines are HF's.

    Args:
        trainer: the ``CurriculumTrainer`` (its ``feed.curriculum``, built by the
            :class:`CurriculumCallback`'s ``on_train_begin``, which runs first).
    """

    def __init__(self, trainer: CurriculumTrainer) -> None:
        super().__init__()
        self._trainer = trainer
        self._done = 0.0

    def on_train_begin(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **_: Any
    ) -> None:
        """Open the bar at the curriculum's progress (world's first process)."""
        from curriculum_ds.records.progress import schedule_bar

        self.current_step = 0
        curriculum = self._trainer.feed.curriculum
        if not state.is_world_process_zero or curriculum is None:
            return
        # HF's hooks write the logs through it and close it
        self.training_bar = schedule_bar(curriculum)
        self._done = float(curriculum.progress)

    def on_step_end(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **_: Any
    ) -> None:
        """Advance the bar by the step's progress."""
        curriculum, bar = self._trainer.feed.curriculum, cast("Any", self.training_bar)
        if bar is None or curriculum is None:
            return
        done = float(curriculum.progress)
        delta = done - self._done
        bar.update(delta if curriculum.schedule.unit == "ep" else int(delta))
        self._done = done
        self.current_step = state.global_step
