"""Aioli's arithmetic (Chen et al., ICLR 2025), pure: probe mixtures, LearnParams, the weights.

Exact to ``HazyResearch/aioli`` ``trainer/aioli_trainer.py`` at
a2361123335cb91d68f5ad86a6c85de7a79e6d5e (``learn_params_subroutine`` and the round update
inline in ``AioliTrainer.train``), replayed against that code's own output in
``tests/unit/dynamic/test_aioli_matches_the_reference.py``. For ``K`` streams, a round:

1. **Probes.** For each of ``lp_rounds`` sweeps, every stream ``i`` in a random order
   (:func:`probe_order`), ``probe_steps`` optimizer steps on the mixture ``one_hot_factor`` on
   ``i``, ``(1 - one_hot_factor) / (K - 1)`` on each other stream (:func:`probe_mixture`);
   after each probe the eval loss of every stream is measured, and its drop since the previous
   measurement is added to column ``i``: ``G[:, i] += L_before - L_after``
   (:func:`learn_params`, which also divides by ``lp_rounds``).
2. **Un-mix.** Each row of ``G`` is solved against the probe mixtures ``W``: ``W a = G[j]``
   (the row ``j`` of ``A``); ``one_hot_factor = 1`` leaves ``G`` as it is.
3. **Normalise** (``--aioli_normalize_A``, which the reference's scripts pass):
   shift by the minimum when it is negative, then divide by the sum (:func:`normalize_a`).
4. **EMA** (``--ema``): ``A ← (1 - ema)·A_new + ema·A``, the first round's ``A`` as it is;
   the weights are ``w_init · exp(η · Σ_rows A)`` (:func:`round_weights`). Without ``ema`` the
   reference multiplies the previous weights instead: ``w ← w · exp(η · Σ_rows A_new)``.

Every function returns float64 and is deterministic.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

__all__ = [
    "learn_params",
    "normalize_a",
    "probe_mixture",
    "probe_mixtures",
    "probe_order",
    "round_weights",
    "unmix",
]

_ORDER_TAG = 0x41494F4C49  # "AIOLI": keeps the probe order's stream apart from the samplers'


def probe_mixture(num_streams: int, stream: int, one_hot_factor: float) -> npt.NDArray[np.float64]:
    """The mixture of a probe of ``stream``: ``one_hot_factor`` on it, the rest spread evenly."""
    w = np.ones(num_streams, dtype=np.float64) * (1 - one_hot_factor) / (num_streams - 1)
    w[stream] = one_hot_factor
    return w


def probe_mixtures(num_streams: int, one_hot_factor: float) -> npt.NDArray[np.float64]:
    """``W``: row ``i`` is the mixture of a probe of stream ``i`` (``(K, K)``)."""
    return np.stack([probe_mixture(num_streams, i, one_hot_factor) for i in range(num_streams)])


def probe_order(
    seed: int, phase_idx: int, round_idx: int, num_streams: int, lp_rounds: int
) -> npt.NDArray[np.int64]:
    """The streams a round probes, in order: ``lp_rounds`` random permutations of ``0..K-1``.

    The reference concatenates ``np.random.permutation(K)`` ``lp_rounds`` times from numpy's
    global RNG; here the RNG is seeded from (run seed, phase, round), so every rank and every
    resume draws the same order.
    """
    rng = np.random.default_rng([seed, _ORDER_TAG, phase_idx, round_idx])  # a SeedSequence
    return np.concatenate([rng.permutation(num_streams) for _ in range(lp_rounds)]).astype(np.int64)


def learn_params(
    loss_0: npt.NDArray[np.float64],
    order: npt.NDArray[np.int64],
    probe_losses: npt.NDArray[np.float64],
    *,
    lp_rounds: int,
    one_hot_factor: float,
) -> npt.NDArray[np.float64]:
    """The round's ``A``, un-mixed, before normalisation (LearnParams).

    Args:
        loss_0: float64 ``(K,)`` eval loss per stream before the first probe.
        order: ``(K·lp_rounds,)`` the stream each probe leaned toward, in order.
        probe_losses: float64 ``(K·lp_rounds, K)``, the eval losses after each probe.
        lp_rounds: sweeps over the streams (the drops are averaged over them).
        one_hot_factor: the probes' weight on their stream; 1 skips the un-mixing.

    Returns:
        float64 ``(K, K)``: ``A[j, i]``, the drop of stream ``j``'s loss per unit of stream
        ``i`` in the mixture.
    """
    num_streams = len(loss_0)
    drops = np.zeros((num_streams, num_streams), dtype=np.float64)
    previous = np.asarray(loss_0, dtype=np.float64)
    for stream, after in zip(order, np.asarray(probe_losses, dtype=np.float64), strict=True):
        drops[:, stream] += previous - after
        previous = after
    return unmix(drops, lp_rounds=lp_rounds, one_hot_factor=one_hot_factor)


def unmix(
    drops: npt.NDArray[np.float64], *, lp_rounds: int, one_hot_factor: float
) -> npt.NDArray[np.float64]:
    """``A`` from the summed drops ``G`` (``G[:, i]``: the drops after the probes of ``i``).

    ``G / lp_rounds``, then each row solved against the probe mixtures (``W a = row``);
    ``one_hot_factor = 1`` returns ``G / lp_rounds``.
    """
    graph = np.asarray(drops, dtype=np.float64) / lp_rounds
    if one_hot_factor == 1:
        return graph
    mixtures = probe_mixtures(len(graph), one_hot_factor)
    return np.stack([np.linalg.solve(mixtures, row) for row in graph])


def normalize_a(a: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    """Shift so the minimum is ≥ 0 (only when it is negative), then divide by the sum."""
    a = np.array(a, dtype=np.float64)
    low = a.min()
    if low < 0:
        a -= low
    return a / a.sum()


def round_weights(
    prior: npt.NDArray[np.float64], a: npt.NDArray[np.float64], eta: float
) -> npt.NDArray[np.float64]:
    """``prior · exp(η · Σ_rows a)``, normalised to sum to 1."""
    w = np.multiply(np.asarray(prior, dtype=np.float64), np.exp(eta * a.sum(axis=0)))
    return w / w.sum()
