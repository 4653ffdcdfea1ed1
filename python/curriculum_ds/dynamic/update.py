"""What a recompute hands back to its caller: the loader's new inputs and the history record."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

__all__ = ["BucketUpdate", "MixtureUpdate"]


@dataclass(frozen=True)
class MixtureUpdate:
    """A recompute's outcome: what the loader applies, and the ``curriculum_history`` record.

    Attributes:
        buckets: ``unit: "buckets"``: per stream of the phase, int64 ``(num_samples,)`` bucket
            of every sample, in ``[0, num_buckets)``; the loader applies it
            (``PhaseLoader.set_buckets``). None when unchanged (the previous weights were kept)
            or with ``unit: "streams"``.
        record: the ``curriculum_history.jsonl`` fields after the step and phase
            (:class:`~curriculum_ds.records.schema.HistoryRow`: ``unit``, ``signal``,
            ``weights`` summing to 1, ``scores``, ...; ``kept_previous: true`` when the previous
            weights were kept).
        proportions: ``unit: "streams"``: float64 ``(num_streams,)`` summing to 1, the phase's
            new stream proportions, in its ``proportion_unit`` (``PhaseLoader.set_proportions``).
            None when unchanged or with ``unit: "buckets"``.
    """

    buckets: list[npt.NDArray[np.int64]] | None
    record: dict[str, Any]
    proportions: npt.NDArray[np.float64] | None = None


BucketUpdate = MixtureUpdate
"""The name of :class:`MixtureUpdate` from when only buckets were weighted."""
