"""Resume rules (issue 4 item 6): the saved state, and an unchanged (or appended) config resumes."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given
from hypothesis import strategies as st
from resume_sections import BASE, MID_MIX, loader_state, save, saved_curriculum

from curriculum_ds.checkpoint.rules import ResumePlan, check_resume
from curriculum_ds.config import parse_curriculum
from curriculum_ds.core.position import Position
from curriculum_ds.core.schedule import PhaseSchedule, phase_fingerprint


def test_saved_curriculum_contents() -> None:
    saved = saved_curriculum(BASE, 1500, global_step=7, consumed_tokens=1500, consumed_samples=21)
    assert saved["version"] == 1
    assert saved["seed"] == 1234
    assert saved["unit"] == "tok"
    assert saved["progress"] == "1500"
    assert saved["phase_idx"] == 1
    assert saved["phases"] == [p.model_dump(mode="json") for p in BASE.schedule]
    assert saved["fingerprints"] == [phase_fingerprint(p) for p in BASE.schedule]
    assert (saved["global_step"], saved["consumed_tokens"], saved["consumed_samples"]) == (
        7,
        1500,
        21,
    )
    json.dumps(saved)  # JSON-able


def test_unchanged_config_resumes_in_place() -> None:
    plan = check_resume(BASE, MID_MIX)
    assert plan == ResumePlan(
        phase_idx=1,
        position=Position(global_step=7, consumed_tokens=1500, consumed_samples=21, progress=1500),
        phase_progress=500,
        is_new_phase=False,
        notes=(),
    )


def test_extra_keys_from_the_training_loop_are_ignored() -> None:
    saved = save(BASE, 1500, loader={**loader_state(1, 21), "cursor": [1, 2]}, dynamic=None)
    assert check_resume(BASE, saved).phase_idx == 1


@given(
    st.lists(st.integers(min_value=1, max_value=10_000), min_size=1, max_size=6),
    st.integers(min_value=0, max_value=70_000),
    st.integers(min_value=1, max_value=10_000),
)
def test_resume_unchanged_or_appended_matches_phase_at(
    durations: list[int], progress: int, appended: int
) -> None:
    loader = {"streams": [{"local": "s"}]}
    raw: dict[str, Any] = {
        "max_duration": f"{sum(durations)}tok",
        "schedule": [
            {"name": f"p{i}", "duration": f"{d}tok", "train_loader": loader}
            for i, d in enumerate(durations)
        ],
    }
    cfg = parse_curriculum(raw)
    sched = PhaseSchedule(cfg)
    saved = save(cfg, progress)
    plan = check_resume(cfg, saved)
    assert plan.phase_idx == sched.phase_at(progress)
    if plan.phase_idx < sched.num_phases:
        assert plan.phase_progress == progress - sched.starts[plan.phase_idx]
        assert plan.is_new_phase == (progress == sched.starts[plan.phase_idx])
    # appending a phase never invalidates a checkpoint
    raw["schedule"].append({"name": "extra", "duration": f"{appended}tok", "train_loader": loader})
    raw["max_duration"] = f"{sum(durations) + appended}tok"
    longer = parse_curriculum(raw)
    assert check_resume(longer, saved).phase_idx == PhaseSchedule(longer).phase_at(progress)
