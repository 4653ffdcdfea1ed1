"""Every phase's max_seq_len is checked against the model's positions (issue 14, item 2).

A GPT-2 folder with ``n_positions=256`` used for a phase of ``max_seq_len`` 512 passed
``validate --model``, and training died at step 122 with ``IndexError: index out of range in
self``. Now ``validate --model``, ``launch`` (the trainer's ``--model``) and the API
(``initialize``/``attach``: ``model.config``, or a ``max_seq_len``/``max_position_embeddings``
attribute) refuse it in one line naming the phase; a model that declares nothing is unchecked.
A model folder whose model type exists only as the folder's own code (``auto_map``) is refused
in one line too, its code never run (issue 31: ``trust_remote_code`` stays off).
"""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch
from click.testing import CliRunner
from helpers import one_error_line, two_phase_curriculum, write_ds_config

import curriculum_ds
from curriculum_ds.cli import main as cli_main
from curriculum_ds.config import load_config
from curriculum_ds.errors import ConfigError
from curriculum_ds.preflight import check_model_context, model_max_positions

MIX = 'curriculum.schedule[1] ("mix").train_loader.max_seq_len'


def _curriculum(two_streams: tuple[Path, Path], seq: int = 128) -> dict[str, Any]:
    curriculum = two_phase_curriculum(*two_streams)
    curriculum["schedule"][1]["train_loader"]["max_seq_len"] = seq
    return curriculum


def _model_folder(root: Path, **config: Any) -> Path:
    folder = root / "model"
    folder.mkdir()
    (folder / "config.json").write_text(
        json.dumps({"model_type": "gpt2", "vocab_size": 512, **config})
    )
    return folder


def _listing(root: Path) -> dict[str, bytes]:
    return {str(p): p.read_bytes() for p in root.rglob("*") if p.is_file()}


def test_validate_model_refuses_a_phase_longer_than_n_positions(
    tmp_path: Path, two_streams: tuple[Path, Path]
) -> None:
    model = _model_folder(tmp_path, n_positions=96)
    cfg = write_ds_config(tmp_path / "ds.json", _curriculum(two_streams))
    before = _listing(tmp_path)
    result = CliRunner().invoke(cli_main, ["validate", str(cfg), "--model", str(model)])
    assert one_error_line(result) == (
        f"Error: {MIX}: 128 exceeds the model's 96 positions (n_positions in {model}/config.json)"
    )
    assert _listing(tmp_path) == before


def test_validate_model_refuses_a_folder_with_its_own_code(
    tmp_path: Path, two_streams: tuple[Path, Path]
) -> None:
    auto_map = {"AutoConfig": "own.Config", "AutoModelForCausalLM": "own.Model"}
    model = _model_folder(tmp_path, model_type="only_in_this_folder", auto_map=auto_map)
    (model / "own.py").write_text(f"open({str(tmp_path / 'MARKER')!r}, 'w').close()\n")
    cfg = write_ds_config(tmp_path / "ds.json", _curriculum(two_streams))
    result = CliRunner().invoke(cli_main, ["validate", str(cfg), "--model", str(model)])
    assert one_error_line(result) == (
        f'Error: --model {model}: config.json maps model type "only_in_this_folder" to the '
        "folder's own code (auto_map); curriculum_ds never runs a model folder's code "
        "(trust_remote_code stays off): a model of your own goes through --model-factory"
    )
    assert not (tmp_path / "MARKER").exists()
    # an auto_map beside a model type transformers ships is ignored by it, and accepted
    (model / "config.json").write_text(
        json.dumps({"model_type": "gpt2", "vocab_size": 512, "auto_map": auto_map})
    )
    result = CliRunner().invoke(cli_main, ["validate", str(cfg), "--model", str(model)])
    assert result.exit_code == 0, result.output


def test_every_phase_too_long_is_named(tmp_path: Path, two_streams: tuple[Path, Path]) -> None:
    model = _model_folder(tmp_path, max_position_embeddings=32)
    cfg = write_ds_config(tmp_path / "ds.json", _curriculum(two_streams))
    with pytest.raises(ConfigError) as info:
        load_config(cfg, model=model)
    assert str(info.value).split("\n") == [
        'curriculum.schedule[0] ("short").train_loader.max_seq_len: 64 exceeds the model\'s 32 '
        f"positions (max_position_embeddings in {model}/config.json)",
        f"{MIX}: 128 exceeds the model's 32 positions "
        f"(max_position_embeddings in {model}/config.json)",
    ]


def test_launch_refuses_the_trainers_model_before_any_rank(
    tmp_path: Path, two_streams: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    from curriculum_ds.commands import launch as launch_module

    def no_rank(*args: Any, **kwargs: Any) -> int:
        raise AssertionError("a rank was started")

    monkeypatch.setattr(launch_module, "run_command", no_rank)
    model = _model_folder(tmp_path, n_positions=96)
    cfg = write_ds_config(tmp_path / "ds.json", _curriculum(two_streams))
    run_dir = tmp_path / "run"
    result = CliRunner().invoke(
        cli_main,
        [
            "launch",
            str(cfg),
            "--num-gpus",
            "1",
            "--",
            "--model",
            str(model),
            "--run-dir",
            str(run_dir),
        ],
    )
    assert one_error_line(result) == (
        f"Error: {MIX}: 128 exceeds the model's 96 positions (n_positions in {model}/config.json)"
    )
    assert not run_dir.exists()


def test_a_model_that_fits_passes(tmp_path: Path, two_streams: tuple[Path, Path]) -> None:
    model = _model_folder(tmp_path, n_positions=128)
    cfg = write_ds_config(tmp_path / "ds.json", _curriculum(two_streams))
    result = CliRunner().invoke(cli_main, ["validate", str(cfg), "--model", str(model)])
    assert result.exit_code == 0, result.output


def test_positions_are_read_from_text_config_and_absent_means_unchecked(tmp_path: Path) -> None:
    nested = tmp_path / "nested"
    nested.mkdir()
    (nested / "config.json").write_text(
        json.dumps({"text_config": {"max_position_embeddings": 64, "vocab_size": 512}})
    )
    assert model_max_positions(nested) == (
        64,
        f"text_config.max_position_embeddings in {nested}/config.json",
    )
    bare = tmp_path / "bare"
    bare.mkdir()
    (bare / "config.json").write_text(json.dumps({"vocab_size": 512}))
    assert model_max_positions(bare) is None


class _Tiny(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lm = torch.nn.Linear(2, 2)


def test_a_live_module_is_read_from_config_then_its_attributes() -> None:
    hf_like = _Tiny()
    hf_like.config = SimpleNamespace(n_positions=256, max_position_embeddings=256)  # type: ignore[assignment]
    assert model_max_positions(hf_like) == (256, "n_positions of _Tiny.config")
    declared = _Tiny()
    declared.max_seq_len = 48  # type: ignore[assignment]
    assert model_max_positions(declared) == (48, "_Tiny.max_seq_len")
    assert model_max_positions(_Tiny()) is None
    engine = SimpleNamespace(module=declared)  # a DeepSpeed engine wraps the user's module
    assert model_max_positions(engine) == (48, "_Tiny.max_seq_len")


def test_initialize_refuses_before_distributed_starts(two_streams: tuple[Path, Path]) -> None:
    import torch.distributed as dist

    model = _Tiny()
    model.max_position_embeddings = 100  # type: ignore[assignment]
    config = {"train_micro_batch_size_per_gpu": 2, "curriculum": _curriculum(two_streams)}
    with pytest.raises(ConfigError) as info:
        curriculum_ds.initialize(model=model, config=config)
    assert str(info.value) == (
        f"{MIX}: 128 exceeds the model's 100 positions (_Tiny.max_position_embeddings)"
    )
    assert not dist.is_initialized()


def test_attach_refuses_an_engine_whose_module_is_too_short(two_streams: tuple[Path, Path]) -> None:
    module = _Tiny()
    module.config = SimpleNamespace(max_position_embeddings=64)  # type: ignore[assignment]
    config = {"train_micro_batch_size_per_gpu": 2, "curriculum": _curriculum(two_streams)}
    with pytest.raises(ConfigError) as info:
        curriculum_ds.attach(SimpleNamespace(module=module), config)
    assert str(info.value) == (
        f"{MIX}: 128 exceeds the model's 64 positions (max_position_embeddings of _Tiny.config)"
    )


def test_check_model_context_accepts_a_model_without_a_limit(
    two_streams: tuple[Path, Path],
) -> None:
    from curriculum_ds.config import parse_curriculum

    check_model_context(parse_curriculum(_curriculum(two_streams, seq=4096)), _Tiny())
