"""A path the operating system refuses is one line naming the option or field, never a
traceback (issue 31 item 4): a read-only or impossible ``--run-dir`` (in the loop's lock and in
``curriculum-ds launch`` before any rank starts), a stream ``local`` with a component over 255
bytes, and the last net of the command group for a path no check names.
"""

from __future__ import annotations

import errno
import json
import os
from pathlib import Path
from typing import Any

import click
import pytest
from click.testing import CliRunner
from helpers import make_dataset, one_error_line, ragged_docs, write_ds_config

from curriculum_ds.cli import main as cli_main
from curriculum_ds.cli.group import _Group
from curriculum_ds.distributed import RUN_DIR_LOCK_NAME, lock_run_dir, open_run_dir
from curriculum_ds.errors import ConfigError


@pytest.fixture(scope="module")
def ds_config(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("user_paths")
    data = make_dataset(root, "short", ragged_docs(30, seed=1, min_len=10, max_len=40))
    curriculum = {
        "max_duration": "1000tok",
        "schedule": [
            {
                "name": "only",
                "duration": "1000tok",
                "train_loader": {"streams": [{"local": str(data)}], "max_seq_len": 64},
            }
        ],
    }
    return write_ds_config(root / "ds.json", curriculum)


def _run_dir_refusal(run_dir: Path) -> str:
    with pytest.raises(ConfigError) as info:
        lock_run_dir(run_dir)
    message = str(info.value)
    assert "\n" not in message
    return message


def test_a_run_dir_below_a_file_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "afile").write_text("x")
    message = _run_dir_refusal(tmp_path / "afile" / "run")
    assert message == f'--run-dir "{tmp_path}/afile/run": cannot be created (Not a directory)'


def test_a_run_dir_that_is_a_file_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "run").write_text("x")
    message = _run_dir_refusal(tmp_path / "run")
    assert message == f'--run-dir "{tmp_path}/run": cannot be created (Not a directory)'


def test_a_run_dir_on_a_read_only_file_system_is_one_line(tmp_path, monkeypatch) -> None:
    # a read-only mount needs root to make; the system's answer there is EROFS from mkdir
    def read_only(self: Path, *args: Any, **kwargs: Any) -> None:
        raise OSError(errno.EROFS, os.strerror(errno.EROFS), str(self))

    monkeypatch.setattr(Path, "mkdir", read_only)
    message = _run_dir_refusal(tmp_path / "ro" / "run")
    assert message == f'--run-dir "{tmp_path}/ro/run": cannot be created (Read-only file system)'


def test_a_run_dir_name_too_long_or_with_nul_is_one_line(tmp_path: Path) -> None:
    message = _run_dir_refusal(tmp_path / ("r" * 300))
    assert message.startswith('--run-dir "')
    assert message.endswith(" characters): cannot be created (File name too long)"), message
    message = _run_dir_refusal(tmp_path / "a\x00b")
    assert message == f'--run-dir "{tmp_path}/a\\u0000b": cannot be created (embedded null byte)'


def test_a_good_run_dir_is_created_with_its_lock_file(tmp_path: Path) -> None:
    open_run_dir(tmp_path / "new" / "run").close()
    assert (tmp_path / "new" / "run" / RUN_DIR_LOCK_NAME).is_file()


def test_launch_refuses_a_bad_run_dir_before_any_rank(ds_config, tmp_path, monkeypatch) -> None:
    started: list[Any] = []
    monkeypatch.setattr(
        "curriculum_ds.commands.launch.run_command", lambda *a, **k: started.append(a) or 0
    )
    (tmp_path / "afile").write_text("x")
    for run_dir in (tmp_path / "afile" / "run", f"--run_dir={tmp_path / 'afile' / 'r2'}"):
        args = ["--run-dir", str(run_dir)] if isinstance(run_dir, Path) else [run_dir]
        result = CliRunner().invoke(
            cli_main, ["launch", str(ds_config), "--num-gpus", "1", "--", *args]
        )
        line = one_error_line(result)
        assert line.startswith('Error: --run-dir "'), line
        assert line.endswith(": cannot be created (Not a directory)"), line
    assert started == []
    # a good one is created there, then the ranks start
    result = CliRunner().invoke(
        cli_main,
        ["launch", str(ds_config), "--num-gpus", "1", "--", "--run-dir", str(tmp_path / "ok")],
    )
    assert result.exit_code == 0, result.output
    assert len(started) == 1
    assert (tmp_path / "ok" / RUN_DIR_LOCK_NAME).is_file()


def test_a_stream_path_too_long_is_one_line_naming_the_field(ds_config, tmp_path) -> None:
    config = json.loads(ds_config.read_text())
    config["curriculum"]["schedule"][0]["train_loader"]["streams"][0]["local"] = "a" * 300
    path = tmp_path / "long.json"
    path.write_text(json.dumps(config))
    line = one_error_line(CliRunner().invoke(cli_main, ["validate", str(path)]))
    assert line == (
        'Error: curriculum.schedule[0] ("only").train_loader.streams[0].local: "'
        + "a" * 80
        + "…"
        + "a" * 80
        + '" (300 characters): cannot be read (File name too long)'
    )


def test_the_group_turns_any_refused_path_into_one_line() -> None:
    @click.group(cls=_Group)
    def group() -> None:
        pass

    @group.command()
    def touch() -> None:
        Path("/tmp/" + "x" * 300).write_text("")

    line = one_error_line(CliRunner().invoke(group, ["touch"]))
    assert (
        line
        == 'Error: "/tmp/' + "x" * 75 + "…" + "x" * 80 + '" (305 characters): File name too long'
    )


def test_an_out_folder_below_a_file_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "afile").write_text("x")
    out = tmp_path / "afile" / "o"
    result = CliRunner().invoke(cli_main, ["demo", "--data-only", "--out", str(out)])
    assert one_error_line(result) == f'Error: --out "{out}": cannot be created (Not a directory)'


def test_a_model_path_too_long_and_a_nul_argument_are_one_line(ds_config: Path) -> None:
    result = CliRunner().invoke(cli_main, ["validate", str(ds_config), "--model", "m" * 300])
    line = one_error_line(result)
    assert line.startswith('Error: --model "mmm'), line
    assert line.endswith('" (300 characters): cannot be read (File name too long)'), line
    result = CliRunner().invoke(cli_main, ["validate", "a\x00b.json"])
    line = one_error_line(result)
    assert line == "Error: a path given holds a NUL byte (embedded null byte)"
