"""``bench/bench_loader_scale.py`` at a tiny scale runs and reports every figure.

Not timed: benchmarks report, CI only checks that they run (the figures at 10^7 samples are in the
README).
"""

from __future__ import annotations

import json
import subprocess
import sys

from helpers import REPO

BENCH = REPO / "bench" / "bench_loader_scale.py"


def test_bench_loader_scale_runs_and_reports(tmp_path):
    args = ["--samples", "3000", "--long-samples", "300", "--batches", "3"]
    args += ["--fetch-samples", "1024", "--rounds", "1", "--cache", str(tmp_path), "--json"]
    proc = subprocess.run(
        [sys.executable, str(BENCH), *args],
        env={"PYTHONPATH": str(REPO / "python"), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-6000:]
    result = json.loads(proc.stdout)
    assert result["samples"] == 3000
    for build in (result["build_big"], result["build_mix"]):
        assert build["build_s"] > 0
        # what the build adds can round to 0 MiB at this size (a peak the imports already set)
        assert build["peak_rss_mib"] >= build["rss_added_mib"] >= 0
    assert set(result["draw_samples_per_s"]) == {"samples", "tokens", "samples, 8 buckets"}
    assert all(rate > 0 for rate in result["draw_samples_per_s"].values())
    fetch = result["fetch"]
    assert fetch["ours_tokens_per_s"] > 0
    assert fetch["streaming_tokens_per_s"] > 0
    assert fetch["ratio"] == fetch["ours_tokens_per_s"] / fetch["streaming_tokens_per_s"]
    # the cached streams are reused by the next run
    assert sorted(p.name for p in tmp_path.iterdir()) == ["long_300", "short_3000"]
