"""Micro-batches read ahead, off the training thread (``curriculum.prefetch_micro_batches``).

Two kinds of work make a step's micro-batches, and only one of them may run ahead:

* **Deciding the samples** (:meth:`~curriculum_ds.core.loader.PhaseLoader.next_global_batch`) stays
on
  the training thread, in the order of an unprefetched run. The next step's global batch is
  decided early (at the draw of this one) only when nothing due before it can change the
  decision: no re-weighting recompute at the end of this step (it re-buckets the samplers and
  moves the probabilities), no phase swap or end of the schedule, no evaluation. The decision is
  a pure function of the loader's counters, the bucket probabilities and the step's start
  ``fraction`` of its phase, and all three are known then, so the early batch is the batch an
  unprefetched run draws.
* **Reading and collating them** (the loader's own read,
  :meth:`~curriculum_ds.core.sample_reader.SampleReader.micro_batch`, called unchanged) runs on
  one daemon thread for the first ``prefetch_micro_batches`` micro-batches of that next step,
  while this step computes; pinned memory on CUDA, so the copy to the device is ``non_blocking``.

A batch decided early is not consumed: :meth:`StepFeed.loader_state` and
:meth:`StepFeed.epochs_done` give the loader's counters *before* that decision, so a checkpoint
(and a kill -9 after it) never counts it, and a resume decides it again, identically. A failure
in the thread (a corrupt shard, a download error) is re-raised on the training thread when the
step that needs the micro-batch is drawn: the same one-line error as without prefetch.

The pattern is PyTorch's ``DataLoader`` pin-memory thread (a bounded producer one step ahead),
with the sampler kept on the consumer's side as in Megatron-LM's ``MegatronPretrainingSampler``.
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

if TYPE_CHECKING:
    from collections.abc import Callable

    import numpy.typing as npt
    import torch

    from curriculum_ds.core.loader import MicroBatch, PhaseLoader
    from curriculum_ds.core.loader_state import LoaderState
    from curriculum_ds.core.schedule import PhaseSchedule, Progress
    from curriculum_ds.plugin.evaluation import Evaluator

__all__ = ["Drawn", "PrefetchThread", "StepFeed", "next_step_settled"]

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
class _Ahead:
    """The next step's global batch, decided early, and its micro-batches being read."""

    key: tuple[int, Progress]  # (phase_idx, start progress) of the step it was decided for
    batch: npt.NDArray[np.int64]
    state_before: LoaderState  # the loader's counters before the decision
    epochs_before: float
    futures: list[Future[MicroBatch]] = field(default_factory=list)


@dataclass(frozen=True)
class Drawn:
    """A step's global batch and this rank's micro-batches, on the engine's device."""

    batch: npt.NDArray[np.int64]
    """int64 ``(global_batch_size, 2)`` of ``(stream_idx, sample_idx)``, in global order."""
    micro_batches: list[MicroBatch]
    """This rank's micro-batches, on the device."""
    data_wait_s: float
    """Seconds the training thread spent deciding, waiting for, reading and copying them."""
    prefetched: int
    """How many of them were read ahead by the prefetch thread."""


class StepFeed:
    """A step's micro-batches, with the next step's read ahead when nothing due can change them.

    Args:
        depth: ``curriculum.prefetch_micro_batches``, micro-batches read ahead (0: none, every
            micro-batch is read on the training thread when its step is drawn).
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
        self._ahead: _Ahead | None = None
        self.num_prefetched = 0
        """Micro-batches of this process read ahead by the thread and used by a step."""

    @property
    def pending(self) -> int:
        """Micro-batches of the next step submitted to the thread and not taken yet."""
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

    def _read(
        self, loader: PhaseLoader, batch: npt.NDArray[np.int64], positions: npt.NDArray[np.int64]
    ) -> MicroBatch:
        """Read one micro-batch as the loader reads it (padded in bulk; documents masked)."""
        return loader.reader.micro_batch(batch[positions], positions, loader.seq_len)

    def _read_pinned(
        self, loader: PhaseLoader, batch: npt.NDArray[np.int64], positions: npt.NDArray[np.int64]
    ) -> MicroBatch:
        mb = self._read(loader, batch, positions)
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
            DownloadError: a micro-batch cannot be read (from the thread or this one).
        """
        start = time.perf_counter()
        ahead, self._ahead = self._ahead, None
        if ahead is not None and ahead.key != key:  # not the step it was decided for
            self._cancel(ahead)
            loader.restore(ahead.state_before)
            ahead = None
        if ahead is None:
            batch = loader.next_global_batch(global_batch_size, probs, fraction=fraction)
            futures: list[Future[MicroBatch]] = []
        else:
            batch, futures = ahead.batch, ahead.futures
        micro_batches = []
        try:
            for idx, positions in enumerate(self._positions(len(batch))):
                mb = (
                    futures[idx].result()
                    if idx < len(futures)
                    else self._read(loader, batch, positions)
                )
                micro_batches.append(mb.to(self._device, non_blocking=self._pin))
        except BaseException:
            self._cancel_futures(futures)
            raise
        self.num_prefetched += len(futures)
        return Drawn(batch, micro_batches, time.perf_counter() - start, len(futures))

    def read_ahead(
        self,
        loader: PhaseLoader,
        global_batch_size: int,
        probs: npt.NDArray[np.float64] | None,
        *,
        fraction: float,
        key: tuple[int, Progress],
    ) -> None:
        """Decide the next step's batch now and read its first ``depth`` micro-batches ahead.

        Call only when nothing due before that step can change its decision (no recompute,
        phase swap, end or evaluation); ``key`` is its ``(phase_idx, start progress)``.
        """
        if self.depth == 0:
            return
        state_before, epochs_before = loader.state(), loader.epochs_done()
        batch = loader.next_global_batch(global_batch_size, probs, fraction=fraction)
        ahead = _Ahead(key, batch, state_before, epochs_before)
        for positions in self._positions(len(batch))[: self.depth]:
            ahead.futures.append(
                self._thread.submit(partial(self._read_pinned, loader, batch, positions))
            )
        self._ahead = ahead

    def loader_state(self, loader: PhaseLoader) -> LoaderState:
        """The loader's counters as a checkpoint saves them: a batch decided early not counted."""
        return loader.state() if self._ahead is None else self._ahead.state_before

    def epochs_done(self, loader: PhaseLoader) -> float:
        """The phase's passes so far, a batch decided early not counted."""
        return loader.epochs_done() if self._ahead is None else self._ahead.epochs_before

    def discard(self) -> None:
        """Drop the early batch and its reads (the loader is closing: its counters go with it)."""
        ahead, self._ahead = self._ahead, None
        if ahead is not None:
            self._cancel(ahead)

    def _cancel(self, ahead: _Ahead) -> None:
        self._cancel_futures(ahead.futures)

    @staticmethod
    def _cancel_futures(futures: list[Future[MicroBatch]]) -> None:
        for future in futures:
            future.cancel()
        for future in futures:  # a read in progress ends before the loader may close
            if not future.cancelled():
                future.exception()

    def close(self) -> None:
        """Drop the early batch and stop the thread. Safe twice."""
        self.discard()
        self._thread.close()
