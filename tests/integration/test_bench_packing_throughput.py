"""``bench/bench_packing_throughput.py`` runs on a small corpus and reports both layouts and
the step time of document masking beside the unmasked packed step.

Not timed: benchmarks report, CI only checks that they run and that the padding they count is
what packing promises (none in packed micro-batches, some in unpacked ones).
"""

from __future__ import annotations

import json
import subprocess
import sys

from helpers import REPO

from curriculum_ds.commands.launch import launcher_env

BENCH = REPO / "bench" / "bench_packing_throughput.py"


def test_bench_packing_throughput_runs_and_reports_both_layouts(tmp_path):
    env = launcher_env(cuda=False)
    env["PYTHONPATH"] = str(REPO / "python")
    figures = tmp_path / "figures.json"
    proc = subprocess.run(
        [
            sys.executable,
            str(BENCH),
            "--rounds",
            "2",
            "--block",
            "1",
            "--max-docs",
            "100",
            "--json",
            str(figures),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr[-6000:]
    assert "packed / unpacked: " in proc.stdout
    assert "document masking, step time masked / unmasked: " in proc.stdout
    result = json.loads(figures.read_text())
    # only the dataset's last row can be short: at most 1 of the 16 timed rows of each layout
    assert result["packed_padding"] < 1 / 16
    assert result["unpacked_padding"] > 0.1  # docstrings average well under 128 tokens
    assert result["packed_tokens_per_cpu_s"] > 0
    assert result["unpacked_tokens_per_cpu_s"] > 0
    assert result["packed_over_unpacked"] > 0
    assert result["masked_padding"] == result["packed_padding"]  # the same rows, masked
    assert result["masked_over_unmasked_step_time"] > 0
