"""One owner of the process environment (curriculum_ds.distributed): a world of one is complete.

DeepSpeed's ``init_distributed`` skips its MPI discovery (which needs mpi4py) only when RANK,
WORLD_SIZE, MASTER_ADDR, MASTER_PORT and LOCAL_RANK are all set; a user's script run as plain
``python my_loop.py`` calls ``curriculum_ds.initialize`` with none of them.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from curriculum_ds.distributed import prepare_environment

RENDEZVOUS = ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "LOCAL_RANK")


@pytest.fixture(autouse=True)
def _restore_environ() -> Iterator[None]:
    """prepare_environment sets variables for the whole process: undo every one of them."""
    saved = dict(os.environ)
    yield
    os.environ.clear()
    os.environ.update(saved)


def test_a_world_of_one_gets_every_rendezvous_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in (*RENDEZVOUS, "LOCAL_SIZE", "LOCAL_WORLD_SIZE"):
        monkeypatch.delenv(name, raising=False)
    prepare_environment()
    assert {n: os.environ[n] for n in ("RANK", "WORLD_SIZE", "LOCAL_RANK")} == {
        "RANK": "0",
        "WORLD_SIZE": "1",
        "LOCAL_RANK": "0",
    }
    assert os.environ["MASTER_ADDR"] == "127.0.0.1"
    assert 0 < int(os.environ["MASTER_PORT"]) < 65536
    assert os.environ["LOCAL_WORLD_SIZE"] == "1"


def test_a_launchers_variables_are_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    launcher = {"RANK": "3", "WORLD_SIZE": "4", "MASTER_ADDR": "10.0.0.1", "MASTER_PORT": "29500"}
    for name, value in {**launcher, "LOCAL_RANK": "1", "LOCAL_SIZE": "2"}.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("LOCAL_WORLD_SIZE", raising=False)
    prepare_environment()
    assert {n: os.environ[n] for n in launcher} == launcher
    assert os.environ["LOCAL_RANK"] == "1"
    assert os.environ["LOCAL_WORLD_SIZE"] == "2"  # DeepSpeed's LOCAL_SIZE, for streaming
