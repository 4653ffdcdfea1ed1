"""DoReMi's ``apply: "loss"``: the step's loss and gradient are ``Σ w·ℓ / Σ w`` over its tokens.

A real :class:`DoReMiReweighter` (two streams, non-uniform proportions) hands its loss weights
to a real :class:`Step` (the fake engine of ``conftest.py``, one rank, GAS 2), as the loader
gives them after :meth:`PhaseLoader.apply`. The oracle is one float64 computation over every
loss-bearing token of the step: ``Σ_t w[stream(t)]·ℓ_t / Σ_t w[stream(t)]``, with ``w`` the
reference's ``(w_d / p_d) / Σ (w / p)``. Per-stream losses and the per-sample losses the
re-weighting observes stay unweighted.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from curriculum_ds.config import DynamicConfig
from curriculum_ds.distributed import Topology
from curriculum_ds.dynamic import DoReMiReweighter, PhaseView
from curriculum_ds.plugin.step import Step
from curriculum_ds.records.schema import StepOutcome

PROPORTIONS = np.array([0.7, 0.3])


def _doremi_loss_weights() -> np.ndarray:
    """The loss weights of a DoReMi update whose second stream has the larger excess loss."""
    cfg = DynamicConfig.model_validate(
        {"enabled": True, "method": "doremi", "unit": "streams", "reference_metric": "ref",
         "window": 4, "recompute_every_n_steps": 1, "doremi": {"apply": "loss"}}
    )  # fmt: skip
    rw = DoReMiReweighter(cfg)
    ref = ({"ref": np.zeros(4)}, {"ref": np.zeros(4)})
    start = rw.start_phase(PhaseView(0, ("web", "code"), PROPORTIONS, (4, 4), ref), None)
    np.testing.assert_allclose(start.loss_weights, [0.5, 0.5])  # w = p before any update
    rw.observe(np.array([[0, 0], [1, 1], [0, 2], [1, 3]]), np.array([0.5, 2.0, 0.7, 1.5]))
    update = rw.maybe_recompute(1)
    assert update is not None
    assert update.proportions is None  # the sampling mix stays
    assert update.loss_weights is not None
    return update.loss_weights


def test_the_step_loss_and_update_are_the_doremi_weighted_token_mean(fake_engine, batch):
    weights = _doremi_loss_weights()
    assert weights[1] > 0.5 > weights[0]  # the stream with more excess loss weighs more
    samples = batch["samples"].copy()
    samples[:, 0] = [0, 1, 1, 0]  # streams of the four samples
    handed: list[StepOutcome] = []

    def complete(outcome: StepOutcome) -> tuple[dict[str, Any], None]:
        handed.append(outcome)
        return {"step": outcome.global_step}, None

    module = fake_engine.module
    params = [p.detach().clone() for p in module.parameters()]
    # the oracle: one float64 pass over every loss-bearing token of the step
    num = torch.zeros((), dtype=torch.float64)
    den = torch.zeros((), dtype=torch.float64)
    per_stream = {0: [0.0, 0], 1: [0.0, 0]}
    for mb in batch["micro_batches"]:
        logits = module(mb.input_ids)[:, :-1].double()
        labels = mb.labels[:, 1:]
        token = F.cross_entropy(logits.transpose(1, 2), labels, reduction="none")
        mask = labels != -100
        w = torch.from_numpy(weights[samples[mb.positions, 0]])[:, None].expand_as(token)
        num = num + (token * w * mask).sum()
        den = den + (w * mask).sum()
        for row, stream in enumerate(samples[mb.positions, 0]):
            per_stream[int(stream)][0] += float(token[row][mask[row]].sum().detach())
            per_stream[int(stream)][1] += int(mask[row].sum())
    objective = num / den
    objective.backward()
    grads = [p.grad.clone() for p in module.parameters()]
    module.zero_grad()
    step = Step(
        fake_engine,
        topology=Topology(dp_rank=0, dp_world_size=1),
        loss_weighting="token",
        lr=0.25,
        stop_flag=lambda: False,
        gather_sample_losses=False,
        complete=complete,
        **{**batch, "samples": samples, "stream_names": ["web", "code"],
           "stream_tokens": np.array([10, 5])},
        loss_weights=weights,
    )  # fmt: skip
    for mb in step.micro_batches:
        step.backward(fake_engine(mb.input_ids, attention_mask=mb.attention_mask), mb)
    step.finish()
    (outcome,) = handed
    assert outcome.loss == pytest.approx(float(objective.detach()), rel=1e-6)
    for name, idx in (("web", 0), ("code", 1)):  # per-stream losses stay unweighted
        total, count = per_stream[idx]
        assert outcome.streams[name]["loss"] == pytest.approx(total / count, rel=1e-6)
    for before, grad, after in zip(params, grads, module.parameters(), strict=True):
        torch.testing.assert_close(
            after.detach(), before - 0.5 * grad.float(), rtol=1e-5, atol=1e-6
        )
