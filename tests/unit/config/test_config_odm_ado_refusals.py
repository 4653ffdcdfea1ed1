"""ODM's and ADO's keys: each bad value is refused in one line naming the key."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from config_sections import refused

from curriculum_ds.config import parse_run
from curriculum_ds.errors import ConfigError


def _refused(method: str, **section: Any) -> str:
    keys = {"enabled": True, "method": method, "unit": "streams", method: section}
    return refused(lambda s: s.__setitem__("dynamic", keys))


@pytest.mark.parametrize("alpha", [0.0, 1.0, -0.5, 1.5])
def test_odm_alpha_outside_the_open_unit_interval_is_refused(alpha: float) -> None:
    line = _refused("odm", alpha=alpha)
    assert line.startswith("curriculum.dynamic.odm.alpha: "), line
    assert "\n" not in line


@pytest.mark.parametrize(
    ("key", "value", "says"),
    [
        ("refit_every", 0, "must be >= 1, got 0"),
        ("warmup_steps", 0, "must be >= 1, got 0"),
        ("fit_starts", 513, "must be <= 512, got 513"),
        ("savgol_window", 20, "must be odd"),
    ],
)
def test_bad_ado_keys_are_refused(key: str, value: int, says: str) -> None:
    line = _refused("ado", **{key: value})
    assert line.startswith(f"curriculum.dynamic.ado.{key}: "), line
    assert says in line
    assert "\n" not in line


RUN: dict[str, Any] = {
    "train_micro_batch_size_per_gpu": 4,
    "gradient_accumulation_steps": 2,
    "curriculum": {
        "max_duration": "2000tok",
        "schedule": [
            {
                "name": "only",
                "duration": "2000tok",
                "train_loader": {"streams": [{"local": "a"}, {"local": "b"}], "max_seq_len": 64},
            }
        ],
    },
}


def _run(method: str, warmup: int) -> dict[str, Any]:
    raw = copy.deepcopy(RUN)
    raw["curriculum"]["dynamic"] = {
        "enabled": True,
        "method": method,
        "unit": "streams",
        method: {"warmup_steps": warmup},
    }
    return raw


@pytest.mark.parametrize("method", ["odm", "ado"])
def test_a_warmup_no_phase_can_outlast_is_refused(method: str) -> None:
    # 2000 tokens over 4 × 2 samples per step: at most 250 steps
    parse_run(_run(method, 249))
    with pytest.raises(ConfigError) as info:
        parse_run(_run(method, 250))
    assert str(info.value) == (
        f"curriculum.dynamic.{method}.warmup_steps: 250 steps, but no phase lasts more than 250 "
        "(its tokens over train_micro_batch_size_per_gpu × gradient_accumulation_steps = 8 "
        "samples per step): the method would never act"
    )


def _aioli(probe_steps: int, recompute: int = 10_000) -> dict[str, Any]:
    raw = copy.deepcopy(RUN)
    raw["curriculum"]["dynamic"] = {
        "enabled": True,
        "method": "aioli",
        "unit": "streams",
        "recompute_every_n_steps": recompute,
        "aioli": {"lp_rounds": 1, "probe_steps": probe_steps},
    }
    raw["curriculum"]["eval"] = {"streams": [{"local": "a"}, {"local": "b"}]}
    return raw


def test_an_aioli_round_no_phase_can_hold_is_refused() -> None:
    # 2000 tokens over 8 samples per step: at most 250 steps; a round: 2 streams × probe_steps
    parse_run(_aioli(124))
    with pytest.raises(ConfigError) as info:
        parse_run(_aioli(125))
    assert str(info.value) == (
        'curriculum.dynamic.aioli.probe_steps: a probe round of schedule[0] ("only") takes 2 '
        "streams × lp_rounds 1 × probe_steps 125 = 250 steps, but the phase lasts at most 250 "
        "(its tokens over train_micro_batch_size_per_gpu × gradient_accumulation_steps = 8 "
        "samples per step): no round would end"
    )
