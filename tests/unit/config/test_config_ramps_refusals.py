"""Ramps and loss weights in the ``curriculum`` section: each bad input is one line naming it.

From issue 22 ("Bad input"): ramp fractions not increasing, not starting at 0 or not ending at 1,
a negative value, a ``max_seq_len`` point below 2 (or above the model's context: preflight), and a
``loss_weight`` <= 0. From issue 32 (item 7): ``seq_len_multiple`` rounds a warmup (default 8,
left out of the phase fingerprint there), a multiple above the ramp's largest point is refused.
"""

from __future__ import annotations

from typing import Any

import pytest
from config_sections import base_section, refused

from curriculum_ds.config import parse_curriculum
from curriculum_ds.core.schedule import phase_fingerprint
from curriculum_ds.errors import ConfigError
from curriculum_ds.preflight.model import check_model_context

MIX = 'curriculum.schedule[1] ("mix").train_loader'


def _set_stream(key: str, value: Any, stream: int = 0):
    return lambda s: s["schedule"][1]["train_loader"]["streams"][stream].__setitem__(key, value)


def _set_loader(key: str, value: Any):
    return lambda s: s["schedule"][1]["train_loader"].__setitem__(key, value)


@pytest.mark.parametrize(
    ("points", "expected"),
    [
        (
            [[0.0, 0.9], [0.5, 0.5], [0.4, 0.1], [1.0, 0.1]],
            "[2]: fractions must increase: 0.4 follows 0.5",
        ),
        ([[0.1, 0.9], [1.0, 0.1]], "[0]: the first point must be at fraction 0.0, got 0.1"),
        ([[0.0, 0.9], [0.8, 0.1]], "[1]: the last point must be at fraction 1.0, got 0.8"),
        ([[0.0, -0.2], [1.0, 0.1]], "[0]: value -0.2 must be >= 0 and <= 1e+15"),
        ([[0.0, 0.9]], ": a ramp needs at least two [fraction, value] points"),
        ([[0.0, 0.9], [1.0]], "[1]: must be a [fraction, value] pair of numbers, got [1.0]"),
    ],
)
def test_bad_proportion_ramps_are_one_line(points: Any, expected: str) -> None:
    message = refused(_set_stream("proportion", points))
    assert message.startswith(f"{MIX}.streams[0].proportion{expected}"), message
    assert "\n" not in message


def test_a_ramped_mix_must_keep_a_positive_total() -> None:
    def edit(s: dict[str, Any]) -> None:
        _set_stream("proportion", [[0.0, 1.0], [0.5, 0.0], [1.0, 0.0]], 0)(s)
        _set_stream("proportion", [[0.0, 0.0], [0.5, 0.0], [1.0, 1.0]], 1)(s)

    assert refused(edit) == (
        f"{MIX}.streams: the streams' proportions sum to 0 at fraction 0.5 of the phase"
    )


@pytest.mark.parametrize(
    ("points", "expected"),
    [
        ([[0.0, 1], [1.0, 1024]], "[0]: value 1 must be >= 2 and <= 1.04858e+06"),
        ([[0.0, 64], [1.0, 64.5]], "[1]: value 64.5 must be an integer"),
        ([[0.0, 64], [0.0, 128], [1.0, 256]], "[1]: fractions must increase: 0.0 follows 0.0"),
    ],
)
def test_bad_warmup_ramps_are_one_line(points: Any, expected: str) -> None:
    message = refused(_set_loader("max_seq_len", points))
    assert message.startswith(f"{MIX}.max_seq_len{expected}"), message


@pytest.mark.parametrize("weight", [0, -1.0])
def test_a_loss_weight_must_be_positive(weight: float) -> None:
    message = refused(_set_stream("loss_weight", weight, 1))
    assert message == f"{MIX}.streams[1].loss_weight: must be > 0, got {weight}"


def test_a_warmup_above_the_models_context_is_refused() -> None:
    section = base_section()
    section["schedule"][1]["train_loader"]["max_seq_len"] = [[0.0, 64], [1.0, 512]]
    cfg = parse_curriculum(section)
    with pytest.raises(ConfigError) as info:
        check_model_context(cfg, type("Model", (), {"max_seq_len": 256})())
    assert str(info.value) == (
        f"{MIX}.max_seq_len: 512 exceeds the model's 256 positions (Model.max_seq_len)"
    )


def test_valid_ramps_parse_and_keep_constant_phases_unchanged() -> None:
    section = base_section()
    plain = parse_curriculum(section)
    _set_stream("proportion", [[0, 0.9], [1, 0.1]], 0)(section)
    _set_stream("proportion", [[0, 0.1], [1, 0.9]], 1)(section)
    _set_stream("loss_weight", 0.5, 1)(section)
    _set_loader("max_seq_len", [[0, 64], [0.25, 256], [1, 1024]])(section)
    loader = parse_curriculum(section).schedule[1].train_loader
    assert loader.proportions_at(0.5) == [0.5, 0.5]
    assert loader.seq_len_at(0.0) == 64
    assert loader.seq_len_at(0.1) == 136  # 64 + 192 * 0.4 = 140.8 -> 140 -> down to 136
    assert loader.peak_seq_len == 1024
    # a phase without ramps or weights dumps as it always did (fingerprints unchanged)
    assert "loss_weight" not in plain.schedule[1].train_loader.streams[0].model_dump()


def test_seq_len_multiple_rounds_a_warmup_and_may_start_below_8() -> None:
    section = base_section()
    _set_loader("max_seq_len", [[0, 2], [1, 10]])(section)
    default = parse_curriculum(section).schedule[1].train_loader
    assert [default.seq_len_at(x) for x in (0.0, 0.5, 1.0)] == [8, 8, 8]  # today's rounding
    _set_loader("seq_len_multiple", 2)(section)
    loader = parse_curriculum(section).schedule[1].train_loader
    assert [loader.seq_len_at(x) for x in (0.0, 0.3, 0.5, 1.0)] == [2, 4, 6, 10]
    _set_loader("max_seq_len", 300)(section)  # a constant length is used as it is
    assert parse_curriculum(section).schedule[1].train_loader.seq_len_at(0.0) == 300


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (
            16,
            "16 is larger than the max_seq_len ramp's largest point 10: its lengths would exceed "
            "the ramp",
        ),
        (0, "must be >= 1, got 0"),
        (2.0, "expected an integer, got 2.0"),
    ],
)
def test_a_bad_seq_len_multiple_is_one_line(value: Any, expected: str) -> None:
    def edit(s: dict[str, Any]) -> None:
        _set_loader("max_seq_len", [[0, 2], [1, 10]])(s)
        _set_loader("seq_len_multiple", value)(s)

    assert refused(edit) == f"{MIX}.seq_len_multiple: {expected}"


def test_seq_len_multiple_at_its_default_keeps_the_phase_fingerprint() -> None:
    section = base_section()
    before = phase_fingerprint(parse_curriculum(section).schedule[1])
    _set_loader("seq_len_multiple", 8)(section)
    explicit = parse_curriculum(section).schedule[1]
    assert "seq_len_multiple" not in explicit.train_loader.model_dump(mode="json")
    assert phase_fingerprint(explicit) == before
    _set_loader("seq_len_multiple", 2)(section)
    assert phase_fingerprint(parse_curriculum(section).schedule[1]) != before


def test_document_masking_at_its_default_keeps_the_phase_fingerprint() -> None:
    section = base_section()
    before = phase_fingerprint(parse_curriculum(section).schedule[1])
    assert parse_curriculum(section).schedule[1].train_loader.document_masking is True
    _set_loader("document_masking", True)(section)
    explicit = parse_curriculum(section).schedule[1]
    assert "document_masking" not in explicit.train_loader.model_dump(mode="json")
    assert phase_fingerprint(explicit) == before
    _set_loader("document_masking", False)(section)
    off = parse_curriculum(section).schedule[1]
    assert off.train_loader.model_dump(mode="json")["document_masking"] is False
    assert phase_fingerprint(off) != before
    assert refused(_set_loader("document_masking", "yes")).startswith(f"{MIX}.document_masking: ")
