"""``curriculum.lr_schedule`` refusals (issue 11 item 4): each one line naming the field, through
the API (``curriculum_ds.plugin.load_run_config``) and through ``curriculum-ds validate``; and the
validate table's lr line."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from config_sections import write_config
from helpers import make_dataset, one_error_line, ragged_docs

from curriculum_ds.cli import main as cli_main
from curriculum_ds.errors import ConfigError
from curriculum_ds.plugin import load_run_config

SCHEDULER = {"type": "WarmupLR", "params": {"warmup_num_steps": 10}}


def _ds(local: str, lr_schedule: dict[str, Any], **extra: Any) -> dict[str, Any]:
    loader = {"streams": [{"local": local}], "max_seq_len": 64}
    return {
        "train_micro_batch_size_per_gpu": 2,
        "optimizer": {"type": "AdamW", "params": {"lr": 3e-3}},
        **extra,
        "curriculum": {
            "max_duration": "3000tok",
            "schedule": [
                {"name": "short", "duration": "1000tok", "train_loader": loader},
                {"name": "mix", "duration": "2000tok", "train_loader": loader},
            ],
            "lr_schedule": lr_schedule,
        },
    }


REFUSED = [
    (
        "min_lr_ratio above 1",
        {"type": "cosine", "warmup": "100tok", "min_lr_ratio": 1.5},
        "curriculum.lr_schedule.min_lr_ratio: must be <= 1, got 1.5",
    ),
    (
        "min_lr_ratio below 0",
        {"type": "linear", "min_lr_ratio": -0.1},
        "curriculum.lr_schedule.min_lr_ratio: must be >= 0, got -0.1",
    ),
    (
        "warmup as long as the run",
        {"type": "cosine", "warmup": "3000tok"},
        "curriculum.lr_schedule.warmup: 3000tok is not shorter than max_duration 3000tok: "
        "no cosine decay would be left",
    ),
    (
        "warmup in the wrong unit",
        {"type": "cosine", "warmup": "0.5ep"},
        'curriculum.lr_schedule.warmup: unit "ep" differs from max_duration\'s "tok" '
        "(0.5ep vs 3000tok); the lr schedule counts progress in it",
    ),
    (
        "decay in the wrong unit",
        {"type": "wsd", "warmup": "100tok", "decay": "1ep"},
        'curriculum.lr_schedule.decay: unit "ep" differs from max_duration\'s "tok" '
        "(1ep vs 3000tok); the lr schedule counts progress in it",
    ),
    (
        "wsd decay longer than the run",
        {"type": "wsd", "decay": "4000tok"},
        "curriculum.lr_schedule.decay: 4000tok is longer than max_duration 3000tok",
    ),
    (
        "warmup + decay longer than the run",
        {"type": "wsd", "warmup": "1500tok", "decay": "2000tok"},
        "curriculum.lr_schedule.decay: warmup 1500tok + decay 2000tok = 3500tok is longer than "
        "max_duration 3000tok",
    ),
    (
        "warmup + last phase longer than the run",
        {"type": "wsd", "warmup": "1001tok", "decay": "last_phase"},
        'curriculum.lr_schedule.decay: warmup 1001tok + decay "last_phase" (2000tok, '
        "schedule[1]) = 3001tok is longer than max_duration 3000tok",
    ),
    (
        "wsd without decay",
        {"type": "wsd", "warmup": "100tok"},
        'curriculum.lr_schedule.decay: required with "type": "wsd" (a duration, or "last_phase")',
    ),
    (
        "decay word misspelt",
        {"type": "wsd", "decay": "last"},
        'curriculum.lr_schedule.decay: expected "<int>tok", "<number>ep" or "last_phase", '
        'got "last"',
    ),
    (
        "unknown type",
        {"type": "exponential"},
        'curriculum.lr_schedule.type: expected one of "cosine", "linear" or "wsd", '
        'got "exponential"',
    ),
]


@pytest.fixture(scope="module")
def local(tmp_path_factory: pytest.TempPathFactory) -> str:
    root = tmp_path_factory.mktemp("lr_data")
    return str(make_dataset(root, "short", ragged_docs(60, seed=1, min_len=10, max_len=40)))


@pytest.mark.parametrize(("what", "lr_schedule", "line"), REFUSED, ids=[r[0] for r in REFUSED])
def test_refused_through_the_api(
    tmp_path: Path, what: str, lr_schedule: dict[str, Any], line: str
) -> None:
    with pytest.raises(ConfigError) as info:
        load_run_config(_ds("data/short", lr_schedule), check_data=False)
    assert str(info.value) == line


@pytest.mark.parametrize(("what", "lr_schedule", "line"), REFUSED, ids=[r[0] for r in REFUSED])
def test_refused_by_validate(
    local: str, tmp_path: Path, what: str, lr_schedule: dict[str, Any], line: str
) -> None:
    cfg = write_config(tmp_path, _ds(local, lr_schedule))
    result = CliRunner().invoke(cli_main, ["validate", str(cfg)])
    assert one_error_line(result) == f"Error: {line}"


def test_a_deepspeed_scheduler_beside_it_is_refused(local: str, tmp_path: Path) -> None:
    ds = _ds(local, {"type": "cosine", "warmup": "100tok"}, scheduler=copy.deepcopy(SCHEDULER))
    line = (
        "scheduler: a DeepSpeed scheduler beside curriculum.lr_schedule (both would set the "
        'learning rate); remove "scheduler" (curriculum.lr_schedule warms up and decays by '
        "tokens) or curriculum.lr_schedule"
    )
    with pytest.raises(ConfigError) as info:
        load_run_config(ds, check_data=False)
    assert str(info.value) == line
    result = CliRunner().invoke(cli_main, ["validate", str(write_config(tmp_path, ds))])
    assert one_error_line(result) == f"Error: {line}"
    # a scheduler alone stays DeepSpeed's business
    del ds["curriculum"]["lr_schedule"]
    load_run_config(ds, check_data=False)


def test_validate_shows_the_lr_schedule_in_one_line(local: str, tmp_path: Path) -> None:
    ds = _ds(local, {"type": "wsd", "warmup": "200tok", "decay": "last_phase"})
    result = CliRunner().invoke(cli_main, ["validate", str(write_config(tmp_path, ds))])
    assert result.exit_code == 0, result.output
    lines = [line for line in result.output.splitlines() if line.startswith("lr_schedule")]
    assert lines == [
        "lr_schedule wsd: warmup 200tok from 0 to peak 0.003, stable to 1000tok, linear decay "
        "(the last phase) to 0.1 x peak at 3000tok; each step's lr is the schedule at the "
        "step's end progress"
    ]
    ds = _ds(local, {"type": "cosine", "min_lr_ratio": 0.0})
    result = CliRunner().invoke(cli_main, ["validate", str(write_config(tmp_path, ds, "b.json"))])
    assert result.exit_code == 0, result.output
    assert (
        "lr_schedule cosine: warmup 0tok from 0 to peak 0.003, cosine decay to 0 x peak at "
        "3000tok" in result.output
    )


def test_the_demo_config_uses_it_and_no_deepspeed_scheduler(tmp_path: Path) -> None:
    from curriculum_ds.commands.demo import demo_ds_config
    from curriculum_ds.config import parse_curriculum

    ds = demo_ds_config(tmp_path, max_duration=600_000, cuda=False)
    assert "scheduler" not in ds
    cfg = parse_curriculum(ds["curriculum"])
    assert cfg.lr_schedule is not None
    assert cfg.lr_schedule.type == "cosine"
    assert str(cfg.lr_schedule.warmup) == "30000tok"
    # a tiny --max-duration still gives a valid schedule (no warmup then)
    assert parse_curriculum(demo_ds_config(tmp_path, max_duration=9, cuda=False)["curriculum"])
