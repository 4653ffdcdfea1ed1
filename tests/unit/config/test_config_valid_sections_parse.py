"""Valid ``curriculum`` sections parse, with their defaults, into frozen models that round-trip."""

from __future__ import annotations

import json
from fractions import Fraction
from pathlib import Path

import pytest
from config_sections import base_section

from curriculum_ds.config import (
    CurriculumConfig,
    Duration,
    DynamicConfig,
    StreamConfig,
    load_config,
    parse_curriculum,
)

REPO = Path(__file__).resolve().parents[3]


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


def test_stream_name_default() -> None:
    assert StreamConfig(local="data/long/").name == "long"
    assert StreamConfig(local="long").name == "long"
    assert StreamConfig(local="data/long", name="L").name == "L"
