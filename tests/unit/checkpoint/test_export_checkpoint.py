"""``curriculum-ds export`` / ``export_checkpoint`` on checkpoints written the
way DeepSpeed writes a ZeRO-0 tag (``mp_rank_00_model_states.pt`` with the whole ``module``).

The ZeRO 1–3 path (DeepSpeed's zero_to_fp32) runs on real checkpoints in
tests/integration/test_checkpoint_retention_export_and_logs.py.

From issue 14, item 5.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from click.testing import CliRunner
from helpers import one_error_line

from curriculum_ds.checkpoint.export import STATE_DICT_FILE, export_checkpoint
from curriculum_ds.cli import main as cli_main
from curriculum_ds.errors import ConfigError, ResumeError


def _zero0_checkpoint(root: Path, module: torch.nn.Module, step: int = 7) -> Path:
    ckpts = root / "checkpoints"
    tag = ckpts / f"global_step{step}"
    tag.mkdir(parents=True)
    torch.save({"module": module.state_dict()}, tag / "mp_rank_00_model_states.pt")
    (ckpts / "latest").write_text(tag.name)
    return ckpts


def _tiny_gpt2(folder: Path) -> torch.nn.Module:
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    model = GPT2LMHeadModel(
        GPT2Config(vocab_size=50, n_positions=16, n_embd=16, n_layer=1, n_head=2)
    )
    model.save_pretrained(folder)
    (folder / "tokenizer_config.json").write_text("{}")
    return model


def test_hf_model_exports_a_folder_that_loads_with_the_same_logits(tmp_path):
    from transformers import AutoModelForCausalLM

    base = _tiny_gpt2(tmp_path / "base").eval()
    trained = _tiny_gpt2(tmp_path / "unused").eval()  # no dropout
    with torch.no_grad():
        for p in trained.parameters():
            p.add_(0.01)  # the checkpoint's weights differ from the --model folder's
    ckpts = _zero0_checkpoint(tmp_path, trained)
    done = export_checkpoint(ckpts, tmp_path / "out", model=tmp_path / "base")
    assert done.format == "hf"
    assert done.tag_dir == ckpts / "global_step7"
    assert (tmp_path / "out" / "tokenizer_config.json").is_file()
    loaded = AutoModelForCausalLM.from_pretrained(tmp_path / "out")
    ids = torch.randint(0, 50, (2, 8), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        expected = trained(ids).logits
        torch.testing.assert_close(loaded(ids).logits, expected, rtol=0, atol=1e-6)
        assert not torch.allclose(base.eval()(ids).logits, expected)
    assert loaded.lm_head.weight.data_ptr() == loaded.transformer.wte.weight.data_ptr()


def test_other_models_export_a_plain_state_dict(tmp_path):
    model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.ReLU(), torch.nn.Linear(4, 2))
    tag = _zero0_checkpoint(tmp_path, model) / "global_step7"
    done = export_checkpoint(tag, tmp_path / "out")  # a tag folder works too
    assert (done.format, done.num_tensors, done.num_parameters) == ("state_dict", 4, 26)
    state = torch.load(tmp_path / "out" / STATE_DICT_FILE)
    fresh = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.ReLU(), torch.nn.Linear(4, 2))
    fresh.load_state_dict(state)
    for a, b in zip(fresh.parameters(), model.parameters(), strict=True):
        assert torch.equal(a, b)
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []


def test_weights_of_another_architecture_are_refused_and_nothing_is_written(tmp_path):
    _tiny_gpt2(tmp_path / "base")
    ckpts = _zero0_checkpoint(tmp_path, torch.nn.Linear(3, 4))
    with pytest.raises(ConfigError, match=r"do not fit GPT2LMHeadModel \(missing \d+ key"):
        export_checkpoint(ckpts, tmp_path / "out", model=tmp_path / "base")
    assert not (tmp_path / "out").exists()
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []


def test_an_empty_out_folder_is_used_a_full_one_refused(tmp_path):
    ckpts = _zero0_checkpoint(tmp_path, torch.nn.Linear(2, 2))
    (tmp_path / "empty").mkdir()
    export_checkpoint(ckpts, tmp_path / "empty")
    assert (tmp_path / "empty" / STATE_DICT_FILE).is_file()
    with pytest.raises(ConfigError, match="exists and is not an empty folder"):
        export_checkpoint(ckpts, tmp_path / "empty")


@pytest.mark.parametrize(
    ("setup", "match"),
    [
        ("missing", "no such checkpoint folder"),
        ("not_a_checkpoint", "not a DeepSpeed checkpoint folder"),
        ("dangling_latest", "names 'global_step9', which is not a folder there"),
    ],
)
def test_unreadable_checkpoints_are_one_line(tmp_path, setup, match):
    ckpts = tmp_path / "checkpoints"
    if setup != "missing":
        ckpts.mkdir()
    if setup == "dangling_latest":
        (ckpts / "latest").write_text("global_step9")
    with pytest.raises(ResumeError, match=match):
        export_checkpoint(ckpts, tmp_path / "out")
    line = one_error_line(CliRunner().invoke(cli_main, ["export", str(ckpts), str(tmp_path / "o")]))
    assert match.split("'")[0] in line


def test_the_cli_prints_what_it_wrote(tmp_path):
    ckpts = _zero0_checkpoint(tmp_path, torch.nn.Linear(2, 2))
    result = CliRunner().invoke(cli_main, ["export", str(ckpts), str(tmp_path / "out")])
    assert result.exit_code == 0, result.output
    assert result.output == (
        f"exported {ckpts / 'global_step7'} (6 parameters) as a plain state_dict: "
        f"{tmp_path / 'out'}\n"
    )
