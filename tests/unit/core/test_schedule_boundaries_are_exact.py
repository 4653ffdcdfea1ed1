"""Phase boundaries: exact, cumulative, overshoot carried into the next phase."""

from __future__ import annotations

import hashlib
import json
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from curriculum_ds.commands.schedule_table import describe_schedule
from curriculum_ds.config import CurriculumConfig, load_config, parse_curriculum
from curriculum_ds.core.schedule import (
    PhaseSchedule,
    phase_fingerprint,
    progress_from_str,
    progress_to_str,
)
from curriculum_ds.errors import ConfigError, ResumeError


def make_cfg(durations: list[str], max_duration: str | None = None) -> CurriculumConfig:
    if max_duration is None:
        max_duration = f"{sum(int(d[: -len('tok')]) for d in durations)}tok"
    return parse_curriculum(
        {
            "max_duration": max_duration,
            "schedule": [
                {"name": f"p{i}", "duration": d, "train_loader": {"streams": [{"local": "s"}]}}
                for i, d in enumerate(durations)
            ],
        }
    )


def test_tok_boundaries() -> None:
    sched = PhaseSchedule(make_cfg(["1000tok", "2000tok", "500tok"]))
    assert sched.unit == "tok"
    assert sched.num_phases == 3
    assert sched.starts == (0, 1000, 3000)
    assert sched.ends == (1000, 3000, 3500)
    assert sched.total == 3500
    assert all(isinstance(e, int) for e in sched.ends)
    assert [sched.phase_at(p) for p in (0, 999, 1000, 2999, 3000, 3499, 3500, 10**9)] == [
        0,
        0,
        1,
        1,
        2,
        2,
        3,
        3,
    ]
    assert sched.phase_progress(1234, 1) == 234
    assert sched.is_done(3500)
    assert not sched.is_done(3499)


def test_ep_boundaries_are_exact_fractions() -> None:
    sched = PhaseSchedule(make_cfg(["0.1ep", "0.2ep", "0.7ep"], "1ep"))
    assert sched.ends == (Fraction(1, 10), Fraction(3, 10), Fraction(1))
    assert all(isinstance(e, Fraction) for e in sched.ends)
    assert sched.phase_at(Fraction(3, 10)) == 2  # 0.1 + 0.2 is exactly 0.3 here
    assert sched.phase_at(Fraction(299, 1000)) == 1
    assert sched.phase_at(Fraction(1)) == 3
    assert sched.phase_progress(Fraction(1, 2), 2) == Fraction(1, 5)


def test_overshoot_is_carried_into_the_next_phase() -> None:
    # 1000tok + 1000tok, 300 tokens per optimizer step: steps cross 1000 at step 4 (1200).
    sched = PhaseSchedule(make_cfg(["1000tok", "1000tok"]))
    progress, phases = 0, []
    while sched.phase_at(progress) < sched.num_phases:
        phases.append(sched.phase_at(progress))  # the phase this step trains in
        progress += 300
    assert phases == [0, 0, 0, 0, 1, 1, 1]  # A gets 1200 tokens, B only 900 more
    assert progress == 2100  # the run ends within one global batch of max_duration


def test_fixed_steps_hit_the_boundary_exactly() -> None:
    """Case C02: 100-token steps put phase A at steps 1-10 and B at 11-20."""
    sched = PhaseSchedule(make_cfg(["1000tok", "1000tok"]))
    step_phases = [sched.phase_at(100 * (step - 1)) for step in range(1, 21)]
    assert step_phases == [0] * 10 + [1] * 10
    assert sched.phase_at(100 * 20) == 2


def test_phase_at_rejects_negative_and_phase_progress_range() -> None:
    sched = PhaseSchedule(make_cfg(["10tok"]))
    with pytest.raises(ValueError, match="progress must be >= 0, got -1"):
        sched.phase_at(-1)
    with pytest.raises(IndexError, match=r"phase_idx 1 not in \[0, 1\)"):
        sched.phase_progress(5, 1)


@given(
    st.lists(st.integers(min_value=1, max_value=10**6), min_size=1, max_size=8),
    st.lists(st.integers(min_value=0, max_value=10**7), min_size=1, max_size=50),
)
def test_phase_at_monotone_and_exact_tok(durations: list[int], probes: list[int]) -> None:
    sched = PhaseSchedule(make_cfg([f"{d}tok" for d in durations]))
    assert sched.ends[-1] == sched.total == sum(durations)
    probes = sorted(probes)
    ks = [sched.phase_at(p) for p in probes]
    assert ks == sorted(ks)
    for p, k in zip(probes, ks, strict=True):
        if k < sched.num_phases:
            assert sched.starts[k] <= p < sched.ends[k]
        else:
            assert p >= sched.total
    for k, end in enumerate(sched.ends):
        assert sched.phase_at(end - 1) == k
        assert sched.phase_at(end) == k + 1  # the step that reaches the end starts phase k+1


def milli_ep(thousandths: int) -> str:
    """Exact decimal text of thousandths of an epoch: 1500 → "1.500ep"."""
    return f"{thousandths // 1000}.{thousandths % 1000:03d}ep"


@given(st.lists(st.integers(min_value=1, max_value=5000), min_size=1, max_size=6))
def test_phase_at_boundaries_exact_ep(thousandths: list[int]) -> None:
    cfg = make_cfg([milli_ep(t) for t in thousandths], milli_ep(sum(thousandths)))
    sched = PhaseSchedule(cfg)
    assert sched.total == Fraction(sum(thousandths), 1000)
    for k, end in enumerate(sched.ends):
        assert end == Fraction(sum(thousandths[: k + 1]), 1000)
        assert sched.phase_at(end) == k + 1
        assert sched.phase_at(end - Fraction(1, 10**9)) == k


def test_progress_str_round_trip() -> None:
    assert progress_to_str(1000) == "1000"
    assert progress_to_str(Fraction(3, 2)) == "3/2"
    assert progress_from_str("1000", "tok") == 1000
    assert progress_from_str("3/2", "ep") == Fraction(3, 2)
    assert progress_from_str("2", "ep") == Fraction(2)
    for bad, unit in (("1.5", "tok"), ("-3", "tok"), ("x", "ep"), ("-1/2", "ep"), ("1", "min")):
        with pytest.raises(ResumeError, match="checkpoint curriculum state"):
            progress_from_str(bad, unit)
    with pytest.raises(TypeError, match="progress must be an int or a Fraction"):
        progress_to_str(1.5)  # type: ignore[arg-type]


@given(st.fractions(min_value=0, max_value=10**6))
def test_progress_str_round_trip_ep(value: Fraction) -> None:
    assert progress_from_str(progress_to_str(value), "ep") == value


def test_phase_fingerprint() -> None:
    a = make_cfg(["1000tok", "1000tok"])
    fp = phase_fingerprint(a.schedule[0])
    assert len(fp) == 64
    assert fp == phase_fingerprint(make_cfg(["1000tok", "5tok"]).schedule[0])
    assert fp != phase_fingerprint(a.schedule[1])  # different name
    assert fp != phase_fingerprint(make_cfg(["999tok", "1001tok"]).schedule[0])
    # sha256 of the canonical JSON (sorted keys, no spaces), pinned so it cannot drift silently
    canonical = (
        '{"duration":"1000tok","name":"p0","train_loader":{"epoch_size":null,"max_seq_len":1024,'
        '"streams":[{"local":"s","name":"s","proportion":1.0}]}}'
    )
    assert fp == hashlib.sha256(canonical.encode()).hexdigest()
    assert fp == "98dffcda03d88170021bc2fae32bffdcd372981685fc90d229661f121bdaa3b7"


# ----------------------------------------------------------------------------------------------
# describe_schedule
# ----------------------------------------------------------------------------------------------


def write_mds(path: Path, lengths: list[int]) -> None:
    from streaming import MDSWriter

    with MDSWriter(out=str(path), columns={"input_ids": "ndarray:int32"}) as writer:
        for n in lengths:
            writer.write({"input_ids": np.arange(n, dtype=np.int32)})


def test_describe_schedule(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    write_mds(tmp_path / "data" / "short", [10, 10, 10, 10])  # mean 10 tokens
    write_mds(tmp_path / "data" / "long", [100, 300])  # mean 200, or 150 truncated at 200
    ds: dict[str, Any] = {
        "train_micro_batch_size_per_gpu": 2,
        "gradient_accumulation_steps": 2,
        "curriculum": {
            "max_duration": "10000tok",
            "schedule": [
                {
                    "name": "short",
                    "duration": "1000tok",
                    "train_loader": {"streams": [{"local": "data/short"}], "max_seq_len": 64},
                },
                {
                    "name": "mix",
                    "duration": "9000tok",
                    "train_loader": {
                        "streams": [
                            {"local": "data/short", "proportion": 1},
                            {"local": "data/long", "proportion": 3},
                        ],
                        "max_seq_len": 200,
                    },
                },
            ],
        },
    }
    (tmp_path / "ds.json").write_text(json.dumps(ds))
    run = load_config(tmp_path / "ds.json", check_data=True)
    text = describe_schedule(run, dp_world_size=2)  # global batch 8
    lines = text.splitlines()
    assert lines[0].split() == [
        "phase",
        "name",
        "duration",
        "ends",
        "at",
        "datamix",
        "max_seq_len",
        "~steps",
    ]
    # short: 1000 / (8 × 10) = 12.5 → 13 steps
    assert lines[2].split() == ["0", "short", "1000tok", "1000tok", "short:", "1", "64", "13"]
    # mix: mean = 0.25 × 10 + 0.75 × 150 = 115; 9000 / (8 × 115) = 9.78 → 10 steps
    assert lines[3].split() == [
        "1",
        "mix",
        "9000tok",
        "10000tok",
        "short:",
        "0.25,",
        "long:",
        "0.75",
        "200",
        "10",
    ]
    assert "~23 optimizer steps" in lines[-1]
    assert "global batch 8 samples (dp_world_size 2)" in lines[-1]


def test_describe_schedule_epochs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    write_mds(tmp_path / "a", [5] * 6)
    write_mds(tmp_path / "b", [5] * 10)
    ds = {
        "train_micro_batch_size_per_gpu": 4,
        "curriculum": {
            "max_duration": "2.5ep",
            "schedule": [
                {"name": "one", "duration": "1.5ep", "train_loader": {"streams": [{"local": "a"}]}},
                {
                    "name": "two",
                    "duration": "1ep",
                    "train_loader": {"streams": [{"local": "a"}, {"local": "b"}], "epoch_size": 8},
                },
            ],
        },
    }
    (tmp_path / "ds.json").write_text(json.dumps(ds))
    text = describe_schedule(load_config(tmp_path / "ds.json"))
    rows = text.splitlines()
    assert rows[2].split()[-1] == "3"  # 1.5 × 6 / 4 = 2.25 → 3
    assert rows[3].split()[-1] == "2"  # 1 × 8 / 4
    assert "2.5ep" in rows[3]


def test_describe_schedule_unreadable_data_shows_question_mark(tmp_path: Path) -> None:
    ds = {
        "train_micro_batch_size_per_gpu": 1,
        "curriculum": {
            "max_duration": "10tok",
            "schedule": [
                {
                    "name": "a",
                    "duration": "10tok",
                    "train_loader": {"streams": [{"local": str(tmp_path / "missing")}]},
                }
            ],
        },
    }
    (tmp_path / "ds.json").write_text(json.dumps(ds))
    text = describe_schedule(load_config(tmp_path / "ds.json"))
    assert text.splitlines()[2].split()[-1] == "?"
    assert "~? optimizer steps" in text


def test_describe_schedule_batch_mismatch(tmp_path: Path) -> None:
    ds = {
        "train_micro_batch_size_per_gpu": 1,
        "train_batch_size": 3,
        "curriculum": {
            "max_duration": "10tok",
            "schedule": [
                {"name": "a", "duration": "10tok", "train_loader": {"streams": [{"local": "x"}]}}
            ],
        },
    }
    (tmp_path / "ds.json").write_text(json.dumps(ds))
    with pytest.raises(ConfigError, match=r"^train_batch_size: 3 != "):
        describe_schedule(load_config(tmp_path / "ds.json"), dp_world_size=2)
