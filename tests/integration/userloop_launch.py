"""Run a user's own training script the way a user would: under the deepspeed launcher or alone.

``launch_script`` is ``tests/helpers.launch`` for a script path instead of ``--module
curriculum_ds.train``: the same command (``curriculum_ds.commands.launch.build_command``, a free
master port) run by the same ``helpers.run_launched`` (``launcher_env(cuda=False)``: CPU
accelerator,
gloo, one OpenMP thread per rank), so that ``deepspeed --num_gpus 2 my_loop.py
--deepspeed_config ds.json ...`` runs on 2 CPU ranks. ``run_script`` runs one plain ``python
my_loop.py ...`` process (a world of one).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from helpers import run_launched

from curriculum_ds.commands.launch import build_command


def script_command(script: Path, ds_config: Path, *args: str, num_gpus: int = 2) -> list[str]:
    """``deepspeed --num_gpus N --master_port P SCRIPT --deepspeed_config X ARGS...``."""
    cmd = build_command(ds_config, num_gpus=num_gpus, train_args=list(args))
    at = cmd.index("--module")
    assert cmd[at + 1] == "curriculum_ds.train"
    return [*cmd[:at], str(script), *cmd[at + 2 :]]


def launch_script(
    script: Path,
    ds_config: Path,
    *args: str,
    num_gpus: int = 2,
    timeout: int = 600,
    check: bool = True,
) -> subprocess.CompletedProcess[str]:
    """Run ``script`` on ``num_gpus`` CPU ranks under the deepspeed launcher (cwd: the config's
    folder). Raises AssertionError with the output tails when ``check`` and it fails."""
    cmd = script_command(script, ds_config, *args, num_gpus=num_gpus)
    return run_launched(cmd, cwd=ds_config.parent, timeout=timeout, check=check)


def run_script(
    script: Path, *args: str, cwd: Path, timeout: int = 300, check: bool = True
) -> subprocess.CompletedProcess[str]:
    """``python SCRIPT ARGS...``: one process, no launcher (``initialize`` makes a world of one)."""
    return run_launched([sys.executable, str(script), *args], cwd=cwd, timeout=timeout, check=check)
