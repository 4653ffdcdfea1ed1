"""A user's own loss terms get the documented scaling, checked against a plain oracle.

``user_loop_script.py`` (its own ``TinyLM``) runs 3 optimizer steps on 2 CPU gloo ranks under
the deepspeed launcher, GAS 2, micro-batches of 2 ragged right-padded samples, ZeRO 0, plain SGD
(``lr = 1``, no momentum, no weight decay, ``gradient_clipping`` 0 so no clip hides a scale):

1. ``smooth``: label-smoothed cross-entropy (0.1) per token through
   ``step.backward_token_losses``;
2. ``aux``: ``step.backward(logits, mb, aux_loss=z_loss)`` (a per-micro-batch z-loss);
3. ``smooth+aux``: both at once.

The oracle is one process of plain torch on the same parameters (dumped before each step) and
the same samples (the step's global batch from ``step.trace_record()``, tokenized here from the
source documents: UTF-8 bytes + EOS), cut into the 4 micro-batches of the 2 ranks as the README
says (each rank a contiguous slice, its micro-batches in order) and padded by
``curriculum_ds.core.loader.collate``. Documented scaling: the optimizer sees the token mean of the
per-token losses over every loss-bearing token of the global batch, plus the mean of ``aux_loss``
over the 4 micro-batches. SGD with lr 1 makes the update minus that gradient, to 1e-5 relative.

From issue 10.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from helpers import make_dataset, ragged_docs, write_ds_config
from user_loop_script import LABEL_SMOOTHING, build_model, z_loss
from userloop_launch import launch_script

from curriculum_ds.core.loader import collate
from curriculum_ds.records.jsonl import read_jsonl

pytestmark = pytest.mark.distributed

SCRIPT = Path(__file__).resolve().parent / "user_loop_script.py"
VARIANTS = ["smooth", "aux", "smooth+aux"]
RANKS, GAS, MICRO = 2, 2, 2
MAX_SEQ_LEN = 64
EOS = 256  # prepare's byte tokenizer: ids 0-255 are the UTF-8 bytes, 256 is EOS
UPDATE_RTOL = 1e-5


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("user_loss_variants")
    docs = ragged_docs(64, seed=3, min_len=5, max_len=60)
    data = make_dataset(root, "ragged", docs, max_seq_len=MAX_SEQ_LEN)
    curriculum = {
        "max_duration": "100000tok",
        "seed": 5,
        "schedule": [
            {
                "name": "only",
                "duration": "100000tok",
                "train_loader": {"streams": [{"local": str(data)}], "max_seq_len": MAX_SEQ_LEN},
            }
        ],
    }
    cfg = write_ds_config(
        root / "ds.json",
        curriculum,
        train_micro_batch_size_per_gpu=MICRO,
        gradient_accumulation_steps=GAS,
        optimizer={"type": "SGD", "params": {"lr": 1.0}},
        gradient_clipping=0.0,
    )
    args = ("--run-dir", "run", "--log", "log.jsonl", "--dump", "dump")
    launch_script(SCRIPT, cfg, *args, "--variants", ",".join(VARIANTS), "--max-steps", "3")
    return {"root": root, "cfg": cfg, "docs": docs, "rows": read_jsonl(root / "log.jsonl")}


def _flat(named: dict[str, torch.Tensor]) -> torch.Tensor:
    return torch.cat([named[n].flatten() for n in sorted(named)])


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).norm() / b.norm())


class Oracle:
    """Step k in one process: its micro-batches, its losses and the SGD update they imply."""

    def __init__(self, run: dict[str, Any], k: int):
        dump = run["root"] / "dump"
        self.before = torch.load(dump / f"params{k - 1}.pt")
        self.after = torch.load(dump / f"params{k}.pt")
        self.record = run["rows"][k - 1]["record"]
        samples = run["rows"][k - 1]["trace"]["samples"]
        assert len(samples) == RANKS * GAS * MICRO
        tokens = [
            np.array([*run["docs"][idx].encode(), EOS], dtype=np.int64)[:MAX_SEQ_LEN]
            for _, idx in samples
        ]
        # rank r holds samples [r*GAS*MICRO, (r+1)*GAS*MICRO), its micro-batches in order
        self.micro_batches = [
            collate(tokens[o : o + MICRO], np.arange(o, o + MICRO))
            for o in range(0, len(tokens), MICRO)
        ]
        self.dumped = [
            mb
            for r in range(RANKS)
            for mb in torch.load(dump / f"rank{r}_step{k}.pt", weights_only=False)
        ]
        self.model = build_model(run["cfg"])
        self.model.load_state_dict(self.before)
        self.actual_update = _flat(self.after) - _flat(self.before)

    def update(self, *, smoothing: float, aux_weight: float) -> tuple[float, float, torch.Tensor]:
        """(token-mean loss, -grad) of ``token mean + aux_weight × sum of the micro-batches'
        aux``; the documented scaling is ``aux_weight = 1 / (RANKS × GAS)``."""
        self.model.zero_grad()
        loss_sums, aux, num_valid = [], [], 0
        for mb in self.micro_batches:
            logits = self.model(mb.input_ids, attention_mask=mb.attention_mask)
            loss_sums.append(
                F.cross_entropy(  # plain torch; position t predicts token t+1
                    logits[:, :-1].reshape(-1, logits.size(-1)),
                    mb.labels[:, 1:].reshape(-1),
                    ignore_index=-100,
                    label_smoothing=smoothing,
                    reduction="sum",
                )
            )
            num_valid += int(mb.loss_mask.sum())
            aux.append(z_loss(logits, mb.attention_mask))
        token_mean = torch.stack(loss_sums).sum() / num_valid
        (token_mean + aux_weight * torch.stack(aux).sum()).backward()
        grads = {n: p.grad for n, p in self.model.named_parameters()}
        aux_mean = float(torch.stack(aux).detach().mean())
        return float(token_mean.detach()), aux_mean, -_flat(grads)


def _oracle(run: dict[str, Any], variant: str) -> Oracle:
    return Oracle(run, VARIANTS.index(variant) + 1)


@pytest.mark.parametrize("variant", VARIANTS)
def test_the_ranks_micro_batches_are_contiguous_slices_of_the_traced_global_batch(run, variant):
    oracle = _oracle(run, variant)
    assert len(oracle.dumped) == len(oracle.micro_batches) == RANKS * GAS
    for ours, theirs in zip(oracle.micro_batches, oracle.dumped, strict=True):
        assert torch.equal(theirs["positions"], torch.as_tensor(ours.positions))
        assert torch.equal(theirs["input_ids"], ours.input_ids)
        assert torch.equal(theirs["labels"], ours.labels)
    # ragged and right-padded: the padding really is in the micro-batches
    lengths = [int(mb.attention_mask.sum(1).min()) for mb in oracle.micro_batches]
    assert min(lengths) < max(mb.input_ids.size(1) for mb in oracle.micro_batches)


@pytest.mark.parametrize("variant", VARIANTS)
def test_update_is_the_documented_loss(run, variant):
    oracle = _oracle(run, variant)
    smoothing = LABEL_SMOOTHING if "smooth" in variant else 0.0
    aux_weight = 1.0 / (RANKS * GAS) if "aux" in variant else 0.0
    token_mean, aux_mean, expected = oracle.update(smoothing=smoothing, aux_weight=aux_weight)
    assert _rel(oracle.actual_update, expected) < UPDATE_RTOL
    assert oracle.record["valid_tokens"] == sum(
        int(m.loss_mask.sum()) for m in oracle.micro_batches
    )
    assert oracle.record["token_loss"] == pytest.approx(token_mean, rel=1e-6)
    if "aux" in variant:  # what the optimizer saw: the token mean plus the mean aux term
        assert oracle.record["aux_loss"] == pytest.approx(aux_mean, rel=1e-6)
        assert oracle.record["loss"] == pytest.approx(token_mean + aux_mean, rel=1e-6)
    else:
        assert oracle.record["aux_loss"] is None
        assert oracle.record["loss"] == pytest.approx(token_mean, rel=1e-6)
    assert oracle.record["lr"] == 1.0
    assert oracle.record["step_applied"]


@pytest.mark.parametrize("variant", VARIANTS)
def test_the_check_tells_the_variants_and_scalings_apart(run, variant):
    """The tolerance is far below the gap to a wrong loss or a wrong aux scaling."""
    oracle = _oracle(run, variant)
    smoothing = LABEL_SMOOTHING if "smooth" in variant else 0.0
    aux_weight = 1.0 / (RANKS * GAS) if "aux" in variant else 0.0
    wrong = [{"smoothing": LABEL_SMOOTHING - smoothing, "aux_weight": aux_weight}]  # (un)smoothed
    if "aux" in variant:
        # aux left out, averaged per rank only (summed over ranks), summed over micro-batches
        wrong += [{"smoothing": smoothing, "aux_weight": w} for w in (0.0, 1.0 / GAS, 1.0)]
    for kwargs in wrong:
        _, _, other = oracle.update(**kwargs)
        assert _rel(oracle.actual_update, other) > 100 * UPDATE_RTOL, kwargs
