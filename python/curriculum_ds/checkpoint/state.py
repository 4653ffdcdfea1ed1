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
from collections.abc import Mapping
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import PlainValidator, StrictStr, ValidationInfo, model_validator

from curriculum_ds.core.loader_state import LoaderState
from curriculum_ds.core.position import Position
from curriculum_ds.core.saved import PREFIX, Int, SavedModel, missing, wrong
from curriculum_ds.core.schedule import (
    PhaseSchedule,
    Progress,
    phase_fingerprint,
    progress_from_str,
    progress_to_str,
)
from curriculum_ds.dynamic.state import TAGS, DynamicState, parse_dynamic_state
from curriculum_ds.errors import ResumeError

if TYPE_CHECKING:
    from curriculum_ds.config import CurriculumConfig

__all__ = ["STATE_VERSION", "CurriculumState", "DynamicState", "LoaderState"]

STATE_VERSION = 1
"""Format version of :class:`CurriculumState` (``version`` in the saved dict)."""

_COUNTERS = ("global_step", "consumed_tokens", "consumed_samples")


def _position(value: Any, info: ValidationInfo) -> Position:
    """The saved counters (top-level keys of the saved form) as a :class:`Position`."""
    if isinstance(value, Position):
        return value
    counters: dict[str, int] = {}
    for key in _COUNTERS:
        if key not in value:
            raise missing(key)
        count = value[key]
        if isinstance(count, bool) or not isinstance(count, int):
            raise wrong(key, count)
        if count < 0:
            raise ResumeError(f"{PREFIX}{key!r} is negative ({count})")
        counters[key] = count
    if "progress" not in value:
        raise missing("progress")
    if not isinstance(value["progress"], str):
        raise wrong("progress", value["progress"])
    unit = info.data.get("unit")
    if unit is None:  # refused already (pydantic reports it first)
        raise ValueError("no unit")
    return Position(progress=progress_from_str(value["progress"], unit), **counters)


class CurriculumState(SavedModel):
    """Where a run is in its schedule, and what resumes its data order exactly.

    The saved form (:meth:`to_dict`) is flat and unchanged since version 1: ``seed``, ``unit``,
    ``progress``, ``phase_idx``, ``phases``, ``global_step``, ``consumed_tokens``,
    ``consumed_samples``, ``fingerprints``, ``loader``, ``dynamic``, ``version``.
    :meth:`from_dict` reads it back, refusing a malformed one with one line naming the key.

    Attributes:
        seed: ``curriculum.seed`` of the saved run.
        unit: ``"tok"`` or ``"ep"`` (``max_duration``'s unit).
        position: the run's counters at the save: optimizer steps, non-padding input tokens and
            samples consumed (global over dp ranks, ≥ 0) and cumulative progress in ``unit`` (int
            tokens or a Fraction of passes); saved as top-level keys.
        phase_idx: ``PhaseSchedule.phase_at(position.progress)`` under the saved schedule;
            ``len(phases)`` once the run has ended. On a boundary it is the next phase.
        phases: every phase's ``model_dump(mode="json")`` at save time (the resume rules compare
            them with the new config).
        fingerprints: :func:`~curriculum_ds.core.schedule.phase_fingerprint` of each phase
            (informational).
        loader: the phase loader's state (``PhaseLoader.state``), None before any draw.
        dynamic: the re-weighting state (``Reweighter.state``), None when off.
        version: :data:`STATE_VERSION`.
        order_version: ``curriculum.order_version`` of the run (the order of samples within a
            stream); None in checkpoints from before it existed, which are version 1
            (:attr:`drawn_order`). Saved after ``version`` when set.
    """

    TRANSPARENT = TAGS | {"position"}

    seed: Int
    unit: StrictStr
    position: Annotated[Position, PlainValidator(_position)]
    phase_idx: Int
    phases: list[dict[str, Any]]
    fingerprints: Annotated[tuple[str, ...], PlainValidator(lambda v: tuple(v or ()))] = ()
    loader: LoaderState | None = None
    dynamic: DynamicState | None = None
    version: Int = STATE_VERSION
    order_version: Literal[1, 2] | None = None

    @property
    def drawn_order(self) -> Literal[1, 2]:
        """The run's order version: ``order_version``, 1 for a checkpoint without it."""
        return self.order_version or 1

    @model_validator(mode="before")
    @classmethod
    def _saved_form(cls, data: Any) -> Any:
        """The flat saved form: a supported version, the counters gathered as ``position``."""
        if not isinstance(data, Mapping):
            raise ResumeError(f"{PREFIX}not a mapping ({type(data).__name__})")
        if "position" in data:
            return data
        if "version" not in data:
            raise missing("version")
        version = data["version"]
        if isinstance(version, bool) or not isinstance(version, int):
            raise wrong("version", version)
        if version != STATE_VERSION:
            raise ResumeError(
                f"{PREFIX}version {version} not supported "
                f"(this curriculum_ds reads version {STATE_VERSION})"
            )
        keys = (*_COUNTERS, "progress")
        return {
            **{k: v for k, v in data.items() if k not in keys},
            "position": {k: data[k] for k in keys if k in data},
        }

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
        loader: LoaderState | Mapping[str, Any] | None = None,
        dynamic: DynamicState | Mapping[str, Any] | None = None,
        order_version: Literal[1, 2] | None = None,
    ) -> CurriculumState:
        """The state of a run of ``cfg`` after ``progress`` units (``phase_idx`` derived)."""
        position = Position(
            global_step=int(global_step),
            consumed_tokens=int(consumed_tokens),
            consumed_samples=int(consumed_samples),
            progress=progress,
        )
        return cls.of(cfg, position, loader=loader, dynamic=dynamic, order_version=order_version)

    @classmethod
    def of(
        cls,
        cfg: CurriculumConfig,
        position: Position,
        *,
        loader: LoaderState | Mapping[str, Any] | None = None,
        dynamic: DynamicState | Mapping[str, Any] | None = None,
        order_version: Literal[1, 2] | None = None,
    ) -> CurriculumState:
        """The state of a run of ``cfg`` at ``position`` (``phase_idx`` derived). Deterministic.

        ``loader`` and ``dynamic`` may be given in their saved (``to_dict``) form;
        ``order_version`` None: ``cfg``'s for a fresh run (:attr:`~curriculum_ds.config.
        CurriculumConfig.fresh_order_version`).

        Raises:
            ResumeError: one of them is malformed (names the key).
        """
        return cls(
            seed=cfg.seed,
            unit=cfg.max_duration.unit,
            position=position,
            phase_idx=PhaseSchedule(cfg).phase_at(position.progress),
            phases=[p.model_dump(mode="json") for p in cfg.schedule],
            fingerprints=tuple(phase_fingerprint(p) for p in cfg.schedule),
            loader=None if loader is None else LoaderState.from_dict(loader),
            dynamic=None if dynamic is None else parse_dynamic_state(dynamic),
            order_version=order_version or cfg.fresh_order_version,
        )

    def to_dict(self) -> dict[str, Any]:
        """The saved form: ``progress`` as exact text (``"1000"``, ``"3/2"``), the rest as is.

        The keys and their order are those of every version-1 checkpoint, then ``order_version``
        (when set).
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
        } | ({} if self.order_version is None else {"order_version": self.order_version})

    @classmethod
    def from_dict(cls, saved: Mapping[str, Any] | CurriculumState) -> CurriculumState:
        """Read a saved dict back, checking every key's presence and type.

        Extra keys are ignored (forward compatibility). Deterministic.

        Raises:
            ResumeError: one line naming the missing or mistyped key, or an unsupported version.
        """
        return cls.parse(saved)
