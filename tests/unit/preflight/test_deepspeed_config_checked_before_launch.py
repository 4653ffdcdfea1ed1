"""The DeepSpeed part of a ds_config is checked before any rank starts (issue 14, items 1 and 6).

Each bad input used to pass ``curriculum-ds validate`` and fail later inside the ranks (or be
ignored silently): a misspelt ``gradient_accumulation_steps`` (DeepSpeed ignores unknown keys),
ZeRO stage 5 (a 79-line pydantic traceback), a ``tensorboard`` section without the package
(``DistNetworkError``), ``WarmupCosineLR`` without ``total_num_steps`` or with an ``"auto"``
HF does not fill (``TypeError``), a misspelt ``curriculum`` key. Now each is one line naming
the key, exit 1, through ``validate``, ``launch`` and the API, and nothing is written.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from helpers import one_error_line, two_phase_curriculum

from curriculum_ds.cli import main as cli_main
from curriculum_ds.config import deepspeed as ds_checks
from curriculum_ds.errors import ConfigError
from curriculum_ds.plugin import load_run_config
from curriculum_ds.preflight import deepspeed_config_errors

BASE: dict[str, Any] = {
    "train_micro_batch_size_per_gpu": 2,
    "gradient_accumulation_steps": 2,
    "steps_per_print": 1_000_000,
    "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}},
    "zero_optimization": {"stage": 0},
}

TYPO = (
    "gradient_acumulation_steps: unknown top-level key "
    '(did you mean "gradient_accumulation_steps"?)'
)

CASES: list[tuple[str, dict[str, Any], str]] = [
    (
        "typo_gradient_accumulation_steps",
        {"gradient_acumulation_steps": 4},
        TYPO,
    ),
    (
        "zero_stage_5",
        {"zero_optimization": {"stage": 5}},
        "zero_optimization.stage: expected one of 0, 1, 2 or 3, got 5",
    ),
    (
        "zero_unknown_key",
        {"zero_optimization": {"stage": 3, "stage3_prefetch_bucket_siz": 1}},
        "zero_optimization.stage3_prefetch_bucket_siz: unknown key (did you mean "
        '"stage3_prefetch_bucket_size"?)',
    ),
    (
        "negative_micro_batch",
        {"train_micro_batch_size_per_gpu": -2},
        "train_micro_batch_size_per_gpu: must be a positive integer, got -2",
    ),
    (
        "tensorboard_without_package",
        {"tensorboard": {"enabled": True, "output_path": "tb"}},
        "tensorboard.enabled: the tensorboard monitor needs the Python package 'tensorboard', "
        "which is not installed (pip install tensorboard, or set enabled to false)",
    ),
    (
        "wandb_without_package",
        {"wandb": {"enabled": True}},
        "wandb.enabled: the wandb monitor needs the Python package 'wandb', "
        "which is not installed (pip install wandb, or set enabled to false)",
    ),
    (
        "warmup_cosine_without_total_num_steps",
        {"scheduler": {"type": "WarmupCosineLR", "params": {"warmup_num_steps": 10}}},
        "scheduler.params.total_num_steps: required by WarmupCosineLR, missing",
    ),
    (
        "warmup_cosine_non_hf_param_auto",  # HF fills only its own keys (test_config_hf_auto)
        {
            "scheduler": {
                "type": "WarmupCosineLR",
                "params": {"total_num_steps": 10, "warmup_min_ratio": "auto"},
            }
        },
        'scheduler.params.warmup_min_ratio: "auto" is filled in only by the HF Trainer\'s '
        "DeepSpeed integration; WarmupCosineLR needs a value",
    ),
    (
        "scheduler_unknown_param",
        {"scheduler": {"type": "WarmupLR", "params": {"warmup_num_step": 10}}},
        "scheduler.params.warmup_num_step: unknown parameter of WarmupLR (did you mean "
        '"warmup_num_steps"?)',
    ),
    (
        "scheduler_unknown_type",
        {"scheduler": {"type": "WarmupCosinLR", "params": {}}},
        'scheduler.type: unknown scheduler "WarmupCosinLR" (did you mean "WarmupCosineLR"?)',
    ),
    (
        "fp16_negative_loss_scale",
        {"fp16": {"enabled": True, "loss_scale": -1}},
        "fp16.loss_scale: must be >= 0 (0 enables dynamic loss scaling), got -1",
    ),
    (
        "optimizer_non_hf_param_auto",
        {"optimizer": {"type": "AdamW", "params": {"lr": 1e-3, "amsgrad": "auto"}}},
        'optimizer.params.amsgrad: "auto" is filled in only by the HF Trainer\'s DeepSpeed '
        "integration; give a value",
    ),
]
IDS = [case[0] for case in CASES]


@pytest.fixture(autouse=True)
def _no_monitor_packages(monkeypatch: pytest.MonkeyPatch) -> None:
    """Monitor packages are missing whatever this machine has installed."""
    monkeypatch.setattr(ds_checks, "_package_installed", lambda name: False)


def _config(tmp_path: Path, two_streams: tuple[Path, Path], edit: dict[str, Any]) -> Path:
    config = {**BASE, **edit, "curriculum": two_phase_curriculum(*two_streams)}
    path = tmp_path / "cfg" / "ds.json"
    path.parent.mkdir()
    path.write_text(json.dumps(config))
    return path


def _listing(root: Path) -> dict[str, bytes]:
    return {str(p): p.read_bytes() for p in root.rglob("*") if p.is_file()}


@pytest.mark.parametrize(("case", "edit", "message"), CASES, ids=IDS)
def test_validate_refuses_in_one_line(
    tmp_path: Path, two_streams: tuple[Path, Path], case: str, edit: dict[str, Any], message: str
) -> None:
    cfg = _config(tmp_path, two_streams, edit)
    before = _listing(tmp_path)
    line = one_error_line(CliRunner().invoke(cli_main, ["validate", str(cfg)]))
    assert line == f"Error: {message}"
    assert _listing(tmp_path) == before


@pytest.mark.parametrize(("case", "edit", "message"), CASES, ids=IDS)
def test_launch_refuses_before_any_rank_starts(
    tmp_path: Path,
    two_streams: tuple[Path, Path],
    monkeypatch: pytest.MonkeyPatch,
    case: str,
    edit: dict[str, Any],
    message: str,
) -> None:
    from curriculum_ds.commands import launch as launch_module

    def no_rank(*args: Any, **kwargs: Any) -> int:
        raise AssertionError("a rank was started")

    monkeypatch.setattr(launch_module, "run_command", no_rank)
    cfg = _config(tmp_path, two_streams, edit)
    run_dir = tmp_path / "run"
    result = CliRunner().invoke(
        cli_main, ["launch", str(cfg), "--num-gpus", "1", "--", "--run-dir", str(run_dir)]
    )
    assert one_error_line(result) == f"Error: {message}"
    assert not run_dir.exists()


@pytest.mark.parametrize(("case", "edit", "message"), CASES, ids=IDS)
def test_api_refuses_with_the_same_line(
    two_streams: tuple[Path, Path], case: str, edit: dict[str, Any], message: str
) -> None:
    config = {**BASE, **edit, "curriculum": two_phase_curriculum(*two_streams)}
    with pytest.raises(ConfigError) as info:
        load_run_config(config)
    assert str(info.value) == message


def test_preflight_function_lists_every_problem_one_line_each() -> None:
    config = {
        **BASE,
        "gradient_acumulation_steps": 4,
        "zero_optimization": {"stage": 5},
        "wandb": {"enabled": True},
    }
    assert deepspeed_config_errors(config) == [
        TYPO,
        "wandb.enabled: the wandb monitor needs the Python package 'wandb', which is not "
        "installed (pip install wandb, or set enabled to false)",
        "zero_optimization.stage: expected one of 0, 1, 2 or 3, got 5",
    ]
    assert deepspeed_config_errors(BASE) == []


def test_a_valid_deepspeed_part_passes_unchanged() -> None:
    config = {
        **BASE,
        "zero_optimization": {"stage": 3, "stage3_prefetch_bucket_size": 1000},
        "bf16": {"enabled": True},
        "gradient_clipping": 1.0,
        "scheduler": {
            "type": "WarmupCosineLR",
            "params": {"total_num_steps": 100, "warmup_num_steps": 10},
        },
        "csv_monitor": {"enabled": True, "output_path": "csv"},
        "_comment": "a note of the user's own, kept by the escape hatch",
    }
    snapshot = json.dumps(config, sort_keys=True)
    assert deepspeed_config_errors(config) == []
    assert json.dumps(config, sort_keys=True) == snapshot


def test_an_unknown_key_without_a_close_match_names_the_escape_hatch() -> None:
    assert deepspeed_config_errors({**BASE, "my_experiment": 1}) == [
        "my_experiment: unknown top-level key (neither DeepSpeed's nor curriculum; DeepSpeed "
        'would ignore it; a note\'s key may start with "_")'
    ]


def test_known_keys_come_from_deepspeed() -> None:
    known = ds_checks.known_top_level_keys()
    for key in ("gradient_accumulation_steps", "zero_optimization", "optimizer", "scheduler"):
        assert key in known
    assert "curriculum" not in known


def test_a_misspelt_curriculum_key_gets_a_did_you_mean(
    tmp_path: Path, two_streams: tuple[Path, Path]
) -> None:
    config = {**BASE, "curriculm": two_phase_curriculum(*two_streams)}
    path = tmp_path / "ds.json"
    path.write_text(json.dumps(config))
    line = one_error_line(CliRunner().invoke(cli_main, ["validate", str(path)]))
    assert line == 'Error: curriculm: unknown top-level key (did you mean "curriculum"?)'
    with pytest.raises(ConfigError) as info:
        load_run_config(config)
    assert str(info.value) == 'curriculm: unknown top-level key (did you mean "curriculum"?)'


def test_a_missing_curriculum_key_is_still_named(tmp_path: Path) -> None:
    path = tmp_path / "ds.json"
    path.write_text(json.dumps(BASE))
    line = one_error_line(CliRunner().invoke(cli_main, ["validate", str(path)]))
    assert line == f'Error: curriculum: required field is missing (no "curriculum" in {path})'


def test_every_problem_of_the_file_is_shown_one_line_each(
    tmp_path: Path, two_streams: tuple[Path, Path]
) -> None:
    curriculum = two_phase_curriculum(*two_streams)
    curriculum["seed"] = -1
    config = {**BASE, "zero_optimization": {"stage": 5}, "curriculum": curriculum}
    path = tmp_path / "ds.json"
    path.write_text(json.dumps(config))
    result = CliRunner().invoke(cli_main, ["validate", str(path)])
    assert result.exit_code == 1
    assert result.output.splitlines() == [
        "Error: curriculum.seed: must be >= 0, got -1",
        "zero_optimization.stage: expected one of 0, 1, 2 or 3, got 5",
    ]
