"""A mixing method's own quantities in a ``curriculum_history.jsonl`` row, named once.

Every streams history row has the weights by stream name (``streams``, ``weights``); each
published method adds the quantities its paper reasons with (issue 33, item 8). This module
reads them out of a row, for the monitors (:mod:`curriculum_ds.records.monitors`) and for
``curve`` and ``report`` (:mod:`curriculum_ds.commands.stream_weights`), so the three show the
same thing under the same names:

============ ========================== =====================================================
method       quantity                   row key
============ ========================== =====================================================
``doremi``   the running average of w   ``average_weights`` (DoReMi's output), and with
             (per stream)               ``apply: "loss"`` the ``loss_weights``
``odm``      the exploration rate ε_t   ``epsilon_t``
``ado``      each stream's fitted α     ``fit[i]["alpha"]`` (of ``L(n) = e^E + e^A / n^α``)
``aioli``    the interaction matrix A   ``interaction`` (``A[j][i]``: stream ``j``'s loss drop
                                        from training on stream ``i``); per stream ``Σ_j A``
                                        is ``scores``
``skillit``  ``A · Σ L_eval`` per       ``scores``; the latest evaluation ``eval_losses``
             stream
``file``     the file's sha256          ``source["sha256"]`` (None: unreadable)
============ ========================== =====================================================

Pure Python: no I/O; every function is deterministic and leaves a key that a row lacks out.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["matrix", "per_stream", "scalars", "source_sha256"]


def _floats(values: Any) -> list[float | None] | None:
    if not isinstance(values, list):
        return None
    return [None if v is None else float(v) for v in values]


def per_stream(row: Mapping[str, Any]) -> list[tuple[str, list[float | None]]]:
    """A row's per-stream quantities other than ``weights``, in the order of ``streams``.

    Returns:
        ``(name, values)`` pairs: ``average_weights`` and ``loss_weights`` (DoReMi), ``alpha``
        (ADO's fitted exponent per stream), ``interaction_sum`` (Aioli's ``Σ_j A``, its
        ``scores``), ``skillit_scores`` (Skill-it's ``A · Σ L_eval``); a value None where the
        row holds none (an unfitted ADO stream).
    """
    out: list[tuple[str, list[float | None]]] = []
    for key in ("average_weights", "loss_weights"):
        if (values := _floats(row.get(key))) is not None:
            out.append((key, values))
    method = row.get("method")
    fit = row.get("fit")
    if method == "ado" and isinstance(fit, list):
        out.append(("alpha", _floats([f.get("alpha") for f in fit]) or []))
    if method in ("aioli", "skillit") and (scores := _floats(row.get("scores"))) is not None:
        out.append(("interaction_sum" if method == "aioli" else "skillit_scores", scores))
    return out


def scalars(row: Mapping[str, Any]) -> list[tuple[str, float]]:
    """A row's scalar quantities: ODM's ``epsilon_t``."""
    eps = row.get("epsilon_t")
    return [] if eps is None else [("epsilon_t", float(eps))]


def matrix(row: Mapping[str, Any]) -> list[list[float]] | None:
    """Aioli's interaction matrix ``A`` (K×K, ``A[j][i]``).

    None for another method, or a round that kept the previous weights.
    """
    a = row.get("interaction")
    return None if not isinstance(a, list) else [[float(v) for v in r] for r in a]


def source_sha256(row: Mapping[str, Any]) -> tuple[bool, str | None]:
    """``(is_file_row, sha256)``: the weights file's sha256 as read at a ``file`` recompute."""
    source = row.get("source")
    if row.get("method") != "file" or not isinstance(source, Mapping):
        return False, None
    sha = source.get("sha256")
    return True, None if sha is None else str(sha)
