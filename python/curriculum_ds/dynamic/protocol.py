"""The surface every re-weighting method has: :class:`Reweighter`.

A re-weighting is driven by its caller (``plugin.Curriculum``) the same way whatever its method:

1. :meth:`~Reweighter.start_phase` when a phase's loader opens (with the saved state on a
   resume); it returns the :class:`~curriculum_ds.dynamic.update.MixtureUpdate` the loader starts
   the phase with;
2. every optimizer step :meth:`~Reweighter.observe` with the step's global per-sample losses,
   then :meth:`~Reweighter.maybe_recompute`, which returns an update on a recompute step;
3. after every held-out evaluation, :meth:`~Reweighter.observe_eval` with the loss per eval
   stream (methods that steer by held-out losses read it; the others ignore it); a method
   that needs evaluations at its own steps (:class:`ProbingReweighter`: Aioli after each
   probe, Skill-it at each update) says so with :meth:`~ProbingReweighter.probe_due`, and the
   caller evaluates its held-out streams after that step, before ``maybe_recompute``, and
   hands it the losses (:meth:`~ProbingReweighter.observe_probe`; not in ``eval.jsonl``);
4. :meth:`~Reweighter.state` when a checkpoint is saved (its typed state,
   :mod:`curriculum_ds.dynamic.state`).

Every update goes to the loader through one call, ``PhaseLoader.apply``. Everything a method
decides must be a deterministic function of what it observed (the same all-gathered losses on
every rank), so ranks hold bit-identical weights without a broadcast; a method that reads an
outside file or fits a model decides on rank 0 and broadcasts inside its own calls.

Methods are found by name through :mod:`curriculum_ds.dynamic.registry` (``dynamic.method``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, ClassVar, Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt

if TYPE_CHECKING:
    from curriculum_ds.config import DynamicConfig
    from curriculum_ds.dynamic.state import DynamicState
    from curriculum_ds.dynamic.update import MixtureUpdate, PhaseView

__all__ = ["ProbingReweighter", "Reweighter"]


class Reweighter(Protocol):
    """A re-weighting method over one unit (``"buckets"`` or ``"streams"``).

    Class attributes:
        method: Its ``dynamic.method`` name (the registry's key).
        units: The ``dynamic.unit`` values it supports.
    """

    method: ClassVar[str]
    units: ClassVar[frozenset[str]]

    def __init__(self, cfg: DynamicConfig) -> None: ...

    @property
    def num_buckets(self) -> int:
        """Buckets of each stream's sampler (1: samples drawn uniformly inside a stream)."""
        ...

    @property
    def num_recomputes(self) -> int:
        """Recomputes so far in the run (the checkpoint carries it over phases)."""
        ...

    def start_phase(self, view: PhaseView, saved: DynamicState | None) -> MixtureUpdate:
        """Start a phase; restore ``saved`` (a :meth:`state`, of any method) when resuming.

        Returns:
            The update the phase's loader starts with (its ``record`` is None).

        Raises:
            ConfigError: a metric column the method reads is missing or not finite.
        """
        ...

    def observe(self, batch: npt.NDArray[np.int64], losses: npt.NDArray[np.float64]) -> None:
        """Record a step's global per-sample losses.

        Args:
            batch: int64 ``(global_batch_size, 2)`` of ``(stream_idx, sample_idx)``.
            losses: float64 ``(global_batch_size,)`` mean token loss per sample (nats), NaN for
                a sample without loss-bearing tokens.
        """
        ...

    def observe_eval(self, global_step: int, losses: Mapping[str, float]) -> None:
        """Record a held-out evaluation: mean token loss (nats) per eval stream name."""
        ...

    def maybe_recompute(self, global_step: int) -> MixtureUpdate | None:
        """After ``global_step`` (1-based): the update of a recompute, else None."""
        ...

    def state(self) -> DynamicState:
        """Everything a resume needs, as the method's own state model.

        One of :data:`~curriculum_ds.dynamic.state.DynamicState` (its ``to_dict`` is the saved
        form).
        """
        ...


@runtime_checkable
class ProbingReweighter(Reweighter, Protocol):
    """A method that evaluates held-out streams at its own steps (Aioli, Skill-it).

    The caller evaluates the streams of the method's ``eval_streams`` (or ``curriculum.eval``'s
    of the train streams' names; :func:`curriculum_ds.plugin.evaluation.probe_eval_config`)
    with the run's exact-over-ranks evaluation, on every rank, after every step for which
    :meth:`probe_due` is true, then calls :meth:`observe_probe`, then ``maybe_recompute``.
    """

    def probe_due(self, global_step: int) -> bool:
        """Whether the method evaluates after ``global_step``; pure (asked again after it).

        Known while the step is drawn (the read-ahead of the next step waits for it).
        """
        ...

    def observe_probe(self, global_step: int, losses: Mapping[str, float]) -> None:
        """The losses of a :meth:`probe_due` evaluation: mean token loss (nats) per stream name."""
        ...
