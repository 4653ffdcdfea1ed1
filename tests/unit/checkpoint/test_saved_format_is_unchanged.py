"""A checkpoint written before issue 30 reads back to the same saved form, keys, types and dtypes.

``tests/data/checkpoint_v1`` holds 1-rank tags of both units written by the code before the
state types moved (see its ``make_fixture.py``). Its curriculum state, read through the typed
``CurriculumState`` and written back with ``to_dict()``, is deep-equal to what is stored: the
same keys in the same order, the same Python and numpy types, dtypes and values.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from curriculum_ds.checkpoint.files import read_curriculum_state
from curriculum_ds.checkpoint.state import CurriculumState

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
