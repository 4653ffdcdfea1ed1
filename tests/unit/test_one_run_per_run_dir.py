"""One training run per --run-dir: a second one is refused at once with one line."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from curriculum_ds.distributed import RUN_DIR_LOCK_NAME, RunDirInUseError, lock_run_dir
from curriculum_ds.errors import CurriculumError

pytestmark = pytest.mark.skipif(os.name != "posix", reason="flock is POSIX")

_HOLDER = textwrap.dedent(
    """
    import sys
    from pathlib import Path
    from curriculum_ds.distributed import lock_run_dir
    lock = lock_run_dir(Path(sys.argv[1]))
    print("locked", flush=True)
    sys.stdin.read()  # hold the lock until the test closes stdin
    """
)


@pytest.fixture
def holder(tmp_path):
    """A second process holding the lock of tmp_path/run."""
    run_dir = tmp_path / "run"
    proc = subprocess.Popen(
        [sys.executable, "-c", _HOLDER, str(run_dir)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    assert proc.stdin is not None
    assert proc.stdout.readline().strip() == "locked"
    yield run_dir, proc
    proc.stdin.close()
    proc.wait(timeout=30)


def test_a_second_lock_of_the_same_run_dir_is_refused_naming_the_holder(holder):
    run_dir, proc = holder
    with pytest.raises(
        RunDirInUseError, match=rf"run dir .*run is in use by another run \(pid {proc.pid}\)$"
    ):
        lock_run_dir(run_dir)
    assert issubclass(RunDirInUseError, CurriculumError)


def test_the_lock_is_released_when_its_holder_dies(holder):
    run_dir, proc = holder
    proc.kill()  # SIGKILL: no cleanup runs; the kernel drops the flock
    proc.wait(timeout=30)
    lock = lock_run_dir(run_dir)  # a stale lock file does not block
    try:
        assert (run_dir / RUN_DIR_LOCK_NAME).read_text().strip() == str(os.getpid())
    finally:
        lock.close()


def test_the_lock_is_released_when_closed(tmp_path):
    lock_run_dir(tmp_path / "run").close()
    lock_run_dir(tmp_path / "run").close()


def test_train_main_refuses_a_run_dir_in_use(holder, monkeypatch, capsys):
    import curriculum_ds.config
    from curriculum_ds.train import main

    run_dir, proc = holder
    monkeypatch.delenv("RANK", raising=False)
    monkeypatch.delenv("LOCAL_RANK", raising=False)
    # the lock is taken after the config checks: any config that passes them will do
    monkeypatch.setattr(curriculum_ds.config, "load_config", lambda *a, **k: object())
    assert main(["--deepspeed_config", "ds.json", "--run-dir", str(run_dir)]) == 1
    err = capsys.readouterr().err
    line = f"run dir {run_dir} is in use by another run (pid {proc.pid})"
    assert err == f"curriculum_ds: error: {line}\n"
