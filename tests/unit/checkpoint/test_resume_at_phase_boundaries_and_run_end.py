"""Resume rules (issue 4 item 6): checkpoints on a boundary (case C02), past it, at the end."""

from __future__ import annotations

import copy
from fractions import Fraction

import pytest
from resume_sections import dynamic_state, loader_state, refused, save, section

from curriculum_ds.checkpoint.rules import check_resume
from curriculum_ds.config import CurriculumConfig, parse_curriculum
from curriculum_ds.errors import ResumeError


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


def test_a_phase_credited_only_the_overshoot_is_not_in_progress() -> None:
    """The step that ends "short" crosses 1000tok (progress 1114): "mix" is credited 114 tok but
    nothing was drawn from it (the loader state is still short's), so its data and the dynamic
    re-weighting may still change, and the resumed run starts mix's loader from its beginning."""
    raw = section()
    raw["dynamic"] = {"enabled": True, "num_buckets": 4}
    cfg = parse_curriculum(raw)
    dynamic = dynamic_state([0.25] * 4, 1_000_000)
    saved = save(cfg, 1114, loader=loader_state(0, 40), dynamic=dynamic)
    edited_mix = copy.deepcopy(raw)
    edited_mix["schedule"][1]["train_loader"]["streams"][0]["proportion"] = 0.5
    edited_mix["dynamic"] = {"enabled": False}
    plan = check_resume(parse_curriculum(edited_mix), saved)
    assert (plan.phase_idx, plan.phase_progress, plan.is_new_phase) == (1, 114, True)
    # drawn from already (the loader state is mix's): mix is in progress and frozen
    drawn = save(cfg, 1114, loader=loader_state(1, 2), dynamic=dynamic)
    refused(
        parse_curriculum(edited_mix),
        drawn,
        'curriculum.schedule[1] ("mix").train_loader.streams[0].proportion: phase "mix" was in '
        "progress at the checkpoint and its data cannot change (checkpoint has 0.3, config has "
        "0.5)",
    )
