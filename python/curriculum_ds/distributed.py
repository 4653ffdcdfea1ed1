"""Process-environment setup for DeepSpeed, torchrun and mosaicml-streaming.

Everything here runs before ``deepspeed`` or ``streaming`` is imported by the training entry point,
because both read their environment at import or construction time.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import IO

from curriculum_ds.errors import CurriculumError

__all__ = [
    "RUN_DIR_LOCK_NAME",
    "LocalRankError",
    "RunDirInUseError",
    "lock_run_dir",
    "prepare_environment",
    "resolve_local_rank",
]

RUN_DIR_LOCK_NAME = ".curriculum_ds.lock"
"""The lock file a training run holds inside its ``--run-dir`` (see :func:`lock_run_dir`)."""


class LocalRankError(ValueError):
    """``--local_rank`` and the ``LOCAL_RANK`` environment variable disagree, or one is invalid."""


class RunDirInUseError(CurriculumError):
    """Another live training run holds the lock of the same ``--run-dir``."""


def _env_local_rank(env: str) -> int:
    """``LOCAL_RANK``'s value as an int; one line naming the variable when it is not one."""
    try:
        return int(env)
    except ValueError:
        raise LocalRankError(
            f"LOCAL_RANK={env!r} in the environment is not an integer local rank"
        ) from None


def resolve_local_rank(cli_local_rank: int | None) -> int:
    """Return this process's local rank and make ``LOCAL_RANK`` agree with it.

    DeepSpeed's launcher appends ``--local_rank=K`` to the module's arguments and also exports
    ``LOCAL_RANK=K``; with ``--no_local_rank`` (and under torchrun) only the environment variable is
    set. The argument wins when the variable is absent; when both are present they must agree.

    Args:
        cli_local_rank: The value of ``--local_rank`` (``None`` when not given).

    Returns:
        The local rank, an int ≥ 0 (0 for a plain single-process run).

    Raises:
        LocalRankError: If ``--local_rank`` and ``LOCAL_RANK`` are both set and differ, either is
            negative, or ``LOCAL_RANK`` is not an integer (e.g. empty).
    """
    env = os.environ.get("LOCAL_RANK")
    if cli_local_rank is None:
        local_rank = _env_local_rank(env) if env is not None else 0
    else:
        if env is not None and _env_local_rank(env) != cli_local_rank:
            raise LocalRankError(
                f"--local_rank={cli_local_rank} disagrees with LOCAL_RANK={env} in the environment"
            )
        local_rank = cli_local_rank
    if local_rank < 0:
        raise LocalRankError(f"local rank must be >= 0, got {local_rank}")
    os.environ["LOCAL_RANK"] = str(local_rank)
    return local_rank


def lock_run_dir(run_dir: Path) -> IO[str]:
    """Take the exclusive lock of ``run_dir`` for this process's lifetime (POSIX ``flock``).

    Creates ``run_dir`` and its lock file :data:`RUN_DIR_LOCK_NAME` if needed, locks the file
    without waiting and writes this process's pid into it. The lock lasts as long as the returned
    file stays open, and the kernel drops it when the process ends in any way (``kill -9``
    included), so a stale lock file never blocks a later run. Only one process per run takes it
    (global rank 0): ``flock`` locks conflict between the ranks of one node as well.

    Returns:
        The open lock file; keep a reference to it until the run ends.

    Raises:
        RunDirInUseError: Another process holds the lock (the message names its pid).
        OSError: ``run_dir`` cannot be created or the lock file cannot be opened.
    """
    run_dir.mkdir(parents=True, exist_ok=True)
    lock = (run_dir / RUN_DIR_LOCK_NAME).open("a+", encoding="utf-8")
    try:
        import fcntl
    except ImportError:  # not POSIX: no lock
        return lock
    try:
        fcntl.flock(lock.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        lock.seek(0)
        holder = lock.read().strip() or "unknown"
        lock.close()
        raise RunDirInUseError(
            f"run dir {run_dir} is in use by another run (pid {holder})"
        ) from None
    except BaseException:
        lock.close()
        raise
    lock.seek(0)
    lock.truncate()
    lock.write(f"{os.getpid()}\n")
    lock.flush()
    return lock


def prepare_environment() -> bool:
    """Set what DeepSpeed and mosaicml-streaming need before either is imported.

    * No CUDA device: ``DS_ACCELERATOR=cpu`` (DeepSpeed's CPU accelerator, which falls back to the
      gloo backend when oneCCL is not installed), unless the user chose an accelerator.
    * ``LOCAL_WORLD_SIZE`` for mosaicml-streaming, which DeepSpeed's launcher does not set (it sets
      ``LOCAL_SIZE``); without it every rank believes it is a node leader and shared-memory setup
      collides. ``LOCAL_SIZE`` wins when set (a ``LOCAL_WORLD_SIZE`` beside it is inherited from
      the launching process, not the launcher's); else an existing value is kept; else
      ``WORLD_SIZE`` (single node), else 1.
    * Single-process runs (``python -m curriculum_ds.train`` without a launcher) get the rendezvous
      variables of a world of one.

    Returns:
        True when a CUDA device is available.
    """
    import torch

    # DeepSpeed JIT-builds ops with ninja, installed beside this Python (the venv's bin), which
    # is not on PATH when the venv was not activated
    bin_dir = str(Path(sys.executable).parent)
    if os.environ.get("PATH", "").split(os.pathsep)[0] != bin_dir:
        os.environ["PATH"] = os.pathsep.join(filter(None, [bin_dir, os.environ.get("PATH")]))
    os.environ.setdefault("TORCH_EXTENSIONS_DIR", torch_extensions_dir())
    has_cuda = torch.cuda.is_available()
    if not has_cuda:
        os.environ.setdefault("DS_ACCELERATOR", "cpu")
    if os.environ.get("LOCAL_SIZE"):
        # DeepSpeed's launcher: its LOCAL_SIZE is the truth; a LOCAL_WORLD_SIZE here can only be
        # inherited from the launching process (e.g. one that opened a dataset itself) and stale
        os.environ["LOCAL_WORLD_SIZE"] = os.environ["LOCAL_SIZE"]
    elif "LOCAL_WORLD_SIZE" not in os.environ:
        os.environ["LOCAL_WORLD_SIZE"] = os.environ.get("WORLD_SIZE", "1")
    if "WORLD_SIZE" not in os.environ:
        os.environ.update({"WORLD_SIZE": "1", "RANK": "0", "MASTER_ADDR": "127.0.0.1"})
        os.environ.setdefault("MASTER_PORT", str(_free_port()))
    return has_cuda


def torch_extensions_dir() -> str:
    """A JIT-op build folder of this Python environment's own (``TORCH_EXTENSIONS_DIR``).

    DeepSpeed JIT-compiles its CPU ops (shared-memory all-reduce, Adam) into torch's extensions
    cache, shared by default by every environment of the user; the build files hold the
    environment's absolute paths, so two venvs (two checkouts, a CI clone) would rebuild the ops
    over each other on every launch (minutes each). One folder per ``sys.prefix`` keeps one build.
    """
    import hashlib

    key = hashlib.sha256(sys.prefix.encode()).hexdigest()[:12]
    return str(Path.home() / ".cache" / "curriculum_ds" / "torch_extensions" / key)


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])
