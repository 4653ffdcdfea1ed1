"""HF's ``"auto"`` values: accepted by ``validate`` and ``launch --script``, refused by the
reference loop and the plugin in one line each (issue 32, item 2).

A ds_config full of the ``"auto"`` values HF's Trainer fills in (batch sizes, GAS, gradient
clipping, the optimizer's lr/betas/eps/weight decay, the warmup scheduler's params, fp16/bf16,
ZeRO's buckets; ``transformers``' ``HfTrainerDeepSpeedConfig``) validates (exit 0; a note says
their checks are deferred to the Trainer; the table's global batch is ``auto``) and passes
``launch --script``'s preflight (the rank start captured); ``launch`` of the reference loop and
``load_run_config`` refuse each value in one line that says to give one. An ``"auto"`` HF does
not fill is still refused everywhere (test_deepspeed_config_checked_before_launch). The
launched run of such a config is in tests/integration/test_hf_trainer.py.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from helpers import one_error_line, two_phase_curriculum

from curriculum_ds.cli import main as cli_main
from curriculum_ds.config.hf_auto import HF_AUTO_STAND_INS, hf_auto_keys, without_hf_auto
from curriculum_ds.errors import ConfigError
from curriculum_ds.plugin import load_run_config

ALL_AUTO: dict[str, Any] = {
    "train_micro_batch_size_per_gpu": "auto",
    "gradient_accumulation_steps": "auto",
    "train_batch_size": "auto",
    "gradient_clipping": "auto",
    "steps_per_print": 1_000_000,
    "optimizer": {
        "type": "AdamW",
        "params": {"lr": "auto", "betas": "auto", "eps": "auto", "weight_decay": "auto"},
    },
    "scheduler": {
        "type": "WarmupDecayLR",
        "params": {
            "warmup_min_lr": "auto",
            "warmup_max_lr": "auto",
            "warmup_num_steps": "auto",
            "total_num_steps": "auto",
        },
    },
    "fp16": {"enabled": "auto"},
    "bf16": {"enabled": "auto"},
    "zero_optimization": {
        "stage": 3,
        "reduce_bucket_size": "auto",
        "stage3_prefetch_bucket_size": "auto",
        "stage3_param_persistence_threshold": "auto",
    },
}


def _write(tmp_path: Path, two_streams: tuple[Path, Path], ds: dict[str, Any]) -> Path:
    path = tmp_path / "ds.json"
    path.write_text(json.dumps({**ds, "curriculum": two_phase_curriculum(*two_streams)}))
    return path


def test_every_key_hf_fills_is_recognised_and_stood_in_for() -> None:
    assert hf_auto_keys(ALL_AUTO) == [k for k in HF_AUTO_STAND_INS if not k.startswith("amp.")]
    stood_in = without_hf_auto(ALL_AUTO)
    assert hf_auto_keys(stood_in) == []
    assert "train_batch_size" not in stood_in
    assert stood_in["optimizer"]["params"]["betas"] == [0.9, 0.999]
    assert ALL_AUTO["optimizer"]["params"]["lr"] == "auto"  # the input is left as it was


def test_validate_accepts_them_and_defers_their_checks(
    tmp_path: Path, two_streams: tuple[Path, Path]
) -> None:
    result = CliRunner().invoke(
        cli_main, ["validate", str(_write(tmp_path, two_streams, ALL_AUTO))]
    )
    assert result.exit_code == 0, result.output
    assert "global batch auto (HF Trainer) samples" in result.output
    note = result.output.splitlines()[-1]
    assert note.startswith(
        'curriculum_ds: note: "auto" in train_micro_batch_size_per_gpu, '
        "gradient_accumulation_steps, train_batch_size, gradient_clipping, optimizer.params.lr,"
    )
    assert note.endswith(
        "the checks that need these values are deferred to the HF Trainer (CurriculumTrainer "
        "fills them from TrainingArguments as HF does, then checks them); the reference loop "
        'and the plugin refuse "auto"'
    )


def test_launch_of_a_script_accepts_them(
    tmp_path: Path, two_streams: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    from curriculum_ds.commands import launch as launch_module

    started: list[list[str]] = []
    monkeypatch.setattr(launch_module, "run_command", lambda cmd, **kw: started.append(cmd) or 0)
    cfg = _write(tmp_path, two_streams, ALL_AUTO)
    script = tmp_path / "train_hf.py"
    script.write_text("")
    args = ["launch", str(cfg), "--num-gpus", "2", "--script", str(script), "--", "--model", "m"]
    result = CliRunner().invoke(cli_main, args)
    assert result.exit_code == 0, result.output
    (cmd,) = started
    assert cmd[cmd.index(str(script)) :] == [
        str(script), "--deepspeed_config", str(cfg), "--model", "m"
    ]  # fmt: skip
    assert 'curriculum_ds: note: "auto" in train_micro_batch_size_per_gpu' in result.output


def test_the_reference_loop_and_the_plugin_refuse_each_in_one_line(
    tmp_path: Path, two_streams: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    from curriculum_ds.commands import launch as launch_module

    def no_rank(*args: Any, **kwargs: Any) -> int:
        raise AssertionError("a rank was started")

    monkeypatch.setattr(launch_module, "run_command", no_rank)
    one = {**ALL_AUTO, "train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 2}
    one = {k: v for k, v in one.items() if k not in ("train_batch_size", "scheduler", "bf16")}
    one["optimizer"] = {"type": "AdamW", "params": {"lr": "auto"}}
    one["fp16"] = {"enabled": False}
    one["gradient_clipping"] = 1.0
    one["zero_optimization"] = {"stage": 2}
    expected = (
        'optimizer.params.lr: "auto" is filled in only by the HF Trainer\'s DeepSpeed '
        "integration; give a value (the reference loop and the plugin read the ds_config as it is)"
    )
    cfg = _write(tmp_path, two_streams, one)
    result = CliRunner().invoke(cli_main, ["launch", str(cfg), "--num-gpus", "1"])
    assert one_error_line(result) == f"Error: {expected}"
    with pytest.raises(ConfigError) as info:
        load_run_config(json.loads(cfg.read_text()))
    assert str(info.value) == expected
    with pytest.raises(ConfigError) as every:  # one line per value
        load_run_config(json.loads(_write(tmp_path, two_streams, ALL_AUTO).read_text()))
    assert len(str(every.value).splitlines()) == len(hf_auto_keys(ALL_AUTO))
