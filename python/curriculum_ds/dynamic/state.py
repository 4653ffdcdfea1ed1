"""A re-weighting's saved state: one typed model per (unit, method), a tagged union.

A method's :meth:`~curriculum_ds.dynamic.protocol.Reweighter.state` hands back its own model and
its ``start_phase`` takes any of them back (a checkpoint on a phase boundary may hold another
unit's). Each model holds only what its method keeps (no padding keys); :meth:`to_dict` writes
the saved form every version-1 checkpoint has, key for key (the stream unit's empty
``last_loss``/``buckets``/``edges`` included, arrays as they are, dtypes kept), and
:func:`parse_dynamic_state` reads one back: a saved state is tagged by its ``unit`` (absent:
``"buckets"``, as every state saved before units existed) and its ``method`` (absent:
``"softmax"``, the only one before methods had names), and a malformed one is refused in one
line naming the key (``dynamic.window.values``). A new method adds its model to
:data:`DynamicState` (its own keys in a sub-state named after it; a format change bumps
``STATE_VERSION``). Pure Python and numpy: no torch, no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, ClassVar

from pydantic import BeforeValidator, Discriminator, Tag, TypeAdapter, ValidationError

from curriculum_ds.core.saved import FloatArray, IntArray, refusal
from curriculum_ds.dynamic.method_states import (
    AioliRoundState,
    DoReMiState,
    DoReMiSubState,
    FileSourceState,
    StreamADOState,
    StreamAioliState,
    StreamFileState,
    StreamODMState,
    StreamSkillitState,
)
from curriculum_ds.dynamic.state_common import BucketWindowState, StreamWindowState, _Common

__all__ = [
    "TAGS",
    "AioliRoundState",
    "BucketSoftmaxState",
    "BucketWindowState",
    "DoReMiState",
    "DoReMiSubState",
    "DynamicState",
    "FileSourceState",
    "StreamADOState",
    "StreamAioliState",
    "StreamFileState",
    "StreamODMState",
    "StreamSkillitState",
    "StreamSoftmaxState",
    "StreamWindowState",
    "parse_dynamic_state",
]

_EMPTY_IF_NONE = BeforeValidator(lambda v: () if v is None else v)


class BucketSoftmaxState(_Common):
    """The state of ``method: "softmax"`` over ``unit: "buckets"`` (``BucketReweighter``).

    Attributes:
        window: the rolling window of per-sample signals.
        last_loss: per stream, float32 ``(num_samples,)`` latest signal (NaN: unseen).
        buckets: per stream, int8 ``(num_samples,)`` bucket assignment (None: not recorded).
        edges: float64 ``(num_buckets - 1,)`` of the last recompute, or None.
    """

    unit: ClassVar[str] = "buckets"
    method: ClassVar[str] = "softmax"

    window: BucketWindowState
    last_loss: tuple[FloatArray, ...]
    buckets: tuple[IntArray, ...] | None = None
    edges: FloatArray | None

    @property
    def window_capacity(self) -> int:
        """Signals the rolling window holds at most."""
        return self.window.capacity

    def to_dict(self) -> dict[str, Any]:
        """The saved form, in its order.

        ``unit``, ``signal`` and ``reference_metric`` come only with a signal other than
        ``"loss"`` (as before signals existed).
        """
        out: dict[str, Any] = {}
        if self.signal != "loss":
            out.update(unit=self.unit, signal=self.signal, reference_metric=self.reference_metric)
        out.update(
            phase_idx=self.phase_idx,
            probs=self.probs,
            window=self.window.to_dict(),
            last_loss=list(self.last_loss),
            buckets=None if self.buckets is None else list(self.buckets),
            edges=self.edges,
            num_recomputes=self.num_recomputes,
        )
        return out


class StreamSoftmaxState(_Common):
    """The state of ``method: "softmax"`` over ``unit: "streams"`` (``StreamReweighter``).

    Attributes:
        window: the rolling window of per-sample signals and their streams.
        mean_losses: learnability: each stream's mean loss at the phase's last recomputes,
            float64 ``(num_streams,)`` each, oldest first; else empty.
    """

    unit: ClassVar[str] = "streams"
    method: ClassVar[str] = "softmax"

    window: StreamWindowState
    mean_losses: Annotated[tuple[FloatArray, ...], _EMPTY_IF_NONE] = ()

    @property
    def window_capacity(self) -> int:
        """Signals the rolling window holds at most."""
        return self.window.capacity

    def to_dict(self) -> dict[str, Any]:
        """The saved form, in its order.

        The bucket unit's keys (``last_loss`` empty, ``buckets`` and ``edges`` None, as the
        format has them) and ``mean_losses`` when there are any.
        """
        out: dict[str, Any] = {
            "unit": self.unit,
            "signal": self.signal,
            "reference_metric": self.reference_metric,
            "phase_idx": self.phase_idx,
            "probs": self.probs,
            "window": self.window.to_dict(),
            "last_loss": [],
            "buckets": None,
            "edges": None,
            "num_recomputes": self.num_recomputes,
        }
        if self.mean_losses:
            out["mean_losses"] = list(self.mean_losses)
        return out


_Saved = (
    BucketSoftmaxState
    | StreamSoftmaxState
    | DoReMiState
    | StreamFileState
    | StreamAioliState
    | StreamSkillitState
    | StreamODMState
    | StreamADOState
)
"""Every state model (the union :data:`DynamicState` tags)."""

_MODELS: tuple[type[_Saved], ...] = (
    BucketSoftmaxState,
    StreamSoftmaxState,
    DoReMiState,
    StreamFileState,
    StreamAioliState,
    StreamSkillitState,
    StreamODMState,
    StreamADOState,
)
TAGS = frozenset(f"{m.unit}/{m.method}" for m in _MODELS)
"""``"unit/method"`` of every state model (pydantic's tags: not part of a key's path)."""


def _tag(value: Any) -> str | None:
    """``"unit/method"`` of a saved state (absent or None: ``buckets``, ``softmax``)."""
    if isinstance(value, _Common):
        return f"{value.unit}/{value.method}"
    if not isinstance(value, Mapping):
        return None
    return f"{value.get('unit') or 'buckets'}/{value.get('method') or 'softmax'}"


DynamicState = Annotated[
    Annotated[BucketSoftmaxState, Tag("buckets/softmax")]
    | Annotated[StreamSoftmaxState, Tag("streams/softmax")]
    | Annotated[DoReMiState, Tag("streams/doremi")]
    | Annotated[StreamFileState, Tag("streams/file")]
    | Annotated[StreamAioliState, Tag("streams/aioli")]
    | Annotated[StreamSkillitState, Tag("streams/skillit")]
    | Annotated[StreamODMState, Tag("streams/odm")]
    | Annotated[StreamADOState, Tag("streams/ado")],
    Discriminator(_tag),
]
"""Any re-weighting state, tagged on (unit, method)."""

_ADAPTER: TypeAdapter[_Saved] = TypeAdapter(DynamicState)


def parse_dynamic_state(saved: Any) -> _Saved:
    """Check and read a saved re-weighting state (a model is returned as is). Deterministic.

    Extra keys are ignored.

    Raises:
        ResumeError: ``checkpoint curriculum state: ...`` naming the missing or mistyped key
            (``dynamic.probs``), or the (unit, method) no model reads.
    """
    if isinstance(saved, _MODELS):
        return saved
    try:
        return _ADAPTER.validate_python(saved)
    except ValidationError as exc:
        raise refusal(exc, "dynamic", TAGS) from None
