"""DeepSpeed's CPU FusedAdam continues bit for bit after a load in a new process (adam_powers).

The C++ kernel keeps beta^t as a running float product; a process that loads step N computes
pow(beta, N + 1) instead. A new process is simulated by a kernel call at another step (its
running product then restarts from pow). Without :func:`restore_adam_powers` the continuation
differs from the uninterrupted optimizer's in the last bits (the bug this fixes, measured here so
the test shows it can see it); with it, the parameters are bit-identical.
"""

from __future__ import annotations

import io

import pytest
import torch
from deepspeed.ops.adam import FusedAdam

from curriculum_ds.checkpoint.adam_powers import cpu_adam_kernel, restore_adam_powers

X = torch.randn(96, 37, generator=torch.Generator().manual_seed(1))


def _model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(37, 53), torch.nn.Tanh(), torch.nn.Linear(53, 5))


def _optimizer(model: torch.nn.Module) -> FusedAdam:
    groups = [  # decay and no-decay groups with the same betas, as a user's usually are (with
        # betas that differ from call to call the kernel takes pow every time: nothing to replay)
        {"params": list(model[0].parameters()), "weight_decay": 0.01},
        {"params": list(model[2].parameters()), "weight_decay": 0.0},
    ]
    return FusedAdam(groups, lr=1e-2, betas=(0.9, 0.95), adam_w_mode=True)


def _step(model: torch.nn.Module, opt: FusedAdam, i: int) -> None:
    opt.zero_grad()
    (model(X[8 * i : 8 * i + 16]) ** 2).mean().backward()
    opt.step()


def _disturb(opt: FusedAdam) -> None:
    """What a new process's kernel knows: not the running product (a call at another step)."""
    dummy = [[torch.zeros(1)] for _ in range(4)]
    opt.multi_tensor_adam(2048 * 32, opt._dummy_overflow_buf, dummy, 0.0, 0.5, 0.5, 1e-8,
                          10**6, opt.adam_w_mode, 1, 0.0)  # fmt: skip


def _resumed(replay: bool, *, total: int, saved_at: int) -> list[torch.Tensor]:
    model = _model()
    opt = _optimizer(model)
    for i in range(saved_at):
        _step(model, opt, i)
    buf = io.BytesIO()
    torch.save({"model": model.state_dict(), "opt": opt.state_dict()}, buf)
    _disturb(opt)
    buf.seek(0)
    saved = torch.load(buf)
    model = _model()
    model.load_state_dict(saved["model"])
    opt = _optimizer(model)
    opt.load_state_dict(saved["opt"])
    if replay:
        assert restore_adam_powers(opt) == 2 * saved_at  # one call per step and group
    for i in range(saved_at, total):
        _step(model, opt, i)
    return [p.detach().clone() for p in model.parameters()]


def _uninterrupted(total: int) -> list[torch.Tensor]:
    model = _model()
    opt = _optimizer(model)
    _disturb(opt)  # its own chain from step 1, as a fresh process's
    for i in range(total):
        _step(model, opt, i)
    return [p.detach().clone() for p in model.parameters()]


@pytest.mark.parametrize("saved_at", [5, 6])  # pow(b, t) = the product up to t = 5 here
def test_replay_continues_bit_for_bit_and_without_it_drifts(saved_at: int) -> None:
    expected = _uninterrupted(8)
    drifted = _resumed(False, total=8, saved_at=saved_at)
    assert any(not torch.equal(a, b) for a, b in zip(expected, drifted, strict=True))
    exact = _resumed(True, total=8, saved_at=saved_at)
    for a, b in zip(expected, exact, strict=True):
        assert torch.equal(a, b)


def test_only_deepspeeds_cpu_kernels_are_replayed() -> None:
    model = _model()
    fused = _optimizer(model)
    assert cpu_adam_kernel(fused) == "fused_adam"
    assert restore_adam_powers(fused) == 0  # never stepped: nothing to replay

    class Wrapper:  # a ZeRO / mixed-precision wrapper holds the optimizer as .optimizer
        optimizer = fused

    assert cpu_adam_kernel(Wrapper()) == "fused_adam"
    torch_adam = torch.optim.AdamW(model.parameters())
    _step(model, torch_adam, 0)
    assert cpu_adam_kernel(torch_adam) is None
    assert restore_adam_powers(torch_adam) == 0
    assert restore_adam_powers(None) == 0
