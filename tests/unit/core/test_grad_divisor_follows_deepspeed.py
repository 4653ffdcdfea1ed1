"""The gradient divisor DeepSpeed 0.19.8 applies, as ``curriculum_ds.core.loss`` reads it,
in-process.

``deepspeed_grad_divisor`` from the engine's settings (ZeRO stage, ``gradient_average``,
``postscale_gradients``, ``gradient_predivide_factor``) and ``engine_grad_divisor`` from an
engine; the token-weighted step through real engines, where these divisors are undone, is
tests/integration/test_token_loss_through_the_engine.py.

From issue 5 (moved out of the integration tier: it launches nothing).
"""

from __future__ import annotations

import pytest

from curriculum_ds.core.loss import deepspeed_grad_divisor, engine_grad_divisor


def test_deepspeed_grad_divisor_follows_deepspeed():
    """The divisors read from DeepSpeed 0.19.8's reduction code (see deepspeed_grad_divisor)."""
    base = {"gradient_average": True, "postscale_gradients": True, "gradient_predivide_factor": 1.0}
    for stage in (0, 1, 2, 3):
        assert deepspeed_grad_divisor(dp_world_size=4, zero_stage=stage, **base) == 4
        # a predivide factor cancels in ZeRO 0-2, whatever its value
        for p in (2.0, 4.0):
            got = deepspeed_grad_divisor(
                dp_world_size=4, zero_stage=stage, **(base | {"gradient_predivide_factor": p})
            )
            assert got == (16 if stage == 3 and p == 4.0 else 4)
        assert (
            deepspeed_grad_divisor(
                dp_world_size=4,
                zero_stage=stage,
                **(base | {"postscale_gradients": False, "gradient_predivide_factor": 4.0}),
            )
            == 4
        )
    assert (
        deepspeed_grad_divisor(
            dp_world_size=4, zero_stage=2, **(base | {"gradient_average": False})
        )
        == 1
    )
    assert deepspeed_grad_divisor(dp_world_size=1, zero_stage=3, **base) == 1


def test_engine_grad_divisor_reads_the_engine_and_refuses_sequence_parallelism():
    class FakeEngine:
        gradient_average = True
        sequence_parallel_size = 1

        def zero_optimization_stage(self) -> int:
            return 3

        def postscale_gradients(self) -> bool:
            return True

        def gradient_predivide_factor(self) -> float:
            return 2.0

    engine = FakeEngine()
    assert engine_grad_divisor(engine, dp_world_size=2) == 4
    assert engine_grad_divisor(engine, dp_world_size=8) == 8
    engine.sequence_parallel_size = 2
    with pytest.raises(ValueError, match="sequence_parallel_size=2: token-weighted loss supports"):
        engine_grad_divisor(engine, dp_world_size=2)
