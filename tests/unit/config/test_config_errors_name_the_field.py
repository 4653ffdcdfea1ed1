"""Validation of the ``curriculum`` section: every error is one line naming the path and phase."""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import pytest
from config_sections import base_section, refused, value_paths
from hypothesis import given
from hypothesis import strategies as st

from curriculum_ds.config import MAX_PROPORTION, MAX_SEQ_LEN, parse_curriculum
from curriculum_ds.config.messages import MAX_ERROR_LINES
from curriculum_ds.errors import ConfigError, CurriculumError


def test_unknown_key_with_typo() -> None:
    message = refused(lambda s: s.__setitem__("dyanmic", s.pop("dynamic")))
    assert message == 'curriculum.dyanmic: unknown key (did you mean "dynamic"?)'


def test_unknown_key_deep_in_a_phase() -> None:
    message = refused(lambda s: s["schedule"][1]["train_loader"].__setitem__("max_seq_lne", 9))
    assert message == (
        'curriculum.schedule[1] ("mix").train_loader.max_seq_lne: unknown key '
        '(did you mean "max_seq_len"?)'
    )
    message = refused(lambda s: s["schedule"][0]["train_loader"]["streams"][0].__setitem__("w", 1))
    assert message.startswith('curriculum.schedule[0] ("short").train_loader.streams[0].w: ')
    assert "unknown key (allowed: local, loss_weight, name, proportion, remote)" in message


def test_non_positive_proportion() -> None:
    message = refused(
        lambda s: s["schedule"][0]["train_loader"]["streams"][0].__setitem__("proportion", -0.3)
    )
    assert message == (
        'curriculum.schedule[0] ("short").train_loader.streams[0].proportion: must be > 0, got -0.3'
    )
    message = refused(
        lambda s: s["schedule"][1]["train_loader"]["streams"][1].__setitem__("proportion", 0)
    )
    assert message == (
        'curriculum.schedule[1] ("mix").train_loader.streams[1].proportion: must be > 0, got 0'
    )


def test_proportion_must_be_a_finite_number() -> None:
    stream = lambda s: s["schedule"][0]["train_loader"]["streams"][0]  # noqa: E731
    message = refused(lambda s: stream(s).__setitem__("proportion", "0.5"))
    assert message.endswith('.proportion: expected a number, got "0.5"')
    message = refused(lambda s: stream(s).__setitem__("proportion", float("inf")))
    assert message.endswith(".proportion: must be a finite number, got Infinity")


def test_unit_mismatch() -> None:
    message = refused(lambda s: s["schedule"][1].__setitem__("duration", "1.5ep"))
    assert message == (
        'curriculum.schedule[1] ("mix").duration: unit "ep" differs from max_duration\'s "tok" '
        "(1.5ep vs 3000tok); every phase must use it"
    )


def test_sum_mismatch() -> None:
    message = refused(lambda s: s.__setitem__("max_duration", "2000tok"))
    expected = "curriculum.max_duration: the schedule's durations sum to 3000tok, not 2000tok"
    assert message == expected

    def ep(s: dict[str, Any]) -> None:
        s["max_duration"] = "2ep"
        s["schedule"][0]["duration"] = "1.5ep"
        s["schedule"][1]["duration"] = "0.25ep"

    assert refused(ep) == "curriculum.max_duration: the schedule's durations sum to 1.75ep, not 2ep"


def test_duplicate_phase_names() -> None:
    message = refused(lambda s: s["schedule"][1].__setitem__("name", "short"))
    assert message == (
        'curriculum.schedule[1] ("short").name: duplicate phase name "short" (also schedule[0])'
    )


def test_duplicate_stream_names_in_one_loader() -> None:
    message = refused(
        lambda s: s["schedule"][1]["train_loader"]["streams"][1].__setitem__("local", "b/short")
    )
    assert message.startswith(
        'curriculum.schedule[1] ("mix").train_loader.streams[1].name: duplicate stream name '
        '"short" (also streams[0])'
    )


def test_empty_or_missing_fields() -> None:
    assert refused(lambda s: s.__setitem__("schedule", [])) == (
        "curriculum.schedule: must have at least 1 item(s), got 0"
    )
    assert refused(lambda s: s.pop("max_duration")) == (
        "curriculum.max_duration: required field is missing"
    )
    assert refused(lambda s: s["schedule"][1]["train_loader"].__setitem__("streams", [])) == (
        'curriculum.schedule[1] ("mix").train_loader.streams: must have at least 1 item(s), got 0'
    )
    assert refused(lambda s: s["schedule"][0].__setitem__("name", "")) == (
        'curriculum.schedule[0] ("").name: must not be empty, got ""'
    )
    assert refused(lambda s: s["schedule"][0].pop("train_loader")) == (
        'curriculum.schedule[0] ("short").train_loader: required field is missing'
    )


def test_phase_without_name_is_located_by_index() -> None:
    assert refused(lambda s: s["schedule"][1].pop("name")) == (
        "curriculum.schedule[1].name: required field is missing"
    )


def test_max_seq_len_and_epoch_size_ranges() -> None:
    loader = lambda s: s["schedule"][1]["train_loader"]  # noqa: E731
    assert refused(lambda s: loader(s).__setitem__("max_seq_len", 1)) == (
        'curriculum.schedule[1] ("mix").train_loader.max_seq_len: must be >= 2, got 1'
    )
    assert refused(lambda s: loader(s).__setitem__("max_seq_len", 1.0)) == (
        'curriculum.schedule[1] ("mix").train_loader.max_seq_len: expected an integer, got 1.0'
    )
    assert refused(lambda s: loader(s).__setitem__("epoch_size", 0)) == (
        'curriculum.schedule[1] ("mix").train_loader.epoch_size: must be >= 1, got 0'
    )


def test_proportions_that_overflow_a_float_are_refused() -> None:
    # 1e308 + 1e308 is inf, and normalising gives inf / inf = nan
    def huge(s: dict[str, Any]) -> None:
        for stream in s["schedule"][1]["train_loader"]["streams"]:
            stream["proportion"] = 1e308

    assert refused(huge) == (
        'curriculum.schedule[1] ("mix").train_loader.streams[0].proportion: must be <= 1e+15, '
        "got 1e+308\n"
        'curriculum.schedule[1] ("mix").train_loader.streams[1].proportion: must be <= 1e+15, '
        "got 1e+308"
    )
    section = base_section()
    for stream in section["schedule"][1]["train_loader"]["streams"]:
        stream["proportion"] = MAX_PROPORTION
    streams = parse_curriculum(section).schedule[1].train_loader.streams
    weights = np.array([s.proportion for s in streams])
    assert np.all(np.isfinite(weights / weights.sum()))


def test_max_seq_len_upper_bound() -> None:
    loader = lambda s: s["schedule"][1]["train_loader"]  # noqa: E731
    assert refused(lambda s: loader(s).__setitem__("max_seq_len", 10**12)) == (
        'curriculum.schedule[1] ("mix").train_loader.max_seq_len: must be <= 1048576, '
        "got 1000000000000"
    )
    assert refused(lambda s: loader(s).__setitem__("max_seq_len", MAX_SEQ_LEN + 1)).endswith(
        "must be <= 1048576, got 1048577"
    )
    section = base_section()
    section["schedule"][1]["train_loader"]["max_seq_len"] = MAX_SEQ_LEN
    assert parse_curriculum(section).schedule[1].train_loader.max_seq_len == 2**20


def test_seed_and_loss_weighting() -> None:
    assert refused(lambda s: s.__setitem__("seed", -1)) == "curriculum.seed: must be >= 0, got -1"
    assert refused(lambda s: s.__setitem__("seed", 2**63)) == (
        f"curriculum.seed: must be < {2**63}, got {2**63}"
    )
    assert refused(lambda s: s.__setitem__("seed", True)) == (
        "curriculum.seed: expected an integer, got true"
    )
    assert refused(lambda s: s.__setitem__("loss_weighting", "tokens")) == (
        'curriculum.loss_weighting: expected one of "token" or "sample", got "tokens"'
    )


def test_several_errors_are_all_shown_one_line_each() -> None:
    def two(s: dict[str, Any]) -> None:
        s["seed"] = -1
        s["dynamic"]["temperature"] = 0

    assert refused(two) == (
        "curriculum.seed: must be >= 0, got -1\ncurriculum.dynamic.temperature: must be > 0, got 0"
    )


def test_many_errors_are_capped_with_a_count() -> None:
    def many(s: dict[str, Any]) -> None:
        for i in range(MAX_ERROR_LINES + 5):
            s[f"bogus_{i}"] = 1

    lines = refused(many).split("\n")
    assert len(lines) == MAX_ERROR_LINES + 1
    assert lines[0].startswith("curriculum.bogus_0: unknown key")
    assert lines[-1] == "(+5 more errors not shown)"


def test_section_must_be_an_object() -> None:
    with pytest.raises(ConfigError, match=r"^curriculum: expected an object, got \[\]$"):
        parse_curriculum([])


def test_config_error_is_a_curriculum_error() -> None:
    assert issubclass(ConfigError, CurriculumError)


_JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | st.floats(allow_nan=True)
    | st.text(max_size=12),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=6,
)


@given(st.data())
def test_any_single_edit_gives_one_line_per_problem_or_a_valid_config(
    data: st.DataObject,
) -> None:
    section = base_section()
    paths = value_paths(section)
    path = data.draw(st.sampled_from(paths))
    value = data.draw(_JSON)
    node = section
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    try:
        parse_curriculum(section)
    except ConfigError as exc:
        lines = str(exc).split("\n")
        assert len(lines) <= MAX_ERROR_LINES + 1
        for line in lines:  # every problem names its field
            assert re.match(r"^curriculum[\w.\[\]]*( \(\"[^\n]*\"\))?[\w.\[\]]*", line)
