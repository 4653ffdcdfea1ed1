"""Run a user's own training script the way a user would: under the deepspeed launcher or alone.

``launch_script`` is ``tests/helpers.launch`` for a script path instead of ``--module
curriculum_ds.train``: the same command (``curriculum_ds.commands.launch.build_command``, a free
master port) run by the same ``helpers.run_launched`` (``launcher_env(cuda=False)``: CPU
accelerator,
gloo, one OpenMP thread per rank), so that ``deepspeed --num_gpus 2 my_loop.py
--deepspeed_config ds.json ...`` runs on 2 CPU ranks. ``run_script`` runs one plain ``python
my_loop.py ...`` process (a world of one). ``front_door`` runs the documented way, ``curriculum-ds
launch CONFIG --num-gpus N --script SCRIPT -- ARGS...``, and can SIGTERM it (a preemption) once a
step is logged; ``processes_running`` finds what is left of a script's ranks.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
from helpers import launched_env, run_launched, unlink_stale_shared_memory

from curriculum_ds.commands.launch import build_command
from curriculum_ds.records.jsonl import read_jsonl


def script_command(script: Path, ds_config: Path, *args: str, num_gpus: int = 2) -> list[str]:
    """``deepspeed --num_gpus N --master_port P SCRIPT --deepspeed_config X ARGS...``."""
    return build_command(ds_config, num_gpus=num_gpus, train_args=list(args), script=script)


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


def front_door(
    script: Path,
    ds_config: Path,
    *args: str,
    sigterm_after_step: int | None = None,
    metrics: Path | None = None,
    num_gpus: int = 2,
    timeout: float = 600,
) -> tuple[int, str]:
    """``curriculum-ds launch DS_CONFIG --num-gpus N --script SCRIPT -- ARGS...`` (cwd: the
    config's folder): its exit code and output (stdout and stderr). With ``sigterm_after_step``,
    SIGTERM to the launcher once ``metrics`` (a metrics.jsonl) logs that step."""
    cmd = [sys.executable, "-m", "curriculum_ds.cli", "launch", str(ds_config)]
    cmd += ["--num-gpus", str(num_gpus), "--script", str(script), "--", *args]
    unlink_stale_shared_memory()  # what an earlier killed job left would collide
    with subprocess.Popen(
        cmd,
        env=launched_env(),
        cwd=ds_config.parent,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    ) as proc:
        deadline = time.monotonic() + timeout
        while sigterm_after_step is not None and proc.poll() is None:
            assert metrics is not None
            assert time.monotonic() < deadline, "no step logged in time"
            rows = read_jsonl(metrics) if metrics.exists() else []
            if rows and rows[-1]["step"] >= sigterm_after_step:
                proc.send_signal(signal.SIGTERM)
                break
            time.sleep(0.05)
        out, _ = proc.communicate(timeout=timeout)
        return proc.returncode, out


def processes_running(script: Path) -> list[str]:
    """The command lines of live processes that run ``script`` (its ranks, or their launchers)."""
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        cmdline = proc.info["cmdline"] or []
        if str(script) in cmdline and proc.status() != psutil.STATUS_ZOMBIE:
            found.append(" ".join(cmdline))
    return found
