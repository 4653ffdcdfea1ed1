"""A step's micro-batches on this rank, each taken when the loop first uses it.

``step.micro_batches`` is a :class:`StepMicroBatches`: a read-only sequence (``len``, indexing,
iteration) whose item ``k`` is taken from the read-ahead (:class:`~curriculum_ds.plugin.prefetch.
StepFeed`) the first time the loop asks for it, so micro-batch ``k + 1`` and later ones are read
on the prefetch thread while micro-batch ``k`` computes. Taking an item is what moves the
read-ahead's window; the time the training thread spent waiting for it is added to
:attr:`StepMicroBatches.data_wait_s`. A list of micro-batches (a step built by hand) becomes one
whose items are all there already.

The loss-bearing tokens of each row (``labels[:, 1:] != -100``) are known before any read when
rows are not document-masked: ``max(length - 1, 0)`` of the row's index length after truncation
(:attr:`StepMicroBatches.row_counts`), so the step's normaliser does not wait for the reads.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, overload

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt
    import torch

    from curriculum_ds.core.microbatch import MicroBatch

    Take = Callable[[int], tuple[MicroBatch, float, bool]]
    """``take(k) -> (micro-batch k on the device, seconds waited, read on the prefetch thread)``."""

__all__ = ["StepMicroBatches"]


class StepMicroBatches(Sequence["MicroBatch"]):
    """This rank's micro-batches of one step, in order, each taken on first use.

    Args:
        positions: each micro-batch's positions in the global batch.
        take: ``take(k)`` reads (or waits for) micro-batch ``k``; None when all are given.
        row_counts: per micro-batch, int64 ``(micro_batch_size,)`` loss-bearing tokens of each
            row, known before the read; None (document masking): counted from the labels.

    Attributes:
        data_wait_s: seconds the training thread spent taking the micro-batches so far (the
            draw's own time included by the feed).
        prefetched: how many of the taken ones were read on the prefetch thread.
    """

    def __init__(
        self,
        positions: list[npt.NDArray[np.int64]],
        take: Take | None,
        *,
        row_counts: list[npt.NDArray[np.int64]] | None = None,
    ) -> None:
        self.positions = positions
        self.row_counts = row_counts
        self._take = take
        self._items: list[MicroBatch | None] = [None] * len(positions)
        self.data_wait_s = 0.0
        self.prefetched = 0

    @classmethod
    def of(
        cls, micro_batches: Sequence[MicroBatch], device: torch.device | str
    ) -> StepMicroBatches:
        """``micro_batches`` as a step's sequence: itself, or a list's items moved to ``device``."""
        if isinstance(micro_batches, StepMicroBatches):
            return micro_batches
        items = [mb.to(device) for mb in micro_batches]
        out = cls([mb.positions for mb in items], None)
        out._items = list(items)
        return out

    def put(self, idx: int, mb: MicroBatch) -> None:
        """Hold micro-batch ``idx``, read by the feed at the draw (on the training thread)."""
        self._items[idx] = mb

    def __len__(self) -> int:
        return len(self._items)

    @overload
    def __getitem__(self, idx: int) -> MicroBatch: ...

    @overload
    def __getitem__(self, idx: slice) -> list[MicroBatch]: ...

    def __getitem__(self, idx: int | slice) -> MicroBatch | list[MicroBatch]:
        if isinstance(idx, slice):
            return [self[k] for k in range(*idx.indices(len(self)))]
        k = range(len(self))[idx]  # IndexError past the end, negatives from it
        mb = self._items[k]
        if mb is None:
            assert self._take is not None  # a list's items are all there
            mb, waited, on_thread = self._take(k)
            self._items[k] = mb
            self.data_wait_s += waited
            self.prefetched += on_thread
        return mb

    def __iter__(self) -> Iterator[MicroBatch]:
        for k in range(len(self)):
            yield self[k]

    def index_of(self, mb: MicroBatch) -> int | None:
        """The index of ``mb`` (the same object) among the micro-batches taken, or None."""
        for k, item in enumerate(self._items):
            if item is mb:
                return k
        return None

    def __repr__(self) -> str:
        taken = sum(item is not None for item in self._items)
        return f"StepMicroBatches({len(self)} micro-batches, {taken} taken)"
