"""Golden vectors of ADO's policy and fit, made by the reference's own code outside the project.

Reference: ``yidingjiang/ado``, ``src/data_selectors/ado.py`` at commit
bc3d8d0e4d6a13f40f03b2e8fb83369d773a2611: ``AdoSelector`` (``update``: per-step counts, the
per-stream loss with its imputation, the EMA of realised counts; ``curr_dist``: the policy;
``compute_scaling_law_params``: the Savitzky–Golay-smoothed curve, every 10th step after
``ignore_steps``, and ``fit_scaling_law``'s vmapped ``jaxopt.LBFGS`` from the 512-point grid).

This script does not import curriculum_ds. It imports ``ado.py`` itself from a directory holding
it (``--source DIR``), in a virtualenv with jax 0.10.2, jaxopt 0.8.5, scipy 1.17.1 and numpy
2.4.6 from PyPI; ``ado.py``'s ``import wandb`` is answered by an empty stand-in module (wandb is
only used for logging). jax runs on the CPU in its default float32, as the reference runs.

Inputs (seeded, numpy PCG64):

* ``policy_K{K}`` for K in (2, 5, 17): 1,200 steps of 32 samples, each sample's stream drawn
  from the selector's current distribution, each sample's loss uniform in [1, 6] (float32).
  ``start_step`` 100, no refit of the selector's own (``update_interval`` out of reach): at step
  100 and every 50 steps after, fitted parameters ``(A, E, α)`` per stream are set on the
  selector (random: A ∈ [-1, 5], E ∈ [0.5, 1.5], α ∈ [0, 0.8], as a refit would), then
  ``update`` and ``curr_dist`` run as the reference's loader calls them. Saved: ``ids`` int64
  ``(T, 32)``, ``losses`` float32 ``(T, 32)``, ``params`` float64 ``(T, K, 3)`` (those in force
  at each step; NaN before the first), ``probs`` float64 ``(T, K)`` (``curr_dist``; NaN while it
  returns None), ``natural`` float64 ``(K,)`` (the empirical distribution).
* ``fit_K{K}`` for K in (2, 5): a loss curve per stream, ``L = e^E + e^A·n^-α`` (n: cumulative
  samples) plus Gaussian noise (σ 0.05 per sample), 32 samples per step drawn from the natural
  distribution, for 400 (K = 2) or 600 (K = 5, ``ignore_steps`` 100) steps through ``update``,
  then ``compute_scaling_law_params``. Saved: ``task_loss`` float32 ``(T, K)`` and ``task_cnt``
  int32 ``(T, K)`` (the selector's own arrays), ``ignore_steps``, ``params`` float32 ``(K, 3)``
  (the reference's fit), ``truth`` (the curves' own parameters).

Output: ``ado_golden.npz`` beside this script. With ``--x64`` (jax's ``jax_enable_x64``: the
same code in float64), the fits only, as ``ado_fit_x64.npz``: the reference's float32 L-BFGS
stops (tol 1e-5) where the objective is still flat to ~1e-11, so its parameters are compared
with ours in float64 too.

Run: ``python make_ado_golden.py --source /path/to/ado/src/data_selectors [--x64]`` (a few
minutes on 2 CPU cores: the jaxopt fit compiles per K).
"""

from __future__ import annotations

import argparse
import sys
import types
from pathlib import Path

import numpy as np

REFERENCE_COMMIT = "bc3d8d0e4d6a13f40f03b2e8fb83369d773a2611"
POLICY_STREAMS = (2, 5, 17)
FIT_CASES = ((2, 400, 0), (5, 600, 100))
"""(K, steps, ignore_steps) of each fit."""
BATCH = 32
POLICY_STEPS = 1200
START_STEP = 100
PARAMS_EVERY = 50


def random_params(rng: np.random.Generator, k: int) -> np.ndarray:
    """``(K, 3)`` parameters ``(A, E, α)`` a refit could return."""
    return np.stack(
        [rng.uniform(-1, 5, k), rng.uniform(0.5, 1.5, k), rng.uniform(0.0, 0.8, k)], axis=1
    )


def policy_case(ado: types.ModuleType, k: int, seed: int) -> dict[str, np.ndarray]:
    """The reference's ``update`` + ``curr_dist`` over POLICY_STEPS steps with set parameters."""
    rng = np.random.default_rng(seed)
    natural_counts = rng.integers(1_000, 100_000, k).astype(np.float64)
    selector = ado.AdoSelector(
        k, natural_counts, 1024, ignore_steps=0, start_step=START_STEP, update_interval=10**9
    )
    ids = np.zeros((POLICY_STEPS, BATCH), dtype=np.int64)
    losses = np.zeros((POLICY_STEPS, BATCH), dtype=np.float32)
    params = np.full((POLICY_STEPS, k, 3), np.nan)
    probs = np.full((POLICY_STEPS, k), np.nan)
    current = selector.empirical_dist
    for itr in range(POLICY_STEPS):
        if itr >= START_STEP and (itr - START_STEP) % PARAMS_EVERY == 0:
            selector.current_params = random_params(rng, k)
        p = np.float64(current)
        ids[itr] = rng.choice(k, BATCH, p=p / p.sum())
        losses[itr] = rng.uniform(1.0, 6.0, BATCH).astype(np.float32)
        selector.update(ids[itr], losses[itr], itr, 1e-3, metrics={})
        out = selector.curr_dist(itr)
        if selector.current_params is not None:
            params[itr] = selector.current_params
        if out is not None:
            probs[itr] = out
            current = out
    return {
        "ids": ids,
        "losses": losses,
        "params": params,
        "probs": probs,
        "natural": np.asarray(selector.empirical_dist, dtype=np.float64),
    }


def fit_case(
    ado: types.ModuleType, k: int, steps: int, ignore: int, seed: int
) -> dict[str, np.ndarray]:
    """Noisy power-law curves through ``update``, then the reference's own fit."""
    rng = np.random.default_rng(seed)
    natural_counts = rng.integers(1_000, 100_000, k).astype(np.float64)
    truth = np.stack(
        [rng.uniform(0.5, 2.5, k), rng.uniform(0.6, 1.4, k), rng.uniform(0.2, 0.6, k)], axis=1
    )
    selector = ado.AdoSelector(
        k, natural_counts, 1024, ignore_steps=ignore, start_step=10**9, update_interval=10**9
    )
    natural = natural_counts / natural_counts.sum()
    for itr in range(steps):
        ids = rng.choice(k, BATCH, p=natural)
        n = BATCH * (itr + 1)
        clean = np.exp(truth[ids, 1]) + np.exp(truth[ids, 0]) * n ** -truth[ids, 2]
        step_losses = (clean + rng.normal(0.0, 0.05, BATCH)).astype(np.float32)
        selector.update(ids, step_losses, itr, 1e-3, metrics={})
    fitted = np.asarray(selector.compute_scaling_law_params())
    params = fitted.astype(fitted.dtype).reshape(k, 3)  # float32, or float64 with --x64
    return {
        "task_loss": selector.task_loss_TxK,
        "task_cnt": selector.task_cnt_TxK,
        "ignore_steps": np.array(ignore),
        "params": params,
        "truth": truth,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--source", type=Path, required=True, help="directory holding ado.py")
    parser.add_argument("--x64", action="store_true", help="the fits only, jax in float64")
    args = parser.parse_args()
    name = "ado_fit_x64.npz" if args.x64 else "ado_golden.npz"
    out = Path(__file__).with_name(name)
    sys.modules.setdefault("wandb", types.ModuleType("wandb"))
    sys.path.insert(0, str(args.source))
    if args.x64:
        import jax

        jax.config.update("jax_enable_x64", True)
    import ado  # the reference's module

    arrays: dict[str, np.ndarray] = {"commit": np.array(REFERENCE_COMMIT)}
    for i, k in enumerate(() if args.x64 else POLICY_STREAMS):
        for key, value in policy_case(ado, k, seed=100 + i).items():
            arrays[f"policy_K{k}_{key}"] = value
    for i, (k, steps, ignore) in enumerate(FIT_CASES):
        for key, value in fit_case(ado, k, steps, ignore, seed=200 + i).items():
            arrays[f"fit_K{k}_{key}"] = value
    np.savez_compressed(out, **arrays)
    print(f"wrote {out} ({len(arrays)} arrays)")


if __name__ == "__main__":
    main()
