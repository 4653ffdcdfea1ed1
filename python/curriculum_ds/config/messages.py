"""One-line messages for pydantic ValidationErrors of the ``curriculum`` section (and DeepSpeed's).

Every validation problem becomes ONE line that starts with the JSON path of the offending field
and, inside the schedule, the phase name, e.g. ``curriculum.schedule[1] ("mix").duration: expected
"<int>tok" or "<number>ep", got "12 tokens"``. pydantic's structured errors are converted into
that form here, in one place (:func:`format_validation_error`); hand-written checks of the models
raise :func:`custom_error` so that their message is kept as written. Several problems are
shown one line each, at most :data:`MAX_ERROR_LINES` (:func:`join_errors`).
"""

from __future__ import annotations

import difflib
import json
import re
import types
import typing
from fractions import Fraction
from typing import Any

from pydantic import BaseModel, ValidationError
from pydantic_core import PydanticCustomError

__all__ = [
    "CUSTOM_ERROR_TYPE",
    "MAX_ERROR_LINES",
    "custom_error",
    "format_validation_error",
    "join_errors",
    "show_value",
    "validation_error_lines",
]

MAX_ERROR_LINES = 20
"""At most this many problems are shown, one line each; a last line counts the rest."""

CUSTOM_ERROR_TYPE = "curriculum"
"""The pydantic error type of every hand-written check; ``ctx["subloc"]`` (optional) is a loc
relative to the model that raised it, so a model-level check can point at one field."""


def custom_error(msg: str, subloc: tuple[str | int, ...] = ()) -> PydanticCustomError:
    """A hand-written validation error: ``msg`` is shown as is, at the field ``subloc``."""
    return PydanticCustomError(CUSTOM_ERROR_TYPE, "{msg}", {"msg": msg, "subloc": subloc})


def show_value(value: Any) -> str:
    """Render a user-supplied value the way it appeared in JSON (strings quoted)."""
    if isinstance(value, Fraction):
        return str(value)
    try:
        return json.dumps(value, ensure_ascii=False, allow_nan=True)
    except (TypeError, ValueError):
        return repr(value)


def _unwrap_model(annotation: Any) -> type[BaseModel] | None:
    """The BaseModel class inside ``X``, ``list[X]``, ``X | None``; else None."""
    stack = [annotation]
    while stack:
        ann = stack.pop()
        if isinstance(ann, type) and issubclass(ann, BaseModel):
            return ann
        if typing.get_origin(ann) in (list, typing.Union, types.UnionType):
            stack.extend(typing.get_args(ann))
    return None


def _model_at(model: type[BaseModel], loc: tuple[str | int, ...]) -> type[BaseModel] | None:
    """The model class that the field at ``loc`` (relative to ``model``) belongs to, if any."""
    cls: type[BaseModel] | None = model
    for item in loc:
        if isinstance(item, int) or cls is None:
            continue
        field = cls.model_fields.get(item)
        if field is None:
            return None
        cls = _unwrap_model(field.annotation)
    return cls


def _format_loc(loc: tuple[str | int, ...], raw: Any, root: str) -> str:
    parts = [root] if root else []
    node = raw
    prev: str | int | None = None
    for item in loc:
        if isinstance(item, int):
            label = f"[{item}]"
            node = node[item] if isinstance(node, list) and 0 <= item < len(node) else None
            if prev == "schedule" and isinstance(node, dict) and isinstance(node.get("name"), str):
                label += f" ({show_value(node['name'])})"
            if parts:
                parts[-1] += label
            else:
                parts.append(label)
        elif isinstance(node, dict) or node is raw:
            parts.append(item)
            node = node.get(item) if isinstance(node, dict) else None
        else:
            continue  # a pydantic union tag ("int", "is-instance[...]") below a scalar value
        prev = item
    return ".".join(parts)


def _error_message(err: Any, loc: tuple[str | int, ...], model: type[BaseModel]) -> str:
    kind = err["type"]
    ctx = err.get("ctx") or {}
    got = err.get("input")
    if kind == CUSTOM_ERROR_TYPE:
        return str(ctx.get("msg", err["msg"]))
    if kind == "extra_forbidden":
        owner = _model_at(model, loc[:-1])
        allowed = (
            sorted(f.alias or name for name, f in owner.model_fields.items())
            if owner is not None
            else []
        )
        close = difflib.get_close_matches(str(loc[-1]), allowed, n=1, cutoff=0.6)
        if close:
            return f'unknown key (did you mean "{close[0]}"?)'
        return "unknown key (allowed: " + ", ".join(allowed) + ")" if allowed else "unknown key"
    if kind == "missing":
        return "required field is missing"
    bounds = {
        "greater_than": (">", "gt"),
        "greater_than_equal": (">=", "ge"),
        "less_than": ("<", "lt"),
        "less_than_equal": ("<=", "le"),
    }
    if kind in bounds:
        op, key = bounds[kind]
        bound = ctx.get(key)
        if isinstance(bound, float) and bound.is_integer() and abs(bound) < 1e6:
            bound = int(bound)
        shown = f"{bound:g}" if isinstance(bound, float) else bound  # 1e15, not 1000000000000000.0
        return f"must be {op} {shown}, got {show_value(got)}"
    if kind == "string_too_short":
        return f"must not be empty, got {show_value(got)}"
    if kind == "too_short":
        return f"must have at least {ctx.get('min_length')} item(s), got {len(got or [])}"
    if kind == "finite_number":
        return f"must be a finite number, got {show_value(got)}"
    if kind == "enum":  # DeepSpeed's ZeroStageEnum lists 3 twice ("0, 1, 2, 3 or 3")
        values = list(dict.fromkeys(re.split(r", | or ", str(ctx.get("expected", "")))))
        shown = ", ".join(values[:-1]) + " or " + values[-1] if len(values) > 1 else values[0]
        return f"expected one of {shown.replace(chr(39), chr(34))}, got {show_value(got)}"
    if kind in ("value_error", "assertion_error"):
        detail = str(err["msg"]).removeprefix("Value error, ").removeprefix("Assertion failed, ")
        return f"{detail}, got {show_value(got)}"
    if kind == "literal_error":
        expected_values = str(ctx.get("expected", "")).replace("'", '"')
        return f"expected one of {expected_values}, got {show_value(got)}"
    expected = {
        "int_type": "an integer",
        "int_from_float": "an integer",
        "float_type": "a number",
        "bool_type": "true or false",
        "string_type": "a string",
        "list_type": "a list",
        "dict_type": "an object",
        "model_type": "an object",
        "model_attributes_type": "an object",
    }
    if kind in expected:
        return f"expected {expected[kind]}, got {show_value(got)}"
    return f"{err['msg']}, got {show_value(got)}"


def validation_error_lines(
    exc: ValidationError, raw: Any, *, model: type[BaseModel], root: str = "curriculum"
) -> list[str]:
    """Every problem of a pydantic ValidationError, one line each: ``<root>.<path>: <problem>``.

    An unknown key comes first (a typo, "max_duraton", explains the "required field" error it
    causes); one field failing several union branches is one problem.

    Args:
        exc: What ``model.model_validate(raw)`` raised.
        raw: The validated JSON value, for the phase names shown in the path.
        model: The model class that was validated (for the allowed keys of an unknown key).
        root: The JSON path of ``raw`` (``"curriculum"``; ``""`` for the top level).

    Returns:
        The lines, without newlines, in pydantic's order (unknown keys first). Deterministic.
    """
    messages: list[str] = []
    errors = sorted(exc.errors(), key=lambda e: e["type"] != "extra_forbidden")
    for err in errors:
        loc = tuple(err["loc"])
        ctx = err.get("ctx") or {}
        if err["type"] == CUSTOM_ERROR_TYPE and ctx.get("subloc"):
            loc = loc + tuple(ctx["subloc"])
        path = _format_loc(loc, raw, root) or root or "ds_config"
        if any(m.startswith(f"{path}: ") for m in messages):
            continue  # one field failing several union branches is one problem
        messages.append(f"{path}: {_error_message(err, loc, model)}".replace("\n", " "))
    return messages


def join_errors(lines: list[str]) -> str:
    """Problems as one message: one line each, at most :data:`MAX_ERROR_LINES`, then a count."""
    shown = [" ".join(line.split("\n")) for line in lines[:MAX_ERROR_LINES]]
    hidden = len(lines) - len(shown)
    if hidden:
        shown.append(f"(+{hidden} more error{'s' if hidden > 1 else ''} not shown)")
    return "\n".join(shown)


def format_validation_error(
    exc: ValidationError, raw: Any, *, model: type[BaseModel], root: str = "curriculum"
) -> str:
    """Every problem of a ValidationError, one line each, at most :data:`MAX_ERROR_LINES`.

    See :func:`validation_error_lines` and :func:`join_errors`. Deterministic.
    """
    return join_errors(validation_error_lines(exc, raw, model=model, root=root))
