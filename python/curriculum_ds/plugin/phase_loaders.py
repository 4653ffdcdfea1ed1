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
from typing import TYPE_CHECKING

from curriculum_ds.core.loader import PhaseLoader

if TYPE_CHECKING:
    from curriculum_ds.config import CurriculumConfig
    from curriculum_ds.core.loader_state import LoaderState
    from curriculum_ds.dynamic import DynamicState, Reweighter
    from curriculum_ds.plugin.prefetch import StepFeed

__all__ = ["PhaseLoaders"]


class PhaseLoaders:
    """One phase's loader at a time, over ``config``'s schedule; ``feed`` reads ahead from it."""

    def __init__(self, config: CurriculumConfig, feed: StepFeed) -> None:
        self.config = config
        self.feed = feed
        self.current: PhaseLoader | None = None
        # what the next loader built restores (then None): set by a resume
        self._pending_loader: LoaderState | None = None
        self._pending_dynamic: DynamicState | None = None

    def at(
        self, phase_idx: int, dynamic: Reweighter | None, run_dir: str | Path | None
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

    def expect(self, loader: LoaderState | None, dynamic: DynamicState | None) -> None:
        """Close the open loader; the next one restores these states.

        ``loader`` if it is of the new loader's phase; the re-weighting starts from ``dynamic``.
        """
        self.close()
        self._pending_loader = loader
        self._pending_dynamic = dynamic

    def saved(self, dynamic: Reweighter | None) -> tuple[LoaderState | None, DynamicState | None]:
        """The loader's and the re-weighting's states as a checkpoint holds them now."""
        loader = self.current
        return (
            # a batch the prefetch decided early is not consumed: the counters before it
            self.feed.loader_state(loader) if loader is not None else self._pending_loader,
            None if dynamic is None else (self._pending_dynamic or dynamic.state()),
        )
