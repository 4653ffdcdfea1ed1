"""Micro-batches read ahead, off the training thread (``curriculum.prefetch_micro_batches``).

Two kinds of work make a step's micro-batches, and only one of them may run ahead:

* **Deciding the samples** (:meth:`~curriculum_ds.core.loader.PhaseLoader.next_global_batch`) stays
  on the training thread, in the order of an unprefetched run. The next step's global batch is
  decided early (at the draw of this one) only when nothing due before it can change the
  decision: no re-weighting recompute at the end of this step (it re-buckets the samplers and
  moves the probabilities), no phase swap or end of the schedule, no evaluation. The decision is
  a pure function of the loader's counters, the bucket probabilities and the step's start
  ``fraction`` of its phase, and all three are known then, so the early batch is the batch an
  unprefetched run draws.
* **Reading and collating them** (the loader's own read,
  :meth:`~curriculum_ds.core.sample_reader.SampleReader.micro_batch`, called unchanged) runs on
  one daemon thread, a bounded producer over the micro-batches decided so far (this step's, then
  the next step's when it is decided): when the loop takes micro-batch *k* of a step
  (:class:`~curriculum_ds.plugin.micro_batches.StepMicroBatches`), those up to *k* + ``depth`` are
  submitted, in order, across the step boundary; pinned memory on CUDA, so the copy to the device
  is ``non_blocking``. A step not decided early (the first of a process, the step after a
  recompute, an evaluation or a phase swap) reads its first micro-batch on the training thread
  when drawn; the thread reads all others. Which micro-batch is read where depends only on the
  loop's order of takes, never on the thread's timing: ``prefetched`` is the step's
  micro-batches less that first one when it was not decided early (``depth`` 0: none).

A batch decided early is not consumed: :meth:`StepFeed.loader_state` and
:meth:`StepFeed.epochs_done` give the loader's counters *before* that decision, so a checkpoint
(and a kill -9 after it) never counts it, and a resume decides it again, identically. A failure
in the thread (a corrupt shard, a download error) is re-raised on the training thread when the
loop takes that micro-batch: the same one-line error as without prefetch.

The pattern is PyTorch's ``DataLoader`` pin-memory thread (a bounded producer), with the sampler
kept on the consumer's side as in Megatron-LM's ``MegatronPretrainingSampler``.
"""

from __future__ import annotations

import queue
import threading
import time
from concurrent.futures import Future
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING, Any

import numpy as np

from curriculum_ds.plugin.micro_batches import StepMicroBatches

if TYPE_CHECKING:
    from collections.abc import Callable

    import numpy.typing as npt
    import torch

    from curriculum_ds.core.loader import MicroBatch, PhaseLoader
    from curriculum_ds.core.loader_state import LoaderState
    from curriculum_ds.core.schedule import PhaseSchedule, Progress
    from curriculum_ds.plugin.evaluation import Evaluator

__all__ = ["Drawn", "PrefetchThread", "StepFeed", "next_step_settled"]

Key = tuple[int, "Progress"]
"""``(phase_idx, start progress)`` of a step: what a batch decided early is checked against."""

_JOIN_TIMEOUT_S = 10.0


def next_step_settled(
    schedule: PhaseSchedule,
    phase_idx: int,
    start: Progress,
    end: Progress,
    *,
    step: int,
    recompute_every: int | None,
    evaluator: Evaluator | None,
) -> bool:
    """Whether the step after ``step`` can be decided now, while ``step`` is being drawn.

    Not when ``step`` ends with a re-weighting recompute (new buckets and probabilities), a phase
    swap or the end of the schedule, or an evaluation: the next step is then decided when it is
    drawn, as without prefetch.

    Args:
        schedule: the run's phase boundaries.
        phase_idx: ``step``'s phase.
        start: the run's progress before ``step`` (the schedule's unit).
        end: the run's progress after ``step``.
        step: the step being drawn (1-based, global).
        recompute_every: ``dynamic.recompute_every_n_steps``, or None without re-weighting.
        evaluator: the held-out evaluation, or None.
    """
    if schedule.is_done(end) or schedule.phase_at(end) != phase_idx:
        return False
    if recompute_every is not None and step % recompute_every == 0:
        return False
    return evaluator is None or not evaluator.is_due(start, end)


class PrefetchThread:
    """One daemon thread running read jobs in the order they are submitted.

    Started on the first :meth:`submit`; :meth:`close` cancels the jobs not started, lets the
    one in progress end, and joins the thread (daemon, so a read stuck in a download never keeps
    the process alive at exit).
    """

    def __init__(self) -> None:
        self._jobs: queue.SimpleQueue[tuple[Future[Any], Callable[[], Any]] | None] = (
            queue.SimpleQueue()
        )
        self._thread: threading.Thread | None = None

    def submit(self, job: Callable[[], Any]) -> Future[Any]:
        """Queue ``job``; its future holds its result or its exception."""
        if self._thread is None:
            self._thread = threading.Thread(
                target=self._run, name="curriculum-ds-prefetch", daemon=True
            )
            self._thread.start()
        future: Future[Any] = Future()
        self._jobs.put((future, job))
        return future

    def _run(self) -> None:
        while (item := self._jobs.get()) is not None:
            future, job = item
            if not future.set_running_or_notify_cancel():
                continue  # cancelled before it started
            try:
                future.set_result(job())
            except BaseException as err:  # re-raised on the training thread by .result()
                future.set_exception(err)

    @property
    def alive(self) -> bool:
        """Whether the thread is running."""
        return self._thread is not None and self._thread.is_alive()

    def close(self) -> None:
        """Stop the thread: queued jobs are cancelled, the running one finishes. Safe twice."""
        thread, self._thread = self._thread, None
        if thread is None:
            return
        while True:  # cancel what has not started
            try:
                item = self._jobs.get_nowait()
            except queue.Empty:
                break
            if item is not None:
                item[0].cancel()
        self._jobs.put(None)
        thread.join(_JOIN_TIMEOUT_S)


@dataclass
class _Planned:
    """A step's global batch, decided, and this rank's micro-batches being read."""

    key: Key  # the step it was decided for
    batch: npt.NDArray[np.int64]
    seq_len: int  # the step's truncation (a warmup moves the loader's with the next decision)
    positions: list[npt.NDArray[np.int64]]
    row_counts: list[npt.NDArray[np.int64]] | None  # None: document masking
    state_before: LoaderState  # the loader's counters before the decision
    epochs_before: float
    # per micro-batch in order: its read on the thread, or None where the training thread read it
    futures: list[Future[MicroBatch] | None] = field(default_factory=list)


@dataclass(frozen=True)
class Drawn:
    """A step's global batch and this rank's micro-batches, taken on the engine's device."""

    batch: npt.NDArray[np.int64]
    """int64 ``(global_batch_size, 2)`` of ``(stream_idx, sample_idx)``, in global order."""
    micro_batches: StepMicroBatches
    """This rank's micro-batches, each taken (moved to the device) when first used."""

    @property
    def data_wait_s(self) -> float:
        """Seconds the training thread spent deciding, waiting for, reading and copying them."""
        return self.micro_batches.data_wait_s

    @property
    def prefetched(self) -> int:
        """How many of the micro-batches taken so far were read on the prefetch thread."""
        return self.micro_batches.prefetched


class StepFeed:
    """A step's micro-batches, read by a bounded producer up to ``depth`` micro-batches ahead.

    Args:
        depth: ``curriculum.prefetch_micro_batches``: while micro-batch *k* computes, those up to
            *k* + ``depth`` are read (0: none, every micro-batch is read on the training thread
            when its step is drawn).
        dp_rank / dp_world_size / micro_batch_size: this rank's slice of a global batch.
        device: the engine's device; on CUDA the read-ahead micro-batches are pinned and copied
            with ``non_blocking=True``.
    """

    def __init__(
        self,
        depth: int,
        *,
        dp_rank: int,
        dp_world_size: int,
        micro_batch_size: int,
        device: torch.device | str,
    ) -> None:
        import torch

        self.depth = depth
        self._dp_rank = dp_rank
        self._dp_world_size = dp_world_size
        self._micro_batch_size = micro_batch_size
        self._device = torch.device(device)
        self._pin = self._device.type == "cuda"
        self._thread = PrefetchThread()
        self._loader: PhaseLoader | None = None
        self._current: _Planned | None = None  # the step drawn last
        self._cursor = 0  # the highest index of it taken (the read-ahead's window starts there)
        self._ahead: _Planned | None = None  # the next step, decided early
        self.num_prefetched = 0
        """Micro-batches of this process read by the thread and taken by a step."""

    @property
    def pending(self) -> int:
        """Micro-batches of the next step submitted to the thread (none taken yet)."""
        return 0 if self._ahead is None else len(self._ahead.futures)

    def _positions(self, global_batch_size: int) -> list[npt.NDArray[np.int64]]:
        """This rank's micro-batches as positions in the global batch (its contiguous slice)."""
        per_rank = global_batch_size // self._dp_world_size
        start = self._dp_rank * per_rank
        step = self._micro_batch_size
        return [
            np.arange(offset, offset + step, dtype=np.int64)
            for offset in range(start, start + per_rank, step)
        ]

    def _plan(self, loader: PhaseLoader, decide: Callable[[], Any], key: Key) -> _Planned:
        """Decide the batch of the step at ``key`` (``decide()`` moves the loader's counters)."""
        state_before, epochs_before = loader.state(), loader.epochs_done()
        batch = decide()
        positions = self._positions(len(batch))
        row_counts = None
        if not loader.reader.masks_documents:  # loss-bearing tokens per row: length - 1
            lengths = np.zeros(len(batch), dtype=np.int64)
            for stream, tokens in enumerate(loader.num_tokens):  # truncated to this seq_len
                rows = np.flatnonzero(batch[:, 0] == stream)
                lengths[rows] = tokens[batch[rows, 1]]
            per_row = np.maximum(lengths - 1, 0)
            row_counts = [per_row[p] for p in positions]
        seq_len = loader.seq_len
        return _Planned(key, batch, seq_len, positions, row_counts, state_before, epochs_before)

    def _read(
        self, loader: PhaseLoader, batch: npt.NDArray[np.int64], positions: npt.NDArray[np.int64],
        seq_len: int,
    ) -> MicroBatch:  # fmt: skip
        """Read one micro-batch as the loader reads it (padded in bulk; documents masked)."""
        return loader.reader.micro_batch(batch[positions], positions, seq_len)

    def _read_pinned(
        self, loader: PhaseLoader, batch: npt.NDArray[np.int64], positions: npt.NDArray[np.int64],
        seq_len: int,
    ) -> MicroBatch:  # fmt: skip
        mb = self._read(loader, batch, positions, seq_len)
        return mb.pin_memory() if self._pin else mb

    def draw(
        self,
        loader: PhaseLoader,
        global_batch_size: int,
        probs: npt.NDArray[np.float64] | None,
        *,
        fraction: float,
        key: tuple[int, Progress],
    ) -> Drawn:
        """This step's batch and micro-batches: the early ones when decided for ``key``.

        Args:
            loader: the phase's loader.
            global_batch_size: samples of the step, all ranks.
            probs: the bucket probabilities (None: uniform).
            fraction: the step's start progress in its phase, in [0, 1].
            key: ``(phase_idx, start progress)`` of the step.

        Raises:
            DownloadError: a micro-batch read on this thread cannot be read (one read on the
                prefetch thread raises when the loop takes it).
        """
        start = time.perf_counter()
        ahead, self._ahead = self._ahead, None
        if ahead is not None and ahead.key != key:  # not the step it was decided for
            self._cancel_futures(ahead.futures)
            loader.restore(ahead.state_before)
            ahead = None
        decide = partial(loader.next_global_batch, global_batch_size, probs, fraction=fraction)
        planned = ahead or self._plan(loader, decide, key)
        self._loader, self._current, self._cursor = loader, planned, 0
        micro_batches = StepMicroBatches(
            planned.positions, partial(self._take, planned), row_counts=planned.row_counts
        )
        eager = len(planned.positions) if self.depth == 0 else 1
        if not planned.futures:  # not read ahead: the first one (all without prefetch) here
            for idx, positions in enumerate(planned.positions[:eager]):
                mb = self._read(loader, planned.batch, positions, planned.seq_len)
                micro_batches.put(idx, mb.to(self._device))
                planned.futures.append(None)
        micro_batches.data_wait_s = time.perf_counter() - start
        self._fill(0)  # the window's reads are queued, not waited for (as ``read_ahead``'s)
        return Drawn(planned.batch, micro_batches)

    def _take(self, planned: _Planned, idx: int) -> tuple[MicroBatch, float, bool]:
        """Micro-batch ``idx`` of ``planned``'s step (``StepMicroBatches``'s ``take``).

        The time waited is the read's (here, or the thread's not done yet) and the copy; the
        window's next reads are queued after it (waking the thread is not waiting for data).
        """
        current = planned is self._current
        if current:
            self._cursor = max(self._cursor, idx)
            if idx >= len(planned.futures):  # taken past the window: queue up to it first
                self._fill(self._cursor)
        start = time.perf_counter()
        future = planned.futures[idx] if idx < len(planned.futures) else None
        if future is None:  # a step no longer the feed's (closed): read here
            assert self._loader is not None
            mb = self._read(self._loader, planned.batch, planned.positions[idx], planned.seq_len)
        else:
            mb = future.result()
            self.num_prefetched += 1
        mb = mb.to(self._device, non_blocking=self._pin)
        waited = time.perf_counter() - start
        if current:
            self._fill(self._cursor)
        return mb, waited, future is not None

    def _fill(self, taken: int) -> None:
        """Submit, in order, the micro-batches to ``taken + depth``: the step's, then the next's."""
        loader = self._loader
        if self.depth == 0 or self._current is None or loader is None:
            return
        last = taken + self.depth
        for planned in (self._current, self._ahead):
            if planned is None:
                return
            while len(planned.futures) <= min(last, len(planned.positions) - 1):
                positions = planned.positions[len(planned.futures)]
                job = partial(self._read_pinned, loader, planned.batch, positions, planned.seq_len)
                planned.futures.append(self._thread.submit(job))
            last -= len(planned.positions)

    def read_ahead(
        self,
        loader: PhaseLoader,
        global_batch_size: int,
        probs: npt.NDArray[np.float64] | None,
        *,
        fraction: float,
        key: tuple[int, Progress],
    ) -> None:
        """Decide the next step's batch now; its micro-batches join the read-ahead's window.

        Call only when nothing due before that step can change its decision (no recompute,
        phase swap, end or evaluation); ``key`` is its ``(phase_idx, start progress)``.
        """
        if self.depth == 0:
            return
        decide = partial(loader.next_global_batch, global_batch_size, probs, fraction=fraction)
        self._ahead = self._plan(loader, decide, key)
        self._fill(self._cursor)

    def loader_state(self, loader: PhaseLoader) -> LoaderState:
        """The loader's counters as a checkpoint saves them: a batch decided early not counted."""
        return loader.state() if self._ahead is None else self._ahead.state_before

    def epochs_done(self, loader: PhaseLoader) -> float:
        """The phase's passes so far, a batch decided early not counted."""
        return loader.epochs_done() if self._ahead is None else self._ahead.epochs_before

    def discard(self) -> None:
        """Drop the early batch and every read not taken (the loader is closing)."""
        for planned in (self._current, self._ahead):
            if planned is not None:
                self._cancel_futures(planned.futures)
        self._current = self._ahead = None

    @staticmethod
    def _cancel_futures(futures: list[Future[MicroBatch] | None]) -> None:
        for future in futures:
            if future is not None:
                future.cancel()
        for future in futures:  # a read in progress ends before the loader may close
            if future is not None and not future.cancelled():
                future.exception()

    def close(self) -> None:
        """Drop the early batch and stop the thread. Safe twice."""
        self.discard()
        self._thread.close()
