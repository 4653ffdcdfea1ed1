"""Micro-batches, ranks and steps without loss-bearing tokens, on the real engine.

Single-token samples (no next token to predict: zero loss-bearing tokens) come from ``prepare``
with ``min_tokens=1`` and its document splitter patched to cut every token into its own sample (the
real splitter makes a one-token sample only from a trailing EOS, next to full ones).
Phase "empty" draws only those: its 2 steps have no loss-bearing token anywhere and must be
skipped. Phase "mixed" draws 1 real document for 3 one-token samples (Megatron's largest-deficit
interleave puts the document second: ``[one, DOC, one, one]``), so with 2 ranks x GAS 2 x
micro-batch 1 rank 0's first micro-batch has 0 tokens and rank 1 has 0 tokens in the whole step.
ZeRO 3: a rank without tokens still takes part in every gather and reduce-scatter of the step.

From issue 5, item 5.
"""

from __future__ import annotations

import math
import re
from collections.abc import Generator
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from helpers import RunOutput, make_dataset, metrics, trace, write_ds_config
from shared_job import Outputs, Run, shared_runs

import curriculum_ds.data.writer as data_module
from curriculum_ds.config import load_config
from curriculum_ds.core.loader import PhaseLoader
from curriculum_ds.core.loss import IGNORE_INDEX
from curriculum_ds.train import build_model

pytestmark = pytest.mark.distributed


DOC = "tokens bear the loss"  # 20 bytes + EOS: 20 loss-bearing tokens
SEED = 11
# a warning raised from our own code, as Python prints it: "<path>/curriculum_ds/x.py:12: XWarning:"
OUR_WARNING = re.compile(r"curriculum_ds[/\\][\w/\\]+\.py:\d+: \w*Warning")


@shared_runs
def _zero_token_runs(root: Path) -> Generator[list[Run], Outputs, tuple[Path, Path, RunOutput]]:
    """The ZeRO-3 run, in the session's shared launched job (tests/shared_job.py)."""
    real = make_dataset(root, "real", [DOC], max_seq_len=32)
    with pytest.MonkeyPatch.context() as mp:  # cut every document into one-token samples
        mp.setattr(
            data_module, "split_document", lambda ids, *_: [ids[i : i + 1] for i in range(ids.size)]
        )
        ones = make_dataset(root, "ones", ["one token per sample"], max_seq_len=2, min_tokens=1)

    def loader(*streams):
        return {"streams": list(streams), "max_seq_len": 32}

    curriculum = {
        "max_duration": "1000000tok",
        "seed": SEED,
        "schedule": [
            {"name": "empty", "duration": "8tok", "train_loader": loader({"local": str(ones)})},
            {
                "name": "mixed",
                "duration": "999992tok",
                "train_loader": loader(
                    {"local": str(real), "proportion": 0.25},
                    {"local": str(ones), "proportion": 0.75},
                ),
            },
        ],
    }
    cfg = write_ds_config(
        root / "ds.json",
        curriculum,
        train_micro_batch_size_per_gpu=1,
        gradient_accumulation_steps=2,
        gradient_clipping=0.0,
        zero_optimization={"stage": 3},
        zero_allow_untested_optimizer=True,
        optimizer={"type": "SGD", "params": {"lr": 1.0}},
    )
    run_dir = root / "run"
    args = ("--max-steps", "3", "--trace-samples", "--dump-state", str(run_dir / "state"))
    outputs = yield [Run(cfg, run_dir, args)]
    return cfg, run_dir, outputs[run_dir]


@pytest.fixture(scope="module")
def zero_token_run(shared_job):
    """(ds config, run dir, its output: every rank's stdout and stderr)."""
    return shared_job(_zero_token_runs)


def test_steps_without_tokens_are_skipped_and_the_run_continues(zero_token_run):
    _, run_dir, proc = zero_token_run
    rows = metrics(run_dir)
    assert [r["step"] for r in rows] == [1, 2, 3]
    assert [r["phase_name"] for r in rows] == ["empty", "empty", "mixed"]
    assert "finished at step 3" in proc.output
    for row in rows[:2]:
        assert row["skipped"] is True
        assert row["loss"] is None
        assert row["token_loss"] is None
        assert row["valid_tokens"] == 0
        assert row["step_tokens"] == 4  # consumed all the same: the schedule moves on
    row = rows[2]
    assert row["skipped"] is False
    assert row["valid_tokens"] == len(DOC)
    assert math.isfinite(row["loss"])
    assert row["loss"] == row["token_loss"]


def test_empty_micro_batch_and_empty_rank_give_no_nan_and_no_warning(zero_token_run):
    _, run_dir, proc = zero_token_run
    # the precondition: rank 0 = positions [0, 1], rank 1 = [2, 3]; the document is at position 1
    # only, so rank 0's first micro-batch and all of rank 1 have no loss-bearing token
    samples = trace(run_dir)[2]["samples"]
    assert [name for name, _ in samples] == ["ones", "real", "ones", "ones"]
    assert "nan" not in (run_dir / "metrics.jsonl").read_text().lower()
    # the output holds every rank's stdout and stderr (a fresh warnings registry per run)
    assert not OUR_WARNING.search(proc.output), OUR_WARNING.search(proc.output)


def test_update_with_empty_rank_is_the_token_mean_of_the_one_document(zero_token_run):
    """Empty ranks add an exact zero; skipped steps leave the parameters alone."""
    cfg_path, run_dir, _ = zero_token_run
    cfg = load_config(cfg_path).curriculum
    torch.manual_seed(cfg.seed)
    model = build_model(None, cfg, 32)
    init = {n: p.detach().clone() for n, p in model.named_parameters()}
    mixed = PhaseLoader(cfg.schedule[1], 1, seed=cfg.seed)
    (doc,) = mixed.fetch(np.array([[0, 0]], dtype=np.int64))  # stream "real", its one sample
    ids = torch.tensor(np.asarray(doc, dtype=np.int64))[None]
    assert ids.size(1) == len(DOC) + 1
    logits = model(input_ids=ids).logits
    loss = F.cross_entropy(logits[0, :-1], ids[0, 1:], ignore_index=IGNORE_INDEX)
    loss.backward()
    row = metrics(run_dir)[2]
    assert row["loss"] == pytest.approx(float(loss.detach()), rel=1e-6)
    after = torch.load(run_dir / "state" / "params.pt")
    names = sorted(init)
    delta = torch.cat([(after[n] - init[n]).flatten() for n in names])
    grads = [model.get_parameter(n).grad for n in names]
    expected = torch.cat(
        [
            -(g if g is not None else torch.zeros_like(init[n])).flatten()
            for n, g in zip(names, grads, strict=True)
        ]
    )
    assert torch.isfinite(delta).all()
    assert float((delta - expected).norm() / expected.norm()) <= 1e-5
