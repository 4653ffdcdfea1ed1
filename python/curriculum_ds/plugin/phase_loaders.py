"""The loader of the phase in progress, and the saved states the next one built restores.

:class:`PhaseLoaders` builds a phase's :class:`~curriculum_ds.core.loader.PhaseLoader` when the
phase starts (the exact swap at a boundary), hands the re-weighting method's start of the phase to
:meth:`~curriculum_ds.core.loader.PhaseLoader.apply`, restores a resume's loader state into it, and
closes it when the phase ends. What a checkpoint holds of them (:meth:`PhaseLoaders.saved`) is the
open loader's counters before a batch the prefetch decided early, or, before it opens, what a
resume left to restore.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Literal, TypedDict

from curriculum_ds.core.loader import PhaseLoader

if TYPE_CHECKING:
    from curriculum_ds.config import CurriculumConfig
    from curriculum_ds.core.loader_state import LoaderState
    from curriculum_ds.dynamic import DynamicState, Reweighter
    from curriculum_ds.plugin.prefetch import StepFeed

__all__ = ["PhaseLoaders", "SavedStates"]


class SavedStates(TypedDict):
    """What a checkpoint holds of the phase's loader and the re-weighting, and the order."""

    loader: LoaderState | None
    dynamic: DynamicState | None
    order_version: Literal[1, 2]


class PhaseLoaders:
    """One phase's loader at a time, over ``config``'s schedule; ``feed`` reads ahead from it."""

    def __init__(self, config: CurriculumConfig, feed: StepFeed) -> None:
        self.config = config
        self.feed = feed
        self.current: PhaseLoader | None = None
        # what the next loader built restores (then None): set by a resume
        self._pending_loader: LoaderState | None = None
        self._pending_dynamic: DynamicState | None = None
        # the order every loader draws in: a fresh run's, or (a resume) its checkpoint's
        self.order_version: Literal[1, 2] = config.fresh_order_version

    def at(
        self,
        phase_idx: int,
        dynamic: Reweighter | None,
        run_dir: str | Path | None,
    ) -> PhaseLoader:
        """The loader of phase ``phase_idx``: the open one, or (a phase swap) a new one."""
        if self.current is not None and self.current.phase_idx == phase_idx:
            return self.current
        self.close()
        loader = PhaseLoader(
            self.config.schedule[phase_idx],
            phase_idx,
            seed=self.config.seed,
            num_buckets=dynamic.num_buckets if dynamic is not None else 1,
            order_version=self.order_version,
        )
        if dynamic is not None:
            view = replace(loader.view(), run_dir=None if run_dir is None else Path(run_dir))
            loader.apply(dynamic.start_phase(view, self._pending_dynamic))
        saved = self._pending_loader
        if saved is not None and saved.phase_idx == phase_idx:
            loader.restore(saved)
        self._pending_loader = self._pending_dynamic = None
        self.current = loader
        return loader

    def close(self) -> None:
        """Close the open loader (a batch decided early goes with its counters)."""
        self.feed.discard()
        if self.current is not None:
            self.current.close()
            self.current = None

    def expect(
        self,
        loader: LoaderState | None,
        dynamic: DynamicState | None,
        order_version: Literal[1, 2],
    ) -> None:
        """Close the open loader; the next one restores these states.

        ``loader`` if it is of the new loader's phase; the re-weighting starts from ``dynamic``;
        the loaders draw in ``order_version`` from then on.
        """
        self.close()
        self.order_version = order_version
        self._pending_loader = loader
        self._pending_dynamic = dynamic

    def saved(self, dynamic: Reweighter | None) -> SavedStates:
        """What a checkpoint holds now: :meth:`CurriculumState.of`'s keyword arguments."""
        # a batch the prefetch decided early is not consumed: the counters before it
        loader = (
            self._pending_loader if self.current is None else self.feed.loader_state(self.current)
        )
        return {
            "loader": loader,
            "dynamic": None if dynamic is None else (self._pending_dynamic or dynamic.state()),
            "order_version": self.order_version,
        }
