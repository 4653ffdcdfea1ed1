"""The arithmetic of ``curriculum-ds ablate`` in-process: JSON merge patches (RFC 7386's own
examples), Student-t intervals and paired deltas against numpy/scipy, the table and the picture
(issue 19 items 1 and 4)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from curriculum_ds.ablate.experiment import first_difference, merge_patch
from curriculum_ds.ablate.plot import mean_curve, render_png
from curriculum_ds.ablate.summary import mean_ci95, render_markdown, summarize

# RFC 7386 Appendix A: (target, patch, result)
RFC_7386_EXAMPLES = [
    ({"a": "b"}, {"a": "c"}, {"a": "c"}),
    ({"a": "b"}, {"b": "c"}, {"a": "b", "b": "c"}),
    ({"a": "b"}, {"a": None}, {}),
    ({"a": "b", "b": "c"}, {"a": None}, {"b": "c"}),
    ({"a": ["b"]}, {"a": "c"}, {"a": "c"}),
    ({"a": "c"}, {"a": ["b"]}, {"a": ["b"]}),
    ({"a": {"b": "c"}}, {"a": {"b": "d", "c": None}}, {"a": {"b": "d"}}),
    ({"a": [{"b": "c"}]}, {"a": [1]}, {"a": [1]}),
    (["a", "b"], ["c", "d"], ["c", "d"]),
    ({"a": "b"}, ["c"], ["c"]),
    ({"a": "foo"}, None, None),
    ({"a": "foo"}, "bar", "bar"),
    ({"e": None}, {"a": 1}, {"e": None, "a": 1}),
    ([1, 2], {"a": "b", "c": None}, {"a": "b"}),
    ({}, {"a": {"bb": {"ccc": None}}}, {"a": {"bb": {}}}),
]


@pytest.mark.parametrize(("target", "patch", "result"), RFC_7386_EXAMPLES)
def test_merge_patch_follows_rfc_7386(target, patch, result):
    before = repr(target)
    assert merge_patch(target, patch) == result
    assert repr(target) == before  # the target is not modified


def test_first_difference_names_the_json_path():
    old = {"curriculum": {"schedule": [{"duration": "1tok"}, {"duration": "2tok"}]}}
    new = {"curriculum": {"schedule": [{"duration": "1tok"}, {"duration": "3tok"}]}}
    assert first_difference(old, new) == "curriculum.schedule[1].duration"
    assert first_difference(old, old) is None
    assert first_difference({"a": 1}, {"a": 1.0}) == "a"  # a type change is a change


def test_mean_ci95_is_the_student_t_half_width():
    x = np.array([3.1, 2.9, 3.4, 3.0])
    got = mean_ci95(list(x))
    assert got["mean"] == pytest.approx(x.mean(), abs=1e-12)
    want = stats.t.ppf(0.975, 3) * x.std(ddof=1) / math.sqrt(4)
    assert got["ci95"] == pytest.approx(want, abs=1e-12)
    assert mean_ci95([2.0]) == {"mean": 2.0, "ci95": None}


def _rows() -> list[dict]:
    rng = np.random.default_rng(0)
    rows = []
    for seed in (1, 2, 3):
        for arm, shift in (("ref", 0.0), ("b", -0.05)):
            a, c = 3.0 + rng.normal(0, 0.02), 2.0 + shift + rng.normal(0, 0.02)
            rows.append(
                {"arm": arm, "seed": seed, "loss": (a + c) / 2, "streams": {"a": a, "c": c}}
            )
    return rows


def test_deltas_are_paired_by_seed():
    rows = _rows()
    summary = summarize(rows, reference="ref", arms=["ref", "b"])
    by = {(r["arm"], r["seed"]): r for r in rows}
    d = np.array([by[("b", s)]["streams"]["c"] - by[("ref", s)]["streams"]["c"] for s in (1, 2, 3)])
    got = summary["arms"]["b"]["delta"]["streams"]["c"]
    assert got["mean"] == pytest.approx(d.mean(), abs=1e-12)
    assert got["ci95"] == pytest.approx(stats.t.ppf(0.975, 2) * d.std(ddof=1) / math.sqrt(3))
    assert got["per_seed"] == pytest.approx({"1": d[0], "2": d[1], "3": d[2]})
    assert summary["arms"]["ref"]["delta"]["loss"]["per_seed"] == {"1": 0.0, "2": 0.0, "3": 0.0}
    assert summary["seeds"] == [1, 2, 3]
    assert summary["arms"]["b"]["n"] == 3


def test_the_table_marks_deltas_whose_interval_excludes_zero(tmp_path):
    summary = summarize(_rows(), reference="ref", arms=["ref", "b"])
    table = render_markdown(summary)
    lines = table.splitlines()
    assert lines[0] == "| arm | n | eval loss | Δ loss | a | Δ a | c | Δ c |"
    assert lines[2].startswith("| ref (reference) | 3 | ")
    assert lines[3].startswith("| b | 3 | ")
    c_delta = lines[3].split(" | ")[-1]
    assert c_delta.startswith("-0.0")
    assert c_delta.endswith("* |")
    streams = {"a": {"loss": 4.0}, "c": {"loss": 3.0}}
    run = [{"tokens": t, "loss": 4 - t / 100, "streams": streams} for t in (10, 50, 100)]
    curves = {arm: [run] * 3 for arm in ("ref", "b")}
    png = render_png(summary, curves, tmp_path / "ablation.png")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    curve = mean_curve(curves["b"], None)
    assert curve.tolist() == [[10.0, 3.9], [50.0, 3.5], [100.0, 3.0]]


def test_exact_match_gets_means_intervals_paired_deltas_and_a_column(tmp_path):
    """A QA eval stream's exact_match (higher is better): statistics, table, picture, verdict."""
    from curriculum_ds.ablate.plot import _verdict

    rows = _rows()
    for row in rows:  # arm b recalls more facts
        row["exact_match"] = {"qa": (0.6 if row["arm"] == "b" else 0.2) + row["seed"] / 100}
    summary = summarize(rows, reference="ref", arms=["ref", "b"])
    got = summary["arms"]["b"]
    assert got["exact_match"]["qa"]["mean"] == pytest.approx(0.62, abs=1e-12)
    assert got["delta"]["exact_match"]["qa"]["mean"] == pytest.approx(0.4, abs=1e-12)
    assert got["delta"]["exact_match"]["qa"]["ci95"] == pytest.approx(0.0, abs=1e-12)
    assert "exact_match" not in summarize(_rows(), reference="ref", arms=["ref", "b"])["arms"]["b"]
    assert _verdict({"mean": 0.4, "ci95": 0.1}, higher_is_better=True) == "better"
    assert _verdict({"mean": 0.4, "ci95": 0.1}) == "worse"
    lines = render_markdown(summary).splitlines()
    assert lines[0].endswith("| qa exact_match ↑ | Δ qa exact_match |")
    assert lines[3].endswith("| 0.6200 ± 0.0248 | +0.4000 ± 0.0000 * |")
    assert "higher is better" in lines[-1]
    streams = {"a": {"loss": 4.0}, "c": {"loss": 3.0}, "qa": {"loss": 2.0, "exact_match": 0.5}}
    run = [{"tokens": t, "loss": 4 - t / 100, "streams": streams} for t in (10, 50, 100)]
    png = render_png(summary, {arm: [run] * 3 for arm in ("ref", "b")}, tmp_path / "a.png")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert mean_curve([run], "qa", "exact_match")[:, 1].tolist() == [0.5, 0.5, 0.5]
