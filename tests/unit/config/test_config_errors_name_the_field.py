"""Validation of the ``curriculum`` section: every error is one line naming the path and phase."""

from __future__ import annotations

import copy
import json
import re
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from curriculum_ds.config import (
    MAX_GLOBAL_BATCH_SIZE,
    MAX_PROPORTION,
    MAX_SEQ_LEN,
    CurriculumConfig,
    Duration,
    DynamicConfig,
    StreamConfig,
    check_streams,
    load_config,
    parse_curriculum,
)
from curriculum_ds.errors import ConfigError, CurriculumError

REPO = Path(__file__).resolve().parents[3]


def base_section() -> dict[str, Any]:
    return {
        "max_duration": "3000tok",
        "loss_weighting": "token",
        "seed": 1234,
        "schedule": [
            {
                "name": "short",
                "duration": "1000tok",
                "train_loader": {
                    "streams": [{"local": "data/short", "proportion": 1.0}],
                    "max_seq_len": 256,
                },
            },
            {
                "name": "mix",
                "duration": "2000tok",
                "train_loader": {
                    "streams": [
                        {"local": "data/short", "proportion": 0.3},
                        {"local": "data/long", "proportion": 0.7},
                    ],
                    "max_seq_len": 1024,
                },
            },
        ],
        "dynamic": {"enabled": True, "num_buckets": 4, "temperature": 1.0, "floor": 0.02},
    }


def refused(edit: Any) -> str:
    """Apply ``edit`` to a copy of the base section; return the one-line ConfigError message."""
    section = copy.deepcopy(base_section())
    edit(section)
    with pytest.raises(ConfigError) as info:
        parse_curriculum(section)
    message = str(info.value)
    assert "\n" not in message
    assert "Traceback" not in message
    assert not message.startswith("(")
    return message


def write_mds(path: Path, lengths: list[int]) -> Path:
    from streaming import MDSWriter

    with MDSWriter(out=str(path), columns={"input_ids": "ndarray:int32"}) as writer:
        for n in lengths:
            writer.write({"input_ids": np.arange(n, dtype=np.int32)})
    return path


# ----------------------------------------------------------------------------------------------
# Valid configs
# ----------------------------------------------------------------------------------------------


def test_base_section_parses_with_defaults() -> None:
    cfg = parse_curriculum(base_section())
    assert cfg.max_duration == Duration(unit="tok", value=3000)
    assert [p.name for p in cfg.schedule] == ["short", "mix"]
    assert cfg.schedule[1].train_loader.streams[1].name == "long"
    assert cfg.schedule[0].train_loader.epoch_size is None
    assert cfg.dynamic.window == 1_000_000
    assert cfg.dynamic.recompute_every_n_steps == 50
    assert cfg.dynamic.static_metric == "num_tokens"
    assert cfg.dynamic.score == "loss"


def test_minimal_section_defaults() -> None:
    cfg = parse_curriculum(
        {
            "max_duration": "1ep",
            "schedule": [
                {"name": "a", "duration": "1ep", "train_loader": {"streams": [{"local": "x/"}]}}
            ],
        }
    )
    assert cfg.seed == 1234
    assert cfg.loss_weighting == "token"
    assert cfg.dynamic == DynamicConfig()
    assert not cfg.dynamic.enabled
    loader = cfg.schedule[0].train_loader
    assert loader.max_seq_len == 1024
    assert loader.streams[0].proportion == 1.0
    assert loader.streams[0].name == "x"


def test_models_are_frozen_and_round_trip() -> None:
    cfg = parse_curriculum(base_section())
    with pytest.raises(ValueError, match="frozen"):
        cfg.seed = 1
    dumped = cfg.model_dump(mode="json")
    assert dumped["max_duration"] == "3000tok"
    assert dumped["schedule"][1]["duration"] == "2000tok"
    assert CurriculumConfig.model_validate(json.loads(json.dumps(dumped))) == cfg


def test_epoch_durations_sum_exactly() -> None:
    section = base_section()
    section["max_duration"] = "1ep"
    section["schedule"][0]["duration"] = "0.1ep"
    section["schedule"][1]["duration"] = "0.9ep"
    cfg = parse_curriculum(section)  # 0.1 + 0.9 == 1 exactly (not in floats: 0.1+0.2 != 0.3)
    assert cfg.schedule[0].duration.value == Fraction(1, 10)
    section["schedule"] = [
        {**section["schedule"][0], "name": n, "duration": d}
        for n, d in (("a", "0.1ep"), ("b", "0.2ep"), ("c", "0.7ep"))
    ]
    assert parse_curriculum(section).max_duration.value == 1


def test_example_config_loads() -> None:
    run = load_config(REPO / "configs" / "ds_demo_example.json")
    assert "curriculum" not in run.ds_config
    assert run.ds_config["zero_optimization"] == {"stage": 2}
    assert run.micro_batch_size == 4
    assert run.gradient_accumulation_steps == 2
    assert run.global_batch_size(2) == 16
    assert [p.name for p in run.curriculum.schedule] == ["short", "mix"]


# ----------------------------------------------------------------------------------------------
# Duration
# ----------------------------------------------------------------------------------------------


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


# ----------------------------------------------------------------------------------------------
# Field-level errors
# ----------------------------------------------------------------------------------------------


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
    assert "unknown key (allowed: local, name, proportion)" in message


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
        "got 1e+308 (+1 more error)"
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


def test_c05_temperature_zero_is_refused() -> None:
    message = refused(lambda s: s["dynamic"].__setitem__("temperature", 0))
    assert message == "curriculum.dynamic.temperature: must be > 0, got 0"


def test_c05_floor_times_buckets_above_one_is_refused() -> None:
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


def test_several_errors_report_the_first_and_a_count() -> None:
    def two(s: dict[str, Any]) -> None:
        s["seed"] = -1
        s["dynamic"]["temperature"] = 0

    assert refused(two) == "curriculum.seed: must be >= 0, got -1 (+1 more error)"


def test_section_must_be_an_object() -> None:
    with pytest.raises(ConfigError, match=r"^curriculum: expected an object, got \[\]$"):
        parse_curriculum([])


def test_config_error_is_a_curriculum_error() -> None:
    assert issubclass(ConfigError, CurriculumError)


def test_stream_name_default() -> None:
    assert StreamConfig(local="data/long/").name == "long"
    assert StreamConfig(local="long").name == "long"
    assert StreamConfig(local="data/long", name="L").name == "L"


# ----------------------------------------------------------------------------------------------
# load_config: files and the DeepSpeed part
# ----------------------------------------------------------------------------------------------


def write_config(tmp_path: Path, ds: dict[str, Any] | str, name: str = "ds.json") -> Path:
    path = tmp_path / name
    path.write_text(ds if isinstance(ds, str) else json.dumps(ds, indent=2))
    return path


def ds_with(section: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"train_micro_batch_size_per_gpu": 4, **extra, "curriculum": section}


def test_load_config_splits_deepspeed_part(tmp_path: Path) -> None:
    path = write_config(tmp_path, ds_with(base_section(), gradient_accumulation_steps=3))
    run = load_config(path)
    assert run.path == path
    assert run.ds_config == {"train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 3}
    assert run.global_batch_size(1) == 12


def test_missing_file(tmp_path: Path) -> None:
    path = tmp_path / "nope.json"
    with pytest.raises(ConfigError, match=rf"^{re.escape(str(path))}: no such file$"):
        load_config(path)


def test_bad_json_names_file_line_and_column(tmp_path: Path) -> None:
    path = write_config(tmp_path, '{\n  "curriculum": {\n    "seed": 1,,\n  }\n}\n')
    with pytest.raises(ConfigError, match=rf"^{re.escape(str(path))}:3:15: invalid JSON: "):
        load_config(path)


def test_missing_curriculum_section(tmp_path: Path) -> None:
    path = write_config(tmp_path, {"train_micro_batch_size_per_gpu": 4})
    with pytest.raises(ConfigError, match=r'^curriculum: required field is missing \(no "curr'):
        load_config(path)
    path = write_config(tmp_path, "[1, 2]", "list.json")
    with pytest.raises(ConfigError, match=r"expected a JSON object at the top level, got \[1, 2\]"):
        load_config(path)


def test_load_config_reports_section_errors(tmp_path: Path) -> None:
    section = base_section()
    section["schedule"][1]["duration"] = "12 tokens"
    path = write_config(tmp_path, ds_with(section))
    expected = (
        'curriculum.schedule[1] ("mix").duration: expected "<int>tok" or "<number>ep", '
        'got "12 tokens"'
    )
    with pytest.raises(ConfigError, match=f"^{re.escape(expected)}$"):
        load_config(path)


@pytest.mark.parametrize(
    ("ds", "pattern"),
    [
        ({}, r"^train_micro_batch_size_per_gpu: required field is missing"),
        (
            {"train_micro_batch_size_per_gpu": 0},
            r"^train_micro_batch_size_per_gpu: must be a positive integer, got 0$",
        ),
        (
            {"train_micro_batch_size_per_gpu": "auto"},
            r'^train_micro_batch_size_per_gpu: must be a positive integer, got "auto"$',
        ),
        (
            {"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 1.5},
            r"^gradient_accumulation_steps: must be a positive integer, got 1.5$",
        ),
    ],
)
def test_batch_keys_are_checked_at_load(tmp_path: Path, ds: dict[str, Any], pattern: str) -> None:
    path = write_config(tmp_path, {**ds, "curriculum": base_section()})
    with pytest.raises(ConfigError, match=pattern):
        load_config(path)


def test_micro_batch_that_cannot_fit_memory_is_refused_at_load(tmp_path: Path) -> None:
    # the mix phase has max_seq_len 1024: 2^14 samples is 2^24 tokens per micro-batch
    assert load_config(write_config(tmp_path, ds_with(base_section()))).micro_batch_size == 4
    ok = {**ds_with(base_section()), "train_micro_batch_size_per_gpu": 2**14}
    assert load_config(write_config(tmp_path, ok)).micro_batch_size == 2**14
    huge = {**ds_with(base_section()), "train_micro_batch_size_per_gpu": 10**6}
    with pytest.raises(ConfigError) as info:
        load_config(write_config(tmp_path, huge))
    assert str(info.value) == (
        "train_micro_batch_size_per_gpu: 1000000 samples × max_seq_len 1024 "
        '(curriculum.schedule[1] ("mix")) = 1,024,000,000 tokens per micro-batch, more than '
        "16,777,216 (2^24); use a "
        "smaller micro-batch and more gradient_accumulation_steps"
    )


def test_global_batch_upper_bound(tmp_path: Path) -> None:
    too_many = ds_with(base_section(), gradient_accumulation_steps=2**23)
    with pytest.raises(
        ConfigError,
        match=(
            r"^gradient_accumulation_steps: 8388608 × train_micro_batch_size_per_gpu 4 = "
            r"33,554,432 samples per optimizer step per rank, more than 16,777,216 \(2\^24\)$"
        ),
    ):
        load_config(write_config(tmp_path, too_many))
    run = load_config(
        write_config(tmp_path, ds_with(base_section(), gradient_accumulation_steps=2**20))
    )
    assert run.global_batch_size(4) == MAX_GLOBAL_BATCH_SIZE
    with pytest.raises(
        ConfigError,
        match=(
            r"^train_batch_size: train_micro_batch_size_per_gpu 4 × gradient_accumulation_steps "
            r"1048576 × dp_world_size 8 = 33,554,432 samples per optimizer step, more than "
            r"16,777,216 \(2\^24\)$"
        ),
    ):
        run.global_batch_size(8)


def test_train_batch_size_must_match_world_size(tmp_path: Path) -> None:
    ds = ds_with(base_section(), gradient_accumulation_steps=2, train_batch_size=16)
    run = load_config(write_config(tmp_path, ds))
    assert run.global_batch_size(2) == 16
    with pytest.raises(
        ConfigError,
        match=(
            r"^train_batch_size: 16 != train_micro_batch_size_per_gpu 4 × "
            r"gradient_accumulation_steps 2 × dp_world_size 4 = 32$"
        ),
    ):
        run.global_batch_size(4)
    with pytest.raises(ValueError, match="dp_world_size must be >= 1"):
        run.global_batch_size(0)


# ----------------------------------------------------------------------------------------------
# check_streams
# ----------------------------------------------------------------------------------------------


@pytest.fixture
def data_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """tmp_path as the working directory, with tiny MDS datasets data/short and data/long."""
    monkeypatch.chdir(tmp_path)
    write_mds(tmp_path / "data" / "short", [5, 7, 9])
    write_mds(tmp_path / "data" / "long", [40, 50])
    return tmp_path


def test_check_streams_accepts_mds_datasets(data_dir: Path) -> None:
    cfg = parse_curriculum(base_section())
    check_streams(cfg)  # num_tokens is present in any MDS dataset with input_ids
    path = write_config(data_dir, ds_with(base_section()))
    assert load_config(path, check_data=True).curriculum == cfg


def test_missing_stream_dir(data_dir: Path) -> None:
    section = base_section()
    section["schedule"][1]["train_loader"]["streams"][1]["local"] = "data/missing"
    cfg = parse_curriculum(section)
    with pytest.raises(
        ConfigError,
        match=(
            r'^curriculum\.schedule\[1\] \("mix"\)\.train_loader\.streams\[1\]\.local: '
            r'"data/missing" does not exist$'
        ),
    ):
        check_streams(cfg)
    path = write_config(data_dir, ds_with(section))
    load_config(path)  # without check_data the files are not looked at
    with pytest.raises(ConfigError, match=r'"data/missing" does not exist$'):
        load_config(path, check_data=True)


def test_not_an_mds_dir(data_dir: Path) -> None:
    (data_dir / "plain").mkdir()
    (data_dir / "plain" / "a.txt").write_text("hello")
    section = base_section()
    section["schedule"][0]["train_loader"]["streams"][0]["local"] = "plain"
    with pytest.raises(
        ConfigError,
        match=(
            r'^curriculum\.schedule\[0\] \("short"\)\.train_loader\.streams\[0\]\.local: '
            r'"plain" is not an MDS dataset \(no index\.json'
        ),
    ):
        check_streams(parse_curriculum(section))


def test_stream_path_is_a_file(data_dir: Path) -> None:
    (data_dir / "file").write_text("x")
    section = base_section()
    section["schedule"][0]["train_loader"]["streams"][0]["local"] = "file"
    with pytest.raises(ConfigError, match=r'\.streams\[0\]\.local: "file" is not a directory$'):
        check_streams(parse_curriculum(section))


def test_corrupt_index(data_dir: Path) -> None:
    (data_dir / "data" / "long" / "index.json").write_text("{not json")
    with pytest.raises(
        ConfigError,
        match=(
            r'^curriculum\.schedule\[1\] \("mix"\)\.train_loader\.streams\[1\]\.local: '
            r'"data/long" is not a readable MDS dataset: '
        ),
    ) as info:
        check_streams(parse_curriculum(base_section()))
    assert "\n" not in str(info.value)


def test_static_metric_must_exist_when_dynamic(data_dir: Path) -> None:
    section = base_section()
    section["dynamic"]["static_metric"] = "token_entropy"
    with pytest.raises(
        ConfigError,
        match=(
            r'^curriculum\.dynamic\.static_metric: stream "data/short" \(schedule\[0\] '
            r'\("short"\)\.train_loader\.streams\[0\]\) has no metric column "token_entropy"'
        ),
    ):
        check_streams(parse_curriculum(section))
    section["dynamic"]["enabled"] = False
    check_streams(parse_curriculum(section))


def test_duration_object_form_errors_are_one_problem() -> None:
    # Duration(unit=..., value=...) is the programmatic form; its errors still read as one line
    message = refused(
        lambda s: s["schedule"][0].__setitem__("duration", {"unit": "tok", "value": 1.5})
    )
    assert (
        message == 'curriculum.schedule[0] ("short").duration.value: expected an integer, got 1.5'
    )


def test_streams_must_share_one_vocabulary(data_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import curriculum_ds.preflight as preflight_module  # where the data checks look it up

    class Info:
        def __init__(self, vocab_size: int | None) -> None:
            self.num_samples = 3
            self.vocab_size = vocab_size
            self.metrics = {"num_tokens": np.array([5, 7, 9])}

    vocab = {"data/short": 256, "data/long": 50257}
    monkeypatch.setattr(
        preflight_module, "read_stream_info_checked", lambda local: Info(vocab[local])
    )
    with pytest.raises(
        ConfigError,
        match=(
            r'^curriculum\.schedule\[1\] \("mix"\)\.train_loader\.streams\[1\]\.local: "data/long" '
            r'was tokenized with vocab_size 50257 but "data/short" \(schedule\[0\] \("short"\)'
            r"\.train_loader\.streams\[0\]\) with 256; all streams must share one tokenizer$"
        ),
    ):
        check_streams(parse_curriculum(base_section()))
    vocab["data/long"] = None  # type: ignore[assignment]  # unknown tokenizer: not compared
    check_streams(parse_curriculum(base_section()))


def _model_dir(root: Path, vocab_size: int) -> Path:
    folder = root / f"model{vocab_size}"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"vocab_size": vocab_size}))
    return folder


def test_check_streams_vocab_size_from_model_or_strict(data_dir: Path) -> None:
    # data/short and data/long are foreign MDS data (no vocab_size), ids 0..8 and 0..49
    cfg = parse_curriculum(base_section())
    check_streams(cfg)  # train's check: it does not know --model, so nothing to compare
    with pytest.raises(
        ConfigError,
        match=(
            r'^curriculum\.schedule\[0\] \("short"\)\.train_loader\.streams\[0\]\.local: '
            r'"data/short" has no vocab_size \(no stream of the schedule was made by '
            r"`curriculum-ds prepare`\); pass --model DIR, the local HF model folder the run will "
            r"use$"
        ),
    ):
        check_streams(cfg, strict=True)
    check_streams(cfg, model=_model_dir(data_dir, 50), strict=True)
    model = _model_dir(data_dir, 49)
    with pytest.raises(
        ConfigError,
        match=(
            r'^curriculum\.schedule\[1\] \("mix"\)\.train_loader\.streams\[1\]\.local: '
            r'"data/long" holds token id 49, out of range for vocab_size 49 \(of --model '
            rf"{re.escape(str(model))}\); ids must be < vocab_size$"
        ),
    ):
        check_streams(cfg, model=model)
    path = write_config(data_dir, ds_with(base_section()))
    with pytest.raises(ConfigError, match=r'"data/long" holds token id 49'):
        load_config(path, check_data=True, model=model)


def test_check_streams_recorded_token_range(
    data_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import curriculum_ds.preflight as preflight_module  # where the data checks look it up

    class Info:
        def __init__(self, max_token_id: int | None) -> None:
            self.vocab_size = 256
            self.max_token_id = max_token_id
            self.metrics = {"num_tokens": np.array([5, 7, 9])}

    recorded = {"data/short": 255, "data/long": 300}
    monkeypatch.setattr(
        preflight_module, "read_stream_info_checked", lambda local: Info(recorded[local])
    )
    with pytest.raises(
        ConfigError,
        match=(
            r'^curriculum\.schedule\[1\] \("mix"\)\.train_loader\.streams\[1\]\.local: '
            r'"data/long" holds token id 300, out of range for vocab_size 256 \(recorded by '
            r"`curriculum-ds prepare`\); ids must be < vocab_size$"
        ),
    ):
        check_streams(parse_curriculum(base_section()))  # even without strict: its own vocab
    recorded["data/long"] = 255
    check_streams(parse_curriculum(base_section()), strict=True)


def _paths(node: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [prefix] if prefix else []
    if isinstance(node, dict):
        for key, value in node.items():
            out += _paths(value, (*prefix, key))
    elif isinstance(node, list):
        for i, value in enumerate(node):
            out += _paths(value, (*prefix, i))
    return out


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
def test_any_single_edit_gives_one_line_or_a_valid_config(data: st.DataObject) -> None:
    section = base_section()
    paths = _paths(section)
    path = data.draw(st.sampled_from(paths))
    value = data.draw(_JSON)
    node = section
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    try:
        parse_curriculum(section)
    except ConfigError as exc:
        message = str(exc)
        assert "\n" not in message
        assert message.startswith("curriculum")
        assert re.match(r"^curriculum[\w.\[\]]*( \(\"[^\n]*\"\))?[\w.\[\]]*", message)
