"""The checkpoint component: a :class:`CurriculumState` saved and loaded with DeepSpeed's.

:class:`Checkpointer` saves and loads the state it is given, as torchtitan's checkpointer does:
it knows the engine, the config, and its target through a small protocol, :class:`Restorable`
(:class:`~curriculum_ds.plugin.curriculum.Curriculum` is one): the state to save, a move to a
position, and the opening of that position's phase. Everything about files, tags, the ``latest``
protocol and the resume rules is behind the checkpoint package
(:func:`curriculum_ds.checkpoint.engine_io.save`, :func:`~curriculum_ds.checkpoint.engine_io.
resume`, :func:`~curriculum_ds.checkpoint.rules.check_resume`).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Protocol

from curriculum_ds.checkpoint import engine_io
from curriculum_ds.checkpoint.files import SavedTag
from curriculum_ds.checkpoint.rules import ResumePlan, check_resume
from curriculum_ds.checkpoint.state import CurriculumState
from curriculum_ds.errors import BucketingError, ResumeError, SamplingError
from curriculum_ds.records.monitors import resume_monitors

if TYPE_CHECKING:
    from collections.abc import Mapping

    from curriculum_ds.config import CurriculumConfig
    from curriculum_ds.core.loader_state import LoaderState
    from curriculum_ds.core.position import Position
    from curriculum_ds.dynamic import DynamicState
    from curriculum_ds.plugin.engine_like import EngineLike
    from curriculum_ds.records.monitors import CurriculumMonitor

__all__ = ["Checkpointer", "Restorable"]


class Restorable(Protocol):
    """What a :class:`Checkpointer` saves and restores."""

    def curriculum_state(self) -> CurriculumState:
        """Where it stands now (what a checkpoint holds)."""
        ...

    def move_to(
        self,
        position: Position,
        loader: LoaderState | None,
        dynamic: DynamicState | None,
        order_version: Literal[1, 2],
    ) -> None:
        """Continue from ``position`` in ``order_version``.

        ``loader`` and ``dynamic`` apply when its loader opens.
        """
        ...

    def open_phase(self) -> None:
        """Open the loader of the position's phase now (none once the schedule is done).

        Raises the loader's and the kernels' errors when a state to restore does not fit.
        """
        ...


class Checkpointer:
    """Saves and loads a :class:`Restorable`'s state with ``engine``'s DeepSpeed checkpoints.

    Args:
        engine: the DeepSpeed engine (or :class:`~curriculum_ds.plugin.engine_like.EngineLike`).
        config: the ``curriculum`` section the resume rules check a saved state against.
        target: what is saved and restored.
        global_batch_size: this run's samples per optimizer step (a checkpoint of another is
            accepted with a note).
        monitor: rank 0's DeepSpeed monitors, cut back to a loaded step; None without.
    """

    def __init__(
        self,
        engine: EngineLike,
        config: CurriculumConfig,
        target: Restorable,
        global_batch_size: int,
        monitor: CurriculumMonitor | None,
    ) -> None:
        self.engine = engine
        self.config = config
        self.target = target
        self.global_batch_size = global_batch_size
        self.monitor = monitor

    def load_state(self, state: Mapping[str, Any] | CurriculumState) -> list[str]:
        """Check ``state`` by the resume rules and restore it; the rules' notes on edits."""
        plan = check_resume(self.config, state)
        self.restore(plan, CurriculumState.from_dict(state))
        return list(plan.notes)

    def restore(self, plan: ResumePlan, saved: CurriculumState | None) -> None:
        """Move the target where ``plan`` (checked against the config) says, from ``saved``.

        The saved loader and re-weighting states are restored now, so one that does not fit the
        phase's streams is refused here and the target is left where it was. ``saved`` None (a
        DeepSpeed checkpoint without curriculum state): the schedule starts at its first phase.

        Raises:
            ResumeError: ``checkpoint curriculum state: cannot be restored (...)``: what does
                not fit.
        """
        if saved is None:
            self.target.move_to(plan.position, None, None, plan.order_version)
            return
        previous = self.target.curriculum_state()
        # the first phase started after a resume gets the saved re-weighting state: all of it
        # inside that phase, the probabilities alone on a boundary (BucketReweighter)
        loader = None if plan.is_new_phase else saved.loader
        self.target.move_to(plan.position, loader, saved.dynamic, plan.order_version)
        try:  # these are the loader's and the kernels' "does not fit" errors
            self.target.open_phase()
        except (ValueError, SamplingError, BucketingError) as exc:
            back = previous.position, previous.loader, previous.dynamic, previous.drawn_order
            self.target.move_to(*back)
            first = str(exc).splitlines()[0] if str(exc) else repr(exc)
            raise ResumeError(
                f"checkpoint curriculum state: cannot be restored ({type(exc).__name__}: {first})"
            ) from None

    def save(self, save_dir: Path, *, client_state: dict[str, Any] | None) -> Path:
        """Collective: ``save_dir/global_step<N>``, the state in ``client_state["curriculum"]``.

        ``latest`` is written last and atomically (a temporary file renamed over it) once every
        rank's files are on disk, so a kill at any moment leaves the previous ``latest`` valid.
        """
        state = self.target.curriculum_state()
        saved = {**(client_state or {}), "curriculum": state.to_dict()}
        tag = f"global_step{state.position.global_step}"
        return engine_io.save(self.engine, save_dir, tag, saved)

    def load(
        self,
        load_dir: str | os.PathLike[str] | SavedTag,
        *,
        tag: str | None,
        plan: ResumePlan | None,
    ) -> tuple[Path, CurriculumState | None] | None:
        """Load the engine and restore the target from a checkpoint (None: there is none).

        The tag's files are read once, and the resume rules are checked against its curriculum
        state before DeepSpeed loads anything, so a refused resume leaves the engine untouched
        (:func:`~curriculum_ds.checkpoint.engine_io.resume`). A ZeRO checkpoint of another
        data-parallel world size is converted once to DeepSpeed's universal format
        (``<tag>_universal`` beside it) and loaded from there; with the same global batch size
        the run continues with the uninterrupted run's global batches, and another global batch
        size is accepted with one ``curriculum_ds: note:`` line on stderr (rank 0). Once the
        target is restored, rank 0's ``csv_monitor`` and ``tensorboard`` are cut back to the
        loaded step (:func:`~curriculum_ds.records.monitors.resume_monitors`).

        Args:
            load_dir: a checkpoints folder (with ``latest``), one tag folder, or the tag already
                read (:func:`curriculum_ds.checkpoint.files.open_tag`), not read again.
            tag: the tag to load; default: what ``latest`` names.
            plan: with a read tag, its ``check_resume`` when the caller checked it already.

        Returns:
            The tag folder loaded and the curriculum state it held (None for a DeepSpeed
            checkpoint without one); None when ``load_dir`` holds no checkpoint.
        """
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
        saved, checked, state = loaded
        self.restore(checked, state)
        if self.monitor is not None:  # rank 0's CSV/TensorBoard cut back to this step
            samples = int(getattr(self.engine, "global_samples", 0))
            resume_monitors(self.monitor.monitor, checked.position.global_step, samples)
        return saved.path, state
