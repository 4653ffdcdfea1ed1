"""``dynamic.method: "file"``: its bad inputs refused by ``curriculum-ds launch`` before any rank.

Each in one line, nothing written: ``dynamic.file`` without a ``path``, the method without
``unit: "streams"``, a path that is a folder. A file that does not exist yet is no refusal: the
phase's proportions hold until it appears, so the launch goes ahead.

From issue 33 (item 6, bad input).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from helpers import one_error_line, write_ds_config

from curriculum_ds.cli import main as cli_main


def _config(tmp_path: Path, streams: tuple[Path, Path], dynamic: dict[str, Any]) -> Path:
    curriculum = {
        "max_duration": "2000tok",
        "schedule": [
            {
                "name": "mix",
                "duration": "2000tok",
                "train_loader": {
                    "streams": [{"local": str(s), "proportion": 0.5} for s in streams],
                    "max_seq_len": 64,
                },
            }
        ],
        "dynamic": {"enabled": True, "method": "file", **dynamic},
    }
    return write_ds_config(tmp_path / "ds.json", curriculum)


def _launch(cfg: Path, run_dir: Path) -> Any:
    return CliRunner().invoke(
        cli_main, ["launch", str(cfg), "--num-gpus", "2", "--", "--run-dir", str(run_dir)]
    )


CASES = {
    "no_path": (
        {"unit": "streams", "file": {}},
        'Error: curriculum.dynamic.file: method "file" needs the weights file: "file": '
        '{"path": "mix.json"}',
    ),
    "no_section": (
        {"unit": "streams"},
        'Error: curriculum.dynamic.file: method "file" needs the weights file',
    ),
    "buckets": (
        {"file": {"path": "mix.json"}},
        'Error: curriculum.dynamic.unit: method "file" re-weights streams: it needs unit '
        '"streams", not "buckets"',
    ),
    "a_folder": (
        {"unit": "streams", "file": {"path": "<folder>"}},
        "Error: curriculum.dynamic.file.path: <folder> is a folder, not a weights file (a JSON "
        'object of stream name → weight, e.g. {"code": 3, "web": 1})',
    ),
}


@pytest.mark.parametrize("case", list(CASES))
def test_launch_refuses_in_one_line_before_any_rank(
    tmp_path: Path,
    two_streams: tuple[Path, Path],
    monkeypatch: pytest.MonkeyPatch,
    case: str,
) -> None:
    from curriculum_ds.commands import launch as launch_module

    def no_rank(*args: Any, **kwargs: Any) -> int:
        raise AssertionError("a rank was started")

    monkeypatch.setattr(launch_module, "run_command", no_rank)
    dynamic, message = CASES[case]
    folder = tmp_path / "weights"
    folder.mkdir()
    if case == "a_folder":
        dynamic = {**dynamic, "file": {"path": str(folder)}}
        message = message.replace("<folder>", str(folder))
    run_dir = tmp_path / "run"
    line = one_error_line(_launch(_config(tmp_path, two_streams, dynamic), run_dir))
    assert line.startswith(message), line
    assert not run_dir.exists()


def test_a_file_that_does_not_exist_yet_is_launched(
    tmp_path: Path, two_streams: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    from curriculum_ds.commands import launch as launch_module

    started: list[Any] = []

    def one_rank_job(cmd: Any, *args: Any, **kwargs: Any) -> int:
        started.append(cmd)
        return 0

    monkeypatch.setattr(launch_module, "run_command", one_rank_job)
    cfg = _config(
        tmp_path, two_streams, {"unit": "streams", "file": {"path": str(tmp_path / "later.json")}}
    )
    assert CliRunner().invoke(cli_main, ["validate", str(cfg)]).exit_code == 0
    result = _launch(cfg, tmp_path / "run")
    assert result.exit_code == 0, result.output
    assert len(started) == 1
    assert not (tmp_path / "later.json").exists()
