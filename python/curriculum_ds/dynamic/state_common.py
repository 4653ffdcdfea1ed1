"""What every re-weighting's saved state shares: the rolling windows and the common keys.

:mod:`curriculum_ds.dynamic.state` (softmax's states and the tagged union) and
:mod:`curriculum_ds.dynamic.method_states` (the published methods') build on these. Pure Python
and numpy: no torch, no I/O.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar, Literal

from curriculum_ds.core.saved import FloatArray, Int, IntArray, SavedModel

if TYPE_CHECKING:
    from curriculum_ds.config import DynamicConfig

__all__ = ["BucketWindowState", "StreamWindowState", "_Common", "method_keys"]


class BucketWindowState(SavedModel):
    """The bucket unit's rolling window (``kernels.RollingWindow.state_dict``).

    Attributes:
        capacity: losses it holds at most.
        values: its finite values, oldest first (float32 as the kernel keeps them).
        num_non_finite: non-finite values left out so far.
    """

    capacity: Int
    values: FloatArray
    num_non_finite: Int

    def to_dict(self) -> dict[str, Any]:
        """The saved form: ``capacity``, ``values``, ``num_non_finite``."""
        return {
            "capacity": self.capacity,
            "values": self.values,
            "num_non_finite": self.num_non_finite,
        }


class StreamWindowState(BucketWindowState):
    """The stream unit's window (``StreamWindow.state_dict``): ``streams``, int32 per value."""

    streams: IntArray

    def to_dict(self) -> dict[str, Any]:
        """The saved form: ``capacity``, ``values``, ``streams``, ``num_non_finite``."""
        return {
            "capacity": self.capacity,
            "values": self.values,
            "streams": self.streams,
            "num_non_finite": self.num_non_finite,
        }


class _Common(SavedModel):
    """What every re-weighting state has.

    Attributes:
        phase_idx: the phase it was taken in (None before any phase started).
        signal: ``dynamic.signal`` of the run that saved it.
        reference_metric: excess loss: the column the window's signals were taken against
            (None otherwise, and in states saved before it was recorded).
        probs: float64 weights now: ``(num_buckets,)`` bucket probabilities or
            ``(num_streams,)`` stream weights.
        num_recomputes: recomputes so far in the run, ≥ 0.
        method_keys: a published method's own section (``dynamic.<method>``, JSON values) of
            the run that saved it, which a resume inside the phase may not change (None:
            ``softmax``, and states saved before it was recorded).
    """

    unit: ClassVar[str]
    method: ClassVar[str]

    phase_idx: Int | None = None
    method_keys: dict[str, Any] | None = None
    signal: Literal["loss", "excess_loss", "learnability"] = "loss"
    reference_metric: str | None = None
    probs: FloatArray
    num_recomputes: Int

    @property
    def num_buckets(self) -> int:
        """``len(probs)``."""
        return len(self.probs)


def method_keys(cfg: DynamicConfig) -> dict[str, Any] | None:
    """``cfg``'s method section as a state records it (JSON values); None for ``softmax``."""
    section = cfg.method_config
    return None if section is None else section.model_dump(mode="json")
