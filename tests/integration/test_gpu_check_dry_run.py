"""``bench/gpu_check.sh --dry-run`` runs on CPU and reports every step.

The dry run is the GPU check without CUDA: the in-process part of the dynamic-overhead benchmark
and the kernel benchmark at their smallest sizes; the CUDA steps (the demo and the token-loss
exactness tests on NCCL ranks) are skipped and say why. Its summary has one line per step, and
it exits 0.

From issue 13, item 6.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from helpers import REPO

pytestmark = pytest.mark.distributed  # the dynamic benchmark's all_gather: 2 gloo processes


def test_gpu_check_dry_run_on_cpu(tmp_path):
    env = dict(os.environ, PYTHON=sys.executable)
    proc = subprocess.run(
        ["bash", str(REPO / "bench" / "gpu_check.sh"), "--dry-run", "--out", str(tmp_path)],
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    out = proc.stdout
    assert proc.returncode == 0, out[-3000:] + proc.stderr[-3000:]
    assert "gpu_check: CPU dry run" in out
    summary = out[out.index("gpu_check summary") :].splitlines()[1:5]
    status = {line.split()[0]: line.split()[1] for line in summary}
    assert status == {"demo": "SKIP", "token_loss": "SKIP", "dynamic": "PASS", "kernels": "PASS"}
    demo, token_loss, dynamic, kernels = summary
    assert "needs CUDA" in demo
    assert "needs CUDA" in token_loss
    assert "machinery per step" in dynamic
    assert "RollingWindow edges" in kernels
    # issue 23: the prefetch comparison against StreamingDataLoader needs CUDA, and says so
    prefetch = out[out.index("gpu_check summary") :].splitlines()[5]
    assert prefetch.split()[:2] == ["prefetch", "SKIP"]
    assert "needs CUDA" in prefetch
    assert out.rstrip().endswith(f"gpu_check: OK (logs in {tmp_path})")
    for step in ("dynamic", "kernels"):
        assert (tmp_path / f"{step}.log").stat().st_size > 0
