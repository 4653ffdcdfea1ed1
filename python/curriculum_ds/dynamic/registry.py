"""Re-weighting methods by name: ``dynamic.method`` × ``dynamic.unit`` → the class that runs it.

As mosaicml-streaming picks its shuffle algorithms from a name → function table
(``streaming/base/shuffle/__init__.py``), a method is a class registered under its name with the
units it supports (:func:`register`); :func:`make_reweighter` builds the one a config asks for.
Registering is all a new method needs: the caller speaks only :class:`Reweighter`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, TypeVar

from curriculum_ds.errors import ConfigError

if TYPE_CHECKING:
    from curriculum_ds.config import DynamicConfig
    from curriculum_ds.dynamic.protocol import Reweighter

__all__ = ["make_reweighter", "methods", "register"]

_REGISTRY: dict[tuple[str, str], type[Reweighter]] = {}
"""(method, unit) → class."""

R = TypeVar("R", bound="type[Reweighter]")


def register(cls: R) -> R:
    """Class decorator: register ``cls`` under ``cls.method`` for each unit in ``cls.units``.

    Raises:
        ValueError: (method, unit) is registered already (two classes would claim one config).
    """
    for unit in sorted(cls.units):
        key = (cls.method, unit)
        if key in _REGISTRY:
            raise ValueError(f"re-weighting {key} registered twice ({_REGISTRY[key].__name__})")
        _REGISTRY[key] = cls
    return cls


def methods() -> dict[str, frozenset[str]]:
    """Every registered method's name → the units it supports."""
    out: dict[str, set[str]] = {}
    for method, unit in _REGISTRY:
        out.setdefault(method, set()).add(unit)
    return {m: frozenset(u) for m, u in sorted(out.items())}


def make_reweighter(cfg: DynamicConfig) -> Reweighter:
    """The re-weighting ``cfg`` asks for (``method`` over ``unit``).

    Raises:
        ConfigError: no method of that name supports that unit (the config refuses both before
            a run; here for a config built by hand).
    """
    cls = _REGISTRY.get((cfg.method, cfg.unit))
    if cls is None:
        known = methods()
        units = known.get(cfg.method)
        why = (
            f"supports unit(s) {', '.join(sorted(units))}"
            if units
            else f"is not one of {', '.join(known)}"
        )
        raise ConfigError(f'curriculum.dynamic.method: "{cfg.method}" {why}, not unit "{cfg.unit}"')
    return cls(cfg)
