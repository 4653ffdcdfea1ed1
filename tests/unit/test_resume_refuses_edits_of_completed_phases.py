"""Resume rules (issue 4 item 6): what may change between a checkpoint and the resumed config."""

from __future__ import annotations

import copy
import json
import re
from fractions import Fraction
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from curriculum_ds.config import CurriculumConfig, parse_curriculum
from curriculum_ds.errors import ResumeError
from curriculum_ds.resume_rules import ResumePlan, check_resume, fresh_plan
from curriculum_ds.schedule import PhaseSchedule, phase_fingerprint
from curriculum_ds.state import CurriculumState

SavedCurriculum = dict[str, Any]


def saved_curriculum(cfg: CurriculumConfig, progress: int | Fraction, **counters: int) -> Any:
    return CurriculumState.at(cfg, progress, **counters).to_dict()


def section() -> dict[str, Any]:
    """short 1000tok → mix 2000tok → cool 1000tok (4000tok)."""
    return {
        "max_duration": "4000tok",
        "seed": 1234,
        "schedule": [
            {
                "name": "short",
                "duration": "1000tok",
                "train_loader": {
                    "streams": [
                        {"local": "data/short", "proportion": 0.3},
                        {"local": "data/long", "proportion": 0.7},
                    ],
                    "max_seq_len": 256,
                },
            },
            {
                "name": "mix",
                "duration": "2000tok",
                "train_loader": {
                    "streams": [
                        {"local": "data/short", "proportion": 0.3},
                        {"local": "data/long", "proportion": 0.7},
                    ],
                    "max_seq_len": 1024,
                },
            },
            {
                "name": "cool",
                "duration": "1000tok",
                "train_loader": {"streams": [{"local": "data/long"}], "max_seq_len": 1024},
            },
        ],
    }


def save(cfg: CurriculumConfig, progress: int | Fraction, **extra: Any) -> SavedCurriculum:
    saved = saved_curriculum(
        cfg, progress, global_step=7, consumed_tokens=int(progress), consumed_samples=21
    )
    saved.update(extra)  # type: ignore[typeddict-item]
    # what comes back from a checkpoint went through a serialiser: keep it JSON-only
    return json.loads(json.dumps(saved))  # type: ignore[no-any-return,unused-ignore]


def edited(edit: Any) -> CurriculumConfig:
    raw = copy.deepcopy(section())
    edit(raw)
    return parse_curriculum(raw)


def set_durations(raw: dict[str, Any], *durations: int, keep: int | None = None) -> None:
    """Set the phases' durations (dropping phases after the first ``keep``) and max_duration."""
    if keep is not None:
        del raw["schedule"][keep:]
    for phase, d in zip(raw["schedule"], durations, strict=False):
        phase["duration"] = f"{d}tok"
    raw["max_duration"] = f"{sum(durations)}tok"


BASE = parse_curriculum(section())
MID_MIX = save(BASE, 1500)  # "short" complete, "mix" in progress with 500tok consumed


def refused(cfg: CurriculumConfig, saved: SavedCurriculum, expected: str) -> None:
    with pytest.raises(ResumeError, match=f"^{re.escape(expected)}$"):
        check_resume(cfg, saved)


# ----------------------------------------------------------------------------------------------
# The saved state
# ----------------------------------------------------------------------------------------------


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
        progress=1500,
        phase_progress=500,
        is_new_phase=False,
        global_step=7,
        consumed_tokens=1500,
        consumed_samples=21,
        notes=(),
    )


def test_extra_keys_from_the_training_loop_are_ignored() -> None:
    saved = save(BASE, 1500, loader={"cursor": [1, 2]}, dynamic=None)
    assert check_resume(BASE, saved).phase_idx == 1


# ----------------------------------------------------------------------------------------------
# Completed phases are frozen
# ----------------------------------------------------------------------------------------------


def test_completed_phase_duration_edit_refused() -> None:
    cfg = edited(lambda r: set_durations(r, 900, 2100, 1000))
    refused(
        cfg,
        MID_MIX,
        'curriculum.schedule[0] ("short").duration: phase "short" is complete and cannot change '
        '(checkpoint has "1000tok", config has "900tok")',
    )


def test_completed_phase_stream_edit_refused() -> None:
    cfg = edited(
        lambda r: r["schedule"][0]["train_loader"]["streams"][1].__setitem__("local", "data/code")
    )
    refused(
        cfg,
        MID_MIX,
        'curriculum.schedule[0] ("short").train_loader.streams[1].local: phase "short" is '
        'complete and cannot change (checkpoint has "data/long", config has "data/code")',
    )


def test_completed_phase_stream_added_refused() -> None:
    cfg = edited(
        lambda r: r["schedule"][0]["train_loader"]["streams"].append({"local": "data/code"})
    )
    refused(
        cfg,
        MID_MIX,
        'curriculum.schedule[0] ("short").train_loader.streams: phase "short" is complete and '
        "cannot change (checkpoint has 2 items, config has 3 items)",
    )


def test_completed_phase_proportion_edit_refused() -> None:
    cfg = edited(
        lambda r: r["schedule"][0]["train_loader"]["streams"][0].__setitem__("proportion", 0.5)
    )
    refused(
        cfg,
        MID_MIX,
        'curriculum.schedule[0] ("short").train_loader.streams[0].proportion: phase "short" is '
        "complete and cannot change (checkpoint has 0.3, config has 0.5)",
    )


def test_completed_phase_max_seq_len_edit_refused() -> None:
    cfg = edited(lambda r: r["schedule"][0]["train_loader"].__setitem__("max_seq_len", 512))
    refused(
        cfg,
        MID_MIX,
        'curriculum.schedule[0] ("short").train_loader.max_seq_len: phase "short" is complete '
        "and cannot change (checkpoint has 256, config has 512)",
    )


def test_completed_phase_epoch_size_set_refused() -> None:
    cfg = edited(lambda r: r["schedule"][0]["train_loader"].__setitem__("epoch_size", 100))
    refused(
        cfg,
        MID_MIX,
        'curriculum.schedule[0] ("short").train_loader.epoch_size: phase "short" is complete '
        "and cannot change (checkpoint has null, config has 100)",
    )


def test_completed_phase_rename_refused() -> None:
    cfg = edited(lambda r: r["schedule"][0].__setitem__("name", "warmup"))
    refused(
        cfg,
        MID_MIX,
        'curriculum.schedule[0] ("warmup").name: phase "short" is complete and cannot change '
        '(checkpoint has "short", config has "warmup")',
    )


def test_explicit_default_is_not_a_change() -> None:
    # writing out a default (name, max_seq_len) is the same phase
    def explicit(r: dict[str, Any]) -> None:
        r["schedule"][0]["train_loader"]["streams"][0]["name"] = "short"
        r["schedule"][2]["train_loader"]["epoch_size"] = None

    assert check_resume(edited(explicit), MID_MIX).phase_idx == 1


def test_schedule_shorter_than_the_completed_phases_refused() -> None:
    saved = save(BASE, 3500)  # short, mix complete; cool in progress
    cfg = edited(lambda r: set_durations(r, 1000, keep=1))
    refused(
        cfg,
        saved,
        'curriculum.schedule: the checkpoint has completed 2 phase(s) ("short", "mix") but the '
        "config has only 1; completed phases cannot be removed",
    )


def test_current_phase_removed_refused() -> None:
    cfg = edited(lambda r: set_durations(r, 1000, keep=1))
    refused(
        cfg,
        MID_MIX,
        'curriculum.schedule: phase "mix" (schedule[1]) was in progress at the checkpoint '
        "(500tok consumed) but the config has only 1 phase(s)",
    )


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


# ----------------------------------------------------------------------------------------------
# Boundaries (case C02) and the end of the run
# ----------------------------------------------------------------------------------------------


def two_phases() -> CurriculumConfig:
    loader = {"streams": [{"local": "data/short"}]}
    return parse_curriculum(
        {
            "max_duration": "2000tok",
            "schedule": [
                {"name": "A", "duration": "1000tok", "train_loader": loader},
                {"name": "B", "duration": "1000tok", "train_loader": loader},
            ],
        }
    )


def test_c02_checkpoint_exactly_on_the_boundary_resumes_into_the_next_phase() -> None:
    cfg = two_phases()
    saved = save(cfg, 1000)  # step 10 at 100 tokens per step
    assert saved["phase_idx"] == 1
    plan = check_resume(cfg, saved)
    assert (plan.phase_idx, plan.progress, plan.phase_progress) == (1, 1000, 0)
    assert plan.is_new_phase  # B from its first sample; no batch of A replayed


def test_c02_variant_checkpoint_one_step_before_the_boundary() -> None:
    cfg = two_phases()
    saved = save(cfg, 900)  # step 9
    assert saved["phase_idx"] == 0
    plan = check_resume(cfg, saved)
    assert (plan.phase_idx, plan.phase_progress, plan.is_new_phase) == (0, 900, False)


def test_boundary_checkpoint_next_phase_may_still_change() -> None:
    # nothing of B was drawn at the checkpoint, so B counts as a later phase
    cfg = two_phases()
    saved = save(cfg, 1000)
    raw = cfg.model_dump(mode="json")
    raw["schedule"][1]["train_loader"]["streams"] = [{"local": "data/long"}]
    raw["schedule"][1]["duration"] = "50tok"
    raw["max_duration"] = "1050tok"
    plan = check_resume(parse_curriculum(raw), saved)
    assert (plan.phase_idx, plan.is_new_phase) == (1, True)
    assert plan.notes == ('phase "B" (schedule[1]) changed',)
    # but A is complete
    raw["schedule"][0]["train_loader"]["max_seq_len"] = 8
    with pytest.raises(ResumeError, match=r'^curriculum\.schedule\[0\] \("A"\)\.train_loader'):
        check_resume(parse_curriculum(raw), saved)


def test_overshooting_checkpoint_is_in_the_next_phase() -> None:
    cfg = two_phases()
    saved = save(cfg, 1200)  # the step crossed the boundary: 200 tokens count against B
    plan = check_resume(cfg, saved)
    assert (plan.phase_idx, plan.phase_progress, plan.is_new_phase) == (1, 200, False)
    raw = cfg.model_dump(mode="json")
    raw["schedule"][1]["duration"] = "100tok"
    raw["max_duration"] = "1100tok"
    refused(
        parse_curriculum(raw),
        saved,
        'curriculum.schedule[1] ("B").duration: 100tok is less than the 200tok phase "B" '
        "already consumed at the checkpoint",
    )


def test_finished_run_resumes_at_the_end_or_into_appended_phases() -> None:
    cfg = two_phases()
    saved = save(cfg, 2050)
    assert saved["phase_idx"] == 2
    plan = check_resume(cfg, saved)
    assert plan.phase_idx == 2
    assert not plan.is_new_phase
    assert plan.notes[-1] == "the run had already reached max_duration: nothing left to train"
    raw = cfg.model_dump(mode="json")
    raw["schedule"].append(
        {"name": "C", "duration": "500tok", "train_loader": {"streams": [{"local": "c"}]}}
    )
    raw["max_duration"] = "2500tok"
    plan = check_resume(parse_curriculum(raw), saved)
    assert (plan.phase_idx, plan.phase_progress, plan.is_new_phase) == (2, 50, False)
    # extending the (complete) last phase instead is an edit of a completed phase
    raw = cfg.model_dump(mode="json")
    raw["schedule"][1]["duration"] = "1500tok"
    raw["max_duration"] = "2500tok"
    with pytest.raises(
        ResumeError, match=r'^curriculum\.schedule\[1\] \("B"\)\.duration: phase "B" is complete'
    ):
        check_resume(parse_curriculum(raw), saved)


def test_epoch_unit_resume() -> None:
    raw = section()
    for phase, d in zip(raw["schedule"], ("0.5ep", "1.25ep", "0.25ep"), strict=True):
        phase["duration"] = d
    raw["max_duration"] = "2ep"
    cfg = parse_curriculum(raw)
    saved = save(cfg, Fraction(3, 4))
    assert saved["progress"] == "3/4"
    plan = check_resume(cfg, saved)
    assert (plan.phase_idx, plan.progress, plan.phase_progress) == (
        1,
        Fraction(3, 4),
        Fraction(1, 4),
    )
    raw["schedule"][1]["duration"] = "0.2ep"
    raw["schedule"][2]["duration"] = "1.3ep"
    refused(
        parse_curriculum(raw),
        saved,
        'curriculum.schedule[1] ("mix").duration: 0.2ep is less than the 0.25ep phase "mix" '
        "already consumed at the checkpoint",
    )


# ----------------------------------------------------------------------------------------------
# Seed, unit, malformed state, runs without curriculum
# ----------------------------------------------------------------------------------------------


def test_seed_change_refused() -> None:
    cfg = edited(lambda r: r.__setitem__("seed", 99))
    refused(
        cfg,
        MID_MIX,
        "curriculum.seed: changed from 1234 (checkpoint) to 99 (config); the sample order "
        "depends on it, so the run cannot resume under a new seed",
    )


def test_unit_change_refused() -> None:
    def to_ep(r: dict[str, Any]) -> None:
        for phase in r["schedule"]:
            phase["duration"] = "1ep"
        r["max_duration"] = "3ep"

    refused(
        edited(to_ep),
        MID_MIX,
        'curriculum.max_duration: unit changed from "tok" (checkpoint) to "ep" (config); the '
        "progress of a run cannot be converted",
    )


@pytest.mark.parametrize(
    ("mutate", "pattern"),
    [
        (lambda s: s.pop("phases"), r"^checkpoint curriculum state: missing 'phases'$"),
        (lambda s: s.__setitem__("version", 2), r"version 2 not supported"),
        (lambda s: s.__setitem__("phase_idx", 0), r"phase_idx 0 does not match progress 1500"),
        (lambda s: s.__setitem__("progress", 1500), r"'progress' has the wrong type"),
        (lambda s: s.__setitem__("progress", "1.5"), r"progress '1\.5' is not a valid tok count"),
        (lambda s: s.__setitem__("phases", [{"name": "x"}]), r"its phases are invalid"),
        (lambda s: s.__setitem__("global_step", True), r"'global_step' has the wrong type"),
    ],
)
def test_malformed_saved_state(mutate: Any, pattern: str) -> None:
    saved = copy.deepcopy(MID_MIX)
    mutate(saved)
    with pytest.raises(ResumeError, match=pattern):
        check_resume(BASE, saved)


def test_not_a_dict() -> None:
    with pytest.raises(ResumeError, match=r"^checkpoint curriculum state: not a mapping \(list\)$"):
        check_resume(BASE, [])  # type: ignore[arg-type]


def test_fresh_plan_for_a_checkpoint_without_curriculum() -> None:
    plan = fresh_plan(BASE, global_step=40)
    assert (plan.phase_idx, plan.progress, plan.phase_progress, plan.is_new_phase) == (
        0,
        0,
        0,
        True,
    )
    assert plan.global_step == 40
    assert plan.consumed_tokens == 0
    assert plan.notes == (
        'checkpoint has no curriculum state: the schedule starts at phase 0 ("short"), '
        "global_step 40 kept",
    )
    raw = section()
    raw["max_duration"] = "3ep"
    for phase in raw["schedule"]:
        phase["duration"] = "1ep"
    ep_plan = fresh_plan(parse_curriculum(raw))
    assert isinstance(ep_plan.progress, Fraction)
    assert ep_plan.notes == ()


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


@pytest.mark.parametrize("resume", ["auto", "path"])
def test_latest_file_with_non_utf8_bytes_is_one_line_naming_it(tmp_path, resume) -> None:
    from curriculum_ds.checkpoint import locate_checkpoint, resume_target

    ckpts = tmp_path / "checkpoints"
    ckpts.mkdir()
    (ckpts / "latest").write_bytes(b"\xff\xfeglobal_step4")
    pattern = re.escape(f"{ckpts / 'latest'}: not a DeepSpeed `latest` file (not UTF-8 text")
    with pytest.raises(ResumeError, match=pattern):
        resume_target("auto" if resume == "auto" else str(ckpts), tmp_path)
    with pytest.raises(ResumeError, match=pattern):
        locate_checkpoint(ckpts)
