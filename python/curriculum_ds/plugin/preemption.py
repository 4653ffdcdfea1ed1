"""Preemption: SIGTERM becomes a request to stop after the current optimizer step.

SLURM (``scancel``, preemption, the end of ``--time``) and Kubernetes (pod eviction) send SIGTERM
and, after a grace period, SIGKILL. A :class:`StopSignal` replaces SIGTERM's default action (die
at once, mid-step, without a checkpoint) with a flag. Every rank's flag goes into the sum that
:meth:`~curriculum_ds.plugin.step.Step.finish` already all-reduces, so every rank learns at the
same step that one of them was signalled (``Curriculum.stop_requested``), whichever rank got the
signal and whenever it came: the loop then saves a checkpoint and leaves.

Further SIGTERMs only set the flag again: a launcher that forwards the signal to ranks that the
scheduler signalled too (DeepSpeed's ``launch.py``, torchrun) does not cut the save short. A
SIGKILL during the save leaves the previous ``latest`` in place (the checkpoint protocol).
"""

from __future__ import annotations

import signal
import threading
from typing import Any

__all__ = ["StopSignal"]


class StopSignal:
    """Catch SIGTERM in this process: record it instead of dying.

    Installed only from the main thread (Python delivers signals there; elsewhere it is a no-op
    and :attr:`received` stays None). :meth:`restore` puts the previous handler back.

    Attributes:
        received: the number of the first signal caught (``signal.SIGTERM``), or None.
        count: how many were caught.
    """

    def __init__(self, signals: tuple[signal.Signals, ...] = (signal.SIGTERM,)) -> None:
        self.received: int | None = None
        self.count = 0
        self._previous: dict[signal.Signals, Any] = {}
        if threading.current_thread() is threading.main_thread():
            for sig in signals:
                self._previous[sig] = signal.signal(sig, self._handle)

    def _handle(self, signum: int, frame: Any) -> None:
        if self.received is None:
            self.received = signum
        self.count += 1

    def caught(self) -> bool:
        """Whether a signal was caught (:attr:`received` is set): a step's stop flag."""
        return self.received is not None

    @property
    def installed(self) -> bool:
        """Whether the handler is in place (constructed in the main thread, not restored)."""
        return bool(self._previous)

    def restore(self) -> None:
        """Put the handlers back that were there before. Safe to call twice."""
        for sig, previous in self._previous.items():
            signal.signal(sig, previous)
        self._previous.clear()
