"""``dynamic.unit`` and ``dynamic.signal``: what is accepted, and each refusal in one line.

From issue 20 (bad inputs: learnability with buckets, an unknown signal, excess_loss without a
reference column; the floor against each phase's streams).
"""

from __future__ import annotations

from typing import Any

import pytest
from config_sections import base_section, refused

from curriculum_ds.config import parse_curriculum


def _dynamic(**keys: Any) -> dict[str, Any]:
    section = base_section()
    section["dynamic"] = {"enabled": True, **keys}
    return section


def test_defaults_are_todays_bucket_unit_and_loss_signal():
    cfg = parse_curriculum(_dynamic())
    assert (cfg.dynamic.unit, cfg.dynamic.signal) == ("buckets", "loss")
    assert cfg.dynamic.reference_metric is None


@pytest.mark.parametrize(
    "keys",
    [
        {"unit": "streams"},
        {"unit": "streams", "signal": "learnability", "learnability_horizon": 3},
        {"unit": "streams", "signal": "excess_loss", "reference_metric": "ref_loss"},
        {"signal": "excess_loss", "reference_metric": "ref_loss"},
        {"unit": "streams", "floor": 0.5},  # 2 streams at most in a phase
    ],
)
def test_valid_units_and_signals_parse(keys):
    cfg = parse_curriculum(_dynamic(**keys))
    for key, value in keys.items():
        assert getattr(cfg.dynamic, key) == value


def _refused_dynamic(**keys: Any) -> str:
    return refused(lambda s: s.__setitem__("dynamic", {"enabled": True, **keys}))


def test_learnability_with_buckets_is_refused_saying_why():
    assert _refused_dynamic(signal="learnability") == (
        'curriculum.dynamic.signal: learnability needs unit "streams": a bucket keyed by the '
        "current loss changes its members every recompute, so its loss drop measures nothing"
    )


def test_an_unknown_signal_or_unit_is_refused():
    assert _refused_dynamic(signal="entropy") == (
        'curriculum.dynamic.signal: expected one of "loss", "excess_loss" or "learnability", got '
        '"entropy"'
    )
    assert _refused_dynamic(unit="domains") == (
        'curriculum.dynamic.unit: expected one of "buckets" or "streams", got "domains"'
    )


def test_excess_loss_without_a_reference_metric_is_refused():
    assert _refused_dynamic(signal="excess_loss") == (
        'curriculum.dynamic.reference_metric: signal "excess_loss" needs the metric column of '
        "the reference model's losses (`curriculum-ds score ... --column NAME`)"
    )


def test_a_reference_metric_without_excess_loss_is_refused():
    assert _refused_dynamic(reference_metric="ref_loss") == (
        'curriculum.dynamic.reference_metric: applies only to signal "excess_loss", not "loss"; '
        "remove it"
    )


def test_a_floor_too_high_for_a_phases_streams_is_refused_naming_the_phase():
    assert _refused_dynamic(unit="streams", floor=0.6) == (
        'curriculum.dynamic.floor: 0.6 × 2 streams of schedule[1] ("mix") = 1.2 > 1'
    )


def test_the_stream_unit_is_not_held_to_num_buckets_floor():
    # 0.3 × 8 buckets > 1, but the weights are over at most 2 streams here
    cfg = parse_curriculum(_dynamic(unit="streams", floor=0.3))
    assert cfg.dynamic.floor == 0.3


@pytest.mark.parametrize("column", ["num_tokens", "token_entropy", "compression_ratio"])
def test_a_reference_metric_that_is_a_prepare_column_is_refused(column):
    """``score`` never writes these names: such a reference_metric is no reference model's
    loss (excess_loss would subtract, e.g., the sample's token entropy)."""
    assert _refused_dynamic(unit="streams", signal="excess_loss", reference_metric=column) == (
        f'curriculum.dynamic.reference_metric: "{column}" is a column of `curriculum-ds '
        "prepare`, not a reference model's loss; write one with `curriculum-ds score ... "
        "--column NAME`"
    )
