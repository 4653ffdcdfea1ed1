"""A Step built from plain values (a fake engine, a topology, a lambda callback), no Curriculum.

The step hands its outcome to the callback it was given and returns the row the callback gives
back; its gradient is the full-batch token mean (the oracle: one single-process computation over
every loss-bearing token of the step).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from curriculum_ds.distributed import Topology
from curriculum_ds.errors import StepError
from curriculum_ds.plugin.step import Step
from curriculum_ds.records.schema import StepOutcome, TraceRow


def _step(engine: Any, batch: dict[str, Any], **overrides: Any) -> tuple[Step, list[Any]]:
    """A Step over ``batch`` whose callback records what it is handed."""
    handed: list[StepOutcome] = []

    def complete(outcome: StepOutcome) -> tuple[dict[str, Any], dict[str, Any] | None]:
        handed.append(outcome)
        return {"step": outcome.global_step, "from": "callback"}, {
            "history_of": outcome.global_step
        }

    values: dict[str, Any] = {
        "topology": Topology(dp_rank=0, dp_world_size=1),
        "loss_weighting": "token",
        "lr": 0.25,
        "stop_flag": lambda: False,
        "gather_sample_losses": False,
        "complete": complete,
        **batch,
    }
    values.update(overrides)
    return Step(engine, **values), handed


def _oracle(module: torch.nn.Module, batch: dict[str, Any]) -> tuple[torch.Tensor, list[Any]]:
    """The token-mean loss over the whole step, and its gradient, in one computation."""
    module.zero_grad()
    total, count = torch.zeros(()), 0
    for mb in batch["micro_batches"]:
        logits = module(mb.input_ids)[:, :-1]
        labels = mb.labels[:, 1:]
        total = total + F.cross_entropy(
            logits.reshape(-1, logits.shape[-1]), labels.reshape(-1), reduction="sum"
        )
        count += int((labels != -100).sum())
    loss = total / count
    loss.backward()
    grads = [p.grad.clone() for p in module.parameters()]
    module.zero_grad()
    return loss.detach(), grads


def _run(step: Step, engine: Any, **kwargs: Any) -> Any:
    for mb in step.micro_batches:
        step.backward(engine(mb.input_ids, attention_mask=mb.attention_mask), mb, **kwargs)
    return step.finish()


def test_finish_hands_the_outcome_to_the_callback_and_returns_its_row(fake_engine, batch):
    step, handed = _step(fake_engine, batch)
    expected_loss, _ = _oracle(fake_engine.module, batch)
    row = _run(step, fake_engine)
    assert row == {"step": 1, "from": "callback"}
    assert row.history == {"history_of": 1}
    with pytest.raises(TypeError, match="a step's metrics row is read only"):
        row["step"] = 2
    with pytest.deprecated_call(match="step.reweighting is deprecated"):
        assert step.reweighting == {"history_of": 1}  # the old name, one more release
    (outcome,) = handed
    assert outcome.global_step == 1
    assert outcome.phase_name == "only"
    assert outcome.lr == 0.25
    assert outcome.valid_tokens == step.global_valid_tokens == sum(n - 1 for n in (6, 3, 4, 2))
    assert outcome.step_tokens == 15
    assert outcome.token_loss == pytest.approx(float(expected_loss), rel=1e-6)
    assert outcome.loss == pytest.approx(float(expected_loss), rel=1e-6)
    assert outcome.aux_loss is None
    assert outcome.skip_reason is None
    assert outcome.step_applied
    assert outcome.sample_losses is None
    assert not outcome.stop_requested
    assert outcome.streams["web"]["samples"] == 4
    assert outcome.streams["web"]["tokens"] == 15
    assert outcome.streams["web"]["loss"] == pytest.approx(float(expected_loss), rel=1e-6)
    assert step.finished
    assert step.lr == 0.25


def test_the_update_is_the_full_batch_token_mean_gradient(fake_engine, batch):
    params = [p.detach().clone() for p in fake_engine.module.parameters()]
    _, grads = _oracle(fake_engine.module, batch)
    step, _ = _step(fake_engine, batch)
    _run(step, fake_engine)
    # DeepSpeed's 1/GAS is off in token mode: our factor is the whole normalisation
    assert [scale for _, scale in fake_engine.backward_calls] == [False, False]
    assert fake_engine.micro_steps == 2
    assert fake_engine.global_steps == 1
    for before, grad, after in zip(params, grads, fake_engine.module.parameters(), strict=True):
        torch.testing.assert_close(after.detach(), before - 0.5 * grad, rtol=1e-5, atol=1e-6)


def test_stop_flag_is_asked_once_and_rides_on_the_outcome(fake_engine, batch):
    asked: list[int] = []

    def stop_flag() -> bool:
        asked.append(1)
        return True

    step, handed = _step(fake_engine, batch, stop_flag=stop_flag)
    _run(step, fake_engine)
    assert asked == [1]
    assert handed[0].stop_requested


def test_sample_losses_are_gathered_only_when_asked(fake_engine, batch):
    expected = []
    with torch.no_grad():  # each sample's token-mean loss, before the update moves the weights
        for mb in batch["micro_batches"]:
            logits = fake_engine.module(mb.input_ids)[:, :-1]
            ce = F.cross_entropy(logits.transpose(1, 2), mb.labels[:, 1:], reduction="none")
            valid = mb.labels[:, 1:] != -100
            expected += ((ce * valid).sum(dim=1) / valid.sum(dim=1)).tolist()
    step, handed = _step(fake_engine, batch, gather_sample_losses=True)
    _run(step, fake_engine)
    losses = handed[0].sample_losses
    assert losses is not None
    assert losses.shape == (4,)
    assert losses.dtype == np.float64
    np.testing.assert_array_equal(losses, step.sample_losses)
    np.testing.assert_allclose(losses, expected, rtol=1e-6)


def test_aux_loss_is_the_mean_over_micro_batches_and_adds_to_the_loss(fake_engine, batch):
    step, handed = _step(fake_engine, batch)
    for k, mb in enumerate(step.micro_batches):
        logits = fake_engine(mb.input_ids)
        aux = (logits.float().mean() * 0 + (k + 1)).reshape(())  # 1.0 then 2.0, in the graph
        step.backward(logits, mb, aux_loss=aux)
    step.finish()
    outcome = handed[0]
    assert outcome.aux_loss == pytest.approx(1.5)
    assert outcome.loss == pytest.approx(outcome.token_loss + 1.5)


def test_sample_weighting_reports_the_mean_of_micro_batch_means(fake_engine, batch):
    step, handed = _step(fake_engine, batch, loss_weighting="sample")
    means = []
    for mb in step.micro_batches:
        logits = fake_engine(mb.input_ids)
        means.append(float(step.backward(logits, mb)))
    step.finish()
    assert [scale for _, scale in fake_engine.backward_calls] == [True, True]
    assert handed[0].loss == pytest.approx(sum(means) / 2, rel=1e-6)


def test_misuse_is_refused_and_the_callback_never_runs(fake_engine, batch):
    step, handed = _step(fake_engine, batch)
    first, second = step.micro_batches
    with pytest.raises(StepError, match=r"finish\(\) before micro-batch\(es\) 0, 1 of 2"):
        step.finish()
    step.backward(fake_engine(first.input_ids), first)
    with pytest.raises(StepError, match="micro-batch 0 was already sent backward"):
        step.backward(fake_engine(first.input_ids), first)
    fake_engine.step()  # the loop stepping the engine itself
    with pytest.raises(StepError, match=r"engine.step\(\) ran 2 time\(s\) for 1 micro-batch"):
        step.backward(fake_engine(second.input_ids), second)
    assert handed == []


def test_trace_record_is_the_trace_row(fake_engine, batch):
    step, _ = _step(fake_engine, batch)
    trace = step.trace_record()
    assert list(trace) == list(TraceRow.__annotations__)
    assert trace == {
        "step": 1,
        "phase": 0,
        "samples": [["web", 0], ["web", 1], ["web", 2], ["web", 3]],
    }


def test_finish_twice_is_refused(fake_engine, batch):
    step, handed = _step(fake_engine, batch)
    _run(step, fake_engine)
    with pytest.raises(StepError, match="step 1 is already finished"):
        step.finish()
    assert len(handed) == 1


def test_a_step_without_loss_tokens_skips_the_engine(fake_engine, batch):
    for mb in batch["micro_batches"]:
        mb.labels[:] = -100
    step, handed = _step(fake_engine, batch)
    assert step.skipped
    assert step.skip_reason == "no_loss_tokens"
    _run(step, fake_engine)
    assert fake_engine.micro_steps == 0
    assert fake_engine.backward_calls == []
    outcome = handed[0]
    assert outcome.skip_reason == "no_loss_tokens"
    assert outcome.loss is None
    assert outcome.token_loss is None
    assert not outcome.step_applied


def test_topology_comes_from_the_engine(fake_engine):
    assert Topology.from_engine(fake_engine) == Topology(dp_rank=0, dp_world_size=1)
    fake_engine.seq_dp_world_size = 3  # DeepSpeed's sequence-data-parallel world wins
    assert Topology.from_engine(fake_engine).dp_world_size == 3
    assert not Topology(dp_rank=0, dp_world_size=1).collective
