"""ADO's policy replays the reference's ``AdoSelector`` to 1e-9; its fit matches the reference's.

Reference: ``yidingjiang/ado``, ``src/data_selectors/ado.py`` at commit
bc3d8d0e4d6a13f40f03b2e8fb83369d773a2611: ``AdoSelector.update`` + ``curr_dist`` (the policy,
given the same fitted parameters) and ``compute_scaling_law_params`` / ``fit_scaling_law`` (the
Savitzky–Golay-smoothed curve and the jaxopt L-BFGS fit from the 512-point grid). The golden
vectors (``tests/data/mixers/ado_golden.npz``) were made by the reference's own module, imported
by ``tests/data/mixers/make_ado_golden.py`` in a virtualenv with jax/jaxopt from PyPI; the
fits also with jax in float64 (``--x64``, ``ado_fit_x64.npz``).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from ado_cases import batch, dynamic, phase

from curriculum_ds.dynamic.ado import ADOReweighter
from curriculum_ds.dynamic.ado_fit import fit_data, fit_scaling_law, objective, scaling_law

GOLDEN = np.load(Path(__file__).parents[2] / "data" / "mixers" / "ado_golden.npz")


@pytest.mark.parametrize("k", [2, 5, 17])
def test_the_policy_replays_the_reference_given_its_fitted_parameters(k: int) -> None:
    ids, losses = GOLDEN[f"policy_K{k}_ids"], GOLDEN[f"policy_K{k}_losses"]
    params, expected = GOLDEN[f"policy_K{k}_params"], GOLDEN[f"policy_K{k}_probs"]
    # the reference's start_step 100; refits are the golden parameters, set as the reference's
    # selector had them (no fit of ours: refit_every out of reach)
    rw = ADOReweighter(dynamic("ado", warmup_steps=100, refit_every=10**9))
    rw.start_phase(phase(GOLDEN[f"policy_K{k}_natural"]), None)
    worst, updates = 0.0, 0
    for t in range(len(ids)):
        rw.observe(batch(ids[t]), losses[t].astype(np.float64))
        if np.isfinite(params[t]).all():
            rw.params = params[t].copy()
        update = rw.maybe_recompute(t + 1)
        if np.isnan(expected[t]).any():
            assert update is None
            continue
        assert update is not None
        assert update.proportions is not None
        worst = max(worst, float(np.abs(update.proportions - expected[t]).max()))
        updates += 1
    assert updates >= 1000
    assert worst <= 1e-9, f"K={k}: max |Δw| = {worst:.3g}"


FIT_X64 = np.load(Path(__file__).parents[2] / "data" / "mixers" / "ado_fit_x64.npz")


def _our_fit(k: int, s: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Our fit of stream ``s`` of the ``fit_K{k}`` case: ``(params, n, L)`` of its points."""
    task_loss = GOLDEN[f"fit_K{k}_task_loss"].astype(np.float64)
    cum = np.cumsum(GOLDEN[f"fit_K{k}_task_cnt"][:, 0].astype(np.float64))
    n, loss = fit_data(
        task_loss[:, s],
        cum,
        skip_steps=int(GOLDEN[f"fit_K{k}_ignore_steps"]),
        stride=10,
        savgol_window=101,
        savgol_order=3,
    )
    return fit_scaling_law(n, loss, num_starts=2), n, loss


@pytest.mark.parametrize("k", [2, 5])
def test_the_fit_finds_the_references_law(k: int) -> None:
    """Parameters within 1e-4 relative of the reference's fit run in float64 where the objective
    has a strict minimum; where it is flat (a valley along A and α) they may differ, and then our
    objective is at most the reference's and the fitted curves agree to 1e-6 at every point.

    Against the reference as it runs (jax float32, L-BFGS tol 1e-5): our objective is at most
    its, and the curves agree to 1e-5.
    """
    assert np.array_equal(GOLDEN[f"fit_K{k}_task_loss"], FIT_X64[f"fit_K{k}_task_loss"])
    reference64 = FIT_X64[f"fit_K{k}_params"]
    reference32 = GOLDEN[f"fit_K{k}_params"].astype(np.float64)
    assert reference64.dtype == np.float64
    flat = []
    for s in range(k):
        ours, n, loss = _our_fit(k, s)
        log_n, log_loss = np.log(n), np.log(loss)
        for reference, tol in ((reference64[s], 1e-6), (reference32[s], 1e-5)):
            assert objective(ours, log_n, log_loss)[0] <= objective(reference, log_n, log_loss)[0]
            curve = scaling_law(ours, n) / scaling_law(reference, n) - 1
            assert np.abs(curve).max() <= tol, (k, s, np.abs(curve).max())
        relative = np.abs(ours - reference64[s]) / np.abs(reference64[s])
        if relative.max() > 1e-4:
            flat.append((s, float(relative.max())))
    # measured: every stream within 5e-6 but K=5 stream 3 (1.1e-3, our objective 1.2e-12 lower)
    assert flat == ([] if k == 2 else [(3, pytest.approx(1.07e-3, rel=0.05))])
