"""DeepSpeed's own curricula beside the ``curriculum`` section (issue 13 item 4): refused with one
line naming the key, through the API (``load_run_config``, what ``initialize`` calls) and through
``curriculum-ds validate``; a key DeepSpeed removed is one line too, never a traceback; and the
``max_consecutive_nonfinite`` setting (item 3) is checked like any other field."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from config_sections import write_config
from helpers import make_dataset, one_error_line, ragged_docs

from curriculum_ds.cli import main as cli_main
from curriculum_ds.config import parse_curriculum
from curriculum_ds.errors import ConfigError
from curriculum_ds.plugin import load_run_config

LEGACY = (
    "curriculum_learning: DeepSpeed's legacy curriculum beside the curriculum section (two "
    "curricula would drive the data); remove it, the curriculum section replaces it"
)
DATA_EFFICIENCY = (
    "data_efficiency.data_sampling.curriculum_learning.enabled: DeepSpeed's data-efficiency "
    "curriculum beside the curriculum section (two curricula would drive the data); set it to "
    "false or remove the block"
)


def _efficiency(enabled: bool) -> dict[str, Any]:
    return {
        "enabled": True,
        "data_sampling": {"enabled": True, "curriculum_learning": {"enabled": enabled}},
    }


def _ds(local: str, **extra: Any) -> dict[str, Any]:
    return {
        "train_micro_batch_size_per_gpu": 2,
        "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}},
        **extra,
        "curriculum": {
            "max_duration": "1000tok",
            "schedule": [
                {
                    "name": "a",
                    "duration": "1000tok",
                    "train_loader": {"streams": [{"local": local}], "max_seq_len": 64},
                }
            ],
        },
    }


REFUSED = [
    (
        "legacy curriculum_learning",
        {"curriculum_learning": {"enabled": True, "curriculum_type": "seqlen"}},
        LEGACY,
    ),
    ("legacy curriculum_learning disabled", {"curriculum_learning": {"enabled": False}}, LEGACY),
    ("data_efficiency curriculum", {"data_efficiency": _efficiency(True)}, DATA_EFFICIENCY),
    (
        "a key DeepSpeed removed",
        {"elasticity": {"enabled": True}},
        "elasticity: Elastic training has been removed; the 'elasticity' configuration block is "
        "no longer supported. Set train_batch_size / train_micro_batch_size_per_gpu / "
        "gradient_accumulation_steps directly.",
    ),
]


@pytest.fixture(scope="module")
def local(tmp_path_factory: pytest.TempPathFactory) -> str:
    root = tmp_path_factory.mktemp("conflict_data")
    return str(make_dataset(root, "a", ragged_docs(40, seed=2, min_len=10, max_len=40)))


@pytest.mark.parametrize(("what", "extra", "line"), REFUSED, ids=[r[0] for r in REFUSED])
def test_refused_through_the_api_and_validate(
    local: str, tmp_path: Path, what: str, extra: dict[str, Any], line: str
) -> None:
    with pytest.raises(ConfigError) as info:
        load_run_config(_ds(local, **extra), check_data=False)
    assert str(info.value) == line
    cfg = write_config(tmp_path, _ds(local, **extra))
    result = CliRunner().invoke(cli_main, ["validate", str(cfg)])
    assert one_error_line(result) == f"Error: {line}"


def test_a_disabled_data_efficiency_curriculum_is_deepspeeds_business(local: str) -> None:
    run = load_run_config(_ds(local, data_efficiency=_efficiency(False)), check_data=False)
    assert run.ds_config["data_efficiency"]["data_sampling"]["curriculum_learning"] == {
        "enabled": False
    }


def test_max_consecutive_nonfinite_default_and_range(local: str) -> None:
    section = _ds(local)["curriculum"]
    assert parse_curriculum(section).max_consecutive_nonfinite == 3
    one = parse_curriculum({**section, "max_consecutive_nonfinite": 1})
    assert one.max_consecutive_nonfinite == 1
    with pytest.raises(ConfigError) as info:
        parse_curriculum({**section, "max_consecutive_nonfinite": 0})
    assert str(info.value) == "curriculum.max_consecutive_nonfinite: must be >= 1, got 0"


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (-1, "must be >= 0, got -1"),
        (1025, "must be <= 1024, got 1025"),
        ("two", 'expected an integer, got "two"'),
    ],
)
def test_prefetch_micro_batches_default_and_range(local: str, value: Any, message: str) -> None:
    """Issue 23 item 1: default 2, 0 turns it off, a bad value is one line naming the key."""
    section = _ds(local)["curriculum"]
    assert parse_curriculum(section).prefetch_micro_batches == 2
    assert parse_curriculum({**section, "prefetch_micro_batches": 0}).prefetch_micro_batches == 0
    with pytest.raises(ConfigError) as info:
        parse_curriculum({**section, "prefetch_micro_batches": value})
    assert str(info.value) == f"curriculum.prefetch_micro_batches: {message}"
