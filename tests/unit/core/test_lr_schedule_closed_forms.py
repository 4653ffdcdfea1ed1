"""``curriculum.lr_schedule`` (issue 11 item 4, issue 14 item 6): the closed forms of
:mod:`curriculum_ds.core.lr_schedule`, evaluated at a step's END progress, and how they are applied
to
an optimizer's param groups."""

from __future__ import annotations

import math
from fractions import Fraction
from typing import Any

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from curriculum_ds.config import parse_curriculum
from curriculum_ds.core.lr_schedule import BASE_LR_KEY, LRSchedule, apply_lr
from curriculum_ds.errors import ConfigError


def _section(lr_schedule: dict[str, Any], *, unit: str = "tok") -> dict[str, Any]:
    """Two phases, 4000 + 6000 tok (or 1 + 1.5 ep), with the given lr_schedule."""
    first, second, total = (
        ("4000tok", "6000tok", "10000tok") if unit == "tok" else ("1ep", "1.5ep", "2.5ep")
    )
    loader = {"streams": [{"local": "data/x"}], "max_seq_len": 64}
    return {
        "max_duration": total,
        "schedule": [
            {"name": "a", "duration": first, "train_loader": loader},
            {"name": "b", "duration": second, "train_loader": loader},
        ],
        "lr_schedule": lr_schedule,
    }


def _schedule(lr_schedule: dict[str, Any], *, unit: str = "tok") -> LRSchedule:
    schedule = LRSchedule.from_config(parse_curriculum(_section(lr_schedule, unit=unit)))
    assert schedule is not None
    return schedule


def test_no_lr_schedule_is_none() -> None:
    section = _section({"type": "cosine"})
    del section["lr_schedule"]
    assert LRSchedule.from_config(parse_curriculum(section)) is None


def test_warmup_is_linear_from_zero_and_the_first_step_is_not_zero() -> None:
    s = _schedule({"type": "cosine", "warmup": "1000tok", "min_lr_ratio": 0.1})
    assert s.factor(0) == 0.0
    # a first step of 37 tokens is evaluated at its end progress, 37: never 0
    assert s.factor(37) == pytest.approx(0.037, abs=1e-15)
    assert s.factor(37) > 0
    assert s.factor(250) == 0.25
    assert s.factor(999) == pytest.approx(0.999, abs=1e-15)
    assert s.factor(1000) == 1.0  # the peak at the end of warmup


def test_cosine_values() -> None:
    s = _schedule({"type": "cosine", "warmup": "1000tok", "min_lr_ratio": 0.1})
    r = 0.1
    for p in (1000, 1001, 3250, 5500, 7000, 9999):
        t = (p - 1000) / 9000
        expected = r + (1 - r) * 0.5 * (1 + math.cos(math.pi * t))
        assert abs(s.factor(p) - expected) <= 1e-12
    assert abs(s.factor(5500) - 0.55) <= 1e-12  # half way: the middle of peak and floor
    assert s.factor(10_000) == 0.1
    assert s.factor(12_345) == 0.1  # the last step overshoots max_duration: still the floor


def test_linear_values() -> None:
    s = _schedule({"type": "linear", "warmup": "2000tok", "min_lr_ratio": 0.0})
    assert s.factor(1000) == 0.5
    assert abs(s.factor(4000) - 0.75) <= 1e-12
    assert abs(s.factor(6000) - 0.5) <= 1e-12
    assert abs(s.factor(9000) - 0.125) <= 1e-12
    assert s.factor(10_000) == 0.0


def test_wsd_with_a_decay_duration() -> None:
    s = _schedule({"type": "wsd", "warmup": "500tok", "decay": "2000tok", "min_lr_ratio": 0.2})
    assert s.decay_start == 8000
    assert s.factor(250) == 0.5
    assert s.factor(500) == s.factor(3000) == s.factor(8000) == 1.0  # stable
    assert abs(s.factor(9000) - 0.6) <= 1e-12
    assert abs(s.factor(9500) - 0.4) <= 1e-12
    assert s.factor(10_000) == 0.2


def test_wsd_last_phase_decays_over_the_last_phase() -> None:
    s = _schedule({"type": "wsd", "warmup": "1000tok", "decay": "last_phase", "min_lr_ratio": 0.1})
    assert s.decay_start == 4000  # the last phase starts at 4000tok and lasts 6000tok
    assert s.factor(4000) == 1.0
    assert abs(s.factor(7000) - 0.55) <= 1e-12
    assert abs(s.factor(8500) - (1 - 0.9 * 0.75)) <= 1e-12
    assert s.factor(10_000) == pytest.approx(0.1, abs=1e-15)


def test_epoch_unit_is_exact() -> None:
    s = _schedule({"type": "wsd", "warmup": "0.25ep", "decay": "last_phase"}, unit="ep")
    assert s.warmup == Fraction(1, 4)
    assert s.decay_start == Fraction(1)
    assert s.factor(Fraction(1, 8)) == 0.5
    assert abs(s.factor(Fraction(7, 4)) - (1 - 0.9 * 0.5)) <= 1e-12
    assert s.factor(Fraction(5, 2)) == 0.1


def test_no_warmup_starts_at_the_peak() -> None:
    s = _schedule({"type": "cosine", "min_lr_ratio": 0.5})
    assert s.warmup == 0
    assert s.factor(0) == 1.0
    assert abs(s.factor(5000) - 0.75) <= 1e-12


@given(
    kind=st.sampled_from(["cosine", "linear", "wsd"]),
    ratio=st.floats(0, 1),
    a=st.integers(0, 10_000),
    b=st.integers(0, 10_000),
)
def test_factor_is_in_range_and_never_rises_after_warmup(
    kind: str, ratio: float, a: int, b: int
) -> None:
    spec: dict[str, Any] = {"type": kind, "warmup": "1000tok", "min_lr_ratio": ratio}
    if kind == "wsd":
        spec["decay"] = "3000tok"
    s = _schedule(spec)
    lo, hi = sorted((a, b))
    assert 0.0 <= s.factor(lo) <= 1.0
    if lo >= 1000:
        assert s.factor(hi) <= s.factor(lo) + 1e-15
    assert s.factor(10_000) == ratio


def test_describe_is_one_line() -> None:
    s = _schedule({"type": "wsd", "warmup": "1000tok", "decay": "last_phase"})
    line = s.describe("tok", peak=3e-3, last_phase=True)
    assert "\n" not in line
    assert line.startswith("lr_schedule wsd: warmup 1000tok from 0 to peak 0.003")
    assert "stable to 4000tok, linear decay (the last phase) to 0.1 x peak at 10000tok" in line
    assert "end progress" in line


def test_apply_scales_every_group_and_keeps_their_ratios() -> None:
    w1, w2 = torch.nn.Parameter(torch.zeros(2)), torch.nn.Parameter(torch.zeros(2))
    opt = torch.optim.AdamW([{"params": [w1], "lr": 1e-3}, {"params": [w2], "lr": 4e-3}])
    apply_lr(opt, 0.25)
    assert [g["lr"] for g in opt.param_groups] == [0.25e-3, 1e-3]
    assert [g[BASE_LR_KEY] for g in opt.param_groups] == [1e-3, 4e-3]
    apply_lr(opt, 0.5)  # the peak is remembered once, not the lr of the last step
    assert [g["lr"] for g in opt.param_groups] == [0.5e-3, 2e-3]
    # a resumed optimizer reads the peak back from its state_dict
    again = torch.optim.AdamW([{"params": [w1], "lr": 1e-3}, {"params": [w2], "lr": 4e-3}])
    again.load_state_dict(opt.state_dict())
    apply_lr(again, 1.0)
    assert [g["lr"] for g in again.param_groups] == [1e-3, 4e-3]


def test_apply_without_an_optimizer_is_refused() -> None:
    with pytest.raises(ConfigError, match=r"^curriculum.lr_schedule: the engine has no optimizer"):
        apply_lr(None, 0.5)
