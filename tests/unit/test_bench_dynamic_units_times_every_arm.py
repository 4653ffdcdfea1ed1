"""``bench_dynamic_overhead.py --units`` (bench/dynamic_units.py) runs every unit × signal arm.

In-process on tiny data: each arm draws, observes and recomputes (its update applied to the
loader), the excess-loss arms read the reference column the bench writes with the product's
writer, and the report prints each arm's extra against buckets/loss with the 0.5% target. A
smoke test: the figures themselves come from running the bench (docs/benchmarks.md).

From issue 20, item 5.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest
from helpers import make_dataset, ragged_docs, write_ds_config

from curriculum_ds.data import read_stream_info

BENCH = Path(__file__).resolve().parents[2] / "bench" / "dynamic_units.py"


def _module():
    spec = importlib.util.spec_from_file_location("dynamic_units", BENCH)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["dynamic_units"] = module
    spec.loader.exec_module(module)
    return module


def test_every_arm_is_timed_and_reported_against_buckets_loss(tmp_path, capsys):
    units = _module()
    a = make_dataset(tmp_path, "a", ragged_docs(40, seed=1))
    b = make_dataset(tmp_path, "b", ragged_docs(40, seed=2))
    curriculum = {
        "max_duration": "4000tok",
        "schedule": [
            {
                "name": "mix",
                "duration": "4000tok",
                "train_loader": {
                    "streams": [
                        {"local": str(a), "proportion": 0.5},
                        {"local": str(b), "proportion": 0.5},
                    ],
                    "max_seq_len": 64,
                },
            }
        ],
        "dynamic": {"enabled": True, "num_buckets": 4, "window": 64, "floor": 0.05,
                    "recompute_every_n_steps": 3},
    }  # fmt: skip
    config = write_ds_config(tmp_path / "ds.json", curriculum)
    units.add_reference_column(config)
    assert units.COLUMN in read_stream_info(str(a)).metrics
    timing = units.time_units(config, steps=7)
    assert timing["steps"] == 7
    assert (
        timing["global_batch"]
        == json.loads(config.read_text())["train_micro_batch_size_per_gpu"] * 2 * 2
    )
    names = [f"{u}/{s}" for u, s in units.ARMS]
    assert list(timing["per_step_s"]) == names
    assert all(t > 0 for t in timing["per_step_s"].values())
    report = units.units_report(timing, step_s=0.5)
    assert report["arms"]["buckets/loss"]["extra_ms"] == 0.0
    units.print_units(report)
    out = capsys.readouterr().out
    for name in names:
        assert name in out
    assert "UNITS OVERHEAD: worst arm" in out
    assert out.rstrip().endswith("of the step (target ≤ 0.5%)")


def test_without_a_step_time_the_share_is_left_out():
    units = _module()
    report = units.units_report({"per_step_s": {"buckets/loss": 1e-4, "streams/loss": 2e-4}}, None)
    assert report["arms"]["streams/loss"]["extra_ms"] == pytest.approx(0.1)
    assert report["arms"]["streams/loss"]["extra_pct_of_step"] is None
