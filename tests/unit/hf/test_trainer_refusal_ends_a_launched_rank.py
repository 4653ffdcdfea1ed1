"""In a launched rank, ``CurriculumTrainer``'s refusal is one line from rank 0 and exit 1 on every
rank (no traceback, before HF builds anything); ``curriculum-ds validate --hf-args`` runs the same
checks on a ``TrainingArguments.to_json_string()`` dump without starting ranks.

The launched case on 2 real ranks (``curriculum-ds launch --script`` with the docs' script and a
micro-batch that disagrees) is in tests/integration/test_hf_trainer.py.

From issue 32, item 1.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner
from helpers import fixed_docs, make_dataset, write_ds_config
from transformers import GPT2Config, GPT2LMHeadModel, TrainingArguments

from curriculum_ds.cli import main as cli
from curriculum_ds.errors import ConfigError
from curriculum_ds.hf import CurriculumTrainer


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    return make_dataset(tmp_path_factory.mktemp("hf_rank"), "d", fixed_docs(32, 16))


def section(data: Path, max_seq_len: int = 16) -> dict:
    loader = {"streams": [{"local": str(data)}], "max_seq_len": max_seq_len}
    return {
        "max_duration": "640tok",
        "schedule": [{"name": "all", "duration": "640tok", "train_loader": loader}],
    }


def arguments(tmp_path: Path, ds: Path, **kw) -> TrainingArguments:
    kw = {"per_device_train_batch_size": 2, "gradient_accumulation_steps": 2} | kw
    args = TrainingArguments(output_dir=str(tmp_path / "out"), use_cpu=True, report_to=[], **kw)
    args.deepspeed = str(ds)  # after __post_init__: HF's DeepSpeed set-up is not reached here
    return args


def model(n_positions: int = 64) -> GPT2LMHeadModel:
    return GPT2LMHeadModel(
        GPT2Config(vocab_size=257, n_positions=n_positions, n_embd=16, n_layer=1, n_head=2)
    )


@pytest.mark.parametrize(
    ("case", "first_words"),
    [
        ("group_by_length", "TrainingArguments.group_by_length: not supported"),
        ("short_context", 'curriculum.schedule[0] ("all").train_loader.max_seq_len: 32 exceeds'),
    ],
)
@pytest.mark.parametrize("rank", ["0", "1"])
def test_a_launched_rank_exits_1_and_rank_0_prints_one_line(
    tmp_path, data, monkeypatch, capsys, case, first_words, rank
):
    if case == "group_by_length":
        cfg = write_ds_config(tmp_path / "ds.json", section(data))
        args, net = arguments(tmp_path, cfg, group_by_length=True), model()
    else:
        cfg = write_ds_config(tmp_path / "ds.json", section(data, max_seq_len=32))
        args, net = arguments(tmp_path, cfg), model(n_positions=16)
    assert args.world_size == 1  # HF's device set-up done (cached) before the rank variables
    monkeypatch.setenv("LOCAL_RANK", rank)
    monkeypatch.setenv("RANK", rank)
    with pytest.raises(SystemExit) as ended:
        CurriculumTrainer(model=net, args=args)
    assert ended.value.code == 1
    out = capsys.readouterr()
    assert out.out == ""
    if rank == "0":
        [line] = out.err.splitlines()
        assert line.startswith(f"curriculum_ds: error: {first_words}"), line
    else:
        assert out.err == ""
    assert not (tmp_path / "out").exists()


def test_outside_a_launcher_the_error_is_raised(tmp_path, data, monkeypatch):
    monkeypatch.delenv("LOCAL_RANK", raising=False)
    cfg = write_ds_config(tmp_path / "ds.json", section(data))
    with pytest.raises(ConfigError, match="group_by_length"):
        CurriculumTrainer(model=model(), args=arguments(tmp_path, cfg, group_by_length=True))


def test_validate_hf_args_checks_the_dump_without_ranks(tmp_path, data):
    cfg = write_ds_config(tmp_path / "ds.json", section(data), train_micro_batch_size_per_gpu=3)
    dump = tmp_path / "args.json"
    dump.write_text(arguments(tmp_path, cfg).to_json_string())
    result = CliRunner().invoke(cli, ["validate", str(cfg), "--hf-args", str(dump)])
    assert result.exit_code == 1
    assert result.output.strip().splitlines() == [
        "Error: train_micro_batch_size_per_gpu: the ds_config has 3 but TrainingArguments gives "
        '2 (per_device_train_batch_size); make them agree, or set "auto"'
    ]
    auto = write_ds_config(
        tmp_path / "auto.json", section(data), train_micro_batch_size_per_gpu="auto"
    )
    result = CliRunner().invoke(
        cli, ["validate", str(auto), "--hf-args", str(dump), "--num-gpus", "2"]
    )
    assert result.exit_code == 0, result.output
    assert "global batch 8 samples (dp_world_size 2)" in result.output  # 2 × GAS 2 × 2 ranks
    dump.write_text(arguments(tmp_path, cfg, group_by_length=True).to_json_string())
    result = CliRunner().invoke(cli, ["validate", str(auto), "--hf-args", str(dump)])
    assert result.exit_code == 1
    assert "group_by_length" in result.output
    dump.write_text('{"per_device_train_batch_size": "two"}')
    result = CliRunner().invoke(cli, ["validate", str(auto), "--hf-args", str(dump)])
    assert result.exit_code == 1
    assert result.output.strip() == (
        f"Error: --hf-args {dump}: per_device_train_batch_size: expected a positive integer, "
        "got 'two'"
    )
