"""The signals a re-weighting scores by: ``loss``, ``excess_loss`` and ``learnability``.

* ``loss``: a sample's mean token loss (nats), as the step gathered it.
* ``excess_loss``: that loss minus the sample's ``reference_metric`` value (its mean token loss
  under a reference model, written by ``curriculum-ds score``), **clipped at 0** as DoReMi clips
  the per-token excess loss (Xie et al. 2023, Algorithm 1, ``max(ℓ_θ - ℓ_ref, 0)``; RHO-LOSS,
  Mindermann et al. 2022, ranks by the same difference). We clip per sample, the unit our losses
  are gathered in. A sample the current model already predicts better than the reference has
  nothing left to learn from it by this measure; without the clip a stream the model overfits
  (negative excess) would be pushed below an unlearnable one (excess ≈ 0).
* ``learnability``: per stream, the relative drop of its mean loss between the recompute
  ``learnability_horizon`` recomputes ago and now, ``(L_then - L_now) / L_then``, as ADO (Jiang
  et al. 2025, "Adaptive Data Optimization") and Velocitune (Luo et al. 2024) score domains by
  how fast their loss falls. A stream of noise stops falling early and gets little weight; a
  stream still being learned gets more.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from curriculum_ds.errors import ConfigError

if TYPE_CHECKING:
    from curriculum_ds.dynamic.update import PhaseView

__all__ = ["excess_losses", "learnability_scores", "metric_columns"]


def metric_columns(
    view: PhaseView, metric: str, field: str, *, hint: str = ""
) -> list[npt.NDArray[np.float64]]:
    """Each stream's metric column ``metric``, float64 ``(num_samples,)``, every value finite.

    Args:
        view: the phase (its stream names and metric columns).
        metric: the column's name.
        field: the config field that named it, for the error (``curriculum.dynamic....``).
        hint: what to do about a non-finite value, appended to that error (`` (re-run ...)``).

    Raises:
        ConfigError: a stream has no such column, or a non-finite value in it (named by stream,
            column and sample). ``validate`` refuses both before launch; here if the data
            changed since.
    """
    columns = []
    for name, metrics in zip(view.stream_names, view.metrics, strict=True):
        if metric not in metrics:
            raise ConfigError(
                f"{field}: stream {name!r} has no metric column {metric!r} "
                f"(has: {', '.join(sorted(metrics))})"
            )
        column = np.asarray(metrics[metric], dtype=np.float64)
        bad = np.flatnonzero(~np.isfinite(column))
        if bad.size:
            raise ConfigError(
                f"{field}: stream {name!r}: metric column {metric!r} is {column[bad[0]]} at "
                f"sample {bad[0]}; every value must be finite{hint}"
            )
        columns.append(column)
    return columns


def excess_losses(
    batch: npt.NDArray[np.int64],
    losses: npt.NDArray[np.float64],
    reference: Sequence[npt.NDArray[np.float64]],
) -> npt.NDArray[np.float64]:
    """Each sample's excess loss over the reference model, clipped at 0 (DoReMi).

    Args:
        batch: int64 ``(n, 2)`` of ``(stream_idx, sample_idx)``.
        losses: float64 ``(n,)`` mean token losses (nats); NaN for a sample without loss tokens.
        reference: per stream, float64 ``(num_samples,)`` the reference model's mean token loss.

    Returns:
        float64 ``(n,)``: ``max(loss - reference, 0)``; NaN where the loss is not finite (NaN
        or ±inf: left out of the window, as such a loss is). Deterministic.
    """
    ref = np.empty(len(batch), dtype=np.float64)
    streams = batch[:, 0]
    for stream, column in enumerate(reference):
        rows = streams == stream
        ref[rows] = column[batch[rows, 1]]
    excess = losses - ref
    # a non-finite loss stays non-finite (left out, case C06): the clip would make -inf a 0
    return np.where(np.isfinite(losses), np.maximum(excess, 0.0), np.nan)


def learnability_scores(
    then: npt.NDArray[np.float64], now: npt.NDArray[np.float64]
) -> npt.NDArray[np.float64]:
    """Per stream, the relative drop of its mean loss: ``(then - now) / then``.

    Args:
        then: float64 ``(K,)`` each stream's mean loss (nats) at the earlier recompute; NaN for a
            stream that had no sample in the window then.
        now: float64 ``(K,)`` the same now.

    Returns:
        float64 ``(K,)``, finite. A stream without a value at either end (or a mean loss ≤ 0
        then) gets the mean of the others' scores, so it neither dominates nor vanishes; 0 for
        all when none has one. Deterministic.
    """
    with np.errstate(divide="ignore", invalid="ignore"):
        scores = (then - now) / then
    known = np.isfinite(scores) & (then > 0)
    fill = float(scores[known].mean()) if known.any() else 0.0
    return np.where(known, scores, fill)
