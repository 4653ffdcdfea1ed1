"""Skill-it's update replays the reference's own output to 1e-9.

Reference: ``HazyResearch/skill-it``, ``trainer/mw_trainer.py``, commit
807b3bf7b11970f3a6fb6201cb37dcc1a3335f00 (``MWTrainer.train``, run unmodified by
``tests/data/mixers/make_aioli_skillit_golden.py`` with the training stubbed around it and
synthetic eval losses). The vectors hold every evaluation's losses, how many of them each update
had seen, the skills graph (after the reference's 1 → 0.5 for off-diagonal edges), the prior
(``--mw_prior``) and the weights it handed its sampler: 1,100 updates over K = 2, 5 and 17
(the identity, the LEGO chain of ``scripts/lego/pt/skillit.sh``, random graphs), windows 1 to
5, one to three evaluations per update.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from curriculum_ds.dynamic.skillit_rule import initial_weights, skillit_weights

GOLDEN = Path(__file__).parents[2] / "data" / "mixers" / "skillit_golden.npz"


def _cases() -> dict[str, dict[str, np.ndarray]]:
    data = np.load(GOLDEN)
    cases: dict[str, dict[str, np.ndarray]] = {}
    for key in data.files:
        case, name = key.split("/")
        cases.setdefault(case, {})[name] = data[key]
    return cases


CASES = _cases()


def test_the_vectors_hold_over_1000_updates_for_k_2_5_17() -> None:
    assert sum(len(c["weights"]) for c in CASES.values()) >= 1000
    assert {int(c["k"]) for c in CASES.values()} == {2, 5, 17}


@pytest.mark.parametrize("name", sorted(CASES))
def test_updates_match_the_reference(name: str) -> None:
    case = CASES[name]
    eta, window = float(case["eta"]), int(case["window"])
    prior, graph = case["prior"], case["graph"]
    evals = case["evals"].astype(np.float64)
    first = initial_weights(prior, graph, eta)
    assert np.abs(first - case["initial"]).max() <= 1e-9
    worst = 0.0
    for seen, expected in zip(case["evals_seen"], case["weights"], strict=True):
        w = skillit_weights(prior, graph, list(evals[max(0, seen - window) : seen]), eta)
        assert np.isfinite(w).all()
        worst = max(worst, float(np.abs(w - expected).max()))
    assert worst <= 1e-9, worst
