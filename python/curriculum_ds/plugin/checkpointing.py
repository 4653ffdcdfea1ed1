"""A curriculum's saved state: ``state_dict``/``load_state_dict`` and DeepSpeed checkpoints.

:class:`CheckpointingMixin` is the checkpoint concern of :class:`~curriculum_ds.plugin.
curriculum.Curriculum`, kept in its own module: where the curriculum stands
(:class:`~curriculum_ds.checkpoint.state.CurriculumState`), moving it to a resume plan's position,
and the two calls each way to the checkpoint package
(:func:`curriculum_ds.checkpoint.engine_io.save` and :func:`~curriculum_ds.checkpoint.engine_io.
resume`), which own files, tags, the ``latest`` protocol and the resume rules.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from curriculum_ds.checkpoint import engine_io
from curriculum_ds.checkpoint.files import SavedTag
from curriculum_ds.checkpoint.rules import ResumePlan, check_resume
from curriculum_ds.checkpoint.state import CurriculumState
from curriculum_ds.core.loader_state import LoaderState
from curriculum_ds.dynamic import DynamicState, Reweighter, make_reweighter
from curriculum_ds.errors import BucketingError, ResumeError, SamplingError
from curriculum_ds.records.monitors import resume_monitors

if TYPE_CHECKING:
    from collections.abc import Mapping

    from curriculum_ds.config import CurriculumConfig
    from curriculum_ds.core.loader import PhaseLoader
    from curriculum_ds.core.position import Position
    from curriculum_ds.plugin.engine_like import EngineLike
    from curriculum_ds.plugin.prefetch import StepFeed
    from curriculum_ds.records.monitors import CurriculumMonitor

__all__ = ["CheckpointingMixin"]


class CheckpointingMixin:
    """Checkpointing of a :class:`~curriculum_ds.plugin.curriculum.Curriculum` (its base class).

    Uses the curriculum's engine, config, position, phase loader and pending restore states,
    declared below; everything about files and formats is behind the checkpoint package.
    """

    engine: EngineLike
    config: CurriculumConfig
    position: Position
    dynamic: Reweighter | None
    global_batch_size: int
    resumed_from: Path | None
    monitor: CurriculumMonitor | None
    _loader: PhaseLoader | None
    _pending_loader: LoaderState | None
    _pending_dynamic: DynamicState | None
    _exhausted: bool
    _feed: StepFeed
    order_version: Literal[1, 2]

    if TYPE_CHECKING:  # the curriculum's own, used here

        @property
        def is_done(self) -> bool:
            """True once ``max_duration`` is reached."""

        @property
        def global_step(self) -> int:
            """Optimizer steps finished."""

        def _close_loader(self) -> None: ...
        def _phase_loader(self) -> PhaseLoader: ...
        def _check_between_steps(self, what: str) -> None: ...
        def _check_nonfinite_limit(self) -> None: ...

    # ------------------------------------------------------------------------------ state
    def _state(self) -> CurriculumState:
        """Where the curriculum stands: its position and the loader/re-weighting states."""
        loader = self._loader
        return CurriculumState.of(
            self.config,
            self.position,
            # a batch the prefetch decided early is not consumed: the counters before it
            loader=self._feed.loader_state(loader) if loader is not None else self._pending_loader,
            dynamic=(
                None if self.dynamic is None else (self._pending_dynamic or self.dynamic.state())
            ),
            order_version=self.order_version,
        )

    def _move_to(
        self, position: Position, *, loader: LoaderState | None, dynamic: DynamicState | None
    ) -> None:
        """Move to ``position``; the loader and re-weighting states apply when its loader opens."""
        self._close_loader()
        self.position = position
        self._pending_loader = loader
        self._pending_dynamic = dynamic
        self._exhausted = False

    def _apply(self, plan: ResumePlan, saved: CurriculumState | None) -> None:
        """Continue where ``plan`` (already checked against this config) says, from ``saved``.

        The saved loader and re-weighting states (typed, so well-formed) are restored now, so one
        that does not fit the phase's streams is refused here and not at the next draw; nothing
        changes then.

        Raises:
            ResumeError: ``checkpoint curriculum state: cannot be restored (...)``: what does
                not fit.
        """
        previous = self._state()
        self.order_version = plan.order_version
        if saved is None:  # a checkpoint without curriculum: the schedule starts at phase 0
            self._move_to(plan.position, loader=None, dynamic=None)
            return
        self._move_to(
            plan.position,
            loader=None if plan.is_new_phase else saved.loader,
            # the first phase started after a resume gets the saved re-weighting state: all of
            # it inside that phase, the probabilities alone on a boundary (BucketReweighter)
            dynamic=saved.dynamic,
        )
        if self.is_done:
            return
        try:  # restore now; these are the loader's and the kernels' "does not fit" errors
            self._phase_loader()
        except (ValueError, SamplingError, BucketingError) as exc:
            self.order_version = previous.drawn_order
            self._move_to(previous.position, loader=previous.loader, dynamic=previous.dynamic)
            raise ResumeError(
                f"checkpoint curriculum state: cannot be restored ({type(exc).__name__}: "
                f"{str(exc).splitlines()[0] if str(exc) else exc!r})"
            ) from None

    def state_dict(self) -> dict[str, Any]:
        """The curriculum's checkpoint state (:meth:`CurriculumState.to_dict` form).

        Plain ints/strings/lists plus numpy arrays for the re-weighting window; put it in
        DeepSpeed's ``client_state`` (``save_checkpoint`` does) or anywhere ``torch.save`` goes.

        Raises:
            StepError: a step is in flight (drawn, not finished).
        """
        self._check_between_steps("state_dict")
        return self._state().to_dict()

    def load_state_dict(self, state: Mapping[str, Any] | CurriculumState) -> list[str]:
        """Continue from a saved state under this (possibly edited) schedule.

        Applies the resume rules (:func:`curriculum_ds.checkpoint.rules.check_resume`):
        completed phases frozen, the current phase's data frozen and its duration at least what
        it consumed, later phases free. The continuation draws the same samples as the
        uninterrupted run would have.

        Args:
            state: what :meth:`state_dict` returned (read back from a checkpoint).

        Returns:
            Notes on accepted edits (e.g. a phase appended), one line each.

        Raises:
            ResumeError: one line naming the phase and field of the first forbidden change, or
                what is wrong with the saved state (naming the key). Nothing changes then.
            StepError: a step is in flight.
        """
        self._check_between_steps("load_state_dict")
        plan = check_resume(self.config, state)
        self._apply(plan, CurriculumState.from_dict(state))
        return list(plan.notes)

    # ------------------------------------------------------------------------ checkpoints
    def save_checkpoint(
        self, save_dir: str | os.PathLike[str], *, client_state: dict[str, Any] | None = None
    ) -> Path:
        """A DeepSpeed checkpoint ``save_dir/global_step<N>``, then ``latest`` moved to it.

        Collective. The curriculum state goes in ``client_state["curriculum"]`` beside the
        user's own ``client_state``. ``latest`` is written last and atomically (a temporary file
        renamed over it) once every rank's files are on disk, so a kill at any moment leaves the
        previous ``latest`` valid.

        Args:
            save_dir: the checkpoints folder (``RUN_DIR/checkpoints`` in the reference loop).
            client_state: more entries for DeepSpeed's ``client_state`` (not ``curriculum``).

        Returns:
            The tag folder written.

        Raises:
            StepError: a step is in flight (nothing is written).
            NonFiniteLossError: the last ``curriculum.max_consecutive_nonfinite`` steps all had a
                NaN/inf loss (nothing is written: the last good checkpoint stays ``latest``).
        """
        self._check_between_steps("save_checkpoint")
        self._check_nonfinite_limit()
        state = {**(client_state or {}), "curriculum": self.state_dict()}
        tag = f"global_step{self.global_step}"
        return engine_io.save(self.engine, Path(save_dir), tag, state)

    def load_checkpoint(
        self,
        load_dir: str | os.PathLike[str] | SavedTag,
        *,
        tag: str | None = None,
        plan: ResumePlan | None = None,
    ) -> Path | None:
        """Load engine and curriculum from a checkpoint; a no-op when there is none.

        The tag's files are read once, and the resume rules are checked against its curriculum
        state before DeepSpeed loads anything, so a refused resume leaves the engine untouched. A
        ZeRO checkpoint of another data-parallel world size is converted once to DeepSpeed's
        universal format (``<tag>_universal`` beside it) and loaded from there; with the same
        global batch size the run continues with the uninterrupted run's global batches. Another
        global batch size is accepted with one ``curriculum_ds: note:`` line on stderr (rank 0).
        A DeepSpeed checkpoint without curriculum state starts the schedule at its first phase
        and keeps the engine's step count. On global rank 0 the ds_config's ``csv_monitor`` and
        ``tensorboard`` are cut back to the loaded step
        (:func:`~curriculum_ds.records.monitors.resume_monitors`); the run dir's JSONL files are
        the loop's (:func:`~curriculum_ds.records.jsonl.truncate_records`, which ``RunLog``
        calls).

        Args:
            load_dir: a checkpoints folder (with ``latest``) or one tag folder; or the tag
                already read (:func:`curriculum_ds.checkpoint.files.open_tag`), which is not read
                again.
            tag: the tag to load; default: what ``latest`` names.
            plan: with a read tag, ``check_resume(self.config, load_dir)`` when the caller
                checked it already (the reference loop does, before DeepSpeed starts); it is not
                checked again then.

        Returns:
            The tag folder loaded, or None when ``load_dir`` holds no checkpoint (no ``latest``
            and no tag files): a fresh start.

        Raises:
            ResumeError: the resume rules refuse the checkpoint (names the phase and field), its
                files cannot be read, or DeepSpeed cannot load it.
            StepError: a step is in flight.
        """
        self._check_between_steps("load_checkpoint")
        loaded = engine_io.resume(
            self.engine,
            self.config,
            load_dir if isinstance(load_dir, SavedTag) else Path(load_dir),
            tag=tag,
            plan=plan,
            global_batch_size=self.global_batch_size,
        )
        if loaded is None:
            return None
        saved, plan, state = loaded
        if state is None and self.dynamic is not None:  # a DeepSpeed run without curriculum
            self.dynamic = make_reweighter(self.config.dynamic)
        self._apply(plan, state)
        self.resumed_from = saved.path
        if self.monitor is not None:  # rank 0's CSV/TensorBoard cut back to this step
            samples = int(getattr(self.engine, "global_samples", 0))
            resume_monitors(self.monitor.monitor, self.global_step, samples)
        return self.resumed_from
