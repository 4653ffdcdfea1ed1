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

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from curriculum_ds.checkpoint.state import CurriculumState
from curriculum_ds.config.ramps import is_ramp
from curriculum_ds.core.lr_schedule import LRSchedule, apply_lr, optimizer_lr
from curriculum_ds.core.position import Position
from curriculum_ds.core.schedule import PhaseSchedule, Progress, progress_to_str
from curriculum_ds.distributed import Topology
from curriculum_ds.dynamic import DynamicState, ProbingReweighter, make_reweighter
from curriculum_ds.errors import StepError
from curriculum_ds.plugin.checkpointing import Checkpointer
from curriculum_ds.plugin.completion import SkipCounts, StepTimer, complete_step, step_progress
from curriculum_ds.plugin.engine_like import EngineLike
from curriculum_ds.plugin.held_out import HeldOutEvals
from curriculum_ds.plugin.nonfinite import check_nonfinite_limit
from curriculum_ds.plugin.phase_loaders import PhaseLoaders
from curriculum_ds.plugin.preemption import StopSignal
from curriculum_ds.plugin.prefetch import Drawn, StepFeed, next_step_settled
from curriculum_ds.plugin.step import Step
from curriculum_ds.records.monitors import CurriculumMonitor

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator, Mapping

    import numpy as np
    import numpy.typing as npt

    from curriculum_ds.checkpoint.files import SavedTag
    from curriculum_ds.checkpoint.rules import ResumePlan
    from curriculum_ds.config import CurriculumConfig, RunConfig
    from curriculum_ds.core.loader import MicroBatch, PhaseLoader
    from curriculum_ds.core.loader_state import LoaderState
    from curriculum_ds.records.schema import EvalRow, HistoryRow, MetricsRow, StepOutcome

__all__ = ["Curriculum"]


class Curriculum:
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
        stop_requested: True once a rank of the run received SIGTERM (preemption), from the
            :meth:`Step.finish` of the step during which (or after which) it arrived, on every
            rank at the same step. The loop should then ``save_checkpoint`` and leave; one that
            does not look at it leaves its ``for`` at the next draw (iteration stops).
        stop_signal: the SIGTERM handler of this process
            (:class:`~curriculum_ds.plugin.preemption.StopSignal`), installed when the curriculum
            is built (main thread only) and removed by :meth:`close` or when iteration ends.
        eval_forward: ``forward(mb) -> logits`` for a re-weighting method's own evaluations, for
            a model not called as ``engine(input_ids, attention_mask=...)`` (RunDir sets it).
        evaluator: the held-out evaluation (``curriculum.eval``), or None without one; see
            :attr:`eval_due` and :meth:`evaluate`.
        monitor: on global rank 0 when the ds_config enables DeepSpeed's ``tensorboard``,
            ``wandb`` or ``csv_monitor``, the :class:`~curriculum_ds.records.monitors.
            CurriculumMonitor` that every finished step (and re-weighting recompute) is written
            to (``curriculum/...`` tags), and every :meth:`evaluate` row. None otherwise.
    """

    def __init__(self, engine: EngineLike, run: RunConfig) -> None:
        self.engine = engine
        self.run = run
        self.config: CurriculumConfig = run.curriculum
        self.schedule = PhaseSchedule(self.config)
        self.lr_schedule = LRSchedule.from_config(self.config)
        self.topology = Topology.from_engine(engine)
        self.dp_rank, self.dp_world_size = self.topology.dp_rank, self.topology.dp_world_size
        self.micro_batch_size = run.micro_batch_size
        self.gradient_accumulation_steps = run.gradient_accumulation_steps
        self.global_batch_size = run.global_batch_size(self.dp_world_size)
        self.dynamic = make_reweighter(self.config.dynamic) if self.config.dynamic.enabled else None
        self.position = Position.start(self.schedule.unit)
        self._counts = SkipCounts()
        self.monitor = CurriculumMonitor.for_engine(engine)
        self.resumed_from: Path | None = None
        self.run_dir: str | Path | None = None
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
        self._loaders = PhaseLoaders(self.config, self._feed)
        self._checkpointer = Checkpointer(
            engine, self.config, self, self.global_batch_size, self.monitor
        )
        self._drawn: tuple[int, Drawn | None] = (0, None)  # the drawn step's seq_len, micro-batches
        probing = isinstance(self.dynamic, ProbingReweighter)
        self._evals = HeldOutEvals(
            self.config, self.schedule, run, self.topology, probing, self._timer
        )
        self.evaluator = self._evals.evaluator
        self.eval_forward: Callable[[MicroBatch], Any] | None = None

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
        """Steps of this process with a NaN/inf global loss or gradient norm: no update."""
        return self._counts.num_nonfinite_steps

    @property
    def consecutive_nonfinite_steps(self) -> int:
        """The non-finite steps that came last, in a row (at the limit: NonFiniteLossError)."""
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
    def order_version(self) -> int:
        """The order the run's samples are drawn in (``curriculum.order_version``)."""
        return self._loaders.order_version

    @property
    def loader(self) -> PhaseLoader | None:
        """The current phase's loader (None before the first step and after the end)."""
        return self._loaders.current

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
            self._loaders.close()
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
        return self._loaders.at(self.phase_idx, self.dynamic, self.run_dir)

    def close(self) -> None:
        """Stop the prefetch thread; release the streams (shared memory), SIGTERM's handler."""
        self._feed.close()
        self._loaders.close()
        self.stop_signal.restore()

    def _complete_step(self, outcome: StepOutcome) -> tuple[MetricsRow, HistoryRow | None]:
        """A step's completion callback: advance the counters, re-weight, build the rows."""
        self.stop_requested = self.stop_requested or outcome.stop_requested
        loader, drawn = self._loaders.current, self._drawn[1]
        assert loader is not None  # a step in flight has its loader and micro-batches
        assert drawn is not None
        before = self.progress
        at = (outcome.global_step, self.consumed_tokens, outcome.phase_idx, outcome.phase_name)
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
            # a re-weighting method's own evaluation after this step (not in eval.jsonl)
            probe=(lambda: self._evals.probe(self.engine, self.eval_forward, at))
            if self._evals.probing
            else None,
        )
        self.position, self._counts = done.position, done.counts
        if done.update is not None:  # a recompute: the loader applies it from the next draw
            loader.apply(done.update)
        self._evals.step_finished(before, self.progress, outcome.phase_idx, outcome.phase_name)
        if self.monitor is not None:  # the ds_config's tensorboard / wandb / csv_monitor
            self.monitor.write_step(done.metrics, done.history)
        return done.metrics, done.history

    # ------------------------------------------------------------------------- evaluation
    @property
    def eval_due(self) -> bool:
        """The step just finished ends an eval interval or a phase (:attr:`HeldOutEvals.due`)."""
        return self._evals.due

    def evaluate(self, forward: Callable[[MicroBatch], Any] | None = None) -> EvalRow:
        """Evaluate the fixed held-out set now; collective (every rank calls it).

        Runs under ``torch.no_grad()`` in eval mode (the engine's mode is restored), leaves the
        global RNGs, the training sample order and the checkpoint state untouched, and its wall
        time is left out of the next step's ``tokens_per_s``
        (:mod:`curriculum_ds.plugin.evaluation`).

        ``forward(mb) -> logits`` is for a model not called as ``engine(input_ids,
        attention_mask=...)``. Returns the ``eval.jsonl`` row, the same on every rank
        (:meth:`~curriculum_ds.plugin.evaluation.Evaluator.evaluate`). StepError: no
        ``curriculum.eval`` in the config, or a step is in flight.
        """
        self._check_between_steps("evaluate")
        if self.evaluator is None:
            raise StepError("evaluate: the config has no curriculum.eval section")
        return self._evals.evaluate(
            self.engine, forward, self.position, self.phase_idx, self.dynamic, self.monitor
        )

    # ------------------------------------------------------------------------ checkpoints
    def curriculum_state(self) -> CurriculumState:
        """Where the curriculum stands: its position and the loader/re-weighting states."""
        return CurriculumState.of(self.config, self.position, **self._loaders.saved(self.dynamic))

    def move_to(
        self, position: Position, loader: LoaderState | None, dynamic: DynamicState | None,
        order_version: Literal[1, 2],
    ) -> None:  # fmt: skip
        """Continue from ``position`` (:class:`~curriculum_ds.plugin.checkpointing.Restorable`)."""
        self._loaders.expect(loader, dynamic, order_version)
        self.position, self._exhausted = position, False

    def open_phase(self) -> None:
        """Open the loader of the position's phase now (none once the schedule is done)."""
        if not self.is_done:
            self._phase_loader()

    def state_dict(self) -> dict[str, Any]:
        """The checkpoint state: :meth:`CurriculumState.to_dict`, for ``client_state``.

        Plain values and numpy arrays, for DeepSpeed's ``client_state`` or anything
        ``torch.save`` writes. Raises ``StepError`` while a step is in flight.
        """
        self._check_between_steps("state_dict")
        return self.curriculum_state().to_dict()

    def load_state_dict(self, state: Mapping[str, Any] | CurriculumState) -> list[str]:
        """Continue from a :meth:`state_dict` under this (possibly edited) schedule.

        By the resume rules (:func:`curriculum_ds.checkpoint.rules.check_resume`: completed
        phases frozen, the current phase's data frozen, later phases free); the continuation
        draws the uninterrupted run's samples. Returns the notes on accepted edits.

        Raises:
            ResumeError: one line naming the phase and field of the first forbidden change, or
                the key of a malformed state; nothing changes then.
            StepError: a step is in flight.
        """
        self._check_between_steps("load_state_dict")
        return self._checkpointer.load_state(state)

    def save_checkpoint(
        self, save_dir: str | os.PathLike[str], *, client_state: dict[str, Any] | None = None
    ) -> Path:
        """Collective: a DeepSpeed checkpoint ``save_dir/global_step<N>``, then ``latest``.

        The curriculum state goes in ``client_state["curriculum"]`` beside your own
        ``client_state``; ``latest`` moves last and atomically (:meth:`Checkpointer.save`).
        Returns the tag folder written.

        Raises:
            StepError: a step is in flight (nothing is written).
            NonFiniteLossError: the last ``curriculum.max_consecutive_nonfinite`` steps were
                NaN/inf (nothing is written: the last good checkpoint stays ``latest``).
        """
        self._check_between_steps("save_checkpoint")
        self._check_nonfinite_limit()
        return self._checkpointer.save(Path(save_dir), client_state=client_state)

    def load_checkpoint(
        self,
        load_dir: str | os.PathLike[str] | SavedTag,
        *,
        tag: str | None = None,
        plan: ResumePlan | None = None,
    ) -> Path | None:
        """Load engine and curriculum from a checkpoint; a no-op (None) when there is none.

        ``load_dir``, ``tag`` and ``plan`` are :meth:`Checkpointer.load`'s (which says how
        another data-parallel size or global batch size resumes). A DeepSpeed checkpoint without
        curriculum state starts the schedule at its first phase. Returns the tag folder loaded.

        Raises:
            ResumeError: the resume rules refuse the checkpoint (names the phase and field), its
                files cannot be read, or DeepSpeed cannot load it.
            StepError: a step is in flight.
        """
        self._check_between_steps("load_checkpoint")
        loaded = self._checkpointer.load(load_dir, tag=tag, plan=plan)
        if loaded is None:
            return None
        if loaded[1] is None and self.dynamic is not None:  # a DeepSpeed run without curriculum
            self.dynamic = make_reweighter(self.config.dynamic)
        self.resumed_from = loaded[0]
        return self.resumed_from

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
