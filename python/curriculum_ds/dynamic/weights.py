"""The weights of a recompute: ``floor + (1 - K * floor) * softmax(score / temperature)``.

One formula for both units (K buckets or K streams) and every signal. It is DoReMi's smoothing
of the domain weights with the uniform distribution (Xie et al. 2023, "DoReMi: Optimizing Data
Mixtures Speeds Up Language Model Pretraining", Algorithm 1: ``(1 - c) * alpha + c * u``) with
``c = K * floor``, applied to a softmax of scores as in online data mixing (Albalak et al. 2023).
Every probability is ≥ ``floor`` and the sum is 1 without renormalising (clamping and then
renormalising, the common mistake, breaks the floor: case C05). The softmax subtracts the
maximum first, so a tiny temperature gives a one-hot softmax, never NaN or inf.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

__all__ = ["FLOOR_SLACK", "bucket_probs", "mixture_probs"]

FLOOR_SLACK = 1e-12
"""How far ``floor * K`` may exceed 1 (``DynamicConfig`` accepts the same slack)."""


def mixture_probs(
    scores: npt.ArrayLike, *, temperature: float, floor: float
) -> npt.NDArray[np.float64]:
    """Probabilities ``floor + (1 - K * floor) * softmax(scores / temperature)`` over K entries.

    Args:
        scores: Per-bucket or per-stream score, float ``(K,)``, finite (a mean signal in nats, or
            a relative loss drop for learnability).
        temperature: Softmax temperature, > 0. Small values approach argmax.
        floor: Minimum probability per entry, ``0 < floor <= 1 / K`` up to the config's rounding
            slack (``floor * K <= 1 + 1e-12``: a decimal such as 0.33333333333334 for 3
            buckets); at ``floor * K >= 1`` every entry is ``floor`` (uniform).

    Returns:
        float64 ``(K,)``, every entry ≥ ``floor``, summing to 1 within a few ulps
        (``|sum - 1| <= 1e-12``) without any renormalisation. Deterministic.

    Raises:
        ValueError: If ``scores`` is not 1-D or empty, temperature ≤ 0 (or NaN), the floor is out
            of range, or a score is not finite.
    """
    s = np.asarray(scores, dtype=np.float64)
    if s.ndim != 1:
        raise ValueError(f"scores must be 1-D, got shape {s.shape}")
    if len(s) == 0:
        raise ValueError("scores must have at least one bucket, got none")
    if not temperature > 0:
        raise ValueError(f"temperature must be > 0, got {temperature}")
    if not 0 < floor * len(s) <= 1 + FLOOR_SLACK or floor <= 0:
        raise ValueError(f"floor must be in (0, 1/num_buckets], got {floor} with {len(s)} buckets")
    if not np.all(np.isfinite(s)):
        raise ValueError(f"bucket scores must be finite, got {s.tolist()}")
    # z ≤ 0, so exp never overflows and the top entry gets exp(0) = 1 (the sum is ≥ 1); a tiny
    # temperature sends the other z to -inf, whose exp is exactly 0: a one-hot softmax, no NaN
    with np.errstate(over="ignore"):
        z = (s - s.max()) / temperature
    e = np.exp(z)
    softmax = e / e.sum()
    return floor + max(0.0, 1.0 - len(s) * floor) * softmax


bucket_probs = mixture_probs
"""The name of :func:`mixture_probs` from when only buckets were weighted."""
