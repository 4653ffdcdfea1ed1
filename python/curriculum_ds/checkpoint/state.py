"""The curriculum's checkpoint state: one typed object, one schema, one owner.

A :class:`CurriculumState` is what :meth:`curriculum_ds.Curriculum.state_dict` returns and what a
DeepSpeed checkpoint carries in its ``client_state["curriculum"]``. It is made of plain values
(ints, strings, lists, dicts) and, for the re-weighting state, numpy arrays, so ``torch.save``
stores it without pickling any curriculum_ds class and a checkpoint stays readable when the code
changes. No process-global RNG is part of it: the sample order is a pure function of the seed and
the counters below (mosaicml-streaming's rule).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from curriculum_ds.errors import ResumeError
from curriculum_ds.schedule import (
    PhaseSchedule,
    Progress,
    phase_fingerprint,
    progress_from_str,
    progress_to_str,
)

if TYPE_CHECKING:
    from curriculum_ds.config import CurriculumConfig

__all__ = ["STATE_VERSION", "CurriculumState"]

STATE_VERSION = 1
"""Format version of :class:`CurriculumState` (``version`` in the saved dict)."""

_COUNTERS = ("global_step", "consumed_tokens", "consumed_samples")


def _require(saved: Mapping[str, Any], key: str, kind: type | tuple[type, ...]) -> Any:
    if key not in saved:
        raise ResumeError(f"checkpoint curriculum state: missing {key!r}")
    value = saved[key]
    if isinstance(value, bool) or not isinstance(value, kind):
        raise ResumeError(f"checkpoint curriculum state: {key!r} has the wrong type ({value!r})")
    return value


@dataclasses.dataclass(frozen=True, kw_only=True)
class CurriculumState:
    """Where a run is in its schedule, and what resumes its data order exactly.

    Attributes:
        seed: ``curriculum.seed`` of the saved run.
        unit: ``"tok"`` or ``"ep"`` (``max_duration``'s unit).
        progress: cumulative progress in ``unit``: int tokens (non-padding input tokens, global
            over dp ranks) or a Fraction of passes.
        phase_idx: ``PhaseSchedule.phase_at(progress)`` under the saved schedule;
            ``len(phases)`` once the run has ended. On a boundary it is the next phase.
        phases: every phase's ``model_dump(mode="json")`` at save time (the resume rules compare
            them with the new config).
        global_step: optimizer steps done, ≥ 0.
        consumed_tokens: non-padding input tokens consumed, global over dp ranks, ≥ 0.
        consumed_samples: samples consumed, global over dp ranks, ≥ 0.
        fingerprints: :func:`~curriculum_ds.schedule.phase_fingerprint` of each phase
            (informational).
        loader: the phase loader's counters (``PhaseLoader.state_dict``), None before any draw.
        dynamic: the re-weighting state (``DynamicReweighter.state_dict``), None when off.
        version: :data:`STATE_VERSION`.
    """

    seed: int
    unit: str
    progress: Progress
    phase_idx: int
    phases: list[dict[str, Any]]
    global_step: int
    consumed_tokens: int
    consumed_samples: int
    fingerprints: list[str] = dataclasses.field(default_factory=list)
    loader: dict[str, Any] | None = None
    dynamic: dict[str, Any] | None = None
    version: int = STATE_VERSION

    @classmethod
    def at(
        cls,
        cfg: CurriculumConfig,
        progress: Progress,
        *,
        global_step: int,
        consumed_tokens: int,
        consumed_samples: int,
        loader: dict[str, Any] | None = None,
        dynamic: dict[str, Any] | None = None,
    ) -> CurriculumState:
        """The state of a run of ``cfg`` after ``progress`` units (``phase_idx`` derived)."""
        return cls(
            seed=cfg.seed,
            unit=cfg.max_duration.unit,
            progress=progress,
            phase_idx=PhaseSchedule(cfg).phase_at(progress),
            phases=[p.model_dump(mode="json") for p in cfg.schedule],
            global_step=int(global_step),
            consumed_tokens=int(consumed_tokens),
            consumed_samples=int(consumed_samples),
            fingerprints=[phase_fingerprint(p) for p in cfg.schedule],
            loader=loader,
            dynamic=dynamic,
        )

    def to_dict(self) -> dict[str, Any]:
        """The saved form: ``progress`` as exact text (``"1000"``, ``"3/2"``), the rest as is."""
        out = dataclasses.asdict(self)
        out["progress"] = progress_to_str(self.progress)
        return out

    @classmethod
    def from_dict(cls, saved: Mapping[str, Any] | CurriculumState) -> CurriculumState:
        """Read a saved dict back, checking every key's presence and type.

        Extra keys are ignored (forward compatibility). Deterministic.

        Raises:
            ResumeError: one line naming the missing or mistyped key, or an unsupported version.
        """
        if isinstance(saved, CurriculumState):
            return saved
        if not isinstance(saved, Mapping):
            raise ResumeError(
                f"checkpoint curriculum state: not a mapping ({type(saved).__name__})"
            )
        version = _require(saved, "version", int)
        if version != STATE_VERSION:
            raise ResumeError(
                f"checkpoint curriculum state: version {version} not supported "
                f"(this curriculum_ds reads version {STATE_VERSION})"
            )
        unit = _require(saved, "unit", str)
        loader = saved.get("loader")
        dynamic = saved.get("dynamic")
        for key, value in (("loader", loader), ("dynamic", dynamic)):
            if value is not None and not isinstance(value, Mapping):
                raise ResumeError(
                    f"checkpoint curriculum state: {key!r} has the wrong type ({value!r})"
                )
        counters = {k: _require(saved, k, int) for k in _COUNTERS}
        for key, value in counters.items():
            if value < 0:
                raise ResumeError(f"checkpoint curriculum state: {key!r} is negative ({value})")
        return cls(
            version=version,
            seed=_require(saved, "seed", int),
            unit=unit,
            phases=_require(saved, "phases", list),
            phase_idx=_require(saved, "phase_idx", int),
            progress=progress_from_str(_require(saved, "progress", str), unit),
            fingerprints=list(saved.get("fingerprints") or []),
            loader=dict(loader) if loader is not None else None,
            dynamic=dict(dynamic) if dynamic is not None else None,
            **counters,
        )
