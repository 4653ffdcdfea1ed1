"""Process-environment setup for DeepSpeed, torchrun and mosaicml-streaming.

The one owner of the process environment: every variable this package sets for DeepSpeed, its
launcher or mosaicml-streaming is decided here (``LOCAL_WORLD_SIZE``, ``PATH``,
``TORCH_EXTENSIONS_DIR``, ``DS_ACCELERATOR``, the rendezvous of a world of one, ``LOCAL_RANK``),
and the rendezvous port is picked here (:func:`free_port`). Everything here runs before
``deepspeed`` or ``streaming`` is imported by the training entry point, because both read their
environment at import or construction time.
"""

from __future__ import annotations

import os
import sys
from collections.abc import MutableMapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from curriculum_ds.errors import CurriculumError, DataError

__all__ = [
    "RUN_DIR_LOCK_NAME",
    "LocalRankError",
    "RunDirInUseError",
    "Topology",
    "ensure_local_world_size",
    "free_port",
    "lock_run_dir",
    "open_run_dir",
    "prepare_environment",
    "put_venv_bin_on_path",
    "resolve_local_rank",
    "set_deepspeed_env",
    "torch_extensions_dir",
    "venv_bin_dir",
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
        ConfigError: ``run_dir`` cannot be created or written (:func:`open_run_dir`).
    """
    lock = open_run_dir(run_dir)
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


def open_run_dir(run_dir: Path) -> IO[str]:
    """Create ``run_dir`` (and its parents) if needed and open its lock file for appending.

    What a run does first in its run directory, so ``curriculum-ds launch`` calls it (and closes
    the file) before any rank starts: a run directory the system refuses is one line there, not
    a traceback in every rank.

    Returns:
        The lock file :data:`RUN_DIR_LOCK_NAME`, open in ``a+`` mode, not locked.

    Raises:
        ConfigError: ``--run-dir "PATH": cannot be created (<the system's reason>)``: a
            read-only file system, a file in the way, no permission, a component over 255 bytes,
            a NUL byte.
    """
    from curriculum_ds.files.user_paths import make_folder, path_error

    make_folder(run_dir, field="--run-dir")
    try:
        return (run_dir / RUN_DIR_LOCK_NAME).open("a+", encoding="utf-8")
    except OSError as exc:  # a read-only folder on a writable file system
        raise path_error("--run-dir", run_dir, exc, what="written") from None


def prepare_environment() -> bool:
    """Set what DeepSpeed and mosaicml-streaming need before either is imported.

    * What DeepSpeed needs (:func:`set_deepspeed_env`): ``PATH``, ``TORCH_EXTENSIONS_DIR``, and
      ``DS_ACCELERATOR=cpu`` without a CUDA device.
    * ``LOCAL_WORLD_SIZE`` for mosaicml-streaming, by the precedence of
      :func:`ensure_local_world_size` (which checks the value when a dataset is opened).
    * Single-process runs (``python -m curriculum_ds.train`` or a user's script without a
      launcher) get the rendezvous variables of a world of one, ``LOCAL_RANK`` included.

    Returns:
        True when a CUDA device is available.
    """
    import torch

    has_cuda = bool(torch.cuda.is_available())
    set_deepspeed_env(os.environ, cuda=has_cuda)
    _set_local_world_size()
    if "WORLD_SIZE" not in os.environ:
        os.environ.update({"WORLD_SIZE": "1", "RANK": "0", "MASTER_ADDR": "127.0.0.1"})
        os.environ.setdefault("MASTER_PORT", str(free_port()))
        # DeepSpeed's init_distributed looks for MPI (mpi4py) unless all five are set
        os.environ.setdefault("LOCAL_RANK", "0")
    return has_cuda


def _set_local_world_size() -> str:
    """Set ``LOCAL_WORLD_SIZE`` by the precedence of :func:`ensure_local_world_size`; unchecked."""
    for name in ("LOCAL_SIZE", "LOCAL_WORLD_SIZE", "WORLD_SIZE"):
        value = os.environ.get(name)
        if value:
            break
    else:
        value = "1"
    os.environ["LOCAL_WORLD_SIZE"] = value
    return value


def ensure_local_world_size() -> int:
    """Set ``LOCAL_WORLD_SIZE`` (ranks on this node) for mosaicml-streaming and return it.

    mosaicml-streaming derives node leadership (who creates its shared memory) from
    ``LOCAL_WORLD_SIZE``; DeepSpeed's launcher sets ``LOCAL_SIZE`` instead, and without either
    every rank believes it is its node's leader and the shared-memory setup collides. The value
    is the first non-empty of:

    1. ``LOCAL_SIZE``: set by DeepSpeed's launcher for its ranks, so it is the truth there; a
       ``LOCAL_WORLD_SIZE`` beside it can only be inherited from the launching process (e.g. one
       that opened a dataset itself) and is stale;
    2. an existing ``LOCAL_WORLD_SIZE`` (torchrun sets it; a user may);
    3. ``WORLD_SIZE``: single-node launchers;
    4. ``1``: a plain single process.

    :func:`prepare_environment` sets the same value without checking it; this runs before every
    ``StreamingDataset`` is built (:func:`curriculum_ds.data.open_stream`). Deterministic.

    Returns:
        The number of ranks on this node, ``>= 1``.

    Raises:
        DataError: the value is not a positive integer dividing ``WORLD_SIZE``.
    """
    raw = _set_local_world_size()
    try:
        value = int(raw)
    except ValueError:
        value = 0
    if value < 1:
        raise DataError(f"LOCAL_WORLD_SIZE must be a positive integer, got {raw!r}")
    world_raw = os.environ.get("WORLD_SIZE", "1") or "1"
    try:
        world = int(world_raw)
    except ValueError:
        world = value
    if world % value:
        raise DataError(f"LOCAL_WORLD_SIZE={value} does not divide WORLD_SIZE={world}")
    return value


def set_deepspeed_env(env: MutableMapping[str, str], *, cuda: bool) -> None:
    """Set in ``env`` what DeepSpeed needs, keeping what the user set.

    * The venv's ``bin`` first on ``PATH`` (:func:`put_venv_bin_on_path`).
    * ``TORCH_EXTENSIONS_DIR``: a JIT-op build folder of this environment's own
      (:func:`torch_extensions_dir`).
    * Without CUDA, ``DS_ACCELERATOR=cpu`` (DeepSpeed's CPU accelerator, which falls back to the
      gloo backend when oneCCL is not installed).

    Args:
        env: ``os.environ`` (a rank, before DeepSpeed is imported) or the environment of the
            launcher about to be started (:func:`curriculum_ds.commands.launch.launcher_env`).
        cuda: Whether a CUDA device is available.
    """
    put_venv_bin_on_path(env)
    env.setdefault("TORCH_EXTENSIONS_DIR", torch_extensions_dir())
    if not cuda:
        env.setdefault("DS_ACCELERATOR", "cpu")


def venv_bin_dir() -> Path:
    """The folder of this Python's executables: the venv's ``bin`` (``deepspeed``, ``ninja``)."""
    return Path(sys.executable).parent


def put_venv_bin_on_path(env: MutableMapping[str, str]) -> None:
    """Put the folder of this Python's executables (the venv's ``bin``) first on ``env["PATH"]``.

    DeepSpeed JIT-compiles ops (Adam, the CPU accelerator's shared-memory all-reduce) with
    ``ninja``, which is installed beside this Python and is not found when the venv was not
    activated (``.venv/bin/curriculum-ds``). Left alone when it is already first.

    Args:
        env: ``os.environ``, or the environment of a process about to be started.
    """
    bin_dir = str(venv_bin_dir())
    if env.get("PATH", "").split(os.pathsep)[0] != bin_dir:
        env["PATH"] = os.pathsep.join(filter(None, [bin_dir, env.get("PATH")]))


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


def free_port() -> int:
    """A TCP port of 127.0.0.1 that is free now (the OS picks it; another process may take it)."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass(frozen=True, kw_only=True)
class Topology:
    """This process's place among the data-parallel ranks.

    Attributes:
        dp_rank: this rank, in ``[0, dp_world_size)``.
        dp_world_size: data-parallel ranks (>= 1). Every rank draws the same global batch and
            takes the slice at ``dp_rank``.
    """

    dp_rank: int = 0
    dp_world_size: int = 1

    @classmethod
    def from_engine(cls, engine: Any) -> Topology:
        """The topology of ``engine``: its data-parallel world and this rank in it.

        ``dp_world_size`` is ``engine.seq_dp_world_size`` when the engine has one, else
        ``engine.dp_world_size``; ``dp_rank`` is this process's rank in the engine's
        (sequence-)data-parallel group, 0 when ``torch.distributed`` is not initialised. Under
        plain data parallelism (what the plugin supports) the group is the whole world, so
        these are ``torch.distributed``'s rank and world size. Reads only; no collective.
        """
        import torch.distributed as dist

        world = int(getattr(engine, "seq_dp_world_size", None) or engine.dp_world_size)
        rank = 0
        if dist.is_available() and dist.is_initialized():
            group = getattr(engine, "seq_data_parallel_group", None) or getattr(
                engine, "data_parallel_group", None
            )
            rank = int(dist.get_rank(group=group))
        return cls(dp_rank=rank, dp_world_size=world)

    @property
    def collective(self) -> bool:
        """Whether the ranks must communicate: ``torch.distributed`` is up and there are > 1."""
        import torch.distributed as dist

        return self.dp_world_size > 1 and dist.is_available() and dist.is_initialized()
