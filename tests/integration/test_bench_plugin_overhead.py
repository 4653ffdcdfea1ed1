"""``bench/bench_plugin_overhead.py --quick`` runs and reports the plugin/bare ratios.

Not timed: benchmarks report, CI only checks that they run (the figures live in the benchmark's
own output).
"""

from __future__ import annotations

import re
import subprocess
import sys

from helpers import REPO

from curriculum_ds.commands.launch import launcher_env

BENCH = REPO / "bench" / "bench_plugin_overhead.py"
RATIO = r"\d+\.\d{3}"


def test_bench_plugin_overhead_quick_runs_and_prints_ratios(tmp_path):
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
    assert re.search(r"^bare\s+\d+\.\d\d\s", out, re.MULTILINE), out
    for loop in ("plugin, dynamic off", "plugin, dynamic on"):
        row = re.search(rf"^{loop}\s+\d+\.\d\d\s+\S+\s+({RATIO})\s+\S+\s+({RATIO})\s", out, re.M)
        assert row is not None, out
        assert all(float(r) > 0 for r in row.groups())
    summary = re.search(r"^SUMMARY plugin/bare step time: .*\[(.+)\]$", out, re.MULTILINE)
    assert summary is not None, out
    assert "bench_plugin_overhead.py --quick" in summary.group(1)


def test_bench_streams_mode_quick_runs_and_prints_the_on_off_ratio(tmp_path):
    """``--streams``: per-stream accounting + monitors on vs off, side by side (issue 11)."""
    env = launcher_env(cuda=False)
    env["PYTHONPATH"] = str(REPO / "python")
    proc = subprocess.run(
        [sys.executable, str(BENCH), "--streams", "--quick", "--out", str(tmp_path)],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr[-6000:]
    out = proc.stdout
    assert re.search(r"^plugin, accounting off\s+\d+\.\d\d\s", out, re.MULTILINE), out
    row = re.search(
        rf"^plugin, accounting \+ monitors\s+\d+\.\d\d\s+\S+\s+({RATIO})\s+\S+\s+({RATIO})\s",
        out,
        re.MULTILINE,
    )
    assert row is not None, out
    assert all(float(r) > 0 for r in row.groups())
    assert re.search(r"^SUMMARY on/off step time: .*≤1\.01", out, re.MULTILINE), out
    # the monitors really wrote: TensorBoard event files and CSV files of the curriculum's tags
    assert list(tmp_path.rglob("events.out.tfevents.*"))
    assert list(tmp_path.rglob("curriculum_streams_fixed128b_loss.csv"))
