"""Per-sample difficulty metrics that :func:`curriculum_ds.data.prepare` writes as columns.

See :mod:`curriculum_ds.data` for the definition of each column of :data:`METRIC_COLUMNS`.
"""

from __future__ import annotations

import zlib
from typing import Any

import numpy as np

__all__ = ["METRIC_COLUMNS", "compression_ratio", "token_entropy"]

METRIC_COLUMNS: tuple[str, ...] = ("num_tokens", "token_entropy", "compression_ratio")
"""Per-sample metric columns written by :func:`curriculum_ds.data.prepare`, in this order."""


def token_entropy(ids: np.ndarray) -> float:
    """Shannon entropy (bits per token) of the token-id frequencies within one sample.

    Args:
        ids: Token ids, any integer dtype, shape ``(n,)`` with ``n >= 1``.

    Returns:
        ``-Σ p log2 p`` over distinct ids; ``0.0`` for a single repeated id. Deterministic.
    """
    _, counts = np.unique(ids, return_counts=True)
    p = counts / counts.sum()
    return float(-(p * np.log2(p)).sum()) + 0.0  # + 0.0 turns -0.0 into 0.0


def compression_ratio(ids: np.ndarray, *, eos_id: int | None, pack_dtype: Any) -> float:
    """Raw-DEFLATE (level 9) compressed size over raw size of a sample's non-EOS ids.

    Args:
        ids: Token ids, shape ``(n,)``.
        eos_id: Id excluded before packing, or ``None``.
        pack_dtype: Unsigned dtype the ids are packed as (uint8 for bytes).

    Returns:
        The ratio (> 0; near or above 1 for very short samples); ``1.0`` when nothing is left.
    """
    body = ids if eos_id is None else ids[ids != eos_id]
    raw = np.ascontiguousarray(body, dtype=pack_dtype).tobytes()
    if not raw:
        return 1.0
    comp = zlib.compressobj(level=9, wbits=-15)
    size = len(comp.compress(raw)) + len(comp.flush())
    return size / len(raw)
