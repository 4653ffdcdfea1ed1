"""``curriculum_ds.RunDir``: the public home of the reference loop's bookkeeping (issue 24).

Its cadences are refused in one line naming the keyword, before anything is read or written;
the loop itself (records, saves, SIGTERM, resume, the same rows as the reference loop) runs on
2 ranks in tests/integration/test_readme_user_loop.py.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import curriculum_ds
from curriculum_ds.run_dir import RunDir


def test_run_dir_is_a_public_name_loaded_on_first_use() -> None:
    assert curriculum_ds.RunDir is RunDir
    assert "RunDir" in curriculum_ds.__all__


@pytest.mark.parametrize(
    ("kwargs", "says"),
    [
        ({"save_interval": -1}, "RunDir: save_interval must be >= 0, got -1"),
        ({"log_interval": -2}, "RunDir: log_interval must be >= 0, got -2"),
        ({"max_steps": 0}, "RunDir: max_steps must be >= 1, got 0"),
        ({"keep_last": 0}, "RunDir: keep_last must be >= 1, got 0"),
    ],
)
def test_a_bad_cadence_is_one_line_and_writes_nothing(
    tmp_path: Path, kwargs: dict[str, Any], says: str
) -> None:
    run_dir = tmp_path / "run"
    with pytest.raises(ValueError, match="^" + says.replace("(", r"\(") + "$"):
        RunDir(run_dir, curriculum=None, **kwargs)  # type: ignore[arg-type]
    assert not run_dir.exists()
