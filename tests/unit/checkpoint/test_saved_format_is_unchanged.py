"""A checkpoint written before issue 30 reads back to the same saved form, keys, types and dtypes.

``tests/data/checkpoint_v1`` holds 1-rank tags of both units written by the code before the
state types moved (see its ``make_fixture.py``). Its curriculum state, read through the typed
``CurriculumState`` and written back with ``to_dict()``, is deep-equal to what is stored: the
same keys in the same order, the same Python and numpy types, dtypes and values; so is each
part read alone, and the states the loader and the re-weighting restored from it hand back.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from curriculum_ds.checkpoint.files import read_curriculum_state
from curriculum_ds.checkpoint.state import CurriculumState
from curriculum_ds.config import load_config
from curriculum_ds.core.loader import PhaseLoader
from curriculum_ds.core.loader_state import LoaderState
from curriculum_ds.dynamic import make_reweighter
from curriculum_ds.dynamic.state import BucketSoftmaxState, StreamSoftmaxState, parse_dynamic_state

FIXTURE = Path(__file__).resolve().parents[2] / "data" / "checkpoint_v1"


def _assert_same(saved: Any, again: Any, where: str) -> None:
    assert type(again) is type(saved), f"{where}: {type(again)} != {type(saved)}"
    if isinstance(saved, dict):
        assert list(again) == list(saved), f"{where}: keys {list(again)} != {list(saved)}"
        for key in saved:
            _assert_same(saved[key], again[key], f"{where}.{key}")
    elif isinstance(saved, list | tuple):
        assert len(again) == len(saved), where
        for i, (a, b) in enumerate(zip(saved, again, strict=True)):
            _assert_same(a, b, f"{where}[{i}]")
    elif isinstance(saved, np.ndarray):
        assert again.dtype == saved.dtype, f"{where}: {again.dtype} != {saved.dtype}"
        np.testing.assert_array_equal(again, saved, err_msg=where)
    elif isinstance(saved, float) and np.isnan(saved):
        assert np.isnan(again), where
    else:
        assert again == saved, f"{where}: {again!r} != {saved!r}"


@pytest.mark.parametrize("unit", ["buckets", "streams"])
def test_a_v1_checkpoint_state_round_trips_to_the_same_saved_form(unit):
    _, saved = read_curriculum_state(FIXTURE / unit / "checkpoints")
    assert saved is not None
    assert saved["dynamic"].get("unit", "buckets") == unit
    again = CurriculumState.from_dict(saved).to_dict()
    _assert_same(saved, again, "curriculum")


@pytest.mark.parametrize("unit", ["buckets", "streams"])
def test_each_part_reads_back_alone_to_the_same_saved_form(unit):
    _, saved = read_curriculum_state(FIXTURE / unit / "checkpoints")
    assert saved is not None
    _assert_same(saved["loader"], LoaderState.from_dict(saved["loader"]).to_dict(), "loader")
    dynamic = parse_dynamic_state(saved["dynamic"])
    assert type(dynamic) is {"buckets": BucketSoftmaxState, "streams": StreamSoftmaxState}[unit]
    assert dynamic.unit == unit
    assert dynamic.method == "softmax"
    _assert_same(saved["dynamic"], dynamic.to_dict(), "dynamic")


def test_a_state_without_a_unit_tag_is_a_bucket_state_and_the_stream_state_has_no_padding():
    _, saved = read_curriculum_state(FIXTURE / "buckets" / "checkpoints")
    assert saved is not None
    assert "unit" not in saved["dynamic"]  # written before units existed, and with signal "loss"
    assert isinstance(parse_dynamic_state(saved["dynamic"]), BucketSoftmaxState)
    # the stream unit keeps no per-sample state: its saved empty keys are the format's, not its
    assert not {"last_loss", "buckets", "edges"} & set(StreamSoftmaxState.model_fields)


@pytest.mark.parametrize("unit", ["buckets", "streams"])
def test_the_owners_restored_from_the_tag_write_the_same_saved_form(tmp_path, monkeypatch, unit):
    """The loader and the re-weighting restored from the v1 tag hand back states whose saved
    form is the tag's, key for key, type for type (what the next checkpoint would write)."""
    shutil.copytree(FIXTURE / "data", tmp_path / "data")
    shutil.copy(FIXTURE / f"ds_{unit}.json", tmp_path / "ds.json")
    monkeypatch.chdir(tmp_path)  # its streams are data/a and data/b
    cfg = load_config(tmp_path / "ds.json").curriculum
    _, saved = read_curriculum_state(FIXTURE / unit / "checkpoints")
    assert saved is not None
    state = CurriculumState.from_dict(saved)
    assert state.loader is not None
    reweighter = make_reweighter(cfg.dynamic)  # as the curriculum builds them
    loader = PhaseLoader(
        cfg.schedule[0],
        0,
        seed=cfg.seed,
        num_buckets=reweighter.num_buckets,
        order_version=state.drawn_order,  # 1: the checkpoint has no order_version
    )
    try:
        loader.apply(reweighter.start_phase(loader.view(), state.dynamic))
        loader.restore(state.loader)
        _assert_same(saved["loader"], loader.state().to_dict(), "loader")
        _assert_same(saved["loader"], loader.state_dict(), "loader")
        _assert_same(saved["dynamic"], reweighter.state().to_dict(), "dynamic")
    finally:
        loader.close()
