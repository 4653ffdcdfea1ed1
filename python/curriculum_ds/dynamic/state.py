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
from typing import Annotated, Any, ClassVar, Literal

from pydantic import BeforeValidator, Discriminator, Tag, TypeAdapter, ValidationError

from curriculum_ds.core.saved import FloatArray, Int, IntArray, SavedModel, refusal

__all__ = [
    "TAGS",
    "BucketSoftmaxState",
    "BucketWindowState",
    "DoReMiState",
    "DoReMiSubState",
    "DynamicState",
    "FileSourceState",
    "StreamADOState",
    "StreamFileState",
    "StreamODMState",
    "StreamSoftmaxState",
    "StreamWindowState",
    "parse_dynamic_state",
]

_EMPTY_IF_NONE = BeforeValidator(lambda v: () if v is None else v)


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
    """

    unit: ClassVar[str]
    method: ClassVar[str]

    phase_idx: Int | None = None
    signal: Literal["loss", "excess_loss", "learnability"] = "loss"
    reference_metric: str | None = None
    probs: FloatArray
    num_recomputes: Int

    @property
    def num_buckets(self) -> int:
        """``len(probs)``."""
        return len(self.probs)


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


class DoReMiSubState(SavedModel):
    """DoReMi's own keys (``dynamic.doremi`` of a saved state).

    Attributes:
        last_scores: float64 ``(num_streams,)``, each stream's score at the last update (an
            absent stream keeps it).
        average: float64 ``(num_streams,)``, the running mean of the weights over the phase
            (the initial weights and every update): DoReMi's output.
        num_updates: updates in the phase so far, ≥ 0.
    """

    last_scores: FloatArray
    average: FloatArray
    num_updates: Int

    def to_dict(self) -> dict[str, Any]:
        """The saved form: ``last_scores``, ``average``, ``num_updates``."""
        return {
            "last_scores": self.last_scores,
            "average": self.average,
            "num_updates": self.num_updates,
        }


class DoReMiState(_Common):
    """The state of ``method: "doremi"`` over ``unit: "streams"`` (``DoReMiReweighter``).

    ``probs`` are DoReMi's weights now (their logarithm is what the next update moves).

    Attributes:
        window: the rolling window of clipped excess losses and their streams.
        doremi: the last scores, the running mean of the weights, the update count.
    """

    unit: ClassVar[str] = "streams"
    method: ClassVar[str] = "doremi"

    window: StreamWindowState
    doremi: DoReMiSubState

    @property
    def window_capacity(self) -> int:
        """Signals the rolling window holds at most."""
        return self.window.capacity

    def to_dict(self) -> dict[str, Any]:
        """The saved form: the common keys, ``window`` and ``doremi``."""
        return {
            "unit": self.unit,
            "method": self.method,
            "signal": self.signal,
            "reference_metric": self.reference_metric,
            "phase_idx": self.phase_idx,
            "probs": self.probs,
            "window": self.window.to_dict(),
            "num_recomputes": self.num_recomputes,
            "doremi": self.doremi.to_dict(),
        }


class FileSourceState(SavedModel):
    """``method: "file"``'s own keys: the weights file and the last content applied from it.

    Attributes:
        path: ``dynamic.file.path`` of the run that saved it.
        sha256: hex sha256 of the file content whose weights hold now (None: none applied in
            the phase yet, the phase's proportions hold).
    """

    path: str
    sha256: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """The saved form: ``path``, ``sha256``."""
        return {"path": self.path, "sha256": self.sha256}


class StreamFileState(_Common):
    """The state of ``method: "file"`` over ``unit: "streams"`` (``FileReweighter``).

    The weights now (``probs``), the recompute count, the phase and the file's sub-state; no
    window (the file method reads no loss). What the run decided at each boundary is in the run
    directory's ``mixture_journal.jsonl``, which a resume replays.

    Attributes:
        file: the weights file and the sha256 of the content applied last.
    """

    unit: ClassVar[str] = "streams"
    method: ClassVar[str] = "file"

    file: FileSourceState

    @property
    def window_capacity(self) -> None:
        """None: no rolling window (``dynamic.window`` does not apply)."""
        return None

    def to_dict(self) -> dict[str, Any]:
        """The saved form, in its order (``file``: ``path``, ``sha256``)."""
        return {
            "unit": self.unit,
            "method": self.method,
            "phase_idx": self.phase_idx,
            "probs": self.probs,
            "num_recomputes": self.num_recomputes,
            "file": self.file.to_dict(),
        }


class _StreamMethod(_Common):
    """A stream method's state: the common keys, its ``unit``/``method`` tag, then its own."""

    unit: ClassVar[str] = "streams"

    @property
    def window_capacity(self) -> None:
        """None: no rolling window (``dynamic.window`` does not apply)."""
        return None

    def _common_dict(self) -> dict[str, Any]:
        return {
            "unit": self.unit,
            "method": self.method,
            "phase_idx": self.phase_idx,
            "probs": self.probs,
            "num_recomputes": self.num_recomputes,
        }


class StreamODMState(_StreamMethod):
    """The state of ``method: "odm"`` (``dynamic.odm.ODMReweighter``).

    Attributes:
        estimated_reward: float64 ``(num_streams,)``, the bandit's smoothed rewards R̂.
        eps: ε of the last update (1/K before the first).
        phase_steps: optimizer steps the phase has taken (the bandit's ``t``).
    """

    method: ClassVar[str] = "odm"

    estimated_reward: FloatArray
    eps: float
    phase_steps: Int

    def to_dict(self) -> dict[str, Any]:
        """The saved form: the common keys, ``estimated_reward``, ``eps``, ``phase_steps``."""
        return {
            **self._common_dict(),
            "estimated_reward": self.estimated_reward,
            "eps": self.eps,
            "phase_steps": self.phase_steps,
        }


class StreamADOState(_StreamMethod):
    """The state of ``method: "ado"`` (``dynamic.ado.ADOReweighter``).

    Attributes:
        losses: per stream, float64 ``(phase_steps,)``: its training loss at each step of the
            phase (imputed where absent, as the reference does): the curve the fits read.
        step_samples: int64 ``(phase_steps,)``: the global batch's samples at each step.
        count_ema: float64 ``(num_streams,)``: EMA of the realised stream shares (``h``).
        probs_mean: float64 ``(num_streams,)``: the running mean of the policy (``p̄``).
        fit_params: per stream ``(A, E, α)`` of the last accepted fit, float64 ``(3,)`` each;
            empty before the first.
    """

    method: ClassVar[str] = "ado"

    losses: tuple[FloatArray, ...]
    step_samples: IntArray
    count_ema: FloatArray
    probs_mean: FloatArray
    fit_params: tuple[FloatArray, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        """The saved form: the common keys, then the ADO keys above."""
        return {
            **self._common_dict(),
            "losses": list(self.losses),
            "step_samples": self.step_samples,
            "count_ema": self.count_ema,
            "probs_mean": self.probs_mean,
            "fit_params": list(self.fit_params),
        }


_Saved = (
    BucketSoftmaxState
    | StreamSoftmaxState
    | DoReMiState
    | StreamFileState
    | StreamODMState
    | StreamADOState
)
"""Every state model (the union :data:`DynamicState` tags)."""

_MODELS: tuple[type[_Saved], ...] = (
    BucketSoftmaxState,
    StreamSoftmaxState,
    DoReMiState,
    StreamFileState,
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
    if isinstance(saved, BucketSoftmaxState | StreamSoftmaxState | DoReMiState | StreamFileState):
        return saved
    try:
        return _ADAPTER.validate_python(saved)
    except ValidationError as exc:
        raise refusal(exc, "dynamic", TAGS) from None
