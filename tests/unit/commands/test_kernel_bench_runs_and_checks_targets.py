"""The benchmark runs (its numbers are not asserted: benchmarks are not timed tests)."""

from __future__ import annotations

import json

import pytest

from curriculum_ds.commands import kernel_bench as bench


def test_bench_smoke_json(capsys: pytest.CaptureFixture[str]) -> None:
    result = bench.run([20_000], as_json=True, repeats=1, extras=False)
    printed = json.loads(capsys.readouterr().out)
    assert printed["meta"]["sizes"] == [20_000]
    cases = {row["case"] for row in result["rows"]}
    assert any(c.startswith("bucketing edges+assign") for c in cases)
    assert any(c.startswith("BucketSampler") for c in cases)
    ours = [r for r in result["rows"] if r["impl"] == bench.OURS]
    assert ours
    assert all(r["median_s"] > 0 for r in ours)


def test_bench_table() -> None:
    rows = [
        {
            "case": "c",
            "impl": bench.OURS,
            "n": 1,
            "median_s": 1e-3,
            "min_s": 1e-3,
            "max_s": 1e-3,
            "ns_per_el": 1.0,
            "ratio": 1.0,
        },
        {"case": "c", "impl": "torch", "n": 1, "error": "RuntimeError: too many"},
    ]
    table = bench.format_table(rows)
    assert "ERROR: RuntimeError: too many" in table
    assert "curriculum_ds" in table


def test_bench_targets() -> None:
    case = "weighted draws with replacement, 1e+06 draws"
    rows = [
        {
            "case": case,
            "impl": bench.OURS,
            "n": 10**6,
            "median_s": 0.005,
            "min_s": 0.002,
            "ns_per_el": 5.0,
        },
        {"case": case, "impl": "torch.multinomial", "n": 10**6, "median_s": 0.1, "min_s": 0.1},
    ]
    (target,) = bench.check_targets(rows)
    assert target["value"] == 20.0
    assert target["met"] is False
    assert target["value_min"] == 50.0
    assert target["met_min"] is True
    assert "MISSED" in bench.format_targets([target])
