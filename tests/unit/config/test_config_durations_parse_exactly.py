"""Durations (``<int>tok``, ``<number>ep``) parse exactly and round-trip; bad ones name the path."""

from __future__ import annotations

import re
from fractions import Fraction
from typing import Any

import pytest
from config_sections import refused
from hypothesis import given
from hypothesis import strategies as st

from curriculum_ds.config import Duration
from curriculum_ds.errors import ConfigError


def test_duration_parsing() -> None:
    assert Duration.parse("1000tok") == Duration(unit="tok", value=1000)
    assert Duration.parse("1.5ep").value == Fraction(3, 2)
    assert isinstance(Duration.parse("2ep").value, Fraction)
    assert str(Duration.parse("0.125ep")) == "0.125ep"
    assert str(Duration.parse("2ep")) == "2ep"
    assert str(Duration(unit="ep", value=Fraction(7, 4))) == "1.75ep"


@pytest.mark.parametrize(
    ("text", "pattern"),
    [
        ("12 tokens", r'expected "<int>tok" or "<number>ep", got "12 tokens"$'),
        ("10", r'expected "<int>tok" or "<number>ep", got "10" \(no unit\)$'),
        ("abc", r'expected "<int>tok" or "<number>ep", got "abc"$'),
        ("1_000tok", r'expected "<int>tok" or "<number>ep", got "1_000tok"$'),
        ("0tok", r'must be positive, got "0tok"$'),
        ("-1tok", r'must be positive, got "-1tok"$'),
        ("0ep", r'must be positive, got "0ep"$'),
        ("-0.5ep", r'must be positive, got "-0.5ep"$'),
        ("1.5tok", r'a tok duration is a whole number of tokens, got "1.5tok"$'),
        (10, r'expected "<int>tok" or "<number>ep", got 10$'),
    ],
)
def test_bad_phase_duration(text: Any, pattern: str) -> None:
    message = refused(lambda s: s["schedule"][1].__setitem__("duration", text))
    assert re.match(r'curriculum\.schedule\[1\] \("mix"\)\.duration: ' + pattern, message)


def test_bad_max_duration() -> None:
    message = refused(lambda s: s.__setitem__("max_duration", "3000"))
    assert message.startswith('curriculum.max_duration: expected "<int>tok" or "<number>ep"')


def test_duration_parse_raises_config_error() -> None:
    with pytest.raises(ConfigError, match=r'^duration: must be positive, got "0tok"$'):
        Duration.parse("0tok")


@given(st.integers(min_value=1, max_value=10**30))
def test_tok_duration_round_trips(tokens: int) -> None:
    text = f"{tokens}tok"
    d = Duration.parse(text)
    assert d.value == tokens
    assert str(d) == text
    assert Duration.model_validate(d.model_dump(mode="json")) == d


@given(
    st.integers(min_value=0, max_value=10**9),
    st.text(alphabet="0123456789", min_size=0, max_size=12),
)
def test_ep_duration_round_trips_exactly(whole: int, frac_digits: str) -> None:
    frac_digits = frac_digits.rstrip("0")
    text = f"{whole}.{frac_digits}ep" if frac_digits else f"{whole}ep"
    if whole == 0 and not frac_digits:
        return
    d = Duration.parse(text)
    number = text[:-2]
    assert d.value == Fraction(number)  # exact, from the decimal string
    assert str(d) == text
    assert Duration.model_validate(str(d)) == d


def test_duration_object_form_errors_are_one_problem() -> None:
    # Duration(unit=..., value=...) is the programmatic form; its errors still read as one line
    message = refused(
        lambda s: s["schedule"][0].__setitem__("duration", {"unit": "tok", "value": 1.5})
    )
    assert (
        message == 'curriculum.schedule[0] ("short").duration.value: expected an integer, got 1.5'
    )
