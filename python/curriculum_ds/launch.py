"""Build and run the DeepSpeed launcher command for ``curriculum_ds.train``."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

__all__ = ["build_command", "default_num_gpus", "launcher_env", "run_command"]


def _deepspeed_executable() -> str:
    beside_python = Path(sys.executable).parent / "deepspeed"
    if beside_python.is_file():
        return str(beside_python)
    found = shutil.which("deepspeed")
    return found if found is not None else "deepspeed"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


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
) -> list[str]:
    """The launcher command line.

    ``deepspeed --num_gpus N --master_port P --module curriculum_ds.train --deepspeed_config X ...``
    (DeepSpeed's launcher spells the module flag ``--module``; it appends ``--local_rank=K``).

    Args:
        ds_config: Path of the ds_config JSON with the ``curriculum`` section.
        num_gpus: Ranks to start on this node (CUDA devices, or CPU ranks without CUDA), ≥ 1.
        train_args: Further arguments of ``curriculum_ds.train`` (``--run-dir DIR`` ...).
        master_port: Rendezvous port; a free one is picked when None.

    Raises:
        ValueError: If ``num_gpus`` < 1.
    """
    if num_gpus < 1:
        raise ValueError(f"--num-gpus must be >= 1, got {num_gpus}")
    port = master_port if master_port is not None else _free_port()
    return [
        _deepspeed_executable(),
        "--num_gpus",
        str(num_gpus),
        "--master_port",
        str(port),
        "--module",
        "curriculum_ds.train",
        "--deepspeed_config",
        str(ds_config),
        *train_args,
    ]


def launcher_env(*, cuda: bool) -> dict[str, str]:
    """The environment for the launcher: CPU accelerator without CUDA, quiet OpenMP threads.

    DeepSpeed's JIT ops get a build folder of this environment's own (see
    :func:`curriculum_ds.distributed.torch_extensions_dir`).

    The folder of this Python's executables (the venv's ``bin``) goes first on ``PATH``: DeepSpeed
    JIT-compiles ops (the CPU accelerator's shared-memory all-reduce) with ``ninja``, which is
    installed there and is not found when the venv was not activated (``.venv/bin/curriculum-ds``).
    """
    from curriculum_ds.distributed import torch_extensions_dir

    env = dict(os.environ)
    env.setdefault("TORCH_EXTENSIONS_DIR", torch_extensions_dir())
    bin_dir = str(Path(sys.executable).parent)
    if env.get("PATH", "").split(os.pathsep)[0] != bin_dir:
        env["PATH"] = os.pathsep.join(filter(None, [bin_dir, env.get("PATH")]))
    if not cuda:
        env.setdefault("DS_ACCELERATOR", "cpu")
        env.setdefault("OMP_NUM_THREADS", "1")  # 2 ranks on a 2-core machine: one thread each
    return env


def run_command(cmd: Sequence[str], *, cuda: bool) -> int:
    """Run the launcher in the foreground; returns its exit code."""
    return subprocess.call(list(cmd), env=launcher_env(cuda=cuda))
