"""The held-out losses a method reads, in the order of the phase's streams (Aioli, Skill-it)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import numpy.typing as npt

__all__ = ["losses_of"]


def losses_of(losses: Mapping[str, float], stream_names: Sequence[str]) -> npt.NDArray[np.float64]:
    """float64 ``(K,)``: the loss of each stream by name; NaN where the evaluation has none.

    The config checked that every train stream has a held-out stream of its name; a stream
    without loss-bearing tokens in its eval samples has no loss (NaN here, and the method keeps
    its weights).
    """
    return np.array([losses.get(name, np.nan) for name in stream_names], dtype=np.float64)
