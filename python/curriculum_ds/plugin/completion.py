"""Completing an optimizer step: what a finished step hands back, and what the run makes of it.

A :class:`~curriculum_ds.plugin.step.Step` does not know its curriculum: when it finishes it
hands a :class:`~curriculum_ds.records.schema.StepOutcome` (plain values) to the completion
callback it was built with. The curriculum's callback calls :func:`complete_step`, which turns
the outcome into the run's next :class:`~curriculum_ds.core.position.Position` and
:class:`SkipCounts`, feeds the dynamic re-weighting (and hands back its update, which the
caller applies to the loader), and builds the step's metrics row
(:func:`~curriculum_ds.records.schema.metrics_row`) and, on a recompute, its history row.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from fractions import Fraction
from typing import TYPE_CHECKING

from curriculum_ds.dynamic.protocol import ProbingReweighter
from curriculum_ds.records.schema import StepOutcome, history_row, metrics_row

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from curriculum_ds.core.loader import PhaseLoader
    from curriculum_ds.core.position import Position
    from curriculum_ds.core.schedule import Progress
    from curriculum_ds.dynamic import MixtureUpdate, Reweighter
    from curriculum_ds.records.schema import HistoryRow, MetricsRow

__all__ = ["Completion", "SkipCounts", "StepTimer", "complete_step", "step_progress"]

NONFINITE_REASONS = ("nonfinite_loss", "nonfinite_grad_norm")
"""The ``skip_reason`` values of a step whose global loss or gradient norm was NaN/inf."""


@dataclass(frozen=True, kw_only=True)
class SkipCounts:
    """Steps of this process that did not update the model.

    Attributes:
        num_skipped_steps: steps without loss-bearing tokens (``"no_loss_tokens"``).
        num_nonfinite_steps: steps whose global loss or gradient norm was NaN/inf.
        consecutive_nonfinite_steps: how many of those came last, in a row.
    """

    num_skipped_steps: int = 0
    num_nonfinite_steps: int = 0
    consecutive_nonfinite_steps: int = 0

    def after(self, skip_reason: str | None) -> SkipCounts:
        """The counts one step later, that step's ``skip_reason`` given.

        A step without loss-bearing tokens leaves the non-finite run as it is; an updating step
        (``None``) ends it. Pure.
        """
        if skip_reason in NONFINITE_REASONS:
            return replace(
                self,
                num_nonfinite_steps=self.num_nonfinite_steps + 1,
                consecutive_nonfinite_steps=self.consecutive_nonfinite_steps + 1,
            )
        if skip_reason is None:
            return replace(self, consecutive_nonfinite_steps=0)
        return replace(
            self, num_skipped_steps=self.num_skipped_steps + int(skip_reason == "no_loss_tokens")
        )


class StepTimer:
    """Wall time per optimizer step for ``tokens_per_s``: evaluations are left out.

    Args:
        clock: the time source in seconds (``time.perf_counter``).
    """

    def __init__(self, clock: Callable[[], float] = time.perf_counter) -> None:
        self._clock = clock
        self._last: float | None = None

    def start(self) -> None:
        """Start timing at the first draw (later calls do nothing)."""
        if self._last is None:
            self._last = self._clock()

    def lap(self) -> float:
        """Seconds since the previous lap (or :meth:`start`); 0 before any start."""
        now = self._clock()
        elapsed = now - (self._last if self._last is not None else now)
        self._last = now
        return elapsed

    def leave_out(self, seconds: float) -> None:
        """Leave ``seconds`` (an evaluation's wall time) out of the next lap."""
        if self._last is not None:
            self._last += seconds


def step_progress(unit: str, step_tokens: int, num_samples: int, samples_per_pass: int) -> Progress:
    """A step's progress in the schedule's unit: its tokens (``tok``) or its passes (``ep``).

    Args:
        unit: ``"tok"`` or ``"ep"``.
        step_tokens: the step's non-padding input tokens (global).
        num_samples: the step's samples (the global batch size).
        samples_per_pass: samples in one pass over the phase's datamix (``ep`` only).

    Returns:
        ``step_tokens`` (int) for ``tok``; the exact Fraction ``num_samples / samples_per_pass``
        for ``ep``. Pure.
    """
    return step_tokens if unit == "tok" else Fraction(num_samples, samples_per_pass)


@dataclass(frozen=True)
class Completion:
    """What :func:`complete_step` returns: the run's counters after the step, and its rows."""

    position: Position
    """The run's position after the step."""
    counts: SkipCounts
    """The skip counts after the step."""
    metrics: MetricsRow
    """The step's ``metrics.jsonl`` row."""
    history: HistoryRow | None
    """Its ``curriculum_history.jsonl`` row when it recomputed the weights, else None."""
    update: MixtureUpdate | None = None
    """A recompute's update, for the caller to apply to the loader (``PhaseLoader.apply``)."""


def complete_step(
    outcome: StepOutcome,
    *,
    position: Position,
    counts: SkipCounts,
    unit: str,
    loader: PhaseLoader,
    dynamic: Reweighter | None,
    timer: StepTimer,
    phase_epochs: float | None = None,
    data_wait_s: float = 0.0,
    prefetched: int = 0,
    seq_len: int | None = None,
    probe: Callable[[], Mapping[str, float]] | None = None,
) -> Completion:
    """The run after ``outcome``: counters, skip counts, re-weighting, the step's rows.

    Args:
        outcome: the finished step.
        position: the run's position before it.
        counts: the skip counts before it.
        unit: the schedule's unit, ``"tok"`` (progress counts ``step_tokens``) or ``"ep"``
            (progress counts the step's samples over the phase's ``samples_per_pass``).
        loader: the phase's loader (read only: its passes for ``ep`` and ``phase_epochs``).
        dynamic: the re-weighting, or None; it observes the step's per-sample losses (when the
            outcome has them) and may recompute at the new ``global_step``.
        timer: laps once, after the re-weighting (the step's time includes it).
        phase_epochs: the phase's passes after the step; default ``loader.epochs_done()`` (the
            caller gives it when the loader has already decided the next step's batch).
        data_wait_s: seconds the step's draw waited for its micro-batches (the row's field).
        prefetched: how many of them were read ahead (the row's field).
        seq_len: the length the step's samples were cut to, in a phase with a ``max_seq_len``
            ramp (the row's field); None otherwise.
        probe: evaluates the held-out streams of a method that evaluates at its own steps
            (:class:`~curriculum_ds.dynamic.protocol.ProbingReweighter`) and returns the loss
            per stream name; called (collective) after the step when the method's
            ``probe_due`` says so, before ``maybe_recompute``.

    Returns:
        The :class:`Completion`. Deterministic but for ``tokens_per_s``.
    """
    num_samples = len(outcome.samples)
    after = position.advanced(
        step_tokens=outcome.step_tokens,
        num_samples=num_samples,
        progress=step_progress(unit, outcome.step_tokens, num_samples, loader.samples_per_pass),
    )
    history = update = None
    if dynamic is not None and outcome.sample_losses is not None:
        dynamic.observe(outcome.samples, outcome.sample_losses)
        step = after.global_step
        if probe is not None and isinstance(dynamic, ProbingReweighter) and dynamic.probe_due(step):
            dynamic.observe_probe(step, probe())
        update = dynamic.maybe_recompute(step)
        if update is not None and update.record is not None:
            history = history_row(
                step=after.global_step,
                phase=outcome.phase_idx,
                phase_name=outcome.phase_name,
                record=update.record,
            )
    row = metrics_row(
        outcome,
        tokens=after.consumed_tokens,
        samples=after.consumed_samples,
        progress=str(after.progress),
        elapsed_s=timer.lap(),
        phase_epochs=loader.epochs_done() if phase_epochs is None else phase_epochs,
        data_wait_s=data_wait_s,
        prefetched=prefetched,
        seq_len=seq_len,
    )
    return Completion(after, counts.after(outcome.skip_reason), row, history, update)
