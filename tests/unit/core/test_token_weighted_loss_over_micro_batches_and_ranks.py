"""Token-weighted loss: the normalisation identity, cases C03 and C04, zero-token guards."""

from __future__ import annotations

import os
import warnings

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from curriculum_ds.core.loss import (
    IGNORE_INDEX,
    count_valid_tokens,
    global_valid_tokens,
    per_sample_token_losses,
    scale_micro_batch_loss,
)


def _labels(num_tokens: int, pad: int) -> torch.Tensor:
    """One row: num_tokens real tokens then pad padding positions (labels IGNORE_INDEX)."""
    row = torch.arange(num_tokens + pad) % 7
    row[num_tokens:] = IGNORE_INDEX
    return row.unsqueeze(0)


def _weighted_step(micro_batches, *, dp_world_size: int, global_valid: torch.Tensor, mode="token"):
    """What the trainer backpropagates: a scalar θ multiplies every token loss, grad = dL/dθ."""
    theta = torch.ones((), requires_grad=True)
    total = torch.zeros(())
    for token_losses in micro_batches:
        n = torch.tensor(len(token_losses))
        total = total + scale_micro_batch_loss(
            theta * token_losses.sum(),
            n,
            mode=mode,
            global_valid_tokens=global_valid,
            dp_world_size=dp_world_size,
        )
    total.backward()
    return float(total.detach()), float(theta.grad)


def test_gradient_accumulation_does_not_average_micro_batch_means():
    """Case C03: GAS over a short and a long micro-batch weighs every token the same."""
    mb1 = torch.full((10,), 1.0)  # 10 loss-bearing tokens at loss 1.0 (6 padding tokens bear none)
    mb2 = torch.full((100,), 2.0)
    labels = [_labels(11, 6), _labels(101, 0)]
    n = global_valid_tokens(labels, device="cpu")
    assert int(n) == 110  # padding and the first (unpredicted) token of each row are not counted
    loss, grad = _weighted_step([mb1, mb2], dp_world_size=1, global_valid=n)
    assert loss == pytest.approx(210 / 110, rel=1e-6)
    assert grad == pytest.approx(210 / 110, rel=1e-6)
    # GAS=1 with both samples in one micro-batch gives the same number
    loss1, grad1 = _weighted_step([torch.cat([mb1, mb2])], dp_world_size=1, global_valid=n)
    assert loss1 == pytest.approx(loss, rel=1e-6)
    assert grad1 == pytest.approx(grad, rel=1e-6)
    # DeepSpeed's default (mean of micro-batch means) is what we must not be: 1.5
    sample_loss, _ = _weighted_step([mb1, mb2], dp_world_size=1, global_valid=n, mode="sample")
    assert sample_loss / 2 == pytest.approx(1.5)
    # more or less padding changes neither the count nor the loss
    n_more_pad = global_valid_tokens([_labels(11, 40), _labels(101, 3)], device="cpu")
    assert int(n_more_pad) == int(n)


def test_with_a_real_model_gradients_match_full_batch():
    """Case C03 with a real model: the accumulated gradients equal the full batch's."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Embedding(11, 16), torch.nn.Linear(16, 11))
    a = torch.randint(0, 11, (1, 17))
    b = torch.randint(0, 11, (1, 40))
    la = a.clone()
    la[0, 11:] = IGNORE_INDEX  # 11 real tokens then 6 padding
    lb = b.clone()

    def grads(batches):
        model.zero_grad()
        n = global_valid_tokens([lab for _, lab in batches], device="cpu")
        for ids, lab in batches:
            sums, counts = per_sample_token_losses(model(ids), lab)
            scale_micro_batch_loss(
                sums.sum(), counts.sum(), mode="token", global_valid_tokens=n, dp_world_size=1
            ).backward()
        return torch.cat([p.grad.flatten() for p in model.parameters()])

    gas2 = grads([(a, la), (b, lb)])
    # one micro-batch holding both rows, right-padded to 40
    ids = torch.zeros((2, 40), dtype=torch.int64)
    lab = torch.full((2, 40), IGNORE_INDEX)
    ids[0, :17], lab[0, :11] = a[0], la[0, :11]
    ids[1], lab[1] = b[0], lb[0]
    gas1 = grads([(ids, lab)])
    torch.testing.assert_close(gas2, gas1, rtol=1e-5, atol=1e-7)


def test_zero_token_micro_batch_gives_zero_not_nan():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        logits = torch.randn(1, 5, 7, requires_grad=True)
        labels = torch.full((1, 5), IGNORE_INDEX)
        for mode in ("token", "sample"):
            sums, counts = per_sample_token_losses(logits, labels)
            assert int(counts.sum()) == 0
            loss = scale_micro_batch_loss(
                sums.sum(),
                counts.sum(),
                mode=mode,
                global_valid_tokens=torch.tensor(12),
                dp_world_size=2,
            )
            assert float(loss.detach()) == 0.0
            loss.backward()
            assert torch.isfinite(logits.grad).all()


def test_count_valid_tokens_is_shift_aware():
    labels = torch.tensor([[5, 6, 7, IGNORE_INDEX], [1, IGNORE_INDEX, IGNORE_INDEX, IGNORE_INDEX]])
    assert int(count_valid_tokens(labels)) == 2  # row 0: 6, 7 predicted; row 1: nothing


def test_unknown_mode_is_refused():
    with pytest.raises(ValueError, match="loss_weighting must be 'token' or 'sample'"):
        scale_micro_batch_loss(
            torch.tensor(1.0),
            torch.tensor(1),
            mode="mean",
            global_valid_tokens=torch.tensor(1),
            dp_world_size=1,
        )


# ---- C04: two real gloo ranks ------------------------------------------------------------------
C04 = {
    "base": ([[2.0] * 3, [1.0] * 7], [[5.0], [3.0]], 21 / 12),
    "padded_rank": ([[2.0] * 3, [1.0] * 7], [[5.0] * 2, []], 23 / 12),
}


def _c04_worker(rank: int, world: int, port: int, variant: str, out) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            per_rank = C04[variant][rank]
            micro_batches = [torch.tensor(m, dtype=torch.float32) for m in per_rank]
            labels = [_labels(len(m) + 1, 3) for m in per_rank]  # +1: the first token bears no loss
            n = global_valid_tokens(labels, device="cpu")
            _, grad = _weighted_step(micro_batches, dp_world_size=world, global_valid=n)
            g = torch.tensor([grad])
            dist.all_reduce(g)
            g /= world  # DeepSpeed's gradient average over data-parallel ranks
            local_sum = torch.tensor(
                [sum(float(m.sum()) for m in micro_batches)], dtype=torch.float64
            )
            dist.all_reduce(local_sum)
            out.put((rank, int(n), float(g), float(local_sum) / int(n)))
    except BaseException as exc:
        out.put((rank, -1, repr(exc), 0.0))
        raise
    finally:
        dist.destroy_process_group()


@pytest.mark.parametrize("variant", ["base", "padded_rank"])
def test_ranks_with_different_token_counts(variant):
    """Case C04: ranks with different token counts give the global token mean."""
    from curriculum_ds.distributed import free_port

    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    port = free_port()
    procs = [ctx.Process(target=_c04_worker, args=(r, 2, port, variant, queue)) for r in range(2)]
    for p in procs:
        p.start()
    results = sorted(queue.get(timeout=60) for _ in procs)
    for p in procs:
        p.join(timeout=60)
        assert p.exitcode == 0
    expected = C04[variant][2]
    for _rank, n, grad, logged in results:
        assert n == 12
        assert grad == pytest.approx(expected, rel=1e-6)
        assert logged == pytest.approx(expected, rel=1e-6)
