"""``CurriculumTrainer``: HF's ``Trainer`` fed and weighted by the curriculum of its ds_config.

Each piece uses one public extension point of ``transformers.Trainer`` (subclassing, documented
overridable methods, callbacks); no private method is replaced or patched:

- ``__init__`` (subclassing): the checks of :mod:`curriculum_ds.hf.arguments` (one line each,
  before anything is built; in a launched rank, rank 0 prints it and every rank exits 1); a
  copy of ``TrainingArguments`` (``dataclasses.replace``: the caller's object is left as it
  was) with ``ignore_data_skip`` on (the curriculum restores its
  own cursor) and ``max_steps`` a bound the run never reaches (it ends at ``max_duration``); the
  :class:`~curriculum_ds.hf.callbacks.CurriculumCallback` added (``add_callback``) and HF's
  ``ProgressCallback``, when there, replaced by
  :class:`~curriculum_ds.hf.callbacks.CurriculumProgress` (a bar up to ``max_duration``);
- ``get_train_dataloader``: the :class:`~curriculum_ds.hf.feed.CurriculumFeed`;
- ``training_step`` ("subclass and override to inject custom behavior"): the micro-batch's
  forward through the DeepSpeed engine and the plugin's token-weighted ``Step.backward`` (which
  calls ``engine.backward`` with DeepSpeed's 1/GAS off and ``engine.step``), then
  ``Step.finish`` after the step's last micro-batch; HF's ``compute_loss`` and
  ``num_items_in_batch`` are not used for training;
- ``create_scheduler``: HF's scheduler over the estimated steps
  (:func:`~curriculum_ds.hf.arguments.estimated_steps`), or a constant one when
  ``curriculum.lr_schedule`` owns the lr;
- ``train``: ``resume_from_checkpoint`` resolved to a ``checkpoint-N`` with curriculum state
  and checked by the resume rules before HF loads anything;
- ``evaluate``: without an ``eval_dataset``, the curriculum's eval streams.
"""

from __future__ import annotations

import contextlib
import os
from typing import TYPE_CHECKING, Any, cast

import torch
from transformers import ProgressCallback, Trainer

from curriculum_ds.errors import StepError
from curriculum_ds.hf.arguments import checked_run, trainer_arguments
from curriculum_ds.hf.callbacks import CurriculumCallback, CurriculumProgress, curriculum_logs
from curriculum_ds.hf.checkpoint import check_folder, resume_folder
from curriculum_ds.hf.feed import MICRO_BATCH_KEY, CurriculumFeed
from curriculum_ds.hf.logs import TrainerLogs

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

    from curriculum_ds.plugin.curriculum import Curriculum
    from curriculum_ds.plugin.engine_like import EngineLike
    from curriculum_ds.plugin.step import Step
    from curriculum_ds.records.schema import StepResult

__all__ = ["CurriculumTrainer"]


class CurriculumTrainer(Trainer):
    """A ``transformers.Trainer`` whose batches, loss, records and checkpoints are the curriculum's.

    Args:
        model: the model (a ``PreTrainedModel`` or any module whose forward maps
            ``input_ids`` + ``attention_mask`` to logits or an output with ``.logits``).
        args: ``TrainingArguments`` with ``deepspeed`` set to a ds_config (path or dict) holding
            a ``curriculum`` section; on CPU ranks also ``use_cpu=True``. Left as it is: the
            Trainer's ``self.args`` is a copy with ``ignore_data_skip`` and ``max_steps`` set.
        train_dataset: must be None: the curriculum feeds the Trainer.
        trace_samples: also write ``sample_trace.jsonl`` (every step's global batch).
        check_data: run the data preflight of ``curriculum-ds validate`` in the constructor.
        **trainer_kwargs: passed on to ``Trainer`` (``eval_dataset``, ``callbacks``,
            ``processing_class``, ...).

    Attributes:
        curriculum_run: the plugin's :class:`~curriculum_ds.config.RunConfig` of the section.
        feed: the :class:`~curriculum_ds.hf.feed.CurriculumFeed`; ``feed.curriculum`` is the
            :class:`~curriculum_ds.Curriculum` once training started (None before).
        finished_record: the last finished step's metrics row and step, until the callback
            took it.

    Raises:
        ConfigError: one line, before anything is built: a ``train_dataset``; no ds_config or no
            ``curriculum`` section in it; ``group_by_length=True``; batch sizes of the ds_config
            that disagree with ``TrainingArguments``; a bad ``curriculum`` section; a phase's
            ``max_seq_len`` beyond the model's positions.
        DataError: a stream's data is missing or malformed.
    """

    def __init__(
        self,
        model: Any = None,
        args: Any = None,
        *,
        train_dataset: Any = None,
        trace_samples: bool = False,
        check_data: bool = True,
        **trainer_kwargs: Any,
    ) -> None:
        self.curriculum_run = checked_run(
            args, model, train_dataset=train_dataset, check_data=check_data
        )
        args, self._horizon = trainer_arguments(args, self.curriculum_run)
        self.trace_samples = trace_samples
        self.feed = CurriculumFeed(self._build_curriculum)
        self.finished_record: tuple[StepResult, Step] | None = None
        self.train_logs = TrainerLogs()
        self._resume_state: dict[str, Any] | None = None
        self._resume_folder: Path | None = None
        with _accelerate_accumulation(args.gradient_accumulation_steps):
            super().__init__(model=model, args=args, **trainer_kwargs)
        self.add_callback(CurriculumCallback(self))
        if any(isinstance(c, ProgressCallback) for c in self.callback_handler.callbacks):
            self.remove_callback(ProgressCallback)  # its bar counts up to the step bound
            self.add_callback(CurriculumProgress(self))  # after the callback building the feed

    # ------------------------------------------------------------- extension points
    def get_train_dataloader(self) -> Any:  # noqa: D102 - documented in the module docstring
        return self.feed

    def training_step(
        self, model: Any, inputs: dict[str, Any], num_items_in_batch: Any = None
    ) -> torch.Tensor:
        """One micro-batch: forward, the plugin's token-weighted backward, and the step's end.

        ``model`` is the DeepSpeed engine; ``Step.backward`` calls its ``backward`` (1/GAS off)
        and ``step``. After the step's last micro-batch, ``Step.finish`` (collective) gives the
        metrics row the callback records. ``num_items_in_batch`` is ignored.

        Returns:
            What HF sums into its ``loss`` log: 0 for every micro-batch but the step's last,
            and the step's loss for that one (the token-weighted objective of the whole global
            batch, what the optimizer saw; the same value on every rank, so HF's mean over ranks
            keeps it). Any GAS × micro-batch split of the same samples logs the same value.
            NaN for a step whose loss is not finite (HF's ``logging_nan_inf_filter`` drops it).
        """
        step = self.feed.step
        mb = inputs[MICRO_BATCH_KEY]
        if step is None:
            raise StepError("training_step: no curriculum step in flight")
        model.train()
        # packed documents: position_ids with attention_mask None, and no KV cache (transformers
        # builds the per-document mask only then); else the attention mask, as always
        masked = {} if mb.position_ids is None else {"use_cache": False}
        outputs = model(input_ids=mb.input_ids, **mb.forward_kwargs(), **masked)
        step.backward(outputs, mb)
        if step.micro_batches.index_of(mb) != len(step.micro_batches) - 1:  # not the last
            return torch.zeros((), device=self.args.device)
        result = step.finish()
        self.finished_record = (result, step)
        objective = self.train_logs.step_finished(result.row, num_samples=len(step.samples))
        return torch.tensor(objective, device=self.args.device)

    def log(self, logs: dict[str, float], *args: Any, **kwargs: Any) -> None:
        """HF's ``log``, with the run's own values (:class:`~curriculum_ds.hf.logs.TrainerLogs`).

        A training log's ``loss`` is the exact mean objective of the steps since the last log,
        with the ``curriculum/...`` values of those steps; ``epoch`` is the passes over the
        phase's datamix; the summary's speeds and ``train_loss`` are the run's.
        """
        self.train_logs.complete(logs)
        self.state.epoch = self.train_logs.epoch  # None: HF leaves "epoch" out
        super().log(logs, *args, **kwargs)

    def create_scheduler(self, num_training_steps: int, optimizer: Any = None) -> Any:
        """HF's scheduler over the run's estimated steps; constant under ``lr_schedule``.

        With ``curriculum.lr_schedule`` the curriculum sets every param group's lr when a step
        is drawn, so HF's scheduler is a constant ``LambdaLR`` (factor 1).
        """
        if self.curriculum_run.curriculum.lr_schedule is not None:
            if self.lr_scheduler is None:
                target = self.optimizer if optimizer is None else optimizer
                self.lr_scheduler = torch.optim.lr_scheduler.LambdaLR(
                    cast("torch.optim.Optimizer", target), lambda _: 1.0
                )
                self._created_lr_scheduler = True
            return self.lr_scheduler
        horizon = self._horizon if self._horizon is not None else num_training_steps
        return super().create_scheduler(num_training_steps=horizon, optimizer=optimizer)

    def train(  # type: ignore[override]
        self, resume_from_checkpoint: str | bool | None = None, **kwargs: Any
    ) -> Any:
        """HF's ``train``, resuming from a ``checkpoint-N`` with curriculum state.

        ``resume_from_checkpoint=True`` takes the newest ``checkpoint-N`` of ``output_dir`` that
        holds the curriculum state; a folder must hold it. The resume rules are checked before
        HF loads anything; the run continues with the uninterrupted run's batches.

        Raises:
            ResumeError: no such checkpoint, or the rules refuse it (one line naming the phase
                and field).
        """
        self._resume_state = None
        if resume_from_checkpoint not in (None, False):
            folder: Path = resume_folder(str(self.args.output_dir), resume_from_checkpoint)
            self._resume_state = check_folder(self.curriculum_run.curriculum, folder)
            self._resume_folder = folder
            resume_from_checkpoint = str(folder)
        else:
            resume_from_checkpoint = None
        return super().train(resume_from_checkpoint=resume_from_checkpoint, **kwargs)

    def evaluate(
        self,
        eval_dataset: Any = None,
        ignore_keys: list[str] | None = None,
        metric_key_prefix: str = "eval",
    ) -> dict[str, float]:
        """The curriculum's eval streams (without an ``eval_dataset``), else HF's ``evaluate``.

        Returns:
            ``{PREFIX_loss: loss over every eval token, PREFIX_<stream>_loss: ...}`` (nats, a
            stream without eval tokens left out; collective), and ``PREFIX_<stream>_exact_match``
            of each QA stream (the share of its records answered exactly), also logged; the row
            is not added to ``eval.jsonl`` (only the scheduled evaluations are).

        Raises:
            StepError: before ``train()`` built the curriculum, or no ``curriculum.eval``.
        """
        if eval_dataset is not None or self.eval_dataset is not None:
            return super().evaluate(eval_dataset, ignore_keys, metric_key_prefix)
        curriculum = self.feed.curriculum
        if curriculum is None:
            raise StepError("evaluate: the curriculum is built by train(); call it first")
        row = curriculum.evaluate()
        losses = {"": row["loss"]} | {f"_{n}": s["loss"] for n, s in row["streams"].items()}
        metrics = {f"{metric_key_prefix}{k}_loss": v for k, v in losses.items() if v is not None}
        for name, stream in row["streams"].items():
            if (exact := stream.get("exact_match")) is not None:
                metrics[f"{metric_key_prefix}_{name}_exact_match"] = exact
        self.log(metrics | curriculum_logs(eval_row=row))
        return metrics

    # ------------------------------------------------------------------- the curriculum
    def _build_curriculum(self) -> Curriculum:
        """The curriculum of the engine HF built (``model_wrapped``), at the resumed state."""
        from curriculum_ds.plugin.engine import attach

        curriculum = attach(
            cast("EngineLike", self.model_wrapped), self.curriculum_run, check_data=False
        )
        if self._resume_state is not None:
            from curriculum_ds.checkpoint.adam_powers import restore_adam_powers

            curriculum.load_state_dict(self._resume_state)
            if self._resume_folder is not None:  # train_loss counts the steps before it
                self.train_logs.restore(self._resume_folder)
            # HF's deepspeed_load_checkpoint loaded the engine; DeepSpeed's CPU Adam kernels
            # then need their running beta^t as the uninterrupted run's (adam_powers)
            restore_adam_powers(getattr(self.model_wrapped, "optimizer", None))
        return curriculum


@contextlib.contextmanager
def _accelerate_accumulation(steps: int) -> Iterator[None]:
    """Build HF's ``Accelerator`` with the run's gradient accumulation steps.

    HF's Trainer creates it without them (it does not use accelerate's accumulation), so
    accelerate's DeepSpeed set-up warns "Gradient accumulation steps mismatch: ... has 1,
    DeepSpeed config has N" and then takes the ds_config's value. accelerate reads
    ``ACCELERATE_GRADIENT_ACCUMULATION_STEPS`` when the ``Accelerator`` is built: set for the
    Trainer's constructor only, the value is the same from the start and nothing warns.
    """
    key = "ACCELERATE_GRADIENT_ACCUMULATION_STEPS"
    before = os.environ.get(key)
    os.environ[key] = str(int(steps))
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = before
