"""The evaluator (``curriculum_ds.plugin.evaluation``) in one process.

* Due after a step that crosses a multiple of ``interval`` or a phase end, exactly (tok and ep).
* The eval set is fixed and split across ranks: every rank runs the same number of forwards
  (placeholders bear no loss), and the per-rank sums add up to the one-rank evaluation exactly.
* The forward runs under ``no_grad`` in eval mode; the mode, the global RNGs (Python, numpy,
  torch) are restored even when the model draws random numbers.
"""

from __future__ import annotations

import random
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from helpers import make_dataset, ragged_docs

from curriculum_ds.config import parse_curriculum
from curriculum_ds.core.schedule import PhaseSchedule
from curriculum_ds.plugin.evaluation import Evaluator

VOCAB = 257


class NoisyLM(torch.nn.Module):
    """An embedding LM that draws from every global RNG in its forward and records its calls."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.emb = torch.nn.Embedding(VOCAB, 16)
        self.head = torch.nn.Linear(16, VOCAB)
        self.calls: list[tuple[bool, bool, int]] = []  # (training, grad enabled, batch)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        self.calls.append((self.training, torch.is_grad_enabled(), int(input_ids.shape[0])))
        torch.rand(3)
        np.random.rand(3)  # noqa: NPY002  (the global RNG a careless model would use)
        random.random()
        return self.head(self.emb(input_ids))


@pytest.fixture(scope="module")
def streams(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("eval_streams")
    return {
        "web": make_dataset(root, "web", ragged_docs(30, seed=3, min_len=10, max_len=60)),
        "one": make_dataset(root, "one", ragged_docs(1, seed=4, min_len=20, max_len=30)),
    }


def _config(streams: dict[str, Path], *, unit: str = "tok", interval: str | None = "100tok"):
    durations = ("300tok", "700tok", "1000tok") if unit == "tok" else ("0.5ep", "1ep", "1.5ep")
    section: dict[str, Any] = {
        "max_duration": durations[2],
        "schedule": [
            {
                "name": name,
                "duration": d,
                "train_loader": {"streams": [{"local": str(streams["web"])}], "max_seq_len": 64},
            }
            for name, d in (("a", durations[0]), ("b", durations[1]))
        ],
        "eval": {
            "streams": [{"local": str(p), "name": n} for n, p in streams.items()],
            "max_samples": 7,
            **({"interval": interval} if interval else {}),
        },
    }
    return parse_curriculum(section)


def _evaluator(cfg: Any, *, rank: int = 0, world: int = 1, mbs: int = 2) -> Evaluator:
    assert cfg.eval is not None
    return Evaluator(
        cfg.eval,
        PhaseSchedule(cfg),
        max_seq_len=64,
        micro_batch_size=mbs,
        dp_rank=rank,
        dp_world_size=world,
    )


@pytest.fixture(scope="module")
def whole(streams: dict[str, Path]) -> Evaluator:
    """The one-rank evaluator (its eval set is read once, at its first evaluation)."""
    return _evaluator(_config(streams))


def _run(ev: Evaluator, model: torch.nn.Module) -> dict[str, Any]:
    return ev.evaluate(model, step=3, tokens=321, phase_idx=1, phase_name="b")


def test_due_at_interval_multiples_and_phase_ends(streams: dict[str, Path]) -> None:
    ev = _evaluator(_config(streams))
    assert not ev.is_due(0, 99)
    assert ev.is_due(99, 100)  # reaches a multiple exactly
    assert ev.is_due(50, 250)  # crosses two: one eval
    assert not ev.is_due(100, 199)
    assert ev.is_due(290, 301)  # crosses the phase end (and 300)
    assert ev.is_due(250, 300)
    no_interval = _evaluator(_config(streams, interval=None))
    assert not no_interval.is_due(250, 299)
    assert no_interval.is_due(299, 300)  # phase "a" ends at 300tok
    assert no_interval.is_due(990, 1003)  # the run end
    ep = _evaluator(_config(streams, unit="ep", interval="0.25ep"))
    assert ep.is_due(Fraction(1, 5), Fraction(1, 4))
    assert not ep.is_due(Fraction(1, 4), Fraction(49, 100))
    assert ep.is_due(Fraction(49, 100), Fraction(1, 2))


def test_the_set_is_fixed_split_over_ranks_and_exact(
    streams: dict[str, Path], whole: Evaluator
) -> None:
    cfg = _config(streams)
    model = NoisyLM()
    first = _run(whole, model)
    again = _run(whole, model)
    assert again | {"eval_time_s": 0} == first | {"eval_time_s": 0}
    whole_row = first
    assert (whole_row["step"], whole_row["tokens"], whole_row["phase_name"]) == (3, 321, "b")
    assert set(whole_row["streams"]) == {"web", "one"}

    # 2 ranks without a process group: each returns its own sums, which add up to the whole
    parts = []
    for rank in range(2):
        model.calls.clear()
        parts.append(_run(_evaluator(cfg, rank=rank, world=2), model))
        # web: 7 samples -> 4 per rank -> 2 forwards of 2; one: 1 sample -> 1 forward each
        assert [batch for *_, batch in model.calls] == ([2, 2, 1] if rank == 0 else [2, 1, 1])
    for name in ("web", "one"):
        tokens = [p["streams"][name]["tokens"] for p in parts]
        assert sum(tokens) == whole_row["streams"][name]["tokens"]
        total = sum(p["streams"][name]["loss"] * t for p, t in zip(parts, tokens, strict=True) if t)
        assert total / sum(tokens) == pytest.approx(whole_row["streams"][name]["loss"], rel=1e-12)
    assert parts[1]["streams"]["one"] == {"loss": None, "tokens": 0}  # only a placeholder

    # the oracle: per-sample cross-entropy of the first 7 samples of "web", one at a time
    from curriculum_ds.data import close_stream, open_stream

    ds = open_stream(streams["web"])
    total, count = 0.0, 0
    with torch.no_grad():
        for i in range(7):
            ids = torch.tensor(np.asarray(ds[i]["input_ids"]), dtype=torch.int64)[None]
            logits = model(ids, torch.ones_like(ids))[0, :-1]
            total += float(torch.nn.functional.cross_entropy(logits, ids[0, 1:], reduction="sum"))
            count += ids.shape[1] - 1
    close_stream(ds)
    assert whole_row["streams"]["web"]["tokens"] == count
    assert whole_row["streams"]["web"]["loss"] == pytest.approx(total / count, rel=1e-6)
    both = sum(s["loss"] * s["tokens"] for s in whole_row["streams"].values())
    assert whole_row["loss"] == pytest.approx(both / whole_row["eval_tokens"], rel=1e-12)


def test_no_grad_eval_mode_and_the_global_rngs_are_left_as_they_were(whole: Evaluator) -> None:
    model = NoisyLM()
    model.train()
    random.seed(1)
    np.random.seed(2)  # noqa: NPY002
    torch.manual_seed(3)
    expected = (random.random(), np.random.rand(), torch.rand(1).item())  # noqa: NPY002
    random.seed(1)
    np.random.seed(2)  # noqa: NPY002
    torch.manual_seed(3)
    _run(whole, model)
    assert (random.random(), np.random.rand(), torch.rand(1).item()) == expected  # noqa: NPY002
    assert model.training
    assert model.calls
    assert all(c[:2] == (False, False) for c in model.calls)
    model.eval()
    _run(whole, model)
    assert not model.training  # the previous mode, whatever it was


def test_a_custom_forward_and_a_bad_one(whole: Evaluator) -> None:
    model = NoisyLM()
    ev = whole
    default = _run(ev, model)

    class Out:
        def __init__(self, logits: torch.Tensor) -> None:
            self.logits = logits

    custom = ev.evaluate(
        model,
        lambda mb: Out(model(mb.input_ids, mb.attention_mask)),
        step=3,
        tokens=321,
        phase_idx=1,
        phase_name="b",
    )
    assert custom["streams"] == default["streams"]
    with pytest.raises(ValueError, match="must return logits"):
        ev.evaluate(model, lambda mb: 1.0, step=0, tokens=0, phase_idx=0, phase_name="a")


def test_an_engine_whose_train_sets_the_wrapped_modules_mode(whole: Evaluator) -> None:
    """DeepSpeed's engine.train/eval set ``engine.module``'s mode and leave its own flag alone."""

    class EngineLike(torch.nn.Module):
        def __init__(self, module: torch.nn.Module) -> None:
            super().__init__()
            self.module = module

        def train(self, mode: bool = True) -> EngineLike:
            self.module.train(mode)
            return self

        def eval(self) -> EngineLike:
            return self.train(False)

        def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> Any:
            return self.module(input_ids, attention_mask)

    model = NoisyLM()
    engine = EngineLike(model)
    model.eval()  # the user's loop had put the model in eval mode
    _run(whole, engine)
    assert model.calls
    assert not model.training
    model.train()
    _run(whole, engine)
    assert model.training
    assert all(not training for training, *_ in model.calls)


def test_a_remote_eval_stream_reads_the_same_samples(
    streams: dict[str, Path], whole: Evaluator, tmp_path: Path
) -> None:
    """A ``remote`` (here a folder, a shared file system) beside an empty ``local`` cache."""
    section = _config(streams).model_dump(mode="json")
    section["eval"]["streams"] = [
        {"local": str(tmp_path / "cache"), "remote": str(streams["web"]), "name": "web"}
    ]
    remote = _evaluator(parse_curriculum(section))
    model = NoisyLM()
    row = _run(remote, model)
    assert row["streams"]["web"] == _run(whole, model)["streams"]["web"]
    assert (tmp_path / "cache" / "index.json").is_file()
