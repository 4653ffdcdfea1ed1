"""LOCAL_WORLD_SIZE for streaming, from the launcher's environment; open_stream sets it."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from prepared_mds import BYTE, write

from curriculum_ds.data import close_stream, ensure_local_world_size, open_stream, prepare
from curriculum_ds.errors import DataError


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({}, "1"),
        ({"LOCAL_SIZE": "4", "WORLD_SIZE": "8"}, "4"),  # DeepSpeed's launcher
        ({"WORLD_SIZE": "2"}, "2"),
        ({"LOCAL_WORLD_SIZE": "2", "WORLD_SIZE": "4"}, "2"),  # kept (torchrun)
        # DeepSpeed's launcher: its LOCAL_SIZE wins over an inherited LOCAL_WORLD_SIZE
        ({"LOCAL_WORLD_SIZE": "2", "LOCAL_SIZE": "4", "WORLD_SIZE": "4"}, "4"),
    ],
)
def test_local_world_size(monkeypatch: pytest.MonkeyPatch, env: dict, expected: str) -> None:
    for name in ("LOCAL_WORLD_SIZE", "LOCAL_SIZE", "WORLD_SIZE"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert ensure_local_world_size() == int(expected)
    assert os.environ["LOCAL_WORLD_SIZE"] == expected


@pytest.mark.parametrize(
    ("env", "match"),
    [
        (
            {"LOCAL_WORLD_SIZE": "zero"},
            r"^LOCAL_WORLD_SIZE must be a positive integer, got 'zero'$",
        ),
        ({"LOCAL_SIZE": "0"}, r"^LOCAL_WORLD_SIZE must be a positive integer, got '0'$"),
        (
            {"LOCAL_SIZE": "3", "WORLD_SIZE": "4"},
            r"^LOCAL_WORLD_SIZE=3 does not divide WORLD_SIZE=4$",
        ),
    ],
)
def test_local_world_size_errors(monkeypatch: pytest.MonkeyPatch, env: dict, match: str) -> None:
    for name in ("LOCAL_WORLD_SIZE", "LOCAL_SIZE", "WORLD_SIZE"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(DataError, match=match):
        ensure_local_world_size()


def test_open_stream_sets_local_world_size(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("LOCAL_WORLD_SIZE", "LOCAL_SIZE", "WORLD_SIZE", "RANK"):
        monkeypatch.delenv(name, raising=False)
    src = write(tmp_path / "a.txt", "hello")
    prepare([src], tmp_path / "ds")
    ds = open_stream(tmp_path / "ds")
    assert os.environ["LOCAL_WORLD_SIZE"] == "1"
    assert BYTE.decode(ds[0]["input_ids"]) == "hello"
    close_stream(ds)
