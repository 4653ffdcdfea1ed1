"""The log line of a step and the start banner (curriculum_ds.records.progress).

From issue 14, item 4.
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch

from curriculum_ds.records.progress import (
    MAX_LINE,
    StepLogger,
    banner,
    count_parameters,
    format_log_line,
    human_count,
)


def _record(**over: Any) -> dict[str, Any]:
    row = {
        "step": 120,
        "phase": 1,
        "phase_name": "mix",
        "tokens": 1_234_567,
        "progress": "1234567",
        "loss": 3.41234,
        "lr": 2.95e-4,
        "tokens_per_s": 12_345.6,
    }
    return row | over


def _schedule(total: int = 3_000_000, unit: str = "tok") -> Any:
    return SimpleNamespace(total=total, unit=unit, num_phases=2)


@pytest.mark.parametrize(
    ("n", "text"),
    [(0, "0"), (999, "999"), (1000, "1k"), (1234567, "1.23M"), (2.5, "2.5"), (3e9, "3B")],
)
def test_human_count_has_three_significant_digits_and_a_suffix(n, text):
    assert human_count(n) == text


def test_log_line_has_step_phase_tokens_with_unit_loss_lr_and_throughput():
    line = format_log_line(_record(), schedule=_schedule())
    assert line == (
        "curriculum_ds: step 120 | phase 1 mix | 1.23M tok (41% of 3M tok) | loss 3.4123 | "
        "lr 2.950e-04 | 12.3k tok/s"
    )


def test_log_line_ends_with_the_data_wait_when_the_row_has_it():
    """Issue 23 item 2: the time the step waited for its micro-batches, in ms."""
    line = format_log_line(_record(data_wait_s=0.00042), schedule=_schedule())
    assert line.endswith(" | 12.3k tok/s | data wait 0.4 ms")


def test_log_line_says_skipped_without_a_loss_and_needs_no_schedule():
    line = format_log_line(_record(loss=None))
    assert "loss skipped" in line
    assert "%" not in line


def test_log_line_of_an_epoch_schedule_gives_progress_in_passes():
    line = format_log_line(_record(progress="3/2"), schedule=_schedule(total=3, unit="ep"))
    assert "1.23M tok (50% of 3 ep)" in line


def test_a_long_phase_name_keeps_the_line_under_the_cap():
    line = format_log_line(_record(phase_name="x" * 1000), schedule=_schedule())
    assert len(line) <= MAX_LINE
    assert line.endswith("12.3k tok/s")


def test_step_interval_logs_every_nth_step():
    logger = StepLogger(3)
    assert [s for s in range(1, 11) if logger.line(_record(step=s))] == [3, 6, 9]


def test_time_interval_logs_the_first_step_then_every_interval_s():
    now = [0.0]
    logger = StepLogger(0, interval_s=10.0, clock=lambda: now[0])
    logged = []
    for step, t in enumerate([0.0, 4.0, 9.9, 10.0, 15.0, 20.5, 21.0], start=1):
        now[0] = t
        if logger.line(_record(step=step)) is not None:
            logged.append(step)
    assert logged == [1, 4, 6]


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [({"interval_steps": -1}, "interval_steps must be >= 0"), ({"interval_s": 0}, "interval_s")],
)
def test_bad_intervals_are_refused(kwargs, match):
    with pytest.raises(ValueError, match=match):
        StepLogger(**kwargs)


class _Engine:
    def __init__(self, module: torch.nn.Module, *, stage: int = 2, bf16: bool = False) -> None:
        self.module = module
        self._stage = stage
        self._bf16 = bf16

    def zero_optimization_stage(self) -> int:
        return self._stage

    def bfloat16_enabled(self) -> bool:
        return self._bf16

    def fp16_enabled(self) -> bool:
        return False


def _curriculum(resumed_from: Path | None = None, order_version: int = 2) -> Any:
    return SimpleNamespace(
        order_version=order_version,
        dp_world_size=2,
        micro_batch_size=4,
        gradient_accumulation_steps=2,
        global_batch_size=16,
        schedule=_schedule(24000),
        resumed_from=resumed_from,
    )


def test_banner_names_model_params_world_batch_dtype_zero_and_start():
    line = banner(_Engine(torch.nn.Linear(10, 10), stage=2, bf16=True), _curriculum())
    assert line == (
        "curriculum_ds: start | Linear 110 params | world 2 | micro-batch 4 × GAS 2 × 2 ranks = "
        "global batch 16 samples | bf16 | ZeRO 2 | 2 phases, 24k tok | fresh start"
    )


def test_banner_names_the_checkpoint_resumed_from_within_the_cap():
    ckpt = Path("/runs") / ("deep" * 100) / "checkpoints" / "global_step40"
    line = banner(_Engine(torch.nn.Linear(2, 2), stage=0), _curriculum(ckpt))
    assert len(line) <= MAX_LINE
    assert "| fp32 | ZeRO 0 |" in line
    assert line.endswith("checkpoints/global_step40")
    short = banner(_Engine(torch.nn.Linear(2, 2)), _curriculum(Path("ck/global_step4")))
    assert short.endswith("| resumed from ck/global_step4")
    # a run in order version 1 (a checkpoint from before version 2, or the bucket unit) says so
    old = banner(_Engine(torch.nn.Linear(2, 2), stage=0), _curriculum(order_version=1))
    assert "| 2 phases, 24k tok | order version 1 | fresh start" in old


def test_parameters_are_counted_whole_under_zero3_and_tied_once():
    model = torch.nn.Sequential(torch.nn.Embedding(10, 4), torch.nn.Linear(4, 10, bias=False))
    model[1].weight = model[0].weight  # tied
    assert count_parameters(model) == 40
    partitioned = torch.nn.Linear(4, 4)
    for p in partitioned.parameters():
        p.ds_numel = p.numel() * 8  # ZeRO-3: the rank holds a slice, ds_numel the whole
    assert count_parameters(partitioned) == 20 * 8
