"""The ``Reweighter`` registry: methods by name × unit, the protocol both units implement."""

from __future__ import annotations

from typing import Any, ClassVar

import pytest

from curriculum_ds.config import DynamicConfig
from curriculum_ds.config.mixers import METHODS
from curriculum_ds.dynamic import (
    BucketReweighter,
    MixtureUpdate,
    Reweighter,
    StreamReweighter,
    make_reweighter,
    methods,
    register,
)
from curriculum_ds.errors import ConfigError


def test_softmax_is_registered_over_both_units_and_built_from_the_config():
    assert methods()["softmax"] == frozenset({"buckets", "streams"})
    buckets = make_reweighter(DynamicConfig(enabled=True))
    streams = make_reweighter(DynamicConfig(enabled=True, unit="streams"))
    assert type(buckets) is BucketReweighter
    assert type(streams) is StreamReweighter
    assert (buckets.num_buckets, streams.num_buckets) == (8, 1)
    # both are the protocol (mypy checks the assignment; the names are the registry's keys)
    ours: list[Reweighter] = [buckets, streams]
    assert [(r.method, sorted(r.units)) for r in ours] == [
        ("softmax", ["buckets"]),
        ("softmax", ["streams"]),
    ]


def test_the_config_names_every_registered_method_and_refuses_others():
    """``dynamic.method``'s allowed values name every registered method; another is refused."""
    assert set(methods()) == set(METHODS)
    with pytest.raises(ValueError, match=r'unknown method "nope"'):
        DynamicConfig(enabled=True, method="nope")


def test_a_method_without_the_unit_asked_for_is_one_line():
    cfg = DynamicConfig.model_construct(**{**DynamicConfig().model_dump(), "method": "nope"})
    with pytest.raises(ConfigError, match=r'^curriculum.dynamic.method: "nope" is not one of '):
        make_reweighter(cfg)


def test_a_second_class_for_one_method_and_unit_is_refused():
    class Twin:
        method: ClassVar[str] = "softmax"
        units: ClassVar[frozenset[str]] = frozenset({"streams"})

        def __init__(self, cfg: Any) -> None: ...

    with pytest.raises(ValueError, match=r"\('softmax', 'streams'\) registered twice"):
        register(Twin)  # type: ignore[type-var]
    assert methods()["softmax"] == frozenset({"buckets", "streams"})


def test_a_temporary_mixture_needs_proportions_and_a_step():
    with pytest.raises(ValueError, match="a temporary mixture needs proportions"):
        MixtureUpdate(hold_steps=3)
    with pytest.raises(ValueError, match="a temporary mixture needs proportions"):
        MixtureUpdate(proportions=None, hold_steps=0)
