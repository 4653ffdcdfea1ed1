"""A fuzzed ds_config either validates or is refused with CurriculumError lines, never another
exception (issue 31 item 9).

Each example mutates a valid ds_config (a two-phase curriculum with a ramp, dynamic
re-weighting, an lr schedule and eval streams, and the DeepSpeed keys curriculum_ds reads) one
to three times: a key dropped; a value replaced by a wrong type, NaN, ±inf, a huge or negative
number, a string holding NUL, right-to-left or astral unicode; a value nested 2, 50 or 5000
levels deep; a number scaled; an unknown key with such a name added. The mutant goes through
:func:`curriculum_ds.config.load_config` in this process (config parsing, the DeepSpeed checks
and the type check of the keys we read; ``check_data`` off: no data is read). What it must do:
return a RunConfig, or raise a CurriculumError whose message is lines of text, one per problem,
none blank, no traceback. Anything else (TypeError, RecursionError, OverflowError...) fails the
example and hypothesis shrinks it to the smallest mutant.
"""

from __future__ import annotations

import copy
import json
import math
from pathlib import Path
from typing import Any

from config_sections import base_section, value_paths
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from curriculum_ds.config import load_config
from curriculum_ds.config.deepspeed_types import deepspeed_type_errors, is_number_or_auto
from curriculum_ds.errors import ConfigError, CurriculumError

DEEP = "\x00deep:{}\x00"
"""A placeholder string for a value nested N levels deep, replaced in the JSON text (the
encoder itself would recurse once per level)."""


def valid_config() -> dict[str, Any]:
    """config_sections' valid section with a ramp of each kind, an lr schedule and eval streams,
    inside the DeepSpeed keys curriculum_ds reads."""
    section = base_section()
    short, mix = (phase["train_loader"] for phase in section["schedule"])
    short["max_seq_len"] = [[0.0, 64], [1.0, 256]]
    mix["streams"][0]["loss_weight"] = 2.0
    mix["streams"][1]["proportion"] = [[0.0, 0.7], [1.0, 0.2]]
    section["lr_schedule"] = {"type": "cosine", "warmup": "500tok", "min_lr_ratio": 0.1}
    section["eval"] = {"streams": [{"local": "data/val"}], "interval": "1000tok", "max_samples": 8}
    return {
        "train_micro_batch_size_per_gpu": 4,
        "gradient_accumulation_steps": 2,
        "optimizer": {"type": "AdamW", "params": {"lr": 3e-4, "weight_decay": 0.01}},
        "zero_optimization": {"stage": 1},
        "curriculum": section,
    }


def _parent(root: Any, path: tuple[Any, ...]) -> Any:
    for part in path[:-1]:
        root = root[part]
    return root


NAMES = st.sampled_from(
    ["", "\x00", "a\x00b", "\u202eevil", "é" * 300, "𝔘𝔫𝔦", "curriculum ", "lr", "_note"]
)
JUNK = st.one_of(
    st.sampled_from(
        [
            math.nan,
            math.inf,
            -math.inf,
            2**64,
            -(2**63),
            1e308,
            -1e308,
            0,
            -1,
            -0.5,
            1e-320,
            True,
            False,
            None,
            "",
            "1",
            "0.001",
            "auto",
            "1000tok",
            "-5tok",
            "1e400tok",
            "nan",
            [],
            {},
            [["0.001"]],
            [[0.0, math.nan], [1.0, 1.0]],
            {"streams": []},
        ]
    ),
    NAMES,
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=40),
)


@st.composite
def mutants(draw: st.DrawFn) -> dict[str, Any]:
    config = valid_config()
    for _ in range(draw(st.integers(min_value=1, max_value=3))):
        paths = value_paths(config)
        if not paths:
            break
        path = draw(st.sampled_from(paths))
        parent, last = _parent(config, path), path[-1]
        kind = draw(st.sampled_from(["drop", "junk", "deep", "scale", "add", "rename"]))
        if kind == "drop":
            del parent[last]
        elif kind == "junk":
            parent[last] = draw(JUNK)
        elif kind == "deep":
            depth = draw(st.sampled_from([2, 50, 5000]))
            parent[last] = DEEP.format(depth)
        elif kind == "scale":
            value = parent[last]
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                factor = draw(st.sampled_from([-1, 0, 1e9, 1e300, 2**62, 0.5]))
                parent[last] = value * factor
        elif isinstance(parent, dict) and kind == "add":
            parent[draw(NAMES)] = draw(JUNK)
        elif isinstance(parent, dict):  # rename: the value under a fuzzed key
            parent[draw(NAMES)] = parent.pop(last)
    return config


def _text(config: dict[str, Any]) -> str:
    text = json.dumps(config, ensure_ascii=False)  # NaN and ±inf as Python's json writes them
    for depth in (2, 50, 5000):
        shown = json.dumps(DEEP.format(depth), ensure_ascii=False)
        text = text.replace(shown, "[" * depth + "1" + "]" * depth)
    return text


def _assert_one_line_refusals(exc: CurriculumError) -> None:
    message = str(exc)
    lines = message.split("\n")
    assert message
    assert all(line.strip() for line in lines), repr(message)
    assert len(lines) <= 21, message  # at most 20 problems, then a count of the rest
    assert "Traceback" not in message


@settings(
    max_examples=300,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(config=mutants())
def test_a_fuzzed_config_validates_or_is_refused_in_lines(tmp_path: Path, config: dict) -> None:
    path = tmp_path / "ds.json"
    path.write_text(_text(config), encoding="utf-8")
    try:
        run = load_config(path, check_data=False)
    except CurriculumError as exc:
        _assert_one_line_refusals(exc)
        return
    # accepted: the keys we read are numbers (or "auto"), the section is the valid types
    assert deepspeed_type_errors(run.ds_config) == {}
    assert run.micro_batch_size >= 1
    for phase in run.curriculum.schedule:
        for stream in phase.train_loader.streams:
            assert not isinstance(stream.proportion, str)


def test_the_valid_config_validates(tmp_path: Path) -> None:
    path = tmp_path / "ds.json"
    path.write_text(_text(valid_config()), encoding="utf-8")
    run = load_config(path, check_data=False)
    assert run.gradient_accumulation_steps == 2
    assert len(run.curriculum.schedule) == 2


def _refusal(tmp_path: Path, edit: Any) -> str:
    config = copy.deepcopy(valid_config())
    edit(config)
    path = tmp_path / "ds.json"
    path.write_text(_text(config), encoding="utf-8")
    try:
        load_config(path, check_data=False)
    except ConfigError as exc:
        _assert_one_line_refusals(exc)
        return str(exc)
    raise AssertionError("accepted")


def test_a_string_proportion_is_refused(tmp_path: Path) -> None:
    def edit(c: dict) -> None:
        c["curriculum"]["schedule"][0]["train_loader"]["streams"][0]["proportion"] = "1"

    message = _refusal(tmp_path, edit)
    assert message == (
        'curriculum.schedule[0] ("short").train_loader.streams[0].proportion: expected a '
        'number, got "1"'
    )


def test_an_lr_that_is_not_a_number_is_refused_naming_the_key(tmp_path: Path) -> None:
    for lr, shown in (("0.001", '"0.001"'), ([["0.001"]], '[["0.001"]]'), (True, "true")):

        def edit(c: dict, lr: Any = lr) -> None:
            c["optimizer"]["params"]["lr"] = lr

        message = _refusal(tmp_path, edit)
        assert message == f'optimizer.params.lr: expected a number or "auto", got {shown}'


def test_a_nan_lr_and_a_float_batch_size_are_refused(tmp_path: Path) -> None:
    def edit(c: dict) -> None:
        c["optimizer"]["params"]["lr"] = math.nan
        c["gradient_accumulation_steps"] = 2.5

    message = _refusal(tmp_path, edit)
    assert message.split("\n") == [
        "gradient_accumulation_steps: must be a positive integer, got 2.5",
        'optimizer.params.lr: expected a number or "auto", got NaN',
    ]


def test_auto_passes_the_type_check_and_only_it() -> None:
    assert is_number_or_auto("auto", integer=True)
    assert is_number_or_auto("auto", integer=False)
    assert is_number_or_auto(3e-4, integer=False)
    assert is_number_or_auto(4, integer=True)
    for bad in ("AUTO", "auto ", "0.001", math.inf, math.nan, True, None, [], 4.0):
        assert not is_number_or_auto(bad, integer=True), bad
    assert deepspeed_type_errors({"optimizer": {"params": {"lr": "auto"}}}) == {}


def test_no_number_of_the_section_is_accepted_as_a_string(tmp_path: Path) -> None:
    config = valid_config()
    numbers = [
        path
        for path in value_paths(config["curriculum"])
        if isinstance(_parent(config["curriculum"], path)[path[-1]], (int, float))
        and not isinstance(_parent(config["curriculum"], path)[path[-1]], bool)
    ]
    assert len(numbers) >= 15  # seed, proportions, ramp points, buckets, ratios, max_samples
    for path in numbers:

        def edit(c: dict, path: tuple[Any, ...] = path) -> None:
            parent = _parent(c["curriculum"], path)
            parent[path[-1]] = str(parent[path[-1]])

        message = _refusal(tmp_path, edit)
        assert message.startswith("curriculum."), (path, message)
        assert "\n" not in message, (path, message)
