"""ADO's per-stream scaling-law fit: ``L(n) = e^E + e^A / n^α`` on a stream's loss curve.

The fit of Jiang et al. 2025, "Adaptive Data Optimization: Dynamic Sample Selection with Scaling
Laws" (ICLR'25), as ``yidingjiang/ado`` ``src/data_selectors/ado.py`` (commit
``bc3d8d0e4d6a13f40f03b2e8fb83369d773a2611``) writes it: ``compute_scaling_law_params`` and
``fit_scaling_law``:

* the data: the stream's per-step training loss smoothed along the steps by a Savitzky–Golay
  filter (``scipy.signal.savgol_filter``, window 101, order 3; :func:`fit_data` scales the window
  down to the curve's length for a short run), then every ``stride``-th step from
  ``skip_steps`` on, against ``n`` = the cumulative number of samples of *all* streams
  (the reference's ``use_same_step_size=True``);
* the objective (:func:`objective`): the Huber loss (δ = 1e-3) between ``log L`` and
  ``log(e^{A - α log n} + e^E)``, summed over the points, plus the reference's linear penalties
  that keep ``α ∈ [0, 0.8]``, ``A ≤ 6.5`` and ``E ≥ 0.5``;
* the optimiser: L-BFGS from each point of the reference's 8 × 8 × 8 grid
  (``A ∈ {-2..5}``, ``E ∈ {-2, -1.5, .., 1.5}``, ``α ∈ {0, 0.1, .., 0.7}``), keeping the run of
  the lowest final objective. The reference runs ``jaxopt.LBFGS`` (float32, tol 1e-5, 200
  iterations); this runs ``scipy.optimize.minimize(method="L-BFGS-B")`` in float64 with the
  analytic gradient and no bounds (the penalties are the reference's bounds).

Pure numpy/scipy, deterministic: the same curve gives bit-identical parameters.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import numpy as np
import numpy.typing as npt
from scipy.optimize import minimize
from scipy.signal import savgol_filter

__all__ = ["HUBER_DELTA", "fit_data", "fit_scaling_law", "init_grid", "objective", "scaling_law"]

HUBER_DELTA = 1e-3
"""The Huber loss's δ on ``log L`` (the reference's ``huber_loss`` default)."""


def init_grid() -> npt.NDArray[np.float64]:
    """The reference's 512 starting points ``(A, E, α)``, float64 ``(512, 3)``, in its order."""
    a, e, alpha = np.meshgrid(
        np.arange(-2, 6, 1.0), np.arange(-2, 2, 0.5), np.arange(0, 0.8, 0.1), indexing="ij"
    )
    return np.stack((a.ravel(), e.ravel(), alpha.ravel()), axis=1)


def scaling_law(params: npt.ArrayLike, n: npt.ArrayLike) -> npt.NDArray[np.float64]:
    """``e^E + e^A / n^α`` for ``params = (A, E, α)`` (scalars or ``(K,)``) at ``n`` samples."""
    a, e, alpha = np.asarray(params, dtype=np.float64)
    return np.asarray(np.exp(e) + np.exp(a) / np.asarray(n, dtype=np.float64) ** alpha)


def objective(
    params: npt.NDArray[np.float64],
    log_n: npt.NDArray[np.float64],
    log_loss: npt.NDArray[np.float64],
) -> tuple[float, npt.NDArray[np.float64]]:
    """The reference's ``loss_fn`` and its gradient at ``params = (A, E, α)``.

    Args:
        params: float64 ``(3,)``.
        log_n: float64 ``(T,)``, log of the cumulative samples at each point.
        log_loss: float64 ``(T,)``, log of the (smoothed) loss at each point.

    Returns:
        ``(value, gradient float64 (3,))``; at a penalty's kink the gradient takes the side the
        penalty is off.
    """
    a, e, alpha = params
    arg1 = a - alpha * log_n
    pred = np.logaddexp(arg1, e)
    diff = log_loss - pred
    abs_diff = np.abs(diff)
    big = abs_diff > HUBER_DELTA
    huber = np.where(big, HUBER_DELTA * (abs_diff - 0.5 * HUBER_DELTA), 0.5 * abs_diff**2)
    value = (
        huber.sum()
        + max(alpha - 0.8, 0.0)  # α ≤ 0.8
        - min(alpha, 0.001)  # α ≥ 0 (the reference's constant offset kept)
        + max(a - 6.5, 0.0)  # A ≤ 6.5
        - min(e - 0.5, 0.0)  # E ≥ 0.5
    )
    d_pred = np.where(big, -HUBER_DELTA * np.sign(diff), -diff)  # d huber / d pred
    share = np.exp(arg1 - pred)  # d pred / d arg1; d pred / d E = 1 - share
    grad = np.array(
        [
            (d_pred * share).sum() + (a > 6.5),
            (d_pred * (1.0 - share)).sum() - (e < 0.5),
            -(d_pred * share * log_n).sum() + (alpha > 0.8) - (alpha < 0.001),
        ]
    )
    return float(value), grad


def fit_data(
    losses: npt.NDArray[np.float64],
    cum_samples: npt.NDArray[np.float64],
    *,
    skip_steps: int,
    stride: int,
    savgol_window: int,
    savgol_order: int,
) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]:
    """The points one stream's fit reads: smoothed losses and cumulative samples.

    Args:
        losses: float64 ``(T,)``, the stream's training loss at each step so far (nats).
        cum_samples: float64 ``(T,)``, cumulative samples of all streams after each step.
        skip_steps: leading steps left out (the reference's ``ignore_steps``).
        stride: every ``stride``-th step from ``skip_steps`` on (the reference: 10).
        savgol_window: the Savitzky–Golay window (the reference: 101), cut to the largest odd
            number ≤ T when the curve is shorter; no smoothing when that is ≤ ``savgol_order``.
        savgol_order: the filter's polynomial order (the reference: 3).

    Returns:
        ``(n, L)``: float64 ``(P,)`` each, the fit's points.
    """
    window = min(savgol_window, len(losses) - (1 - len(losses) % 2))
    smooth = (
        savgol_filter(losses, window, savgol_order, axis=-1)
        if window > savgol_order
        else np.asarray(losses, dtype=np.float64)
    )
    return cum_samples[skip_steps::stride], smooth[skip_steps::stride]


@contextlib.contextmanager
def _one_blas_thread() -> Iterator[None]:
    """One BLAS thread while the fits run (``threadpoolctl``, a pinned dependency).

    L-BFGS-B's tiny BLAS calls (3 parameters) only pay thread start-ups: with 2 OpenBLAS
    threads on a busy 2-core machine a fit was 16x slower than with one. A launched rank has one
    already (``OMP_NUM_THREADS=1``, the launcher's setting); this covers other processes.
    """
    import threadpoolctl  # loaded with the first fit, not with the package

    with threadpoolctl.threadpool_limits(limits=1, user_api="blas"):
        yield


def fit_scaling_law(
    n: npt.NDArray[np.float64], loss: npt.NDArray[np.float64], *, num_starts: int = 512
) -> npt.NDArray[np.float64]:
    """``(A, E, α)`` of the lowest objective over L-BFGS runs from the reference's grid.

    Args:
        n: float64 ``(P,)`` cumulative samples at each point, > 0.
        loss: float64 ``(P,)`` the loss at each point, > 0.
        num_starts: runs from this many grid points, those of lowest objective (ties in the
            grid's order); 512: every point, as the reference. On loss curves the objective
            is nearly unimodal (most starts end at the same minimum), so a few suffice; the
            reference's vmapped runs cost nothing extra on an accelerator, ours run one by one.

    Returns:
        float64 ``(3,)``; NaN when no run ends finite (as the reference's ``nanargmin`` over
        non-finite values; the caller then keeps its previous parameters). Deterministic.
    """
    log_n = np.log(np.asarray(n, dtype=np.float64))
    log_loss = np.log(np.asarray(loss, dtype=np.float64))
    grid = init_grid()
    if num_starts < len(grid):
        first = np.array([objective(g, log_n, log_loss)[0] for g in grid])
        grid = grid[np.sort(np.argsort(first, kind="stable")[:num_starts])]
    best, best_value = np.full(3, np.nan), np.inf
    with _one_blas_thread():
        for start in grid:
            result = minimize(
                objective,
                start,
                args=(log_n, log_loss),
                jac=True,
                method="L-BFGS-B",
                options={"maxiter": 200, "ftol": 1e-15, "gtol": 1e-10},
            )
            if np.isfinite(result.fun) and result.fun < best_value:
                best, best_value = np.asarray(result.x, dtype=np.float64), float(result.fun)
    return best
