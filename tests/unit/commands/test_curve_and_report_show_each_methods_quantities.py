"""``curve``, ``report`` and the monitors name each mixing method and show its own quantities.

The history rows are the ones the methods write (each method driven over synthetic steps, its
records as ``Step.finish`` writes them): the titles name the method and what it follows (never
``signal loss`` for a method that reads no training-loss signal), the table ends each row with
the method's own quantities (DoReMi's average, ODM's ε_t, ADO's fitted α, Aioli's ΣA, Skill-it's
A·ΣL, the weights file's sha256) and lists the last row's in full, the report's summary adds
them under the final weights, and the monitors get them as ``curriculum/...`` tags.

From issue 33 (item 8).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from curriculum_ds.commands.curve import load_curve, render_table
from curriculum_ds.commands.report import load_report, summary
from curriculum_ds.commands.stream_weights import mixed_by, quantities
from curriculum_ds.config import DynamicConfig
from curriculum_ds.dynamic import PhaseView, ProbingReweighter, make_reweighter
from curriculum_ds.records.monitors import bucket_events

NAMES = ("code", "prose", "noise")
KEYS: dict[str, dict[str, Any]] = {
    "doremi": {"reference_metric": "ref", "window": 64, "doremi": {"apply": "loss"}},
    "odm": {"odm": {"warmup_steps": 1}},
    "ado": {"ado": {"skip_steps": 1, "warmup_steps": 4, "refit_every": 3, "fit_starts": 2}},
    "aioli": {"recompute_every_n_steps": 4, "aioli": {"lp_rounds": 1, "probe_steps": 1}},
    "skillit": {"recompute_every_n_steps": 2},
    "file": {"recompute_every_n_steps": 2},
}


def _rows(method: str, work: Path, steps: int = 12) -> list[dict[str, Any]]:
    """The history rows ``method`` writes over ``steps`` synthetic steps (phase 0, "mix")."""
    keys = {"enabled": True, "method": method, "unit": "streams", "recompute_every_n_steps": 1}
    keys.update(KEYS[method])
    if method == "file":
        keys["file"] = {"path": str(work / "weights.json")}
        (work / "weights.json").write_text(json.dumps({"code": 2, "prose": 1, "noise": 1}))
    rng = np.random.default_rng(0)
    view = PhaseView(
        phase_idx=0,
        stream_names=NAMES,
        proportions=np.array([0.4, 0.4, 0.2]),
        num_samples=(50, 50, 50),
        metrics=tuple({"ref": np.full(50, 1.0)} for _ in NAMES),
        run_dir=work,
    )
    rw = make_reweighter(DynamicConfig.model_validate(keys))
    rw.start_phase(view, None)
    rows = []
    for step in range(1, steps + 1):
        streams = rng.integers(0, 3, 16)
        batch = np.stack([streams, rng.integers(0, 50, 16)], axis=1)
        rw.observe(batch, 2.0 + streams + 3.0 / step + rng.normal(0, 0.01, 16))
        if isinstance(rw, ProbingReweighter) and rw.probe_due(step):
            rw.observe_probe(step, {n: 4.0 - 0.1 * i - 0.01 * step for i, n in enumerate(NAMES)})
        update = rw.maybe_recompute(step)
        if update is not None and update.record is not None:
            rows.append({"step": step, "phase": 0, "phase_name": "mix", **update.record})
    assert rows, method
    return rows


def _run_dir(tmp_path: Path, method: str) -> tuple[Path, list[dict[str, Any]]]:
    run = tmp_path / method
    run.mkdir()
    rows = _rows(method, tmp_path)
    metrics = [
        {"step": s, "phase": 0, "phase_name": "mix", "loss": 1.0, "tokens": 100 * s,
         "step_tokens": 100, "lr": 1e-3,
         "streams": {n: {"samples": 1, "tokens": 30, "loss": 1.0} for n in NAMES}}
        for s in range(1, 13)
    ]  # fmt: skip
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in metrics))
    (run / "curriculum_history.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return run, rows


MIXED_BY = {
    "doremi": "method doremi (excess loss, apply loss)",
    "odm": "method odm (training loss)",
    "ado": "method ado (training loss curves)",
    "aioli": "method aioli (probe evaluations)",
    "skillit": "method skillit (held-out losses)",
    "file": "method file (weights file)",
}


@pytest.mark.parametrize("method", list(KEYS))
def test_the_table_names_the_method_and_ends_each_row_with_its_quantities(tmp_path, method):
    run, rows = _run_dir(tmp_path, method)
    table = render_table(load_curve(run), max_rows=100)
    lines = table.splitlines()
    assert lines[0].startswith(f"stream weights ({MIXED_BY[method]}; 3 streams; ")
    assert "signal" not in lines[0]
    assert lines[1].split() == ["step", "phase", *NAMES]
    body = lines[3 : 3 + len(rows)]
    for line, row in zip(body, rows, strict=True):
        assert line.split()[0] == str(row["step"])
        assert line.endswith(quantities(row)), line
    last = rows[-1]
    if method == "doremi":
        avg = ", ".join(f"{n} {w:.3f}" for n, w in zip(NAMES, last["average_weights"], strict=True))
        assert quantities(last).startswith(f"average {avg}; loss weights code ")
    if method == "odm":
        assert quantities(last) == f"ε_t {last['epsilon_t']:.4g}"
    if method == "ado":
        alphas = [f["alpha"] for f in last["fit"]]
        assert quantities(last) == "α " + ", ".join(
            f"{n} {a:.3f}" for n, a in zip(NAMES, alphas, strict=True)
        )
    if method == "aioli":
        a = np.array(last["interaction"])
        assert quantities(last) == "ΣA " + ", ".join(
            f"{n} {v:.3f}" for n, v in zip(NAMES, a.sum(axis=0), strict=True)
        )
        i = lines.index("Aioli's A[j][i] (stream j's loss drop from training on stream i):")
        assert lines[i + 1] == "  code: " + ", ".join(
            f"{n} {v:.3f}" for n, v in zip(NAMES, a[0], strict=True)
        )
    if method == "skillit":
        assert quantities(last).startswith("A·ΣL code ")
    if method == "file":
        sha = hashlib.sha256((tmp_path / "weights.json").read_bytes()).hexdigest()
        assert quantities(last) == f"sha256 {sha[:12]}"
        assert f"weights file {tmp_path / 'weights.json'}: sha256 {sha}" in lines


@pytest.mark.parametrize("method", list(KEYS))
def test_the_reports_summary_names_the_method_and_adds_its_quantities(tmp_path, method):
    run, rows = _run_dir(tmp_path, method)
    text = summary(load_report(run)).splitlines()
    i = next(k for k, line in enumerate(text) if line.startswith("  stream weights "))
    assert text[i].endswith(f"(step {rows[-1]['step']}, {MIXED_BY[method]})")
    assert text[i + 1].strip() == quantities(rows[-1])


def test_a_softmax_history_reads_as_before():
    rows = [{"step": 1, "unit": "streams", "signal": "loss", "streams": ["a"], "weights": [1.0]},
            {"step": 2, "unit": "streams", "signal": "learnability", "streams": ["a"],
             "weights": [1.0]}]  # fmt: skip
    assert mixed_by(rows) == "signal loss → learnability"
    assert quantities(rows[0]) == ""
    odm = {**rows[0], "method": "odm", "signal": "loss"}
    assert mixed_by([rows[0], odm]) == "signal loss → method odm (training loss)"


def test_the_monitors_get_each_methods_quantities(tmp_path):
    tags: dict[str, set[str]] = {}
    for method in KEYS:
        row = _rows(method, tmp_path)[-1]
        events = bucket_events(row)  # type: ignore[arg-type]
        assert all(x == row["step"] for _, _, x in events)
        tags[method] = {t for t, _, _ in events}
        by_tag = {t: v for t, v, _ in events}
        if method == "odm":
            assert by_tag["curriculum/epsilon_t"] == row["epsilon_t"]
        if method == "ado":
            assert by_tag["curriculum/alpha/prose"] == row["fit"][1]["alpha"]
        if method == "aioli":
            assert by_tag["curriculum/interaction/noise/code"] == row["interaction"][2][0]
    weights = {f"curriculum/stream_weights/{n}" for n in NAMES}
    assert tags["doremi"] == weights | {
        f"curriculum/{f}/{n}" for f in ("average_weights", "loss_weights") for n in NAMES
    }
    assert tags["odm"] == weights | {"curriculum/epsilon_t"}
    assert tags["ado"] == weights | {f"curriculum/alpha/{n}" for n in NAMES}
    assert tags["aioli"] == weights | {
        f"curriculum/interaction/{j}/{i}" for j in NAMES for i in NAMES
    } | {f"curriculum/interaction_sum/{n}" for n in NAMES}
    assert tags["skillit"] == weights | {f"curriculum/skillit_scores/{n}" for n in NAMES}
    assert tags["file"] == weights
