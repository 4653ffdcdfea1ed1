"""``--model-factory module:function``: a user's own model for the reference loop (issue 24).

The factory is imported from ``sys.path`` and called with the data's vocabulary and the
schedule's longest ``max_seq_len``; it returns a module, or ``(module, forward)``. A bad spec or
a bad return value is one ``ConfigError`` line naming ``--model-factory``. ``nanogpt_forward``
gives every position's logits of a model in nanoGPT's convention (which returns the last
position's only without targets). The 2-rank training run of such a model is in
tests/integration/test_readme_user_loop.py.
"""

from __future__ import annotations

import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from curriculum_ds.config import parse_curriculum
from curriculum_ds.errors import ConfigError
from curriculum_ds.model_factory import build_from_factory, load_factory, nanogpt_forward

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "integration"))
from nanogpt_model import GPT, GPTConfig

FACTORIES = """
import torch
from curriculum_ds.model_factory import nanogpt_forward
from nanogpt_model import GPT, GPTConfig

def plain(vocab_size, max_seq_len):
    return torch.nn.Linear(vocab_size, max_seq_len)

def nanogpt(vocab_size, max_seq_len):
    return GPT(GPTConfig(block_size=max_seq_len, vocab_size=vocab_size)), nanogpt_forward

def wrong(vocab_size, max_seq_len):
    return "a model"

not_callable = 3
"""


@pytest.fixture(scope="module")
def two_streams(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    from helpers import make_dataset, ragged_docs

    root = tmp_path_factory.mktemp("factory_streams")
    return (
        make_dataset(root, "short", ragged_docs(40, seed=1)),
        make_dataset(root, "long", ragged_docs(40, seed=2)),
    )


@pytest.fixture
def factories(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    (tmp_path / "user_factories.py").write_text(FACTORIES)
    monkeypatch.syspath_prepend(str(tmp_path))
    return "user_factories"


@pytest.mark.parametrize(
    ("spec", "says"),
    [
        ("no_colon", "--model-factory no_colon: expected module:function"),
        (":build", "--model-factory :build: expected module:function"),
        ("no_such_module_xyz:build", "--model-factory no_such_module_xyz:build: cannot import"),
        ("user_factories:missing", "user_factories has no function missing"),
        ("user_factories:not_callable", "user_factories has no function not_callable"),
    ],
)
def test_a_bad_spec_is_one_line_naming_the_flag(factories: str, spec: str, says: str) -> None:
    with pytest.raises(ConfigError) as err:
        load_factory(spec)
    assert says in str(err.value)
    assert "\n" not in str(err.value)


def test_the_factory_gets_the_datas_vocab_and_the_longest_sequence(
    factories: str, two_streams: tuple[Path, Path]
) -> None:
    from helpers import two_phase_curriculum

    cfg = parse_curriculum(two_phase_curriculum(*two_streams))
    model, forward = build_from_factory(f"{factories}:plain", cfg, 64)
    assert forward is None
    assert (model.in_features, model.out_features) == (257, 64)  # byte-level data: 257
    model, forward = build_from_factory(f"{factories}:nanogpt", cfg, 64)
    assert isinstance(model, GPT)
    assert model.config.block_size == 64
    assert forward is nanogpt_forward
    with pytest.raises(ConfigError, match=r"returned str, expected a torch.nn.Module"):
        build_from_factory(f"{factories}:wrong", cfg, 64)


def test_nanogpt_forward_gives_every_positions_logits() -> None:
    torch.manual_seed(0)
    model = GPT(GPTConfig(block_size=8, vocab_size=11)).eval()
    idx = torch.randint(0, 11, (2, 6))
    last, loss = model(idx)
    assert last.shape == (2, 1, 11)
    assert loss is None
    mb = SimpleNamespace(input_ids=idx, attention_mask=torch.ones_like(idx))
    logits = nanogpt_forward(model, mb)
    assert logits.shape == (2, 6, 11)
    torch.testing.assert_close(logits[:, -1:], last)
