"""The rolling window of ``unit: "streams"``: the last N finite per-sample signals, with streams.

The bucket unit's window (:class:`~curriculum_ds.kernels.RollingWindow`, Rust) needs order
statistics over millions of values; the stream unit needs only a sum and a count per stream, so
its window is two numpy rings (signal and stream index). Means are taken over the window in
arrival order, oldest first, whatever the ring's physical layout: a window rebuilt from a
checkpoint gives bit-identical means.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

__all__ = ["StreamWindow"]


class StreamWindow:
    """The last ``capacity`` finite per-sample signals and the stream each came from.

    Args:
        capacity: Samples kept at most (global across dp ranks), ≥ 1.

    Non-finite signals are not kept; they are counted in :attr:`num_non_finite` (case C06).
    Deterministic: the same pushes give the same state on every rank.
    """

    def __init__(self, capacity: int):
        if capacity < 1:
            raise ValueError(f"window capacity must be >= 1, got {capacity}")
        self.capacity = int(capacity)
        self._values = np.zeros(0, dtype=np.float64)  # grown to capacity as samples arrive
        self._streams = np.zeros(0, dtype=np.int32)
        self._next = 0  # where the next value goes once the ring is full
        self.num_non_finite = 0

    def __len__(self) -> int:
        return len(self._values)

    def push(self, values: npt.NDArray[np.float64], streams: npt.NDArray[np.int64]) -> None:
        """Append a step's signals, float64 ``(n,)``, and their stream indices, int ``(n,)``.

        The oldest values leave once the window is full; non-finite ones are counted, not kept.
        """
        finite = np.isfinite(values)
        self.num_non_finite += int(len(values) - finite.sum())
        v = np.asarray(values[finite], dtype=np.float64)[-self.capacity :]
        s = np.asarray(streams[finite], dtype=np.int32)[-self.capacity :]
        room = self.capacity - len(self._values)
        if room > 0:  # still filling: append (then wrap what did not fit)
            self._values = np.concatenate([self._values, v[:room]])
            self._streams = np.concatenate([self._streams, s[:room]])
            v, s = v[room:], s[room:]
        if len(v):
            at = (self._next + np.arange(len(v))) % self.capacity
            self._values[at] = v
            self._streams[at] = s
            self._next = int((self._next + len(v)) % self.capacity)

    def ordered(self) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.int32]]:
        """The window oldest first: ``(values float64 (n,), streams int32 (n,))``, copies."""
        if self._next == 0:
            return self._values.copy(), self._streams.copy()
        order = np.r_[self._next : len(self._values), 0 : self._next]
        return self._values[order], self._streams[order]

    def values(self) -> npt.NDArray[np.float64]:
        """The window's signals oldest first, float64 ``(n,)`` (as ``RollingWindow.values``)."""
        return self.ordered()[0]

    def stream_means(
        self, num_streams: int
    ) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.float64]]:
        """Per stream, the window's sample count and mean signal.

        Returns:
            ``(counts, means)``: int64 and float64 ``(num_streams,)``; a stream without a sample
            in the window has mean NaN. Summed in arrival order, so deterministic.
        """
        values, streams = self.ordered()
        counts = np.bincount(streams, minlength=num_streams).astype(np.int64)
        sums = np.bincount(streams, weights=values, minlength=num_streams)
        means = np.divide(sums, counts, out=np.full(num_streams, np.nan), where=counts > 0)
        return counts, means

    def state_dict(self) -> dict[str, Any]:
        """The saved form: ``capacity``, ``values`` (float64, oldest first), ``streams``, counts.

        Returns:
            A dict of plain ints and numpy arrays (copies).
        """
        values, streams = self.ordered()
        return {
            "capacity": self.capacity,
            "values": values,
            "streams": streams,
            "num_non_finite": self.num_non_finite,
        }

    @classmethod
    def from_state_dict(cls, state: dict[str, Any]) -> StreamWindow:
        """The window :meth:`state_dict` saved.

        Raises:
            ValueError: more values than the capacity, or values and streams of other lengths.
        """
        window = cls(int(state["capacity"]))
        values = np.asarray(state["values"], dtype=np.float64).reshape(-1)
        streams = np.asarray(state["streams"], dtype=np.int32).reshape(-1)
        if len(values) > window.capacity or len(values) != len(streams):
            raise ValueError(
                f"stream window state: {len(values)} values and {len(streams)} streams for a "
                f"capacity of {window.capacity}"
            )
        window._values, window._streams = values.copy(), streams.copy()
        window.num_non_finite = int(state["num_non_finite"])
        return window
