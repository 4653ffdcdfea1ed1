"""ODM's update replays the reference's own ``SmoothedMeanWeightUpdater`` to 1e-9.

Reference: ``alon-albalak/online-data-mixing``, ``megatron/data/data_sampling_utils.py`` at
commit edbfdadb62b0388120b6198b1743067a7cd990dc, ``SmoothedMeanWeightUpdater.update`` (one
domain per step, exponentiated weights: the rule we run) and ``.group_update`` (every domain of a
mixed batch, weights without the exp: replayed with ``exponentiate=False``). The golden vectors
(``tests/data/mixers/odm_golden.npz``) were made by the reference's own class, compiled from its
source by ``tests/data/mixers/make_odm_golden.py``, over 1,000 updates per case for K = 2, 5, 17.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from curriculum_ds.dynamic.odm import odm_update

GOLDEN = np.load(Path(__file__).parents[2] / "data" / "mixers" / "odm_golden.npz")
CASES = sorted({k.rsplit("_", 1)[0] for k in GOLDEN.files if k != "commit"})


@pytest.mark.parametrize("case", CASES)
def test_odm_update_replays_the_reference(case: str) -> None:
    path, k_text, alpha_text = case.split("_")
    k, alpha = int(k_text[1:]), float(alpha_text[1:])
    rewards = GOLDEN[f"{case}_rewards"]
    expected_probs, expected_eps = GOLDEN[f"{case}_probs"], GOLDEN[f"{case}_eps"]
    assert rewards.shape == (1000, k)
    estimated, eps = np.zeros(k), 1.0 / k
    worst = 0.0
    for i, t in enumerate(GOLDEN[f"{case}_iterations"]):
        estimated, eps, probs = odm_update(
            estimated, eps, rewards[i], int(t), smoothing=alpha, exponentiate=path == "single"
        )
        assert eps == pytest.approx(expected_eps[i], abs=1e-15)
        worst = max(worst, float(np.abs(probs - expected_probs[i]).max()))
    assert worst <= 1e-9, f"{case}: max |Δw| = {worst:.3g}"
    assert abs(expected_probs[-1].sum() - 1) < 1e-12


def test_the_exponentiated_update_does_not_overflow_where_the_reference_would() -> None:
    # K = 2, first update, loss 10 nats: exp(0.5 · 0.1 · e^10) = exp(1101) overflows in the
    # reference's math.exp; the max-shifted softmax gives the same weights finitely
    estimated, eps, probs = odm_update(np.zeros(2), 0.5, np.array([10.0, np.nan]), 1, smoothing=0.9)
    assert eps == 0.5  # min(1/2, sqrt(ln 2 / 2)) = 1/2: (1 - K·ε) = 0, uniform weights
    assert probs.tolist() == [0.5, 0.5]
    _, eps, probs = odm_update(estimated, eps, np.array([10.0, 2.0]), 4, smoothing=0.9)
    assert np.all(np.isfinite(probs))
    assert probs[0] > probs[1]
    assert eps == pytest.approx(np.sqrt(np.log(2) / 8))
