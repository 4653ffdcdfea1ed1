"""`curriculum-ds launch` killed with SIGKILL leaves no process of the run behind."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.skipif(os.name != "posix", reason="process groups are POSIX")

# stands in for the DeepSpeed runner: starts a "rank" (a grandchild) that writes its pid and
# would keep running for minutes
_RUNNER = textwrap.dedent(
    """
    import subprocess, sys
    rank = "import os, sys, time; open(sys.argv[1], 'w').write(str(os.getpid())); time.sleep(300)"
    sys.exit(subprocess.call([sys.executable, "-c", rank, sys.argv[1]]))
    """
)

_LAUNCHER = textwrap.dedent(
    """
    import sys
    from curriculum_ds.commands.launch import run_command
    sys.exit(run_command([sys.executable, "-c", sys.argv[1], sys.argv[2]], cuda=False))
    """
)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie still answers kill(pid, 0); it no longer runs
    stat = Path(f"/proc/{pid}/stat")
    return not (stat.is_file() and stat.read_text().rsplit(")", 1)[1].split()[0] == "Z")


def _wait_for(cond, timeout: float) -> bool:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(0.05)
    return cond()


def test_sigkill_of_the_launch_process_stops_the_ranks(tmp_path):
    pid_file = tmp_path / "rank.pid"
    launcher = subprocess.Popen([sys.executable, "-c", _LAUNCHER, _RUNNER, str(pid_file)])
    try:
        assert _wait_for(lambda: pid_file.is_file() and pid_file.read_text(), 60)
        rank_pid = int(pid_file.read_text())
        assert _alive(rank_pid)
        launcher.send_signal(signal.SIGKILL)
        launcher.wait()
        assert _wait_for(lambda: not _alive(rank_pid), 30), "the rank outlived its launcher"
    finally:
        if launcher.poll() is None:
            launcher.kill()
            launcher.wait()
        if pid_file.is_file() and pid_file.read_text() and _alive(int(pid_file.read_text())):
            os.kill(int(pid_file.read_text()), signal.SIGKILL)


def test_run_command_returns_the_launcher_exit_code(tmp_path):
    from curriculum_ds.commands.launch import run_command

    start = time.monotonic()
    assert run_command([sys.executable, "-c", "import sys; sys.exit(3)"], cuda=False) == 3
    assert time.monotonic() - start < 8  # a normal end does not wait out the watchdog's grace
