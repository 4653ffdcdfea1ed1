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


# ------------------------------------------------------------- units and signals (issue 20)
STREAMS = {"enabled": True, "unit": "streams", "window": 100, "floor": 0.05}


def _streams_state(signal: str = "loss") -> dict:
    return {
        "unit": "streams",
        "signal": signal,
        "phase_idx": 0,
        "probs": np.array([1.0]),
        "window": {
            "capacity": 100,
            "values": np.array([2.5, 3.0]),
            "streams": np.array([0, 0], dtype=np.int32),
            "num_non_finite": 1,
        },
        "last_loss": [],
        "buckets": None,
        "edges": None,
        "num_recomputes": 3,
        "mean_losses": [np.array([2.9]), np.array([2.7])],
    }


@pytest.mark.parametrize(
    ("new", "field", "was", "now"),
    [
        (ON, "unit", '"streams"', '"buckets"'),
        (
            {**STREAMS, "signal": "learnability"},
            "signal",
            '"loss"',
            '"learnability"',
        ),
    ],
)
def test_unit_or_signal_changed_mid_phase_is_refused(new, field, was, now):
    saved = _saved(_cfg(**STREAMS), 500)
    saved["dynamic"] = _streams_state()
    with pytest.raises(
        ResumeError,
        match=rf"^curriculum.dynamic.{field}: the checkpoint is inside phase 0 \(\"a\"\), which "
        rf"ran with {field} {was}, not {now}; it cannot change before that phase ends$",
    ):
        check_resume(_cfg(**new), saved)


def test_a_stream_state_resumes_under_its_unit_and_round_trips():
    cfg = _cfg(**STREAMS)
    saved = _saved(cfg, 500)
    saved["dynamic"] = _streams_state()
    plan = check_resume(cfg, saved)
    assert not plan.is_new_phase
    state = CurriculumState.from_dict(saved)
    assert state.dynamic is not None
    assert (state.dynamic.unit, state.dynamic.signal) == ("streams", "loss")
    again = state.dynamic.to_dict()
    assert (again["unit"], again["signal"], again["num_recomputes"]) == ("streams", "loss", 3)
    assert [m.tolist() for m in again["mean_losses"]] == [[2.9], [2.7]]
    assert again["window"]["streams"].tolist() == [0, 0]


def test_a_bucket_state_saved_before_units_is_buckets_and_loss():
    state = CurriculumState.from_dict(_saved(_cfg(**ON), 500))
    assert state.dynamic is not None
    assert (state.dynamic.unit, state.dynamic.method, state.dynamic.signal) == (
        "buckets",
        "softmax",
        "loss",
    )
    assert "mean_losses" not in type(state.dynamic).model_fields  # no other unit's keys
    assert "unit" not in state.dynamic.to_dict()  # saved as it always was


def test_another_reference_column_mid_phase_is_refused():
    # the window's excess losses were taken against ref_loss: another reference would mix two
    excess = {**STREAMS, "signal": "excess_loss", "reference_metric": "ref_loss"}
    saved = _saved(_cfg(**excess), 500)
    saved["dynamic"] = {**_streams_state("excess_loss"), "reference_metric": "ref_loss"}
    assert not check_resume(_cfg(**excess), saved).is_new_phase
    with pytest.raises(
        ResumeError,
        match=r'^curriculum.dynamic.reference_metric: the checkpoint is inside phase 0 \("a"\), '
        r'which ran with reference_metric "ref_loss", not "ref_loss_v2"; it cannot change',
    ):
        check_resume(_cfg(**{**excess, "reference_metric": "ref_loss_v2"}), saved)
    state = CurriculumState.from_dict(saved)
    assert state.dynamic is not None
    assert state.dynamic.to_dict()["reference_metric"] == "ref_loss"


def _two_stream_cfg(**dynamic):
    streams = {"streams": [{"local": "data/x"}, {"local": "data/y"}]}
    return parse_curriculum(
        {
            "max_duration": "2000tok",
            "schedule": [
                {"name": "a", "duration": "1000tok", "train_loader": streams},
                {"name": "b", "duration": "1000tok", "train_loader": streams},
            ],
            "dynamic": {"enabled": True, "unit": "streams", **dynamic},
        }
    )


def _method_saved(cfg, progress):
    """A saved state of ``cfg``'s method, as its reweighter writes it (its keys recorded)."""
    from curriculum_ds.dynamic import PhaseView, make_reweighter

    method = make_reweighter(cfg.dynamic)
    view = PhaseView(
        phase_idx=0,
        stream_names=("x", "y"),
        proportions=np.array([0.5, 0.5]),
        num_samples=(10, 10),
        metrics=({}, {}),
    )
    method.start_phase(view, None)
    saved = CurriculumState.at(
        cfg, progress, global_step=5, consumed_tokens=progress, consumed_samples=20
    ).to_dict()
    saved["dynamic"] = method.state().to_dict()
    return saved


def test_a_methods_own_key_changed_mid_phase_is_refused_naming_it():
    """Issue 33: a change of ``method`` or of its own keys inside a phase is refused."""
    odm = {"method": "odm", "odm": {"alpha": 0.9}}
    saved = _method_saved(_two_stream_cfg(**odm), 500)
    assert saved["dynamic"]["method_keys"] == {"alpha": 0.9, "warmup_steps": 0}
    with pytest.raises(
        ResumeError,
        match=r'^curriculum\.dynamic\.odm\.alpha: the checkpoint is inside phase 0 \("a"\), '
        r"which ran with alpha 0\.9, not 0\.5; it cannot change before that phase ends$",
    ):
        check_resume(_two_stream_cfg(method="odm", odm={"alpha": 0.5}), saved)
    with pytest.raises(ResumeError, match=r"^curriculum\.dynamic\.method: .* not \"ado\""):
        check_resume(_two_stream_cfg(method="ado"), saved)
    assert not check_resume(_two_stream_cfg(**odm), saved).is_new_phase  # unchanged: resumes


def test_a_methods_keys_may_change_at_a_phase_boundary_or_when_not_recorded():
    odm = {"method": "odm"}
    at_boundary = _method_saved(_two_stream_cfg(**odm), 1000)
    plan = check_resume(_two_stream_cfg(method="odm", odm={"alpha": 0.5}), at_boundary)
    assert plan.is_new_phase
    older = _method_saved(_two_stream_cfg(**odm), 500)
    older["dynamic"]["method_keys"] = None  # a state saved before the keys were recorded
    assert not check_resume(_two_stream_cfg(method="odm", odm={"alpha": 0.5}), older).is_new_phase
