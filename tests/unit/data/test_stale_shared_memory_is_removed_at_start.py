"""Stale streaming shared memory of SIGKILLed processes is removed at start (issue 31, item 8).

A process killed with SIGKILL leaves mosaicml-streaming's ``/dev/shm/NNNNNN_*`` segments behind.
For a remote stream they break every later dataset on the same cache folder ("Reused local
directory"); the product removes them at its first registration, under the shared-memory lock,
only when unused and owned by this user, with one line naming them.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from helpers import make_dataset, ragged_docs

from curriculum_ds.data import streams
from curriculum_ds.data.streams import close_stream, open_stream, remove_stale_shared_memory
from curriculum_ds.errors import DataError

REPO = Path(__file__).resolve().parents[3]

_KILLED_RANK = textwrap.dedent(
    """
    import os, signal, sys
    from curriculum_ds.data import sync_stream_metadata
    from curriculum_ds.data.streams import open_stream
    sync_stream_metadata(sys.argv[1], sys.argv[2])
    ds = open_stream(sys.argv[1], sys.argv[2])
    print(ds._shm_prefix_int, flush=True)
    os.killpg(0, signal.SIGKILL)  # with its resource tracker, which would unlink them
    """
)


def _segment(name: str) -> Path:
    """A segment with a streaming name that nobody holds (as a killed process leaves it)."""
    path = streams.SHM_DIR / name
    path.write_bytes(b"\0" * 16)
    return path


def test_a_killed_ranks_segments_no_longer_break_the_next_dataset(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    remote = make_dataset(tmp_path, "remote", ragged_docs(20, seed=5))
    cache = tmp_path / "cache"
    env = dict(os.environ, PYTHONPATH=str(REPO / "python"), LOCAL_WORLD_SIZE="1")
    proc = subprocess.run(
        [sys.executable, "-c", _KILLED_RANK, str(cache), str(remote)],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        start_new_session=True,
    )
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    prefix = int(proc.stdout.split()[-1])
    left = {p.name for p in streams.SHM_DIR.glob(f"{prefix:06}_*")}
    assert f"{prefix:06}_locals" in left
    # the break-in's reproduction: the dead process's registration refuses the cache folder
    with pytest.raises(DataError, match=r"Reused local directory"):
        open_stream(cache, str(remote))
    capsys.readouterr()
    # the next run's first registration removes them, and its dataset opens
    monkeypatch.setattr(streams, "_stale_removed", False)
    monkeypatch.setattr(streams, "STALE_MIN_AGE_S", 0.0)
    with streams.streaming_registration():
        ds = open_stream(cache, str(remote))
    try:
        assert ds.num_samples > 0
    finally:
        close_stream(ds)
    lines = capsys.readouterr().err.splitlines()
    notes = [line for line in lines if "stale shared-memory" in line]
    assert len(notes) == 1, lines
    assert notes[0].startswith("curriculum_ds: note: removed ")
    assert all(name in notes[0] for name in left)
    # once per process: a second registration does not scan again
    with streams.streaming_registration():
        pass
    assert "stale" not in capsys.readouterr().err


def test_only_unused_segments_of_this_user_are_removed() -> None:
    dead = _segment("999990_barrier")
    unrelated = _segment("999992_unknown")  # not a streaming name
    held = _segment("999993_barrier")
    other_user = _segment("999991_barrier")
    if os.getuid() == 0:
        os.chown(other_user, 12345, 12345)
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys, time; f = open(sys.argv[1]); time.sleep(60)", held]
    )
    try:
        deadline = time.monotonic() + 30
        while not _holds(holder.pid, held) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert _holds(holder.pid, held)
        removed = remove_stale_shared_memory(min_age_s=0.0)
        assert "999990_barrier" in removed
        assert not dead.exists()
        assert held.exists()
        assert unrelated.exists()
        assert other_user.exists() or os.getuid() != 0
    finally:
        holder.kill()
        holder.wait()
        for path in (dead, other_user, unrelated, held):
            path.unlink(missing_ok=True)


def test_nothing_is_removed_when_a_process_of_this_user_cannot_be_read(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    dead = _segment("999994_barrier")
    read_maps = streams._read_maps

    def deny_this_process(proc: Path) -> str:
        if proc.name == str(os.getpid()):
            raise PermissionError(13, "Permission denied", str(proc / "maps"))
        return read_maps(proc)

    monkeypatch.setattr(streams, "_read_maps", deny_this_process)
    try:
        assert remove_stale_shared_memory(min_age_s=0.0) == []
        assert dead.exists()
    finally:
        dead.unlink(missing_ok=True)


def _holds(pid: int, path: Path) -> bool:
    try:
        return any(str(fd.readlink()) == str(path) for fd in Path(f"/proc/{pid}/fd").iterdir())
    except OSError:
        return False
