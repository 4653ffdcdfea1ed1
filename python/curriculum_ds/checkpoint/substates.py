"""The loader's and the re-weighting's parts of a checkpoint, typed.

``PhaseLoader.state_dict`` and ``BucketReweighter.state_dict`` write plain dicts (ints, lists,
numpy arrays) into :class:`~curriculum_ds.checkpoint.state.CurriculumState`. Before a resume
restores them, :meth:`LoaderState.from_dict` and :meth:`DynamicState.from_dict` check every key
the restore reads and refuse a malformed one with one :class:`~curriculum_ds.errors.ResumeError`
line naming it (``loader.samplers``, ``dynamic.window.values``). :meth:`to_dict` gives back the
saved form, key for key, so a checkpoint written before these types existed loads, and one
written after is the same bytes. Pure Python and numpy: no torch, no I/O.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from curriculum_ds.core.saved import missing as _missing
from curriculum_ds.core.saved import wrong as _wrong

__all__ = ["DynamicState"]

_ARRAY = (list, tuple, np.ndarray)


def _get(
    saved: Mapping[str, Any], where: str, key: str, kind: Any, *, optional: bool = False
) -> Any:
    """``saved[key]`` checked against ``kind`` (bool is not an int); None when optional, absent."""
    name = f"{where}.{key}"
    if key not in saved:
        if optional:
            return None
        raise _missing(name)
    value = saved[key]
    if value is None and optional:
        return None
    if isinstance(value, bool) or not isinstance(value, kind):
        raise _wrong(name, value)
    return value


def _ints(value: Any, name: str) -> list[int]:
    """A 1-D sequence of ints (a list or an integer array) as a list, or the error naming it."""
    array = np.asarray(value)
    if array.ndim != 1 or (array.size and array.dtype.kind not in "iu"):
        raise _wrong(name, value)
    return [int(v) for v in array]


def _floats(value: Any, name: str) -> None:
    """Check a 1-D numeric sequence (floats or ints, NaN allowed)."""
    try:
        array = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError):
        raise _wrong(name, value) from None
    if array.ndim != 1:
        raise _wrong(name, value)


def _float_list(value: Any, name: str) -> list[float] | None:
    """An optional list of numbers as floats (None stays None)."""
    if value is None:
        return None
    if not all(isinstance(t, (int, float, np.number)) for t in list(value)):
        raise _wrong(name, value)
    return [float(t) for t in value]


def _arrays(value: Any, name: str, check: Any) -> None:
    if not isinstance(value, Sequence) or isinstance(value, str):
        raise _wrong(name, value)
    for i, item in enumerate(value):
        check(item, f"{name}[{i}]")


@dataclasses.dataclass(frozen=True, kw_only=True, eq=False)
class DynamicState:
    """The re-weighting state (``BucketReweighter`` or ``StreamReweighter.state_dict``).

    Attributes:
        phase_idx: the phase it was taken in (None in a state that did not record it).
        probs: float64 ``(num_buckets,)`` bucket probabilities, or ``(num_streams,)`` stream
            weights.
        window: the rolling window: ``{"capacity": int, "values": float array,
            "num_non_finite": int}``, plus ``"streams"`` (int, per value) for the stream unit.
        last_loss: per stream, float32 ``(num_samples,)`` latest signal (NaN: unseen); empty for
            the stream unit.
        buckets: per stream, int8 ``(num_samples,)`` bucket assignment (None: not recorded).
        edges: float64 ``(num_buckets - 1,)`` of the last recompute, or None.
        num_recomputes: recomputes so far, ≥ 0.
        unit: ``"buckets"`` (also a state saved before units existed) or ``"streams"``.
        signal: ``"loss"`` (also a state saved before signals existed), ``"excess_loss"`` or
            ``"learnability"``.
        mean_losses: learnability: each stream's mean loss at the phase's last recomputes,
            float64 ``(num_streams,)`` each, oldest first; else empty.
        reference_metric: excess loss: the column the window's signals were taken against (None
            otherwise, and in states saved before it was recorded).
    """

    phase_idx: int | None
    probs: Any
    window: dict[str, Any]
    last_loss: list[Any]
    buckets: list[Any] | None
    edges: Any
    num_recomputes: int
    unit: str = "buckets"
    signal: str = "loss"
    mean_losses: list[Any] = dataclasses.field(default_factory=list)
    reference_metric: str | None = None

    @property
    def num_buckets(self) -> int:
        """``len(probs)``."""
        return len(self.probs)

    @property
    def window_capacity(self) -> int:
        """Losses the rolling window holds at most."""
        return int(self.window["capacity"])

    @classmethod
    def from_dict(cls, saved: Mapping[str, Any]) -> DynamicState:
        """Check and read a saved re-weighting state. Extra keys are ignored. Deterministic.

        Raises:
            ResumeError: ``checkpoint curriculum state: ...`` naming the missing or mistyped key.
        """
        w = "dynamic"
        if not isinstance(saved, Mapping):
            raise _wrong(w, saved)
        probs = _get(saved, w, "probs", _ARRAY)
        _floats(probs, f"{w}.probs")
        window = _get(saved, w, "window", Mapping)
        _get(window, f"{w}.window", "capacity", (int, np.integer))
        _floats(_get(window, f"{w}.window", "values", _ARRAY), f"{w}.window.values")
        _get(window, f"{w}.window", "num_non_finite", (int, np.integer))
        unit = _get(saved, w, "unit", str, optional=True) or "buckets"
        if unit not in ("buckets", "streams"):
            raise _wrong(f"{w}.unit", unit)
        if unit == "streams":
            _ints(_get(window, f"{w}.window", "streams", _ARRAY), f"{w}.window.streams")
        mean_losses = _get(saved, w, "mean_losses", (list, tuple), optional=True) or []
        _arrays(mean_losses, f"{w}.mean_losses", _floats)
        last_loss = _get(saved, w, "last_loss", (list, tuple))
        _arrays(last_loss, f"{w}.last_loss", _floats)
        buckets = _get(saved, w, "buckets", (list, tuple), optional=True)
        if buckets is not None:
            _arrays(buckets, f"{w}.buckets", _ints)
        if "edges" not in saved:
            raise _missing(f"{w}.edges")
        edges = saved["edges"]
        if edges is not None:
            _floats(edges, f"{w}.edges")
        return cls(
            phase_idx=_get(saved, w, "phase_idx", int, optional=True),
            probs=probs,
            window=dict(window),
            last_loss=list(last_loss),
            buckets=None if buckets is None else list(buckets),
            edges=edges,
            num_recomputes=int(_get(saved, w, "num_recomputes", (int, np.integer))),
            unit=unit,
            signal=_get(saved, w, "signal", str, optional=True) or "loss",
            reference_metric=_get(saved, w, "reference_metric", str, optional=True),
            mean_losses=list(mean_losses),
        )

    def to_dict(self) -> dict[str, Any]:
        """The saved form (``BucketReweighter.state_dict``'s keys, in its order)."""
        out: dict[str, Any] = {}
        if self.unit != "buckets" or self.signal != "loss":
            out.update(unit=self.unit, signal=self.signal, reference_metric=self.reference_metric)
        out["phase_idx"] = self.phase_idx
        out.update(
            probs=self.probs,
            window=dict(self.window),
            last_loss=list(self.last_loss),
            buckets=None if self.buckets is None else list(self.buckets),
            edges=self.edges,
            num_recomputes=self.num_recomputes,
        )
        if self.mean_losses:
            out["mean_losses"] = list(self.mean_losses)
        return out
