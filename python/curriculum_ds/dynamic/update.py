"""The values a re-weighting trades with its caller: what it sees of a phase, what it hands back.

* :class:`PhaseView`: the phase a re-weighting starts (its index, stream names, proportions and
  metric columns), a small value the caller builds from the phase's loader, so ``dynamic/`` never
  imports the loader;
* :class:`MixtureUpdate`: what a phase start or a recompute hands back, and the one thing the
  loader applies (:meth:`~curriculum_ds.core.loader.PhaseLoader.apply`): new bucket
  assignments and bucket probabilities, new stream proportions, per-stream loss weights, a
  temporary mixture held for a number of steps, and the ``curriculum_history.jsonl`` record.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

__all__ = ["MixtureUpdate", "PhaseView"]


@dataclass(frozen=True)
class PhaseView:
    """What a re-weighting reads of the phase it starts (read only; no copies of the columns).

    Attributes:
        phase_idx: The phase's index in the schedule.
        stream_names: The phase's stream names, in its order (``K`` streams).
        proportions: float64 ``(K,)``, the phase's stream proportions at its start (summing to 1,
            in its ``proportion_unit``).
        num_samples: Samples per stream, ``(K,)``.
        metrics: Per stream, its metric columns by name (``num_tokens``, ``prepare``'s
            difficulty columns, ``score``'s reference losses), each ``(num_samples,)``.
        run_dir: The run directory (``Curriculum.run_dir``), where a method keeps a file of
            its own (``file``'s journal); None when the loop keeps none.
        seed: The run's seed (``curriculum.seed``), for a method that draws (Aioli's probe
            order).
    """

    phase_idx: int
    stream_names: tuple[str, ...]
    proportions: npt.NDArray[np.float64]
    num_samples: tuple[int, ...]
    metrics: tuple[Mapping[str, npt.NDArray[Any]], ...]
    run_dir: Path | None = None
    seed: int = 0


@dataclass(frozen=True, kw_only=True)
class MixtureUpdate:
    """What a re-weighting hands the loader at a phase start or a recompute, and the history row.

    Every field is optional: None leaves that part of the loader as it is. The loader applies
    an update whole, in one place (:meth:`~curriculum_ds.core.loader.PhaseLoader.apply`).

    Attributes:
        buckets: ``unit: "buckets"``: per stream of the phase, int64 ``(num_samples,)`` bucket
            of every sample, in ``[0, num_buckets)``, for the streams' samplers.
        bucket_probs: ``unit: "buckets"``: float64 ``(num_buckets,)`` summing to 1, the bucket
            probabilities the samplers draw with from the next draw on.
        proportions: ``unit: "streams"``: float64 ``(K,)`` summing to 1, every entry > 0, the
            phase's new stream proportions in its ``proportion_unit`` (they replace a ramp; the
            deficit rule tracks their integral from now on).
        loss_weights: float64 ``(K,)``, every entry ≥ 0 and one > 0: per-stream loss weights
            from the next step on (a method that weights the loss instead of the sampling, as
            DoReMi's proxy trains); the step's loss is ``Σ w·ℓ / Σ w`` over its tokens.
        hold_steps: With ``proportions``: they hold for this many draws (optimizer steps), then
            the proportions of before the update come back (a probe round). None: until the next
            update.
        record: The ``curriculum_history.jsonl`` fields of a recompute
            (:class:`~curriculum_ds.records.schema.HistoryRow`: ``unit``, ``signal``,
            ``weights``, ``scores``, ...; ``kept_previous: true`` when the previous weights were
            kept). None at a phase start, which writes no history row.
    """

    buckets: Sequence[npt.NDArray[np.int64]] | None = None
    bucket_probs: npt.NDArray[np.float64] | None = None
    proportions: npt.NDArray[np.float64] | None = None
    loss_weights: npt.NDArray[np.float64] | None = None
    hold_steps: int | None = None
    record: dict[str, Any] | None = None

    def __post_init__(self) -> None:
        if self.hold_steps is not None and (self.proportions is None or self.hold_steps < 1):
            raise ValueError(
                f"hold_steps {self.hold_steps}: a temporary mixture needs proportions and ≥ 1 step"
            )
