"""Build and run the DeepSpeed launcher command for ``curriculum_ds.train`` or a user's script."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import IO, Any, cast

from curriculum_ds.distributed import free_port, set_deepspeed_env, venv_bin_dir

__all__ = [
    "build_command",
    "deepspeed_executable",
    "default_num_gpus",
    "launcher_env",
    "launcher_prefix",
    "run_command",
    "signal_ranks",
]


def deepspeed_executable() -> str:
    """The `deepspeed` runner: beside this Python, else on PATH."""
    beside_python = venv_bin_dir() / "deepspeed"
    if beside_python.is_file():
        return str(beside_python)
    found = shutil.which("deepspeed")
    return found if found is not None else "deepspeed"


def has_cuda() -> bool:
    """Whether a CUDA device is visible (imports torch)."""
    import torch

    return bool(torch.cuda.is_available())


def default_num_gpus() -> int:
    """All visible CUDA devices, or 2 CPU ranks when there is none."""
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 2


def build_command(
    ds_config: Path,
    *,
    num_gpus: int,
    train_args: Sequence[str] = (),
    master_port: int | None = None,
    script: Path | None = None,
) -> list[str]:
    """The launcher command line.

    ``deepspeed --num_gpus N --master_port P --module curriculum_ds.train --deepspeed_config X ...``
    (DeepSpeed's launcher spells the module flag ``--module``; it appends ``--local_rank=K``), or
    with ``script``: ``deepspeed --num_gpus N --master_port P SCRIPT --deepspeed_config X ...``.

    Args:
        ds_config: Path of the ds_config JSON with the ``curriculum`` section.
        num_gpus: Ranks to start on this node (CUDA devices, or CPU ranks without CUDA), ≥ 1.
        train_args: Further arguments of ``curriculum_ds.train`` (``--run-dir DIR`` ...), or of
            ``script``.
        master_port: Rendezvous port; a free one is picked when None.
        script: A user's training script to start on every rank instead of the reference loop.

    Raises:
        ValueError: If ``num_gpus`` < 1.
    """
    if num_gpus < 1:
        raise ValueError(f"--num-gpus must be >= 1, got {num_gpus}")
    target = ["--module", "curriculum_ds.train"] if script is None else [str(script)]
    return [
        *launcher_prefix(num_gpus, master_port),
        *target,
        "--deepspeed_config",
        str(ds_config),
        *train_args,
    ]


def launcher_prefix(
    num_gpus: int, master_port: int | None = None, hostfile: Path | None = None
) -> list[str]:
    """``deepspeed --num_gpus N [--hostfile H] --master_port P``: the runner's part of a command.

    ``master_port``: a free one is picked when None.
    """
    port = master_port if master_port is not None else free_port()
    return [
        deepspeed_executable(),
        "--num_gpus",
        str(num_gpus),
        *(["--hostfile", str(hostfile)] if hostfile is not None else []),
        "--master_port",
        str(port),
    ]


def launcher_env(*, cuda: bool) -> dict[str, str]:
    """The environment for the launcher: CPU accelerator without CUDA, quiet OpenMP threads.

    The DeepSpeed variables come from :func:`curriculum_ds.distributed.set_deepspeed_env`: the
    venv's ``bin`` (``ninja``) first on ``PATH``, a JIT-op build folder of this environment's own,
    and ``DS_ACCELERATOR=cpu`` without CUDA.
    """
    env = dict(os.environ)
    set_deepspeed_env(env, cuda=cuda)
    if not cuda:
        env.setdefault("OMP_NUM_THREADS", "1")  # 2 ranks on a 2-core machine: one thread each
    return env


# The watchdog of run_command: a process in the launcher's own process group that waits for
# EOF on stdin. "done" before EOF: the launcher finished normally. Bare EOF: the process that
# ran the launcher is gone (even by SIGKILL, which nothing can catch), so the whole group (the
# DeepSpeed runner, its `deepspeed.launcher.launch` and every rank) is stopped: SIGTERM first
# (DeepSpeed's launch terminates its ranks on it), SIGKILL after a grace period.
_WATCHDOG = """
import os, signal, sys, time
signal.signal(signal.SIGINT, signal.SIG_IGN)
signal.signal(signal.SIGTERM, signal.SIG_IGN)
if sys.stdin.buffer.read() == b"done":
    sys.exit(0)
group = os.getpgrp()
os.killpg(group, signal.SIGTERM)
time.sleep(float(sys.argv[1]))
os.killpg(group, signal.SIGKILL)
"""

_GRACE_S = 10.0
"""Seconds the ranks get to stop on SIGTERM before SIGKILL, when the launching process died."""


def signal_ranks(launcher_pid: int, signum: int) -> int:
    """Send ``signum`` to the ranks under a DeepSpeed launcher, not to the launchers.

    The ranks are the children of the per-node ``deepspeed.launcher.launch`` process somewhere
    below ``launcher_pid``. The launchers are left alone: on SIGTERM DeepSpeed's ``launch.py``
    kills its ranks 30 s later and exits 1 whatever they did, and the single-node ``deepspeed``
    runner has no handler at all (it dies and leaves ``launch.py`` behind).

    Returns:
        How many processes were signalled (0 when the ranks are not started or already gone).
    """
    import psutil

    num_signalled = 0
    try:
        tree = psutil.Process(launcher_pid).children(recursive=True)
    except psutil.Error:
        return 0
    for proc in tree:
        try:
            if not any("deepspeed.launcher.launch" in part for part in proc.cmdline()):
                continue
            for rank in proc.children():
                rank.send_signal(signum)
                num_signalled += 1
        except psutil.Error:  # gone meanwhile
            continue
    return num_signalled


def run_command(cmd: Sequence[str], *, cuda: bool) -> int:
    """Run the launcher in the foreground; returns its exit code (negative: killed by a signal).

    On POSIX the launcher and everything it starts run in a process group of their own, with a
    watchdog process in it: when this process ends before the launcher does (``kill -9``
    included), the watchdog stops the whole group, so no rank is left running, reparented to
    init, writing into the run dir. Ctrl-C (or an exception here) stops the group the same way.

    SIGTERM to this process (preemption: SLURM, Kubernetes) goes to the ranks alone
    (:func:`signal_ranks`): they finish the step in progress, write its checkpoint and exit 0,
    and so do the launchers after them; this returns their exit code.
    """
    env = launcher_env(cuda=cuda)
    if os.name != "posix":
        return subprocess.call(list(cmd), env=env)
    watchdog = subprocess.Popen(
        [sys.executable, "-c", _WATCHDOG, str(_GRACE_S)],
        stdin=subprocess.PIPE,
        process_group=0,
    )
    to_watchdog = cast("IO[bytes]", watchdog.stdin)  # stdin=PIPE: always a pipe
    stop_group = False  # True while the launcher runs: leaving then stops it
    try:
        proc = subprocess.Popen(list(cmd), env=env, process_group=watchdog.pid)
        stop_group = True

        def forward(signum: int, frame: Any) -> None:
            signal_ranks(proc.pid, signum)

        previous = signal.signal(signal.SIGTERM, forward)
        try:
            code = proc.wait()
        finally:
            signal.signal(signal.SIGTERM, previous)
        stop_group = False
        return code
    finally:
        with contextlib.suppress(BrokenPipeError):
            if not stop_group:
                to_watchdog.write(b"done")
            to_watchdog.close()
        watchdog.wait()
