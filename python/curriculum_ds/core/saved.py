"""What every typed part of a checkpoint shares: a frozen pydantic base and one-line refusals.

A saved state (:class:`~curriculum_ds.core.loader_state.LoaderState`, the re-weighting states of
:mod:`curriculum_ds.dynamic.state`, :class:`~curriculum_ds.checkpoint.state.CurriculumState`) is
a :class:`SavedModel`: frozen, extra keys ignored (forward compatibility), its fields declared
with the value types below, which check what a checkpoint holds as today's code writes it (an
int is not a bool nor a string, a count array holds integers). :meth:`SavedModel.parse` reads a
saved dict and turns pydantic's report into ONE :class:`~curriculum_ds.errors.ResumeError` line
naming the first bad key by its path in the saved form (``loader.samplers[0]``,
``dynamic.window.values``). Pure Python and numpy: no torch, no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, ClassVar, Self

import numpy as np
import numpy.typing as npt
from pydantic import BaseModel, ConfigDict, PlainValidator, ValidationError

from curriculum_ds.errors import ResumeError

__all__ = [
    "PREFIX",
    "FloatArray",
    "Floats",
    "Int",
    "IntArray",
    "Ints",
    "SavedModel",
    "missing",
    "refusal",
    "wrong",
]

PREFIX = "checkpoint curriculum state: "
"""How every refusal of a saved state starts."""


def missing(key: str) -> ResumeError:
    """``checkpoint curriculum state: missing 'key'``."""
    return ResumeError(f"{PREFIX}missing {key!r}")


def wrong(key: str, value: Any) -> ResumeError:
    """``checkpoint curriculum state: 'key' has the wrong type (value)``, the value cut at 80."""
    text = repr(value)
    return ResumeError(
        f"{PREFIX}{key!r} has the wrong type ({text if len(text) <= 80 else text[:77] + '...'})"
    )


def _int(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int | np.integer):
        raise ValueError("not an int")
    return int(value)


def _int_array(value: Any) -> npt.NDArray[Any]:
    array = np.asarray(value) if isinstance(value, list | tuple | np.ndarray) else None
    if array is None or array.ndim != 1 or (array.size and array.dtype.kind not in "iu"):
        raise ValueError("not a 1-D sequence of ints")
    return array


def _float_array(value: Any) -> npt.NDArray[Any]:
    if not isinstance(value, list | tuple | np.ndarray):
        raise ValueError("not a 1-D sequence of numbers")
    try:
        array = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError):
        raise ValueError("not a 1-D sequence of numbers") from None
    if array.ndim != 1:
        raise ValueError("not a 1-D sequence of numbers")
    return value if isinstance(value, np.ndarray) else array


def _floats(value: Any) -> tuple[float, ...]:
    if not isinstance(value, list | tuple | np.ndarray) or not all(
        isinstance(v, int | float | np.number) and not isinstance(v, bool) for v in list(value)
    ):
        raise ValueError("not a sequence of numbers")
    return tuple(float(v) for v in value)


Int = Annotated[int, PlainValidator(_int)]
"""An int (numpy's too), not a bool nor a string."""
Ints = Annotated[tuple[int, ...], PlainValidator(lambda v: tuple(int(x) for x in _int_array(v)))]
"""A 1-D sequence of ints (a list or an integer array), kept as Python ints."""
Floats = Annotated[tuple[float, ...], PlainValidator(_floats)]
"""A sequence of numbers, kept as Python floats (they round-trip exactly)."""
IntArray = Annotated[npt.NDArray[np.integer[Any]], PlainValidator(_int_array)]
"""A 1-D integer numpy array, kept as saved (dtype included)."""
FloatArray = Annotated[npt.NDArray[np.floating[Any]], PlainValidator(_float_array)]
"""A 1-D numeric numpy array (NaN allowed), kept as saved (dtype included); a list (never
written by curriculum_ds) reads as float64."""


def _key(where: str, loc: tuple[int | str, ...], transparent: frozenset[str]) -> str:
    name = where
    for part in loc:
        if isinstance(part, int):
            name = f"{name}[{part}]"
        elif part not in transparent:
            name = f"{name}.{part}" if name else part
    return name


class SavedModel(BaseModel):
    """A typed part of a checkpoint: frozen, extra keys ignored, read by :meth:`parse`."""

    model_config = ConfigDict(frozen=True, extra="ignore", arbitrary_types_allowed=True)

    TRANSPARENT: ClassVar[frozenset[str]] = frozenset()
    """Levels of the model that the saved form does not have (left out of a key's path)."""

    @classmethod
    def parse(cls, saved: Mapping[str, Any] | Self, where: str = "") -> Self:
        """Check and read a saved dict (a model of this class is returned as is). Deterministic.

        Args:
            saved: the saved form (``to_dict``'s).
            where: the key the saved form sits under (``"loader"``), for the messages.

        Raises:
            ResumeError: ``checkpoint curriculum state: ...`` naming the first missing or
                mistyped key (one line).
        """
        if isinstance(saved, cls):
            return saved
        try:
            return cls.model_validate(saved)
        except ValidationError as exc:
            raise refusal(exc, where, cls.TRANSPARENT) from None


def refusal(exc: ValidationError, where: str, transparent: frozenset[str]) -> ResumeError:
    """The first error of ``exc`` as one line naming its key (``where`` + its path)."""
    error = exc.errors()[0]
    key = _key(where, tuple(error["loc"]), transparent) or "curriculum"
    if error["type"] == "missing":
        return missing(key)
    if error["type"] == "union_tag_invalid":  # a tagged union's tag that no model reads
        ctx = error.get("ctx") or {}
        return ResumeError(
            f"{PREFIX}{key!r} is a {ctx.get('tag')!r} state; this curriculum_ds reads "
            f"{ctx.get('expected_tags')}"
        )
    return wrong(key, error.get("input"))
