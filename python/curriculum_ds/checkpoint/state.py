"""The curriculum's checkpoint state: one typed object, one schema, one owner.

A :class:`CurriculumState` is what :meth:`curriculum_ds.Curriculum.state_dict` returns and what a
DeepSpeed checkpoint carries in its ``client_state["curriculum"]``. It is made of plain values
(ints, strings, lists, dicts) and, for the re-weighting state, numpy arrays, so ``torch.save``
stores it without pickling any curriculum_ds class and a checkpoint stays readable when the code
changes. No process-global RNG is part of it: the sample order is a pure function of the seed and
the counters below (mosaicml-streaming's rule).
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from curriculum_ds.checkpoint.substates import DynamicState
from curriculum_ds.core.loader_state import LoaderState
from curriculum_ds.core.position import Position
from curriculum_ds.core.schedule import (
    PhaseSchedule,
    Progress,
    phase_fingerprint,
    progress_from_str,
    progress_to_str,
)
from curriculum_ds.errors import ResumeError

if TYPE_CHECKING:
    from curriculum_ds.config import CurriculumConfig

__all__ = ["STATE_VERSION", "CurriculumState", "DynamicState", "LoaderState"]

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

    The saved form (:meth:`to_dict`) is flat and unchanged since version 1: ``seed``, ``unit``,
    ``progress``, ``phase_idx``, ``phases``, ``global_step``, ``consumed_tokens``,
    ``consumed_samples``, ``fingerprints``, ``loader``, ``dynamic``, ``version``.

    Attributes:
        seed: ``curriculum.seed`` of the saved run.
        unit: ``"tok"`` or ``"ep"`` (``max_duration``'s unit).
        position: the run's counters at the save: optimizer steps, non-padding input tokens and
            samples consumed (global over dp ranks, ≥ 0) and cumulative progress in ``unit`` (int
            tokens or a Fraction of passes).
        phase_idx: ``PhaseSchedule.phase_at(position.progress)`` under the saved schedule;
            ``len(phases)`` once the run has ended. On a boundary it is the next phase.
        phases: every phase's ``model_dump(mode="json")`` at save time (the resume rules compare
            them with the new config).
        fingerprints: :func:`~curriculum_ds.core.schedule.phase_fingerprint` of each phase
            (informational).
        loader: the phase loader's counters (``PhaseLoader.state_dict``, typed), None before
            any draw.
        dynamic: the re-weighting state (``BucketReweighter.state_dict``, typed), None when
            off.
        version: :data:`STATE_VERSION`.
    """

    seed: int
    unit: str
    position: Position
    phase_idx: int
    phases: list[dict[str, Any]]
    fingerprints: list[str] = dataclasses.field(default_factory=list)
    loader: LoaderState | None = None
    dynamic: DynamicState | None = None
    version: int = STATE_VERSION

    @property
    def progress(self) -> Progress:
        """``position.progress``: cumulative progress in ``unit``."""
        return self.position.progress

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
        position = Position(
            global_step=int(global_step),
            consumed_tokens=int(consumed_tokens),
            consumed_samples=int(consumed_samples),
            progress=progress,
        )
        return cls.of(cfg, position, loader=loader, dynamic=dynamic)

    @classmethod
    def of(
        cls,
        cfg: CurriculumConfig,
        position: Position,
        *,
        loader: LoaderState | Mapping[str, Any] | None = None,
        dynamic: DynamicState | Mapping[str, Any] | None = None,
    ) -> CurriculumState:
        """The state of a run of ``cfg`` at ``position`` (``phase_idx`` derived). Deterministic.

        ``loader`` and ``dynamic`` may be given in their saved (``state_dict``) form.

        Raises:
            ResumeError: one of them is malformed (names the key).
        """
        return cls(
            seed=cfg.seed,
            unit=cfg.max_duration.unit,
            position=position,
            phase_idx=PhaseSchedule(cfg).phase_at(position.progress),
            phases=[p.model_dump(mode="json") for p in cfg.schedule],
            fingerprints=[phase_fingerprint(p) for p in cfg.schedule],
            loader=_loader_state(loader),
            dynamic=_dynamic_state(dynamic),
        )

    def to_dict(self) -> dict[str, Any]:
        """The saved form: ``progress`` as exact text (``"1000"``, ``"3/2"``), the rest as is.

        The keys and their order are those of every version-1 checkpoint.
        """
        pos = self.position
        return {
            "seed": self.seed,
            "unit": self.unit,
            "progress": progress_to_str(pos.progress),
            "phase_idx": self.phase_idx,
            "phases": copy.deepcopy(self.phases),
            "global_step": pos.global_step,
            "consumed_tokens": pos.consumed_tokens,
            "consumed_samples": pos.consumed_samples,
            "fingerprints": list(self.fingerprints),
            "loader": None if self.loader is None else copy.deepcopy(self.loader.to_dict()),
            "dynamic": None if self.dynamic is None else copy.deepcopy(self.dynamic.to_dict()),
            "version": self.version,
        }

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
            position=Position(
                progress=progress_from_str(_require(saved, "progress", str), unit), **counters
            ),
            fingerprints=list(saved.get("fingerprints") or []),
            loader=_loader_state(loader),
            dynamic=_dynamic_state(dynamic),
        )


def _loader_state(value: LoaderState | Mapping[str, Any] | None) -> LoaderState | None:
    if value is None or isinstance(value, LoaderState):
        return value
    return LoaderState.from_dict(value)


def _dynamic_state(value: DynamicState | Mapping[str, Any] | None) -> DynamicState | None:
    if value is None or isinstance(value, DynamicState):
        return value
    return DynamicState.from_dict(value)
