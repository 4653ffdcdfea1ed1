"""The loader and re-weighting parts of a checkpoint are typed (``core.loader_state.LoaderState``,
``dynamic.state``): a malformed one is refused with one line naming the key, and a well-formed one
reads back to the same saved dict (issues 18 and 30)."""

from __future__ import annotations

import copy
from typing import Any

import numpy as np
import pytest

from curriculum_ds.core.loader_state import LoaderState
from curriculum_ds.dynamic.state import BucketSoftmaxState, parse_dynamic_state
from curriculum_ds.errors import ResumeError

LOADER: dict[str, Any] = {
    "phase_idx": 1,
    "num_samples": 8,
    "stream_counts": [3, 5],
    "samplers": [{"seed": 1, "num_draws": 3}, {"seed": 2, "num_draws": 5}],
}
TOKENS = {**LOADER, "proportion_unit": "tokens", "stream_tokens": [30, 50], "pending": [[], [4]]}
DYNAMIC: dict[str, Any] = {
    "phase_idx": 1,
    "probs": np.full(2, 0.5),
    "window": {"capacity": 4, "values": np.zeros(2, np.float32), "num_non_finite": 0},
    "last_loss": [np.full(3, np.nan, np.float32), np.zeros(5, np.float32)],
    "buckets": [np.zeros(3, np.int8), np.ones(5, np.int8)],
    "edges": None,
    "num_recomputes": 2,
}


@pytest.mark.parametrize("saved", [LOADER, TOKENS], ids=["samples", "tokens"])
def test_a_loader_state_reads_back_key_for_key(saved):
    assert LoaderState.from_dict(saved).to_dict() == saved
    assert list(LoaderState.from_dict(saved).to_dict()) == list(saved)


def test_a_dynamic_state_reads_back_key_for_key():
    state = parse_dynamic_state(DYNAMIC)
    assert isinstance(state, BucketSoftmaxState)  # no unit tag: the bucket unit
    again = state.to_dict()
    assert list(again) == list(DYNAMIC)
    assert again["probs"] is DYNAMIC["probs"]  # the arrays as saved: the same bytes on re-save
    assert state.num_buckets == 2
    assert state.window_capacity == 4


def _edit(saved: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    bad = copy.deepcopy(saved)
    *parents, key = path.split(".")
    node = bad
    for p in parents:
        node = node[p]
    if value is KeyError:
        del node[key]
    else:
        node[key] = value
    return bad


@pytest.mark.parametrize(
    ("path", "value", "message"),
    [
        ("num_samples", "x", r"'loader\.num_samples' has the wrong type \('x'\)"),
        ("num_samples", True, r"'loader\.num_samples' has the wrong type"),
        ("samplers", KeyError, r"missing 'loader\.samplers'"),
        ("phase_idx", KeyError, r"missing 'loader\.phase_idx'"),
        ("stream_counts", [1.5], r"'loader\.stream_counts' has the wrong type"),
        ("samplers", [3], r"'loader\.samplers\[0\]' has the wrong type"),
    ],
)
def test_a_malformed_loader_state_names_the_key(path, value, message):
    with pytest.raises(ResumeError, match=rf"^checkpoint curriculum state: {message}"):
        LoaderState.from_dict(_edit(LOADER, path, value))


def test_a_tokens_loader_state_needs_its_token_counts():
    bad = {k: v for k, v in TOKENS.items() if k != "pending"}
    with pytest.raises(ResumeError, match=r"missing 'loader\.pending'"):
        LoaderState.from_dict(bad)


@pytest.mark.parametrize(
    ("path", "value", "message"),
    [
        ("probs", KeyError, r"missing 'dynamic\.probs'"),
        ("probs", "x", r"'dynamic\.probs' has the wrong type"),
        ("window.values", KeyError, r"missing 'dynamic\.window\.values'"),
        ("window.capacity", "4", r"'dynamic\.window\.capacity' has the wrong type"),
        ("last_loss", KeyError, r"missing 'dynamic\.last_loss'"),
        ("edges", KeyError, r"missing 'dynamic\.edges'"),
        ("num_recomputes", None, r"'dynamic\.num_recomputes' has the wrong type"),
        ("last_loss", [np.zeros((2, 2))], r"'dynamic\.last_loss\[0\]' has the wrong type"),
        ("buckets", [np.zeros(3)], r"'dynamic\.buckets\[0\]' has the wrong type"),
    ],
)
def test_a_malformed_dynamic_state_names_the_key(path, value, message):
    with pytest.raises(ResumeError, match=rf"^checkpoint curriculum state: {message}"):
        parse_dynamic_state(_edit(DYNAMIC, path, value))


def test_the_saved_state_keeps_its_version_1_keys_in_order_then_the_order_version():
    from resume_sections import BASE, saved_curriculum

    from curriculum_ds.checkpoint.state import CurriculumState

    saved = saved_curriculum(BASE, 1500, global_step=7, consumed_tokens=1500, consumed_samples=21)
    assert list(saved) == [
        "seed",
        "unit",
        "progress",
        "phase_idx",
        "phases",
        "global_step",
        "consumed_tokens",
        "consumed_samples",
        "fingerprints",
        "loader",
        "dynamic",
        "version",
        "order_version",  # issue 35: absent in checkpoints of before (read as version 1)
    ]
    assert CurriculumState.from_dict(saved).to_dict() == saved


def test_the_resume_rules_refuse_a_malformed_loader_state_before_anything_loads():
    from resume_sections import BASE, save

    from curriculum_ds.checkpoint.rules import check_resume

    saved = save(BASE, 1500, loader={"cursor": [1, 2]}, dynamic=None)
    with pytest.raises(
        ResumeError, match=r"^checkpoint curriculum state: missing 'loader\.samplers'$"
    ):
        check_resume(BASE, saved)


STREAMS: dict[str, Any] = {
    "unit": "streams",
    "signal": "loss",
    "reference_metric": None,
    "phase_idx": 0,
    "probs": np.full(2, 0.5),
    "window": {
        "capacity": 4,
        "values": np.zeros(2),
        "streams": np.zeros(2, np.int32),
        "num_non_finite": 0,
    },
    "last_loss": [],
    "buckets": None,
    "edges": None,
    "num_recomputes": 1,
}


def test_a_stream_state_reads_back_key_for_key_and_needs_its_window_streams():
    assert list(parse_dynamic_state(STREAMS).to_dict()) == list(STREAMS)
    with pytest.raises(
        ResumeError, match=r"^checkpoint curriculum state: missing 'dynamic\.window\.streams'$"
    ):
        parse_dynamic_state(_edit(STREAMS, "window.streams", KeyError))


def test_a_state_of_an_unknown_unit_or_method_is_one_line():
    with pytest.raises(
        ResumeError,
        match=r"^checkpoint curriculum state: 'dynamic' is a 'zz/softmax' state; .*'streams/",
    ):
        parse_dynamic_state({**STREAMS, "unit": "zz"})
    with pytest.raises(ResumeError, match=r"'dynamic' is a 'streams/zz' state"):
        parse_dynamic_state({**STREAMS, "method": "zz"})
    with pytest.raises(
        ResumeError, match=r"^checkpoint curriculum state: 'dynamic' has the wrong type \(\[1\]\)$"
    ):
        parse_dynamic_state([1])
