"""Values that move inside a phase: ``[[fraction_of_phase, value], ...]`` points (a ramp).

A stream's ``proportion`` and a loader's ``max_seq_len`` may be a number (constant over the
phase) or a list of points, linearly interpolated between them: the first at fraction 0.0, the
last at 1.0, fractions strictly increasing. A step uses the value at its *start* progress in the
phase (DeepSpeed's curriculum scheduler does the same with its ``difficulty_step``).
:func:`parse_points` checks a list (one-line errors naming the point, through
:func:`~curriculum_ds.config.messages.custom_error`); :func:`value_at` evaluates one. Pure and
deterministic: the loader, the validate table and the report all read a ramp through
:func:`value_at`.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Sequence
from typing import Any

from curriculum_ds.config.messages import custom_error, show_value

__all__ = ["Points", "SeqLenPoints", "is_ramp", "parse_points", "value_at"]

Points = tuple[tuple[float, float], ...]
"""A ramp: ``((fraction, value), ...)``, fractions from 0.0 to 1.0, strictly increasing."""
SeqLenPoints = tuple[tuple[float, int], ...]
"""A sequence-length ramp: ``((fraction, tokens), ...)``."""


def is_ramp(value: Any) -> bool:
    """True for a ramp (a tuple or list of points), False for a plain number."""
    return isinstance(value, (tuple, list))


def parse_points(
    value: Any, *, low: float, high: float, integer: bool = False, low_open: bool = False
) -> Any:
    """Check a ramp's points; pass anything that is not a list through unchanged.

    Args:
        value: the field's raw value: a number (returned as is, for the field's own checks) or a
            list of ``[fraction, value]`` pairs.
        low: the smallest value allowed (excluded when ``low_open``).
        high: the largest value allowed.
        integer: values must be integers (``max_seq_len``).
        low_open: ``low`` itself is refused (``loss_weight > 0``).

    Returns:
        ``value`` unchanged when it is not a list, else the points as a tuple of
        ``(float fraction, value)`` tuples.

    Raises:
        PydanticCustomError: one line naming the point: not a pair, a fraction outside [0, 1], the
            first not at 0.0 or the last not at 1.0, fractions not increasing, a value out of
            bounds or not an integer.
    """
    if not isinstance(value, list):
        return value
    if len(value) < 2:
        raise custom_error(
            f"a ramp needs at least two [fraction, value] points (at 0.0 and 1.0), got "
            f"{show_value(value)}"
        )
    points: list[tuple[float, float]] = []
    for i, point in enumerate(value):
        if not (
            isinstance(point, (list, tuple))
            and len(point) == 2
            and all(_is_number(v) for v in point)
        ):
            raise custom_error(
                f"must be a [fraction, value] pair of numbers, got {show_value(point)}", (i,)
            )
        fraction, v = float(point[0]), point[1]
        if integer and not (isinstance(v, int) or float(v).is_integer()):
            raise custom_error(f"value {show_value(v)} must be an integer", (i,))
        v = int(v) if integer else float(v)
        if not 0.0 <= fraction <= 1.0:
            raise custom_error(f"fraction {show_value(point[0])} is not in [0, 1]", (i,))
        if points and fraction <= points[-1][0]:
            raise custom_error(
                f"fractions must increase: {show_value(point[0])} follows "
                f"{show_value(points[-1][0])}",
                (i,),
            )
        if v < low or (low_open and v == low) or v > high:
            bound = f"> {low:g}" if low_open else f">= {low:g}"
            raise custom_error(
                f"value {show_value(point[1])} must be {bound} and <= {high:g}", (i,)
            )
        points.append((fraction, v))
    if points[0][0] != 0.0:
        raise custom_error(f"the first point must be at fraction 0.0, got {points[0][0]}", (0,))
    if points[-1][0] != 1.0:
        raise custom_error(
            f"the last point must be at fraction 1.0, got {points[-1][0]}", (len(points) - 1,)
        )
    return tuple(points)


def value_at(spec: float | Sequence[Sequence[float]], fraction: float) -> float:
    """The value of a constant or a ramp at ``fraction`` of the phase.

    Args:
        spec: a number (returned as a float) or validated points.
        fraction: progress in the phase in [0, 1] (clipped to it).

    Returns:
        The linear interpolation between the points around ``fraction`` (float64 arithmetic,
        deterministic).
    """
    if isinstance(spec, (int, float)):
        return float(spec)
    points = spec
    x = min(max(fraction, 0.0), 1.0)
    i = bisect.bisect_left(points, x, key=lambda p: p[0])  # first point at or after x
    if i == 0:
        return float(points[0][1])
    (x0, y0), (x1, y1) = points[i - 1], points[min(i, len(points) - 1)]
    if x1 == x0:
        return float(y1)
    return float(y0) + (float(y1) - float(y0)) * (x - x0) / (x1 - x0)


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
