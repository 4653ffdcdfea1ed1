"""Resume rules (issue 4 item 6): seed, unit, malformed state, runs without curriculum."""

from __future__ import annotations

import copy
import re
from fractions import Fraction
from typing import Any

import pytest
from resume_sections import BASE, MID_MIX, edited, refused, section

from curriculum_ds.checkpoint.rules import check_resume, fresh_plan
from curriculum_ds.config import parse_curriculum
from curriculum_ds.errors import ResumeError


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


@pytest.mark.parametrize("resume", ["auto", "path"])
def test_latest_file_with_non_utf8_bytes_is_one_line_naming_it(tmp_path, resume) -> None:
    from curriculum_ds.checkpoint.files import locate_checkpoint, resume_target

    ckpts = tmp_path / "checkpoints"
    ckpts.mkdir()
    (ckpts / "latest").write_bytes(b"\xff\xfeglobal_step4")
    pattern = re.escape(f"{ckpts / 'latest'}: not a DeepSpeed `latest` file (not UTF-8 text")
    with pytest.raises(ResumeError, match=pattern):
        resume_target("auto" if resume == "auto" else str(ckpts), tmp_path)
    with pytest.raises(ResumeError, match=pattern):
        locate_checkpoint(ckpts)
