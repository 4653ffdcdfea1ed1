"""The curriculum beside a DeepSpeed engine: phases, loaders, counters, re-weighting, checkpoints.

Iterating a :class:`Curriculum` yields :class:`~curriculum_ds.plugin.step.Step` objects, one per
optimizer step, until ``max_duration``. The curriculum owns everything a step needs between two
optimizer steps: the phase schedule and its exact boundaries, the current phase's loader (built
when the phase starts, closed when it ends), the dynamic re-weighting, the counters, and the
checkpoint state (:class:`~curriculum_ds.checkpoint.state.CurriculumState`, in DeepSpeed's
``client_state``). It holds no RNG: every global batch is a pure function of (seed, phase,
counters), so every rank draws the same batch and takes its own slice.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from curriculum_ds.config.ramps import is_ramp
from curriculum_ds.core.loader import PhaseLoader
from curriculum_ds.core.loader_state import LoaderState
from curriculum_ds.core.lr_schedule import LRSchedule, apply_lr, optimizer_lr
from curriculum_ds.core.position import Position
from curriculum_ds.core.schedule import PhaseSchedule, Progress, progress_to_str
from curriculum_ds.distributed import Topology
from curriculum_ds.dynamic import DynamicState, ProbingReweighter, make_reweighter
from curriculum_ds.errors import StepError
from curriculum_ds.plugin.checkpointing import CheckpointingMixin
from curriculum_ds.plugin.completion import SkipCounts, StepTimer, complete_step, step_progress
from curriculum_ds.plugin.engine_like import EngineLike
from curriculum_ds.plugin.evaluation import Evaluator, probe_eval_config, stream_losses
from curriculum_ds.plugin.nonfinite import check_nonfinite_limit
from curriculum_ds.plugin.preemption import StopSignal
from curriculum_ds.plugin.prefetch import Drawn, StepFeed, next_step_settled
from curriculum_ds.plugin.step import Step
from curriculum_ds.records.monitors import CurriculumMonitor

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator, Mapping

    import numpy as np
    import numpy.typing as npt

    from curriculum_ds.config import CurriculumConfig, EvalConfig, RunConfig
    from curriculum_ds.core.loader import MicroBatch
    from curriculum_ds.records.schema import EvalRow, HistoryRow, MetricsRow, StepOutcome

__all__ = ["Curriculum"]


class Curriculum(CheckpointingMixin):
    """The curriculum of one DeepSpeed engine: ``for step in curriculum`` until the schedule ends.

    Build it with :func:`curriculum_ds.initialize` (which also builds the engine) or
    :func:`curriculum_ds.attach` (for an engine you built yourself).

    Attributes:
        engine: the ``deepspeed.DeepSpeedEngine`` it trains.
        run: the loaded config (``run.curriculum`` is the validated ``curriculum`` section,
            ``run.ds_config`` the DeepSpeed part).
        config: ``run.curriculum``.
        schedule: the phase boundaries (:class:`~curriculum_ds.core.schedule.PhaseSchedule`).
        lr_schedule: ``curriculum.lr_schedule``
        (:class:`~curriculum_ds.core.lr_schedule.LRSchedule`),
            applied to every param group when a step is drawn; None without one.
        topology: the data-parallel ranks, read from the engine
            (:meth:`~curriculum_ds.distributed.Topology.from_engine`).
        dp_rank / dp_world_size: this rank and the number of data-parallel ranks (``topology``'s).
        micro_batch_size / gradient_accumulation_steps / global_batch_size: samples per
            micro-batch per rank, micro-batches per step per rank, and samples per optimizer step
            over all ranks.
        dynamic: the re-weighting state, or None when ``dynamic.enabled`` is false.
        run_dir: the run directory the loop keeps its records in, or None. ``RunDir`` and
            ``CurriculumTrainer`` (its ``output_dir``) set it; a loop of one's own sets it
            before the first step when a method keeps a file there (``dynamic.method: "file"``
            journals its reads in ``run_dir/mixture_journal.jsonl``).
        global_step: optimizer steps finished (0 before the first; restored on resume).
        consumed_tokens / consumed_samples: non-padding input tokens and samples consumed, global.
        progress: cumulative progress in the schedule's unit (int tokens, or a Fraction of
            passes for ``ep``).
        stop_requested: True once a rank of the run received SIGTERM (preemption), from the
            :meth:`Step.finish` of the step during which (or after which) it arrived, on every
            rank at the same step. The loop should then ``save_checkpoint`` and leave; one that
            does not look at it leaves its ``for`` at the next draw (iteration stops).
        stop_signal: the SIGTERM handler of this process
            (:class:`~curriculum_ds.plugin.preemption.StopSignal`), installed when the curriculum
            is built (main thread only) and removed by :meth:`close` or when iteration ends.
        num_skipped_steps: steps of this process without loss-bearing tokens.
        evaluator: the held-out evaluation (``curriculum.eval``), or None without one; see
            :attr:`eval_due` and :meth:`evaluate`.
        monitor: on global rank 0 when the ds_config enables DeepSpeed's ``tensorboard``,
            ``wandb`` or ``csv_monitor``, the :class:`~curriculum_ds.records.monitors.
            CurriculumMonitor` that every finished step (and re-weighting recompute) is written
            to (``curriculum/...`` tags), and every :meth:`evaluate` row. None otherwise.
        num_nonfinite_steps: steps of this process that applied no update because their global
            loss (or gradient norm) was NaN/inf (``skip_reason`` in the step's record).
        consecutive_nonfinite_steps: how many of those came last, in a row; at
            ``curriculum.max_consecutive_nonfinite`` the next draw or ``save_checkpoint`` raises
            :class:`~curriculum_ds.errors.NonFiniteLossError`.
    """

    def __init__(self, engine: EngineLike, run: RunConfig) -> None:
        self.engine = engine
        self.run = run
        self.config: CurriculumConfig = run.curriculum
        self.schedule = PhaseSchedule(self.config)
        self.lr_schedule = LRSchedule.from_config(self.config)
        self.topology = Topology.from_engine(engine)
        self.dp_rank = self.topology.dp_rank
        self.dp_world_size = self.topology.dp_world_size
        self.micro_batch_size = run.micro_batch_size
        self.gradient_accumulation_steps = run.gradient_accumulation_steps
        self.global_batch_size = run.global_batch_size(self.dp_world_size)
        self.dynamic = make_reweighter(self.config.dynamic) if self.config.dynamic.enabled else None
        self.position = Position.start(self.schedule.unit)
        self._counts = SkipCounts()
        self.monitor = CurriculumMonitor.for_engine(engine)
        self.resumed_from: Path | None = None
        self.run_dir: str | Path | None = None
        self._loader: PhaseLoader | None = None
        # what the next phase loader built restores (then None): set by a resume
        self._pending_loader: LoaderState | None = None
        self._pending_dynamic: DynamicState | None = None
        self._step: Step | None = None  # drawn and not finished
        self.stop_requested = False
        self.stop_signal = StopSignal()
        self._exhausted = False
        self._timer = StepTimer()  # tokens_per_s: a step's wall time, evaluations left out
        # the micro-batches, read ahead off this thread (curriculum.prefetch_micro_batches)
        self._feed = StepFeed(
            self.config.prefetch_micro_batches,
            dp_rank=self.dp_rank,
            dp_world_size=self.dp_world_size,
            micro_batch_size=self.micro_batch_size,
            device=engine.device,
        )
        # the drawn step's seq_len (warmup rows) and micro-batches (data wait, read-ahead count)
        self._drawn: tuple[int, Drawn | None] = (0, None)
        self.evaluator = self._evaluator(self.config.eval)
        # a method that evaluates at its own steps (Aioli, Skill-it): its held-out streams
        probing = isinstance(self.dynamic, ProbingReweighter)
        self._probe_evaluator = self._evaluator(probe_eval_config(self.config) if probing else None)
        self.eval_forward: Callable[[MicroBatch], Any] | None = None
        """``forward(mb) -> logits`` for the evaluations a re-weighting method runs at its own
        steps, for a model not called as ``engine(input_ids, attention_mask=...)``."""
        # the last finished step: (progress before, progress after, phase_idx, phase_name);
        # None before any step of this process and once evaluate() ran after it
        self._last_span: tuple[Progress, Progress, int, str] | None = None

    def _evaluator(self, cfg: EvalConfig | None) -> Evaluator | None:
        """An evaluation of ``cfg``'s held-out streams over this run's ranks (None: no ``cfg``)."""
        if cfg is None:
            return None
        return Evaluator(
            cfg,
            self.schedule,
            max_seq_len=max(p.train_loader.peak_seq_len for p in self.config.schedule),
            micro_batch_size=self.micro_batch_size,
            dp_rank=self.dp_rank,
            dp_world_size=self.dp_world_size,
        )

    # ---------------------------------------------------------------------------- queries
    @property
    def global_step(self) -> int:
        """Optimizer steps finished (0 before the first; restored on resume)."""
        return self.position.global_step

    @property
    def consumed_tokens(self) -> int:
        """Non-padding input tokens consumed, global."""
        return self.position.consumed_tokens

    @property
    def consumed_samples(self) -> int:
        """Samples consumed, global."""
        return self.position.consumed_samples

    @property
    def progress(self) -> Progress:
        """Cumulative progress in the schedule's unit (int tokens, or a Fraction of passes)."""
        return self.position.progress

    @property
    def num_skipped_steps(self) -> int:
        """Steps of this process without loss-bearing tokens."""
        return self._counts.num_skipped_steps

    @property
    def num_nonfinite_steps(self) -> int:
        """Steps of this process whose global loss (or gradient norm) was NaN/inf."""
        return self._counts.num_nonfinite_steps

    @property
    def consecutive_nonfinite_steps(self) -> int:
        """How many of the non-finite steps came last, in a row."""
        return self._counts.consecutive_nonfinite_steps

    @property
    def phase_idx(self) -> int:
        """The phase the next step draws from; ``num_phases`` once the schedule is done."""
        return self.schedule.phase_at(self.progress)

    @property
    def is_done(self) -> bool:
        """True once ``max_duration`` is reached (iteration then stops)."""
        return self.schedule.is_done(self.progress)

    @property
    def loader(self) -> PhaseLoader | None:
        """The current phase's loader (None before the first step and after the end)."""
        return self._loader

    # -------------------------------------------------------------------------- iteration
    def __iter__(self) -> Iterator[Step]:
        return self

    def __next__(self) -> Step:
        """Draw the next optimizer step (collective: every rank draws the same global batch).

        Raises:
            StopIteration: the schedule has just ended (``max_duration`` reached), or
                :attr:`stop_requested` (SIGTERM) is set.
            StepError: the previous step was not finished, or the schedule had already ended
                and the iteration goes on.
            NonFiniteLossError: the last ``curriculum.max_consecutive_nonfinite`` steps all had a
                NaN/inf loss.
        """
        if self._step is not None and not self._step.finished:
            raise StepError(
                f"step {self._step.global_step} was not finished: call step.finish() before "
                "drawing the next step"
            )
        self._check_nonfinite_limit()
        if self.stop_requested:  # preempted, and the loop did not stop by itself
            self.close()
            raise StopIteration
        if self.is_done:
            self._close_loader()
            if self._exhausted:
                raise StepError(
                    f"the schedule is complete (max_duration {self.config.max_duration} reached "
                    f"at step {self.global_step}): nothing left to iterate"
                )
            self._exhausted = True
            self.stop_signal.restore()  # SIGTERM is the default again once the loop is over
            raise StopIteration
        loader = self._phase_loader()
        probs = loader.bucket_probs
        drawn = self._feed.draw(
            loader,
            self.global_batch_size,
            probs,
            fraction=self.schedule.phase_fraction(self.progress, loader.phase_idx),
            key=(loader.phase_idx, self.progress),
        )
        batch, micro_batches = drawn.batch, drawn.micro_batches
        self._timer.start()
        stream_tokens = loader.stream_tokens(batch)
        self._drawn = (loader.seq_len, drawn)
        step_tokens = int(stream_tokens.sum())
        end = self.progress + step_progress(
            self.schedule.unit, step_tokens, len(batch), loader.samples_per_pass
        )
        self._read_ahead(loader, probs, end)  # the next step's reads run while this one computes
        if self.lr_schedule is not None:  # at the step's END progress, before Step reads its lr
            apply_lr(self.engine.optimizer, self.lr_schedule.factor(end))
        self._step = Step(
            self.engine,
            topology=self.topology,
            loss_weighting=self.config.loss_weighting,
            # DeepSpeed's scheduler moves the lr only after an update: the optimizer's now is
            # this step's
            lr=optimizer_lr(self.engine),
            stop_flag=self.stop_signal.caught,
            gather_sample_losses=self.dynamic is not None,
            complete=self._complete_step,
            global_step=self.global_step + 1,
            phase_idx=loader.phase_idx,
            phase_name=loader.phase.name,
            samples=batch,
            micro_batches=micro_batches,
            stream_tokens=stream_tokens,
            stream_names=loader.stream_names,
            loss_weights=None if (loader.loss_weights == 1.0).all() else loader.loss_weights,
        )
        return self._step

    def _read_ahead(
        self, loader: PhaseLoader, probs: npt.NDArray[np.float64] | None, end: Progress
    ) -> None:
        """Decide the next step's batch now and read it ahead when it is settled (prefetch)."""
        recompute = self.config.dynamic.recompute_every_n_steps if self.dynamic else None
        probing = isinstance(self.dynamic, ProbingReweighter)
        if probing and self.dynamic.probe_due(self.global_step + 1):  # type: ignore[union-attr]
            return  # the method evaluates after this step and may change the mixture
        if self.config.prefetch_micro_batches and next_step_settled(
            self.schedule, loader.phase_idx, self.progress, end,
            step=self.global_step + 1, recompute_every=recompute, evaluator=self.evaluator,
        ):  # fmt: skip
            fraction = self.schedule.phase_fraction(end, loader.phase_idx)
            key = (loader.phase_idx, end)
            self._feed.read_ahead(loader, self.global_batch_size, probs, fraction=fraction, key=key)

    def _phase_loader(self) -> PhaseLoader:
        """The loader of the phase in progress: the exact swap at a boundary happens here."""
        phase_idx = self.phase_idx
        if self._loader is not None and self._loader.phase_idx == phase_idx:
            return self._loader
        self._close_loader()
        num_buckets = self.dynamic.num_buckets if self.dynamic is not None else 1
        loader = PhaseLoader(
            self.config.schedule[phase_idx],
            phase_idx,
            seed=self.config.seed,
            num_buckets=num_buckets,
        )
        if self.dynamic is not None:
            run_dir = None if self.run_dir is None else Path(self.run_dir)
            view = replace(loader.view(), run_dir=run_dir)
            loader.apply(self.dynamic.start_phase(view, self._pending_dynamic))
        saved = self._pending_loader
        if saved is not None and saved.phase_idx == phase_idx:
            loader.restore(saved)
        self._pending_loader = self._pending_dynamic = None
        self._loader = loader
        return loader

    def _close_loader(self) -> None:
        self._feed.discard()  # a batch decided early goes with its loader's counters
        if self._loader is not None:
            self._loader.close()
            self._loader = None

    def close(self) -> None:
        """Stop the prefetch thread; release the streams (shared memory), SIGTERM's handler."""
        self._feed.close()
        self._close_loader()
        self.stop_signal.restore()

    def _complete_step(self, outcome: StepOutcome) -> tuple[MetricsRow, HistoryRow | None]:
        """A step's completion callback: advance the counters, re-weight, build the rows."""
        self.stop_requested = self.stop_requested or outcome.stop_requested
        loader, drawn = self._loader, self._drawn[1]
        assert loader is not None  # a step in flight has its loader and micro-batches
        assert drawn is not None
        before = self.progress
        done = complete_step(
            outcome,
            position=self.position,
            counts=self._counts,
            unit=self.schedule.unit,
            loader=loader,
            dynamic=self.dynamic,
            timer=self._timer,
            phase_epochs=self._feed.epochs_done(loader),
            data_wait_s=drawn.data_wait_s,
            prefetched=drawn.prefetched,
            # a warmup: the length the step trained on
            seq_len=self._drawn[0] if is_ramp(loader.phase.train_loader.max_seq_len) else None,
            probe=((lambda: self._probe(outcome)) if self._probe_evaluator is not None else None),
        )
        self.position, self._counts = done.position, done.counts
        if done.update is not None:  # a recompute: the loader applies it from the next draw
            loader.apply(done.update)
        self._last_span = (before, self.progress, outcome.phase_idx, outcome.phase_name)
        if self.monitor is not None:  # the ds_config's tensorboard / wandb / csv_monitor
            self.monitor.write_step(done.metrics, done.history)
        return done.metrics, done.history

    def _probe(self, outcome: StepOutcome) -> Mapping[str, float]:
        """A re-weighting method's own evaluation after ``outcome``'s step (not in eval.jsonl)."""
        assert self._probe_evaluator is not None
        at = (outcome.global_step, outcome.phase_idx, outcome.phase_name)
        return stream_losses(self._run_eval(self._probe_evaluator, self.eval_forward, at))

    def _run_eval(
        self,
        evaluator: Evaluator,
        forward: Callable[[MicroBatch], Any] | None,
        at: tuple[int, int, str],
    ) -> EvalRow:
        """``evaluator``'s row at ``(step, phase_idx, phase_name)``, out of ``tokens_per_s``."""
        step, phase_idx, phase_name = at
        row = evaluator.evaluate(
            self.engine,
            forward,
            step=step,
            tokens=self.consumed_tokens,
            phase_idx=phase_idx,
            phase_name=phase_name,
        )
        self._timer.leave_out(row["eval_time_s"])  # not training time
        return row

    # ------------------------------------------------------------------------- evaluation
    @property
    def eval_due(self) -> bool:
        """True when the step just finished ends an eval ``interval`` or a phase.

        False without ``curriculum.eval``, before the first step of this process (a resumed run
        evaluated its checkpoint's step before saving it), and once :meth:`evaluate` ran for that
        step. Call it between ``step.finish()`` and the checkpoint save.
        """
        span = self._last_span
        return self.evaluator is not None and span is not None and self.evaluator.is_due(*span[:2])

    def evaluate(self, forward: Callable[[MicroBatch], Any] | None = None) -> EvalRow:
        """Evaluate the fixed held-out set now; collective (every rank calls it).

        Runs under ``torch.no_grad()`` in eval mode (the engine's mode is restored), leaves the
        global RNGs, the training sample order and the checkpoint state untouched, and its wall
        time is left out of the next step's ``tokens_per_s``
        (:mod:`curriculum_ds.plugin.evaluation`).

        Args:
            forward: ``forward(mb) -> logits`` for a model not called as ``engine(input_ids,
                attention_mask=...)``; default: that call.

        Returns:
            The ``eval.jsonl`` row (:meth:`~curriculum_ds.plugin.evaluation.Evaluator.evaluate`),
            the same on every rank.

        Raises:
            StepError: no ``curriculum.eval`` in the config, or a step is in flight.
        """
        self._check_between_steps("evaluate")
        if self.evaluator is None:
            raise StepError("evaluate: the config has no curriculum.eval section")
        if self._last_span is not None:
            phase_idx, phase_name = self._last_span[2:]
        else:  # before the first step of this process: the phase the next step draws from
            phase_idx = min(self.phase_idx, self.schedule.num_phases - 1)
            phase_name = self.schedule.names[phase_idx]
        row = self._run_eval(self.evaluator, forward, (self.global_step, phase_idx, phase_name))
        if self.dynamic is not None:  # a method steering by held-out losses reads them
            self.dynamic.observe_eval(self.global_step, stream_losses(row))
        self._last_span = None
        if self.monitor is not None:  # curriculum/eval/... in the ds_config's monitors
            self.monitor.write_eval(row)
        return row

    def _check_nonfinite_limit(self) -> None:
        check_nonfinite_limit(
            self.consecutive_nonfinite_steps,
            self.config.max_consecutive_nonfinite,
            global_step=self.global_step,
        )

    def _check_between_steps(self, what: str) -> None:
        if self._step is not None and not self._step.finished:
            raise StepError(
                f"{what} during step {self._step.global_step}: call step.finish() first"
            )

    def __repr__(self) -> str:
        return (
            f"Curriculum(step={self.global_step}, phase={self.phase_idx}/"
            f"{self.schedule.num_phases}, progress={progress_to_str(self.progress)}"
            f"{self.schedule.unit}, global_batch_size={self.global_batch_size})"
        )
