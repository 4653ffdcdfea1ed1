"""Weight arrays for the sampler properties, and a goodness-of-fit check of draw counts."""

from __future__ import annotations

import numpy as np
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

_WEIGHTS = hnp.arrays(
    np.float64,
    st.integers(1, 200),
    elements=st.one_of(st.just(0.0), st.floats(0.0, 1e3), st.sampled_from([1e-300, 1e300])),
)


def _chi_square_ok(counts: np.ndarray, probs: np.ndarray, n: int) -> bool:
    """Generous goodness-of-fit bound (a fixed seed makes the test deterministic)."""
    mask = probs > 0
    assert counts[~mask].sum() == 0, "a zero-weight index was drawn"
    expected = probs[mask] * n
    chi2 = float((((counts[mask] - expected) ** 2) / expected).sum())
    dof = int(mask.sum()) - 1
    return chi2 < dof + 8 * np.sqrt(2 * max(dof, 1)) + 10
