"""``bench/bench_plugin_overhead.py``'s report prints each target as given: ``--moving``'s 0.5%
(1.005) printed as "≤1.00" before, and its wide ratio label ran into the IQR column (issue 22's
overhead figure). In-process on made-up timings."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench" / "bench_plugin_overhead.py"


def _bench():
    spec = importlib.util.spec_from_file_location("bench_plugin_overhead", BENCH)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault(spec.name, module)
    spec.loader.exec_module(module)
    return module


def test_the_moving_report_prints_the_half_percent_target():
    bench = _bench()
    constant, moving = bench.MOVING_VARIANTS
    times = {
        "wall": {constant: [100.0, 100.0, 100.0], moving: [100.2, 100.4, 100.3]},
        "cpu": {constant: [90.0, 90.0, 90.0], moving: [90.2, 90.3, 90.1]},
        "draw": {constant: [0.5, 0.5, 0.5], moving: [0.6, 0.6, 0.6]},
        "finish": {constant: [1.0, 1.0, 1.0], moving: [1.1, 1.1, 1.1]},
    }
    rows = bench.summarize(times, bench.MOVING_VARIANTS, bench.MOVING_TARGETS)
    header = {
        "command": "bench_plugin_overhead.py --moving",
        "world_size": 1,
        "threads": 1,
        "micro_batch_size": 8,
        "gas": 2,
        "rounds": 3,
        "block": 5,
        "warmup": 10,
    }
    out = bench.report(rows, header, label="moving/constant")
    assert "≤1.005" in out
    columns = next(line for line in out.splitlines() if line.startswith("loop"))
    assert "IQR moving/constant" in columns  # the wide label keeps its own column
    assert "CPU ms/step moving/constant" in columns
    assert "≤1.00 " not in out
    assert "≤1.00;" not in out
    summary = out.splitlines()[-1]
    assert summary.startswith("SUMMARY moving/constant step time: plugin, ramp + loss weights ")
    assert "(ok ≤1.005;" in summary
    assert "1.003 wall / 1.002 CPU" in summary
