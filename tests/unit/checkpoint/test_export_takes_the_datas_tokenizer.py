"""``export`` gives a folder ``AutoTokenizer.from_pretrained`` loads: the tokenizer files of the
run's streams (written by ``prepare``) are copied beside the model when the model has none of its
own; streams prepared with different tokenizers are one line. A HF Trainer ``checkpoint-N``
folder exports as a HF model from its own ``config.json``, with the data's tokenizer found
through its ``curriculum_state.pt``.

Tags written the way DeepSpeed writes a ZeRO-0 tag (``mp_rank_00_model_states.pt`` with the whole
``module``); the ZeRO 1–3 consolidation runs on real checkpoints in the integration tier.

From issue 32, item 5.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from helpers import make_dataset

from curriculum_ds.checkpoint.export import export_checkpoint
from curriculum_ds.checkpoint.files import HF_STATE_FILE
from curriculum_ds.errors import ConfigError


def _tiny_gpt2(folder: Path) -> torch.nn.Module:
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    model = GPT2LMHeadModel(
        GPT2Config(vocab_size=257, n_positions=16, n_embd=16, n_layer=1, n_head=2)
    )
    model.save_pretrained(folder)
    return model.eval()


def _curriculum(*streams: Path) -> dict[str, Any]:
    loader = {"streams": [{"local": str(s)} for s in streams], "max_seq_len": 16}
    return {"phases": [{"name": "p", "duration": "100tok", "train_loader": loader}]}


def _tag(folder: Path, module: torch.nn.Module, curriculum: dict[str, Any] | None) -> Path:
    tag = folder / "global_step3"
    tag.mkdir(parents=True)
    states: dict[str, Any] = {"module": module.state_dict()}
    if curriculum is not None:
        states["curriculum"] = curriculum
    torch.save(states, tag / "mp_rank_00_model_states.pt")
    (folder / "latest").write_text(tag.name)
    return folder


def _same_logits(model: torch.nn.Module, out: Path) -> None:
    from transformers import AutoModelForCausalLM

    loaded = AutoModelForCausalLM.from_pretrained(out).eval()
    ids = torch.randint(0, 257, (2, 8), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        torch.testing.assert_close(loaded(ids).logits, model(ids).logits, rtol=0, atol=1e-5)


def test_the_streams_tokenizer_is_copied_and_round_trips(tmp_path: Path) -> None:
    from transformers import AutoTokenizer

    data = make_dataset(tmp_path, "data", ["some text", "more text"])
    model = _tiny_gpt2(tmp_path / "base")
    ckpts = _tag(tmp_path / "checkpoints", model, _curriculum(data, data))
    export_checkpoint(ckpts, tmp_path / "out", model=tmp_path / "base")
    _same_logits(model, tmp_path / "out")
    tok = AutoTokenizer.from_pretrained(tmp_path / "out")
    text = "grüße, 世界"
    assert tok.decode(tok(text)["input_ids"]) == text
    assert tok(text)["input_ids"] == list(text.encode())


def test_streams_with_different_tokenizers_are_one_line(tmp_path: Path) -> None:
    byte = make_dataset(tmp_path, "byte", ["some text"])
    other = make_dataset(tmp_path, "other", ["more text"])
    (other / "tokenizer.json").write_text((byte / "tokenizer.json").read_text() + " ")
    model = _tiny_gpt2(tmp_path / "base")
    ckpts = _tag(tmp_path / "checkpoints", model, _curriculum(byte, other))
    with pytest.raises(ConfigError, match="different tokenizers") as err:
        export_checkpoint(ckpts, tmp_path / "out", model=tmp_path / "base")
    assert len(str(err.value).splitlines()) == 1
    assert str(byte) in str(err.value)
    assert not (tmp_path / "out").exists()


def test_a_hf_checkpoint_folder_exports_as_a_hf_model_with_the_datas_tokenizer(
    tmp_path: Path,
) -> None:
    from transformers import AutoTokenizer

    data = make_dataset(tmp_path, "data", ["some text"])
    checkpoint = tmp_path / "out_dir" / "checkpoint-3"
    model = _tiny_gpt2(checkpoint)  # the Trainer's save_model: config.json and the weights
    _tag(checkpoint, model, curriculum=None)  # the HF callback keeps the state beside the tag
    torch.save(_curriculum(data), checkpoint / HF_STATE_FILE)
    done = export_checkpoint(checkpoint, tmp_path / "exported")
    assert done.format == "hf"
    _same_logits(model, tmp_path / "exported")
    tok = AutoTokenizer.from_pretrained(tmp_path / "exported")
    assert tok("é")["input_ids"] == list("é".encode())
    # a tag of it too
    again = export_checkpoint(checkpoint / "global_step3", tmp_path / "again")
    assert again.format == "hf"
