"""load_config: the file, its JSON, the DeepSpeed part and its batch keys, each error one line."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from config_sections import base_section, ds_with, write_config

from curriculum_ds.config import MAX_GLOBAL_BATCH_SIZE, load_config
from curriculum_ds.errors import ConfigError


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
            r'^train_micro_batch_size_per_gpu: "auto" is filled in only by the HF Trainer\'s '
            r"DeepSpeed integration; give a value \(the reference loop and the plugin read the "
            r"ds_config as it is\)$",
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
