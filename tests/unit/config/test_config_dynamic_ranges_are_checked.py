"""The ``dynamic`` section (case C05): temperature, floor × num_buckets and the other ranges."""

from __future__ import annotations

from typing import Any

import pytest
from config_sections import refused

from curriculum_ds.config import DynamicConfig


def test_temperature_zero_is_refused() -> None:
    """Case C05: temperature 0 is refused, naming the field."""
    message = refused(lambda s: s["dynamic"].__setitem__("temperature", 0))
    assert message == "curriculum.dynamic.temperature: must be > 0, got 0"


def test_floor_times_buckets_above_one_is_refused() -> None:
    """Case C05: floor × num_buckets > 1 is refused, naming the field."""
    message = refused(lambda s: s["dynamic"].__setitem__("floor", 0.3))
    assert message == "curriculum.dynamic.floor: 0.3 × num_buckets 4 = 1.2 > 1"


def test_floor_exactly_one_over_buckets_is_accepted() -> None:
    assert DynamicConfig(num_buckets=8, floor=0.125).floor == 0.125
    assert DynamicConfig(num_buckets=10, floor=0.1).floor == 0.1


@pytest.mark.parametrize(
    ("key", "value", "expected"),
    [
        ("floor", 0, "curriculum.dynamic.floor: must be > 0, got 0"),
        ("floor", -0.1, "curriculum.dynamic.floor: must be > 0, got -0.1"),
        ("temperature", -1.0, "curriculum.dynamic.temperature: must be > 0, got -1.0"),
        ("num_buckets", 1, "curriculum.dynamic.num_buckets: must be >= 2, got 1"),
        ("num_buckets", 65, "curriculum.dynamic.num_buckets: must be <= 64, got 65"),
        ("window", 0, "curriculum.dynamic.window: must be >= 1, got 0"),
        ("window", 10_000_001, "curriculum.dynamic.window: must be <= 10000000, got 10000001"),
        (
            "recompute_every_n_steps",
            0,
            "curriculum.dynamic.recompute_every_n_steps: must be >= 1, got 0",
        ),
        ("enabled", "yes", 'curriculum.dynamic.enabled: expected true or false, got "yes"'),
        ("score", "entropy", 'curriculum.dynamic.score: expected one of "loss", got "entropy"'),
        (
            "num_bukets",
            4,
            'curriculum.dynamic.num_bukets: unknown key (did you mean "num_buckets"?)',
        ),
    ],
)
def test_dynamic_ranges(key: str, value: Any, expected: str) -> None:
    assert refused(lambda s: s["dynamic"].__setitem__(key, value)) == expected
