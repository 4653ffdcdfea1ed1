"""``bench/bench_mixers.py --quick`` times every registered stream method side by side.

A smoke run (no demo launch, a few synthetic steps): each method of the registry is timed or
listed with its reason, ADO's fits are counted apart, and the table prints. The figures come
from running the bench (docs/benchmarks.md). From issue 33, acceptance "Overhead".
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

from curriculum_ds.dynamic.registry import methods

BENCH = Path(__file__).resolve().parents[2] / "bench" / "bench_mixers.py"


def _module():
    spec = importlib.util.spec_from_file_location("bench_mixers", BENCH)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["bench_mixers"] = module
    spec.loader.exec_module(module)
    return module


def test_every_stream_method_is_timed_or_named_with_its_reason(capsys):
    bench = _module()
    timing = bench.time_methods(steps=11, num_streams=3, global_batch=16, base={}, quick=True)
    stream_methods = {m for m, units in methods().items() if "streams" in units}
    assert set(timing["per_step_s"]) | set(timing["not_timed"]) == stream_methods
    assert {"softmax", "odm", "ado"} <= set(timing["per_step_s"])
    assert all(t > 0 for t in timing["per_step_s"].values())
    fits = timing["refit"]["ado"]
    assert fits["count"] == 2  # t = 6 and 9 (t ≥ warmup 4, every 3; steps 0..10)
    assert fits["total_s"] > 0
    rep = bench.report(timing, step_s=0.25)
    assert rep["methods"]["ado"]["refit"]["count"] == 2
    assert rep["methods"]["odm"]["pct_of_step"] == pytest.approx(
        100 * timing["per_step_s"]["odm"] / 0.25, abs=1e-4
    )
    bench.print_report(rep, timing)
    out = capsys.readouterr().out
    for name in timing["per_step_s"]:
        assert f"  {name} " in out
    assert "+ refit: 2 fits" in out
    assert "MIXERS OVERHEAD: worst" in out


def test_the_evaluations_of_aioli_and_skillit_are_counted_and_costed_apart(capsys):
    bench = _module()
    timing = bench.time_methods(steps=11, num_streams=3, global_batch=16, base={}, quick=True)
    assert set(timing["probe"]) == {"aioli", "skillit"}
    # Aioli (a round after every 5th step, 3 probes of 1 step): evaluations after 5, 6, 7, 8
    # and 10, 11; probe steps 6, 7, 8 and 11. Skill-it: an evaluation after every 2nd step.
    assert timing["probe"]["aioli"]["count"] == 6
    assert timing["probe"]["aioli"]["probe_steps"] == 4
    assert timing["probe"]["skillit"]["count"] == 5
    assert timing["probe"]["skillit"]["probe_steps"] == 0
    rep = bench.report(timing, step_s=0.25, eval_s=0.1)
    evals = rep["methods"]["skillit"]["evals"]
    assert evals["eval_ms_per_step"] == pytest.approx(1e3 * 5 * 0.1 / 11, abs=1e-3)
    assert evals["eval_pct_of_step"] == pytest.approx(100 * 5 * 0.1 / 11 / 0.25, abs=1e-4)
    assert rep["methods"]["aioli"]["evals"]["probe_steps_pct"] == pytest.approx(400 / 11, abs=0.01)
    assert "evals" not in rep["methods"]["odm"]
    bench.print_report(rep, timing)
    out = capsys.readouterr().out
    assert "+ evals: 5 (45.45 per 100 steps), at 100 ms each 45.5 ms per step (18.18% of" in out


def test_the_quick_mode_runs_without_a_demo_run(capsys):
    _module().main(["--quick", "--json"])
    out = capsys.readouterr().out
    assert '"step_s": null' in out
    assert '"odm"' in out
