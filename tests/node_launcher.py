"""The node launcher of the tests' launched jobs: DeepSpeed's ``deepspeed.launcher.launch``, minus
its imports.

DeepSpeed's node launcher imports torch and DeepSpeed (~4 s of a 2-core machine, ~12 s when it
is loaded) before it starts the ranks, which then import them again: every launched test paid
that once more per job. This script does what ``deepspeed/launcher/launch.py`` (DeepSpeed
0.18, ``main``) does on one node, with the standard library and psutil only:

* the same arguments (``--world_info`` base64 JSON, ``--master_addr``, ``--master_port``,
  ``--module``, the target and its arguments);
* the same environment per rank: ``MASTER_ADDR``, ``MASTER_PORT``, ``WORLD_SIZE``,
  ``CROSS_RANK``, ``CROSS_SIZE``, ``LOCAL_SIZE``, ``RANK``, ``LOCAL_RANK``, the accelerator's
  visible devices (``CUDA_VISIBLE_DEVICES``, what both the CPU and the CUDA accelerators set),
  and ``PYTORCH_NVML_BASED_CUDA_CHECK=1``, which importing torch leaves in the launcher's;
* the same command per rank: ``python -u [-m] TARGET --local_rank=K ARGS...``, logged as DeepSpeed
  logs it (``process PID spawned with command: [...]``);
* the same end: the first rank that exits non-zero has the others' process trees terminated
  (SIGTERM, then SIGKILL after 30 s) and its exit code is the launcher's; SIGTERM or SIGINT to
  the launcher does the same and exits 1. It waits on its children instead of polling every
  second.

DeepSpeed's own runner and node launcher stay under test: ``curriculum-ds launch`` runs them in
test_cli_front_door, test_preemption_stops_after_a_step and test_readme_user_loop, and
``tests/unit/test_node_launcher_matches_deepspeeds.py`` checks that both give a rank the same
environment and command.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import json
import os
import signal
import subprocess
import sys
from types import FrameType

import psutil

_TERMINATE_TIMEOUT_S = 30  # deepspeed.launcher.launch.terminate_process_tree's


def _terminate_tree(pid: int) -> None:
    try:
        process = psutil.Process(pid)
        family = [*process.children(recursive=True), process]
    except psutil.NoSuchProcess:
        return
    for member in family:
        with contextlib.suppress(psutil.NoSuchProcess):
            member.terminate()
    _, alive = psutil.wait_procs(family, timeout=_TERMINATE_TIMEOUT_S)
    for member in alive:
        with contextlib.suppress(psutil.NoSuchProcess):
            member.kill()


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--world_info", required=True)
    parser.add_argument("--master_addr", default="127.0.0.1")
    parser.add_argument("--master_port", required=True)
    parser.add_argument("--module", action="store_true")
    parser.add_argument("target")
    parser.add_argument("args", nargs=argparse.REMAINDER)
    args = parser.parse_args()
    world = json.loads(base64.urlsafe_b64decode(args.world_info))
    assert len(world) == 1, "one node: the tests' jobs run on this machine"
    (ids,) = world.values()
    env = dict(os.environ)
    env |= {
        "CUDA_VISIBLE_DEVICES": ",".join(map(str, ids)),
        "MASTER_ADDR": args.master_addr,
        "MASTER_PORT": str(args.master_port),
        "WORLD_SIZE": str(len(ids)),
        "CROSS_RANK": "0",
        "CROSS_SIZE": "1",
        "LOCAL_SIZE": str(len(ids)),
        # what importing torch in DeepSpeed's launcher leaves in the environment its ranks inherit
        "PYTORCH_NVML_BASED_CUDA_CHECK": "1",
    }
    processes: list[subprocess.Popen[bytes]] = []
    for rank in range(len(ids)):
        cmd = [sys.executable, "-u", *(["-m"] if args.module else []), args.target]
        cmd += [f"--local_rank={rank}", *args.args]
        rank_env = env | {"RANK": str(rank), "LOCAL_RANK": str(rank)}
        processes.append(subprocess.Popen(cmd, env=rank_env))
        print(f"process {processes[-1].pid} spawned with command: {cmd}", flush=True)

    def stop_all(code: int) -> int:
        for process in processes:
            _terminate_tree(process.pid)
        return code

    def on_signal(signum: int, frame: FrameType | None) -> None:
        raise SystemExit(stop_all(1))

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    alive = {p.pid: p for p in processes}
    while alive:
        pid, status = os.wait()
        process = alive.pop(pid, None)
        if process is None:
            continue
        code = os.waitstatus_to_exitcode(status)
        process.returncode = code
        if code != 0:
            return stop_all(code)
    return 0


if __name__ == "__main__":
    sys.exit(main())
