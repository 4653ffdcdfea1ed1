"""A phase loader's saved state: one frozen, typed value, checked against its phase in one place.

:meth:`PhaseLoader.state <curriculum_ds.core.loader.PhaseLoader.state>` hands back a
:class:`LoaderState`; :meth:`~curriculum_ds.core.loader.PhaseLoader.restore` takes one. A
checkpoint stores it as :meth:`LoaderState.to_dict` (the keys every version-1 checkpoint has, in
their order); :meth:`LoaderState.parse` reads that back, refusing a malformed one with one line
naming the key (``loader.samplers``), and :meth:`LoaderState.fit` checks it against the phase it
is restored into (its number of streams, their sizes, its ``proportion_unit``, whether its mix
moves) before the loader takes any of it. Pure.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal, Protocol

import numpy as np
import numpy.typing as npt

from curriculum_ds.core.saved import Floats, Int, Ints, SavedModel, missing

__all__ = ["Hold", "LoaderState", "PhaseShape"]


class PhaseShape(Protocol):
    """What :meth:`LoaderState.fit` reads of a phase (a ``PhaseLoader`` has it)."""

    @property
    def proportion_unit(self) -> str:
        """``"samples"`` or ``"tokens"``."""
        ...

    @property
    def moving_mix(self) -> bool:
        """Whether a proportion of the phase is a ramp (the state must carry ``targets``)."""
        ...

    @property
    def stream_sizes(self) -> Sequence[int]:
        """Each stream's number of samples."""
        ...

    @property
    def order_version(self) -> int:
        """The order of samples within a stream (1 or 2; ``core.stream_order``)."""
        ...


class Hold(SavedModel):
    """A temporary mixture in progress (``MixtureUpdate.hold_steps``).

    Attributes:
        steps: draws left under it.
        weights: the stream weights after it, or None (the phase's own mix then).
    """

    steps: Int
    weights: Floats | None = None

    @classmethod
    def of(cls, steps: int, weights: npt.NDArray[np.float64] | None) -> Hold:
        """The hold a loader keeps as ``(draws left, weights after or None)``."""
        return cls(steps=steps, weights=None if weights is None else tuple(weights.tolist()))

    def pair(self) -> tuple[int, npt.NDArray[np.float64] | None]:
        """``(draws left, float64 weights after it or None)``, as the loader keeps it."""
        return self.steps, None if self.weights is None else np.array(self.weights)

    def to_dict(self) -> dict[str, Any]:
        """The saved form: ``{"steps": int, "weights": list of floats or None}``."""
        return {
            "steps": self.steps,
            "weights": None if self.weights is None else list(self.weights),
        }


class LoaderState(SavedModel):
    """A phase loader's counters: what a resume inside a phase needs to draw the same batches.

    Attributes:
        samplers: per stream, its sampler's counters (checked by the sampler's kernel; first,
            as a resume reads them first).
        phase_idx: the phase they belong to.
        num_samples: samples drawn in the phase, global.
        stream_counts: per stream, samples drawn from it (summing to ``num_samples``).
        proportion_unit: ``"tokens"`` when proportions count tokens; None for ``"samples"`` (the
            key is absent then, as in every checkpoint before it existed).
        stream_tokens: per stream, tokens placed (``"tokens"`` only).
        pending: per stream, sample indices drawn but not placed yet (``"tokens"`` only).
        targets: per stream, the integral of its moving target (a phase with proportion ramps
            or stream weights only).
        stream_weights: per stream, the proportions set by re-weighting over streams (None: the
            phase's own).
        hold: a temporary mixture in progress, or None.
        document_masking: True when the phase's micro-batches mask packed rows per document
            (``train_loader.document_masking`` on a stream that records document starts); None
            otherwise (the key is absent then, as in every checkpoint before it existed: a phase
            resumed from such a state keeps drawing unmasked micro-batches).
        order_version: 2 when ``samplers`` are order version 2's cursors
            (:mod:`curriculum_ds.core.stream_order`); None for version 1 (the key is absent then,
            as in every checkpoint before it existed).
    """

    samplers: tuple[dict[str, Any], ...]
    phase_idx: Int
    num_samples: Int
    stream_counts: Ints
    proportion_unit: Literal["samples", "tokens"] | None = None
    stream_tokens: Ints | None = None
    pending: tuple[Ints, ...] | None = None
    targets: Floats | None = None
    stream_weights: Floats | None = None
    hold: Hold | None = None
    document_masking: Literal[True] | None = None
    order_version: Literal[2] | None = None

    def model_post_init(self, context: Any, /) -> None:
        """A ``"tokens"`` state carries its token counts (as a resume reads them)."""
        if self.proportion_unit == "tokens":
            for key in ("stream_tokens", "pending"):
                if getattr(self, key) is None:
                    raise missing(f"loader.{key}")

    @classmethod
    def from_dict(cls, saved: Any) -> LoaderState:
        """:meth:`parse` of a saved ``loader`` (messages name ``loader.<key>``)."""
        return cls.parse(saved, "loader")

    def fit(self, phase: PhaseShape) -> LoaderState:
        """This state, checked against the phase it is restored into. Pure.

        A state without ``proportion_unit`` (all checkpoints before it existed) is a
        ``"samples"`` one.

        Raises:
            ValueError: the counters do not fit the phase's streams (their number, a count that
                is negative or does not add up to the samples drawn, a pending sample out of
                range, a stream weight not > 0, targets missing or not finite where the mix
                moves, a hold that does not fit) or its ``proportion_unit`` is not the phase's.
        """
        unit, sizes = self.proportion_unit or "samples", list(phase.stream_sizes)
        if unit != phase.proportion_unit:
            raise ValueError(
                f"loader state counts its proportions in {unit!r}, this phase in "
                f"{phase.proportion_unit!r}"
            )
        num_streams, version = len(sizes), self.order_version or 1
        if version != phase.order_version:
            raise ValueError(
                f"loader state is of order version {version}, this phase draws in version "
                f"{phase.order_version}"
            )
        if unit == "tokens":
            self._fit_tokens(sizes)
        weights = self.stream_weights
        if weights is not None and (len(weights) != num_streams or min(weights) <= 0):
            raise ValueError(
                f"loader state stream weights {list(weights)} do not fit a phase of "
                f"{num_streams} stream(s)"
            )
        if phase.moving_mix or weights is not None:
            targets = [] if self.targets is None else list(self.targets)
            if len(targets) != num_streams or not np.isfinite(targets).all():
                raise ValueError(
                    f"loader state targets {targets} do not fit a phase of {num_streams} stream(s)"
                )
        counts = self.stream_counts
        if len(counts) != num_streams or len(self.samplers) != num_streams:
            raise ValueError(
                f"loader state has {len(counts)} stream counts and {len(self.samplers)} sampler "
                f"states for a phase of {num_streams} stream(s)"
            )
        if self.num_samples < 0 or min(counts, default=0) < 0 or sum(counts) != self.num_samples:
            raise ValueError(
                f"loader state counts {list(counts)} do not add up to its "
                f"{self.num_samples} samples drawn"
            )
        hold = self.hold
        if hold is not None and (
            hold.steps < 0
            or (
                hold.weights is not None
                and (len(hold.weights) != num_streams or min(hold.weights) <= 0)
            )
        ):
            raise ValueError(
                f"loader state hold {hold.to_dict()} does not fit a phase of {num_streams} "
                "stream(s)"
            )
        return self

    def _fit_tokens(self, sizes: list[int]) -> None:
        tokens, pending = self.stream_tokens or (), self.pending or ()
        if len(tokens) != len(sizes) or len(pending) != len(sizes):
            raise ValueError(
                f"loader state has {len(tokens)} token counts and {len(pending)} pending "
                f"lists for a phase of {len(sizes)} stream(s)"
            )
        if min(tokens, default=0) < 0:
            raise ValueError(f"loader state token counts {list(tokens)} are negative")
        for stream, (indices, size) in enumerate(zip(pending, sizes, strict=True)):
            if indices and not (min(indices) >= 0 and max(indices) < size):
                raise ValueError(
                    f"loader state pending samples of stream {stream} are not in [0, {size})"
                )

    def to_dict(self) -> dict[str, Any]:
        """The saved form: ``PhaseLoader.state_dict``'s keys in their order, plain lists."""
        out: dict[str, Any] = {
            "phase_idx": self.phase_idx,
            "num_samples": self.num_samples,
            "stream_counts": list(self.stream_counts),
            "samplers": [dict(s) for s in self.samplers],
        }
        if self.proportion_unit is not None:
            out["proportion_unit"] = self.proportion_unit
        if self.stream_tokens is not None:
            out["stream_tokens"] = list(self.stream_tokens)
        if self.pending is not None:
            out["pending"] = [list(p) for p in self.pending]
        if self.targets is not None:
            out["targets"] = list(self.targets)
        if self.stream_weights is not None:
            out["stream_weights"] = list(self.stream_weights)
        if self.hold is not None:
            out["hold"] = self.hold.to_dict()
        if self.document_masking is not None:
            out["document_masking"] = True
        if self.order_version is not None:
            out["order_version"] = self.order_version
        return out
