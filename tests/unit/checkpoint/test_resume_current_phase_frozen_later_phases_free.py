"""Resume rules (issue 4 item 6): the current phase's data is frozen, later phases are free."""

from __future__ import annotations

from typing import Any

import pytest
from resume_sections import MID_MIX, edited, refused, set_durations

from curriculum_ds.checkpoint.rules import check_resume
from curriculum_ds.core.schedule import PhaseSchedule
from curriculum_ds.errors import ResumeError

# ----------------------------------------------------------------------------------------------
# The current phase: data frozen, duration ≥ consumed
# ----------------------------------------------------------------------------------------------


def test_current_phase_data_edit_refused() -> None:
    cfg = edited(
        lambda r: r["schedule"][1]["train_loader"]["streams"][1].__setitem__("proportion", 0.6)
    )
    refused(
        cfg,
        MID_MIX,
        'curriculum.schedule[1] ("mix").train_loader.streams[1].proportion: phase "mix" was in '
        "progress at the checkpoint and its data cannot change (checkpoint has 0.7, config has "
        "0.6)",
    )
    cfg = edited(lambda r: r["schedule"][1]["train_loader"].__setitem__("max_seq_len", 2048))
    with pytest.raises(ResumeError, match=r'\("mix"\)\.train_loader\.max_seq_len: phase "mix"'):
        check_resume(cfg, MID_MIX)


def test_current_phase_rename_refused() -> None:
    cfg = edited(lambda r: r["schedule"][1].__setitem__("name", "blend"))
    refused(
        cfg,
        MID_MIX,
        'curriculum.schedule[1] ("blend").name: phase "mix" was in progress at the checkpoint '
        'and its data cannot change (checkpoint has "mix", config has "blend")',
    )


def test_current_duration_below_consumed_refused() -> None:
    cfg = edited(lambda r: set_durations(r, 1000, 400, 1000))
    refused(
        cfg,
        MID_MIX,
        'curriculum.schedule[1] ("mix").duration: 400tok is less than the 500tok phase "mix" '
        "already consumed at the checkpoint",
    )


def test_current_duration_above_consumed_accepted() -> None:
    cfg = edited(lambda r: set_durations(r, 1000, 600, 1000))
    plan = check_resume(cfg, MID_MIX)
    assert (plan.phase_idx, plan.progress, plan.phase_progress) == (1, 1500, 500)
    assert not plan.is_new_phase
    assert plan.notes == ('phase "mix": duration 2000tok -> 600tok (500tok already consumed)',)
    cfg = edited(lambda r: set_durations(r, 1000, 5000, 1000))  # longer is fine too
    assert check_resume(cfg, MID_MIX).phase_idx == 1


def test_current_duration_equal_to_consumed_ends_the_phase() -> None:
    cfg = edited(lambda r: set_durations(r, 1000, 500, 1000))
    plan = check_resume(cfg, MID_MIX)
    assert (plan.phase_idx, plan.phase_progress, plan.is_new_phase) == (2, 0, True)


# ----------------------------------------------------------------------------------------------
# Later phases: free to change, and new ones may be appended
# ----------------------------------------------------------------------------------------------


def test_later_phases_edited_and_appended_accepted() -> None:
    def later(r: dict[str, Any]) -> None:
        r["schedule"][2]["train_loader"] = {"streams": [{"local": "data/code"}], "max_seq_len": 64}
        r["schedule"][2]["duration"] = "3000tok"
        r["schedule"].append(
            {"name": "anneal", "duration": "500tok", "train_loader": {"streams": [{"local": "a"}]}}
        )
        r["max_duration"] = "6500tok"

    cfg = edited(later)
    plan = check_resume(cfg, MID_MIX)
    assert (plan.phase_idx, plan.phase_progress, plan.is_new_phase) == (1, 500, False)
    assert plan.notes == (
        'phase "cool" (schedule[2]) changed',
        'phase "anneal" (schedule[3]) appended',
    )
    assert PhaseSchedule(cfg).phase_at(plan.progress) == plan.phase_idx


def test_later_phase_removed_accepted_with_a_note() -> None:
    cfg = edited(lambda r: set_durations(r, 1000, 2000, keep=2))
    plan = check_resume(cfg, MID_MIX)
    assert plan.phase_idx == 1
    assert plan.notes == ('phase "cool" (schedule[2]) removed',)
