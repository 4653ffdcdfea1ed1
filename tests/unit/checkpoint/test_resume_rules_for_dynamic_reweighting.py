"""Inside a phase, dynamic re-weighting's shape (on/off, buckets, window) may not change."""

import numpy as np
import pytest
from resume_sections import dynamic_state

from curriculum_ds.checkpoint.rules import check_resume
from curriculum_ds.checkpoint.state import CurriculumState
from curriculum_ds.config import parse_curriculum
from curriculum_ds.errors import ResumeError


def _cfg(**dynamic):
    return parse_curriculum(
        {
            "max_duration": "2000tok",
            "schedule": [
                {
                    "name": "a",
                    "duration": "1000tok",
                    "train_loader": {"streams": [{"local": "data/x"}]},
                },
                {
                    "name": "b",
                    "duration": "1000tok",
                    "train_loader": {"streams": [{"local": "data/y"}]},
                },
            ],
            "dynamic": dynamic,
        }
    )


def _saved(cfg, progress, *, num_buckets=4, window=100, on=True):
    saved = CurriculumState.at(
        cfg, progress, global_step=5, consumed_tokens=progress, consumed_samples=20
    ).to_dict()
    saved["dynamic"] = dynamic_state(np.full(num_buckets, 1 / num_buckets), window) if on else None
    return saved


ON = {"enabled": True, "num_buckets": 4, "window": 100, "floor": 0.05}


@pytest.mark.parametrize(
    ("new", "field"),
    [
        ({"enabled": False}, "curriculum.dynamic.enabled"),
        ({**ON, "num_buckets": 8}, "curriculum.dynamic.num_buckets"),
        ({**ON, "window": 10}, "curriculum.dynamic.window"),
    ],
)
def test_mid_phase_change_is_refused_naming_the_field(new, field):
    saved = _saved(_cfg(**ON), 500)
    with pytest.raises(ResumeError, match=rf'^{field}: the checkpoint is inside phase 0 \("a"\)'):
        check_resume(_cfg(**new), saved)


def test_turning_dynamic_on_mid_phase_is_refused():
    saved = _saved(_cfg(), 500, on=False)
    with pytest.raises(
        ResumeError,
        match=r"^curriculum.dynamic.enabled: .* with dynamic "
        r"re-weighting off",
    ):
        check_resume(_cfg(**ON), saved)


def test_change_at_a_phase_boundary_is_accepted():
    saved = _saved(_cfg(**ON), 1000)  # exactly at the end of phase "a": "b" starts fresh
    plan = check_resume(_cfg(**{**ON, "num_buckets": 8}), saved)
    assert plan.phase_idx == 1
    assert plan.is_new_phase


def test_unchanged_dynamic_resumes():
    plan = check_resume(_cfg(**ON), _saved(_cfg(**ON), 500))
    assert plan.phase_idx == 0
    assert not plan.is_new_phase
