"""When and at which step the curriculum's held-out evaluations run, and where their rows go.

:class:`HeldOutEvals` holds the two evaluations a run can have: ``curriculum.eval``'s (at its
interval and at every phase end: :attr:`HeldOutEvals.due`, the loop's :meth:`~curriculum_ds.
plugin.curriculum.Curriculum.evaluate`) and a re-weighting method's own, at the method's steps
(Aioli, Skill-it: :meth:`HeldOutEvals.probe`, not in ``eval.jsonl``). Both run on
:class:`~curriculum_ds.plugin.evaluation.Evaluator`, and their wall time is left out of the next
step's ``tokens_per_s``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from curriculum_ds.plugin.evaluation import Evaluator, probe_eval_config, stream_losses

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from curriculum_ds.config import CurriculumConfig, EvalConfig, RunConfig
    from curriculum_ds.core.loader import MicroBatch
    from curriculum_ds.core.position import Position
    from curriculum_ds.core.schedule import PhaseSchedule, Progress
    from curriculum_ds.distributed import Topology
    from curriculum_ds.dynamic import Reweighter
    from curriculum_ds.plugin.completion import StepTimer
    from curriculum_ds.plugin.engine_like import EngineLike
    from curriculum_ds.records.monitors import CurriculumMonitor
    from curriculum_ds.records.schema import EvalRow

__all__ = ["HeldOutEvals"]


class HeldOutEvals:
    """The held-out evaluations of one curriculum over its data-parallel ranks.

    Args:
        config: the ``curriculum`` section (``eval``, and the method's held-out streams when
            ``probing``).
        schedule: its phase boundaries (an eval is due at each phase end).
        run: the run config (its ``micro_batch_size``).
        topology: the data-parallel ranks the evaluations are spread over.
        probing: the re-weighting method evaluates at its own steps.
        timer: the step timer the evaluations' wall time is left out of.
    """

    def __init__(
        self,
        config: CurriculumConfig,
        schedule: PhaseSchedule,
        run: RunConfig,
        topology: Topology,
        probing: bool,
        timer: StepTimer,
    ) -> None:
        self.schedule = schedule
        self._timer = timer

        def evaluator(cfg: EvalConfig | None) -> Evaluator | None:
            if cfg is None:
                return None
            peak = max(p.train_loader.peak_seq_len for p in config.schedule)
            return Evaluator(
                cfg,
                schedule,
                max_seq_len=peak,
                micro_batch_size=run.micro_batch_size,
                dp_rank=topology.dp_rank,
                dp_world_size=topology.dp_world_size,
            )

        self.evaluator = evaluator(config.eval)
        self._probe_evaluator = evaluator(probe_eval_config(config) if probing else None)
        # the last finished step: (progress before, progress after, phase_idx, phase_name);
        # None before any step of this process and once evaluate() ran after it
        self._last_span: tuple[Progress, Progress, int, str] | None = None

    @property
    def probing(self) -> bool:
        """The re-weighting method evaluates at its own steps."""
        return self._probe_evaluator is not None

    def step_finished(self, before: Progress, after: Progress, phase_idx: int, name: str) -> None:
        """A step went from ``before`` to ``after`` in phase ``phase_idx``, named ``name``."""
        self._last_span = (before, after, phase_idx, name)

    @property
    def due(self) -> bool:
        """True when the step just finished ends an eval ``interval`` or a phase.

        False without ``curriculum.eval``, before the first step of this process (a resumed run
        evaluated its checkpoint's step before saving it), and once :meth:`evaluate` ran for that
        step. ``Curriculum.eval_due``: call it between ``step.finish()`` and the checkpoint save.
        """
        span = self._last_span
        return self.evaluator is not None and span is not None and self.evaluator.is_due(*span[:2])

    def evaluate(
        self,
        engine: EngineLike,
        forward: Callable[[MicroBatch], Any] | None,
        position: Position,
        next_phase_idx: int,
        dynamic: Reweighter | None,
        monitor: CurriculumMonitor | None,
    ) -> EvalRow:
        """``curriculum.eval``'s row at ``position``, handed to ``dynamic`` and ``monitor``.

        Labelled with the last finished step's phase, or, before any step of this process, with
        the phase the next step draws from (``next_phase_idx``). A method steering by held-out
        losses observes them; the row goes to the ds_config's monitors (``curriculum/eval/...``).
        """
        assert self.evaluator is not None
        if self._last_span is not None:
            phase_idx, phase_name = self._last_span[2:]
        else:
            phase_idx = min(next_phase_idx, self.schedule.num_phases - 1)
            phase_name = self.schedule.names[phase_idx]
        at = (position.global_step, position.consumed_tokens, phase_idx, phase_name)
        row = self._run(self.evaluator, engine, forward, at)
        self._last_span = None
        if dynamic is not None:
            dynamic.observe_eval(position.global_step, stream_losses(row))
        if monitor is not None:
            monitor.write_eval(row)
        return row

    def probe(
        self, engine: EngineLike, forward: Callable[[MicroBatch], Any] | None,
        at: tuple[int, int, int, str],
    ) -> Mapping[str, float]:  # fmt: skip
        """The method's own held-out losses by stream at ``(step, tokens, phase_idx, name)``."""
        assert self._probe_evaluator is not None
        return stream_losses(self._run(self._probe_evaluator, engine, forward, at))

    def _run(
        self, evaluator: Evaluator, engine: EngineLike, forward: Callable[[MicroBatch], Any] | None,
        at: tuple[int, int, int, str],
    ) -> EvalRow:  # fmt: skip
        step, tokens, phase_idx, phase_name = at
        row = evaluator.evaluate(
            engine, forward, step=step, tokens=tokens, phase_idx=phase_idx, phase_name=phase_name
        )
        self._timer.leave_out(row["eval_time_s"])  # not training time
        return row
