"""``bench/bench_prefetch.py --quick`` runs and reports the prefetch on/off data-wait ratios.

Not timed: benchmarks report, CI only checks that they run (issue 23's figures are in
docs/benchmarks.md). The batches of each on/off pair must be the same. ``--quick`` runs GAS 4.
"""

from __future__ import annotations

import re
import subprocess
import sys

from helpers import REPO

from curriculum_ds.commands.launch import launcher_env

BENCH = REPO / "bench" / "bench_prefetch.py"


def test_bench_prefetch_quick_runs_and_prints_ratios(tmp_path):
    env = launcher_env(cuda=False)
    env["PYTHONPATH"] = str(REPO / "python")
    proc = subprocess.run(
        [sys.executable, str(BENCH), "--quick", "--out", str(tmp_path)],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr[-6000:]
    out = proc.stdout
    for loop in ("off", "on", "off, dynamic", "on, dynamic"):
        assert re.search(rf"^{loop}\s+4\s+\d+\.\d{{3}}\s+\d+\.\d{{3}}\s+\d+\.\d\s", out, re.M), out
    summary = re.search(
        r"^SUMMARY prefetch data wait: GAS 4 static on/off (\d+\.\d{3}) .*same batches True: "
        r"\w+; GAS 4 dynamic on/off (\d+\.\d{3}) .*same batches True: \w+  \[.+\]$",
        out,
        re.MULTILINE,
    )
    assert summary is not None, out
