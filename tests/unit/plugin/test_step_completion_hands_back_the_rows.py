"""Completing a step without a Curriculum: counters, skip counts, re-weighting hook, the rows."""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import numpy as np
import pytest
import torch

from curriculum_ds.core.position import Position
from curriculum_ds.dynamic import MixtureUpdate
from curriculum_ds.plugin.completion import SkipCounts, StepTimer, complete_step, step_progress
from curriculum_ds.plugin.stats import StepStats
from curriculum_ds.records.schema import MetricsRow, StepOutcome


class _Loader:
    """The two things completion reads from a PhaseLoader; it changes nothing of it."""

    samples_per_pass = 8

    def epochs_done(self) -> float:
        return 1 / 3


UPDATE = MixtureUpdate(
    buckets=[np.zeros(4, dtype=np.int64)], record={"weights": [0.5, 0.5], "window_size": 4}
)


class _Dynamic:
    """Records what it observes; recomputes at every step."""

    def __init__(self) -> None:
        self.observed: list[Any] = []

    def observe(self, samples: Any, losses: Any) -> None:
        self.observed.append((samples, losses))

    def maybe_recompute(self, global_step: int) -> MixtureUpdate:
        return UPDATE


def _outcome(**overrides: Any) -> StepOutcome:
    values: dict[str, Any] = {
        "global_step": 3,
        "phase_idx": 1,
        "phase_name": "mix",
        "samples": np.zeros((4, 2), dtype=np.int64),
        "step_tokens": 40,
        "lr": 1e-3,
        "loss": 2.5,
        "token_loss": 2.5,
        "aux_loss": None,
        "valid_tokens": 36,
        "skip_reason": None,
        "step_applied": True,
        "streams": {"web": {"samples": 4, "tokens": 40, "loss": 2.5}},
        "sample_losses": None,
        "stop_requested": False,
    }
    values.update(overrides)
    return StepOutcome(**values)


def test_complete_step_advances_the_position_and_builds_the_row():
    timer = StepTimer(clock=iter([10.0, 12.0]).__next__)
    timer.start()
    before = Position(global_step=2, consumed_tokens=100, consumed_samples=8, progress=100)
    done = complete_step(
        _outcome(),
        position=before,
        counts=SkipCounts(),
        unit="tok",
        loader=_Loader(),
        dynamic=None,
        timer=timer,
        data_wait_s=0.0012345678,
        prefetched=2,
    )
    assert done.position == Position(
        global_step=3, consumed_tokens=140, consumed_samples=12, progress=140
    )
    assert done.history is None
    assert done.counts == SkipCounts()
    assert done.metrics == {
        "step": 3,
        "phase": 1,
        "phase_name": "mix",
        "tokens": 140,
        "samples": 12,
        "progress": "140",
        "loss": 2.5,
        "token_loss": 2.5,
        "aux_loss": None,
        "valid_tokens": 36,
        "step_tokens": 40,
        "skipped": False,
        "skip_reason": None,
        "step_applied": True,
        "lr": 1e-3,
        "tokens_per_s": 20.0,
        "data_wait_s": 0.001235,
        "prefetched": 2,
        "phase_epochs": 0.333333,
        "streams": {"web": {"samples": 4, "tokens": 40, "loss": 2.5}},
    }
    assert list(done.metrics) == list(MetricsRow.__annotations__)


def test_re_weighting_observes_the_losses_and_its_update_is_handed_back():
    loader, dynamic = _Loader(), _Dynamic()
    losses = np.arange(4, dtype=np.float64)
    done = complete_step(
        _outcome(sample_losses=losses),
        position=Position.start("ep"),
        counts=SkipCounts(),
        unit="ep",
        loader=loader,  # type: ignore[arg-type]
        dynamic=dynamic,  # type: ignore[arg-type]
        timer=StepTimer(),
    )
    assert done.position.progress == Fraction(4, 8)
    assert len(dynamic.observed) == 1
    assert done.update is UPDATE  # the caller applies it to the loader (PhaseLoader.apply)
    assert done.history == {
        "step": 1,
        "phase": 1,
        "phase_name": "mix",
        "weights": [0.5, 0.5],
        "window_size": 4,
    }


@pytest.mark.parametrize(
    ("reasons", "expected"),
    [
        (
            [None, "nonfinite_loss", "nonfinite_grad_norm"],
            SkipCounts(num_nonfinite_steps=2, consecutive_nonfinite_steps=2),
        ),
        (
            ["nonfinite_loss", "no_loss_tokens", "nonfinite_loss"],
            SkipCounts(num_skipped_steps=1, num_nonfinite_steps=2, consecutive_nonfinite_steps=2),
        ),
        (
            ["nonfinite_loss", None, "no_loss_tokens"],
            SkipCounts(num_skipped_steps=1, num_nonfinite_steps=1, consecutive_nonfinite_steps=0),
        ),
    ],
)
def test_skip_counts_follow_the_skip_reasons(reasons, expected):
    counts = SkipCounts()
    for reason in reasons:
        counts = counts.after(reason)
    assert counts == expected


def test_step_progress_counts_tokens_or_exact_passes():
    assert step_progress("tok", 40, 4, 8) == 40
    assert step_progress("ep", 40, 4, 6) == Fraction(2, 3)


def test_evaluation_time_is_left_out_of_the_lap():
    timer = StepTimer(clock=iter([0.0, 5.0, 9.0]).__next__)
    assert timer.lap() == 0.0  # before any start
    timer.start()  # no-op: the first lap started the clock
    timer.leave_out(3.0)  # 5 s until the next lap, 3 of them evaluating
    assert timer.lap() == 2.0
    assert timer.lap() == 4.0


def test_step_stats_reads_back_its_slots_and_the_tail():
    stats = StepStats(
        samples_per_rank=4, num_micro_batches=2, dp_world_size=1, collective=False, device="cpu"
    )
    for k, (sums, valid) in enumerate([([2.0, 4.0], [1.0, 2.0]), ([3.0, 0.0], [3.0, 0.0])]):
        loss_sums, num_valid = torch.tensor(sums), torch.tensor(valid)
        aux = torch.tensor(float(k + 1)) if k == 1 else None
        mean = stats.add_micro_batch(
            k, loss_sums, num_valid, aux, loss_sum=loss_sums.sum(), count=num_valid.sum()
        )
        assert float(mean) == pytest.approx(sum(sums) / sum(valid))
    totals = stats.all_reduce(torch.tensor([7.0, 8.0], dtype=torch.float64), stop=True)
    assert totals.sample_mean_loss == pytest.approx((6 / 3 + 3 / 3) / 2)
    assert totals.aux_loss == pytest.approx(2.0 / 2)
    assert totals.stop_requested
    assert totals.tail.tolist() == [7.0, 8.0]
    losses = stats.sample_losses()
    np.testing.assert_array_equal(losses[:3], [2.0, 2.0, 1.0])
    assert np.isnan(losses[3])
