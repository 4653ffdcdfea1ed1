"""Aioli's round update replays the reference's own output to 1e-9.

Reference: ``HazyResearch/aioli``, ``trainer/aioli_trainer.py``, commit
a2361123335cb91d68f5ad86a6c85de7a79e6d5e (``AioliTrainer.train`` and
``learn_params_subroutine``, run unmodified by ``tests/data/mixers/make_aioli_skillit_golden.py``
with the training stubbed around them and synthetic eval losses). The vectors hold, per round,
the eval losses before the probes, the probe order the reference drew, the eval losses after
each probe, and the weights it handed its sampler: 1,130 rounds over K = 2, 5 and 17, with EMA
and without, one_hot_factor 0.625 to 0.9.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from curriculum_ds.dynamic.aioli_rule import (
    learn_params,
    normalize_a,
    probe_mixture,
    probe_order,
    round_weights,
)

GOLDEN = Path(__file__).parents[2] / "data" / "mixers" / "aioli_golden.npz"


def _cases() -> dict[str, dict[str, np.ndarray]]:
    data = np.load(GOLDEN)
    cases: dict[str, dict[str, np.ndarray]] = {}
    for key in data.files:
        case, name = key.split("/")
        cases.setdefault(case, {})[name] = data[key]
    return cases


CASES = _cases()


def test_the_vectors_hold_over_1000_rounds_for_k_2_5_17() -> None:
    assert sum(len(c["weights"]) for c in CASES.values()) >= 1000
    assert {int(c["k"]) for c in CASES.values()} == {2, 5, 17}


@pytest.mark.parametrize("name", sorted(CASES))
def test_rounds_match_the_reference(name: str) -> None:
    case = CASES[name]
    k, eta, ema = int(case["k"]), float(case["eta"]), float(case["ema"])
    lp_rounds, ohf = int(case["lp_rounds"]), float(case["one_hot_factor"])
    prior = np.ones(k)  # the reference's weights_init after its prior phase
    smoothed = None
    weights = prior / k
    worst = 0.0
    for r in range(len(case["weights"])):
        a = learn_params(
            case["loss_0"][r].astype(np.float64),
            case["orders"][r].astype(np.int64),
            case["probe_losses"][r].astype(np.float64),
            lp_rounds=lp_rounds,
            one_hot_factor=ohf,
        )
        a = normalize_a(a)
        if r < len(case["graphs"]):  # its normalised A of the round, before the EMA
            np.testing.assert_allclose(a, case["graphs"][r], rtol=0, atol=1e-12)
        if np.isnan(ema):  # no EMA: the reference multiplies the previous weights
            weights = round_weights(weights if r else prior, a, eta)
        else:
            smoothed = a if smoothed is None else (1 - ema) * a + ema * smoothed
            weights = round_weights(prior, smoothed, eta)
        assert np.isfinite(weights).all()
        worst = max(worst, float(np.abs(weights - case["weights"][r]).max()))
    assert worst <= 1e-9, worst


def test_probe_mixtures_are_the_references() -> None:
    assert probe_mixture(2, 1, 0.625).tolist() == [0.375, 0.625]
    w = probe_mixture(5, 3, 0.7)
    assert w[3] == 0.7
    assert np.allclose(w[[0, 1, 2, 4]], 0.075)
    assert np.isclose(w.sum(), 1)


def test_probe_order_is_lp_rounds_permutations_fixed_by_the_seed() -> None:
    order = probe_order(7, 1, 3, 5, 4)
    assert order.shape == (20,)
    for sweep in order.reshape(4, 5):
        assert sorted(sweep.tolist()) == [0, 1, 2, 3, 4]
    assert (probe_order(7, 1, 3, 5, 4) == order).all()
    assert not (probe_order(8, 1, 3, 5, 4) == order).all()
    assert not (probe_order(7, 1, 4, 5, 4) == order).all()
