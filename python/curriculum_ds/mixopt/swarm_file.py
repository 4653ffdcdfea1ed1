"""``mixopt run``'s ``SWARM.json``: its shape, its checks, and the swarm's runs as an experiment.

A swarm file names a ``base`` ds_config (relative to the swarm file) with one phase whose
streams are the domains to mix, ``num_runs``, a ``seed``, how mixtures are drawn (``prior``,
``knobs``), the ``target`` and the proposal's ``constraints`` (docs/mixopt.md).
:func:`load_swarm` reads and checks it, one line each and before anything is written, and gives
the swarm's runs as an ablate :class:`~curriculum_ds.ablate.experiment.Experiment` whose arms
are ``run-0000``, ``run-0001``... (one seed: a swarm is one seeded run per mixture). Mixture *i*
is :func:`~curriculum_ds.mixopt.candidates.swarm_mixture` of ``(seed, i)``: adding runs never
changes the earlier ones.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from curriculum_ds.ablate.experiment import Experiment, validate_arm
from curriculum_ds.config import read_json_object, read_stream_info_checked
from curriculum_ds.errors import ConfigError
from curriculum_ds.mixopt.candidates import DirichletKnobs, swarm_mixture
from curriculum_ds.mixopt.constraints import Constraints, mixture_bounds

__all__ = ["Swarm", "SwarmFile", "TargetSpec", "load_swarm", "run_name", "run_patch"]


class TargetSpec(BaseModel):
    """What the proposal minimises: the mean eval loss (default), one's, or a weighted sum."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True, allow_inf_nan=False)

    stream: str | None = None
    """One eval stream's loss (exclusive with ``weights``)."""
    weights: dict[str, float] | None = None
    """Eval stream → weight ≥ 0 (normalised; unnamed streams weigh 0)."""


class SearchSpec(BaseModel):
    """The proposal's search (``mixopt fit``'s ``--candidates``, ``--top-k``, ``--bootstrap``)."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    candidates: int = Field(default=100_000, ge=1)
    top_k: int = Field(default=128, ge=1)
    bootstrap: int = Field(default=20, ge=0)


class SwarmFile(BaseModel):
    """The shape of ``SWARM.json`` (unknown keys are refused)."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True, allow_inf_nan=False)

    base: str
    num_runs: int = Field(ge=1)
    seed: int = Field(default=0, ge=0)
    prior: dict[str, float] | None = None
    """Stream → share (> 0); None: each stream's natural token share in the prepared data."""
    knobs: DirichletKnobs = Field(default_factory=DirichletKnobs)
    target: TargetSpec = Field(default_factory=TargetSpec)
    constraints: Constraints = Field(default_factory=Constraints)
    regressor: Literal["log_linear", "lightgbm"] = "log_linear"
    search: SearchSpec = Field(default_factory=SearchSpec)
    model: str | None = None


@dataclass(frozen=True, kw_only=True)
class Swarm:
    """A checked swarm.

    Attributes:
        spec: the file as read.
        path: the swarm file.
        experiment: the swarm's runs as an ablate experiment (arms ``run-0000``..., one seed).
        streams: the phase's stream names (the domains), in the base's order.
        locals_by_stream: each stream's ``local`` folder, as the base names it.
        tokens: float64 ``(streams,)``: each stream's prepared tokens.
        prior: float64 ``(streams,)`` on the simplex.
        mixtures: float64 ``(num_runs, streams)``: run *i*'s mixture.
        target_weights: float64 ``(eval streams,)`` summing to 1.
    """

    spec: SwarmFile
    path: Path
    experiment: Experiment
    streams: tuple[str, ...]
    locals_by_stream: dict[str, str]
    tokens: np.ndarray
    prior: np.ndarray
    mixtures: np.ndarray
    target_weights: np.ndarray


def run_name(index: int) -> str:
    """Run *i*'s arm name (its folder under ``OUT/runs``)."""
    return f"run-{index:04d}"


def _stream_name(stream: dict[str, Any]) -> str:
    name = stream.get("name")
    return str(name) if name else PurePosixPath(str(stream["local"]).replace("\\", "/")).name


def run_patch(base: dict[str, Any], mixture: np.ndarray) -> dict[str, Any]:
    """The merge patch of one swarm run: the phase's streams at ``mixture``, in tokens.

    A stream whose share is 0 is left out of the phase (proportions must be > 0); the eval
    streams are the base's, so the eval still covers it.
    """
    schedule = copy.deepcopy(base["curriculum"]["schedule"])
    loader = schedule[0]["train_loader"]
    loader["streams"] = [
        {**stream, "proportion": float(share)}
        for stream, share in zip(loader["streams"], mixture, strict=True)
        if share > 0
    ]
    loader["proportion_unit"] = "tokens"
    return {"curriculum": {"schedule": schedule}}


def _schema_error(exc: ValidationError, path: Path) -> ConfigError:
    err = exc.errors()[0]
    loc = ".".join(str(part) for part in err["loc"])
    msg = err["msg"]
    if err["type"] == "extra_forbidden":
        msg = "unknown key"
    elif err["type"] == "missing":
        msg = "required field is missing"
    return ConfigError(f"{path}: {loc}: {msg}")


def _base_phase(base: dict[str, Any], where: str) -> list[dict[str, Any]]:
    """The base's one phase's streams (raw JSON), or a one-line ConfigError."""
    curriculum = base.get("curriculum")
    schedule = curriculum.get("schedule") if isinstance(curriculum, dict) else None
    if not isinstance(schedule, list) or len(schedule) != 1:
        raise ConfigError(f"{where}: curriculum.schedule: a swarm's base has exactly one phase")
    loader = schedule[0].get("train_loader") if isinstance(schedule[0], dict) else None
    streams = loader.get("streams") if isinstance(loader, dict) else None
    if not isinstance(streams, list) or not streams:
        raise ConfigError(
            f"{where}: curriculum.schedule[0].train_loader.streams: the domains to mix are needed"
        )
    return streams


def _named_vector(
    values: dict[str, float], names: tuple[str, ...], field: str, path: Path, kind: str
) -> np.ndarray:
    unknown = [name for name in values if name not in names]
    if unknown:
        raise ConfigError(
            f"{path}: {field}: {unknown[0]!r} is not {kind} of the base config ({', '.join(names)})"
        )
    return np.array([float(values.get(name, 0.0)) for name in names])


def _target_weights(spec: SwarmFile, eval_streams: tuple[str, ...], path: Path) -> np.ndarray:
    target = spec.target
    if target.stream is not None and target.weights is not None:
        raise ConfigError(f"{path}: target: give stream or weights, not both")
    if target.stream is not None:
        return _named_vector(
            {target.stream: 1.0}, eval_streams, "target.stream", path, "an eval stream"
        )
    if target.weights is not None:
        weights = _named_vector(
            target.weights, eval_streams, "target.weights", path, "an eval stream"
        )
        if weights.min() < 0 or weights.sum() <= 0:
            raise ConfigError(f"{path}: target.weights: weights ≥ 0, not all 0")
        return weights / weights.sum()
    return np.full(len(eval_streams), 1.0 / len(eval_streams))


def load_swarm(path: str | Path) -> Swarm:
    """Read and check ``SWARM.json``; nothing is written.

    Raises:
        ConfigError: one line: the file's shape (naming the field), a base without exactly one
            phase, ``num_runs`` below the number of streams + 1, a prior, target or
            constraint naming a stream that is not in the base config, constraints no mixture
            satisfies, a run whose ds_config does not validate, a base without ``curriculum.eval``.
        DataError: a stream's prepared data is unreadable.
    """
    path = Path(path)
    raw = read_json_object(path, field="swarm")
    try:
        spec = SwarmFile.model_validate(raw)
    except ValidationError as exc:
        raise _schema_error(exc, path) from None
    base = read_json_object(path.parent / spec.base, field="base")
    phase = _base_phase(base, f"{path}: base {spec.base}")
    streams = tuple(_stream_name(s) for s in phase)
    if spec.num_runs < len(streams) + 1:
        raise ConfigError(
            f"{path}: num_runs: {spec.num_runs} is below the number of streams + 1 "
            f"({len(streams) + 1}): the regression has more unknowns than runs"
        )
    model = None if spec.model is None else str(path.parent / spec.model)
    checked = validate_arm(base, "base", model)
    if checked.curriculum.eval is None:
        raise ConfigError(f"{path}: base {spec.base}: curriculum.eval: required by mixopt run")
    eval_streams = tuple(s.name or s.local for s in checked.curriculum.eval.streams)
    locals_by_stream = {name: str(s["local"]) for name, s in zip(streams, phase, strict=True)}
    tokens = np.array(
        [float(read_stream_info_checked(s.local).num_tokens) for s in _phase_streams(checked)]
    )
    if spec.prior is None:
        prior = tokens / tokens.sum()
    else:
        prior = _named_vector(spec.prior, streams, "prior", path, "a stream")
        if prior.min() <= 0:
            raise ConfigError(f"{path}: prior: every stream of the base needs a share > 0")
        prior = prior / prior.sum()
    target_weights = _target_weights(spec, eval_streams, path)
    try:
        mixture_bounds(spec.constraints, streams, tokens)
    except ConfigError as exc:
        raise ConfigError(f"{path}: constraints: {exc}") from None
    mixtures = np.stack(
        [swarm_mixture(prior, spec.seed, i, spec.knobs) for i in range(spec.num_runs)]
    )
    arms = {run_name(i): run_patch(base, mixtures[i]) for i in range(spec.num_runs)}
    experiment = Experiment(
        path=path,
        base=base,
        arms=arms,
        reference=run_name(0),
        seeds=(spec.seed,),
        model=model,
        max_duration=str(checked.curriculum.max_duration),
        eval_streams=eval_streams,
    )
    return Swarm(
        spec=spec,
        path=path,
        experiment=experiment,
        streams=streams,
        locals_by_stream=locals_by_stream,
        tokens=tokens,
        prior=prior,
        mixtures=mixtures,
        target_weights=target_weights,
    )


def _phase_streams(checked: Any) -> list[Any]:
    """The validated base's one phase's stream configs."""
    return list(checked.curriculum.schedule[0].train_loader.streams)
