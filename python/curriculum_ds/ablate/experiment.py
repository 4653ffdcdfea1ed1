"""An ``curriculum-ds ablate`` experiment: its file, the arms' configs, the checks before any run.

An ``EXPERIMENT.json`` names a ``base`` ds_config (relative to the experiment file), ``arms``
(name → a JSON merge patch over the base, RFC 7386), a ``reference`` arm, ``seeds`` and optionally
a ``model``: a folder, or the name of a size of the default GPT-2
(:data:`~curriculum_ds.default_model.MODEL_PRESETS`: ``proxy``, ``proxy_10x``; docs/ablate.md).
:func:`load_experiment` reads it and refuses, one line each and before anything is written,
whatever would make the comparison unfair or impossible: an arm whose config does not validate,
unequal ``max_duration``, unequal or missing ``curriculum.eval``, a ``reference`` that is not an
arm, fewer than 2 arms or seeds, an arm name that cannot name a folder, an arm patch that sets
where DeepSpeed writes (:func:`path_keys`).
"""

from __future__ import annotations

import copy
import dataclasses
import json
import re
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from curriculum_ds.config import read_json_object
from curriculum_ds.default_model import MODEL_PRESETS
from curriculum_ds.errors import ConfigError
from curriculum_ds.files.user_paths import show_path

__all__ = [
    "MONITOR_SECTIONS",
    "Experiment",
    "arm_config",
    "first_difference",
    "load_experiment",
    "merge_patch",
    "monitor_paths",
    "path_keys",
    "validate_arm",
]

_ARM_NAME = re.compile(r"[A-Za-z0-9._-]{1,64}")
"""An arm's name: its run folder's name (``OUT/runs/ARM``), portable and short."""


def merge_patch(target: Any, patch: Any) -> Any:
    """``target`` with the JSON merge ``patch`` applied (RFC 7386 §2); neither is modified.

    An object in the patch merges key by key (``null`` deletes the key); anything else (a list, a
    number, a string) replaces the target's value whole.

    Args:
        target: a JSON value (dicts, lists, str, numbers, bool, None).
        patch: a JSON value.

    Returns:
        A new JSON value; deterministic.
    """
    if not isinstance(patch, Mapping):
        return copy.deepcopy(patch)
    result = dict(target) if isinstance(target, Mapping) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def first_difference(old: Any, new: Any, path: str = "") -> str | None:
    """The JSON path of the first value that differs between ``old`` and ``new``, or None.

    Keys are visited in sorted order; ``path`` prefixes the result (``"" `` at the top level).
    """
    if isinstance(old, Mapping) and isinstance(new, Mapping):
        for key in sorted(set(old) | set(new)):
            sub = f"{path}.{key}" if path else str(key)
            if key not in old or key not in new:
                return sub
            found = first_difference(old[key], new[key], sub)
            if found is not None:
                return found
        return None
    if isinstance(old, list) and isinstance(new, list) and len(old) == len(new):
        for idx, (a, b) in enumerate(zip(old, new, strict=True)):
            found = first_difference(a, b, f"{path}[{idx}]")
            if found is not None:
                return found
        return None
    return None if old == new and type(old) is type(new) else (path or "(the whole value)")


class _ExperimentFile(BaseModel):
    """The shape of ``EXPERIMENT.json`` (unknown keys are refused)."""

    model_config = ConfigDict(extra="forbid", strict=True)

    base: str
    arms: dict[str, dict[str, Any]] = Field(min_length=2)
    reference: str
    seeds: list[int] = Field(min_length=2)
    model: str | None = None


@dataclass(frozen=True, kw_only=True)
class Experiment:
    """A checked experiment: every arm validates and all measure on the same yardstick."""

    path: Path
    """The experiment file."""
    base: dict[str, Any]
    """The base ds_config (its JSON object), read from ``base``."""
    arms: dict[str, dict[str, Any]]
    """Arm name → its merge patch, in the file's order (the order runs start in)."""
    reference: str
    """The arm that deltas are measured against (one of ``arms``)."""
    seeds: tuple[int, ...]
    """The seeds every arm runs with (distinct, ≥ 2): each sets ``curriculum.seed``, which also
    seeds the model's initialisation in the reference loop."""
    model: str | None
    """A HF model folder every arm starts from (``--model`` of the reference loop); None: the
    reference loop's small default GPT-2, of size :attr:`model_preset`."""
    model_preset: str = "proxy"
    """The default GPT-2's size (``--model-preset``) when ``model`` is None: the experiment
    file's ``model`` when it names one of :data:`~curriculum_ds.default_model.MODEL_PRESETS`
    (a folder of that name is not looked for)."""
    max_duration: str
    """The arms' common ``curriculum.max_duration`` (e.g. ``"60000tok"``)."""

    eval_streams: tuple[str, ...]
    """The names of the common eval streams, in the config's order."""

    @property
    def model_label(self) -> str | None:
        """What each run's ``ablate.json`` records as its model.

        The folder, a preset other than ``proxy`` by name, else None (the default, as recorded
        before presets existed).
        """
        if self.model is not None:
            return self.model
        return None if self.model_preset == "proxy" else self.model_preset


def arm_config(experiment: Experiment, arm: str, seed: int) -> dict[str, Any]:
    """The ds_config of one run: the base, the arm's merge patch, then ``curriculum.seed``.

    A monitor's ``output_path`` (:data:`MONITOR_SECTIONS`, from the base: a patch may not set
    one) is removed, so the run's monitors write under its own run folder
    (``OUT/runs/ARM/seed-S/monitors/``, the reference loop's default) instead of every arm ×
    seed writing into one folder.
    """
    config = copy.deepcopy(merge_patch(experiment.base, experiment.arms[arm]))  # base untouched
    for section in monitor_paths(config):
        del config[section]["output_path"]
    curriculum = config.get("curriculum")
    if isinstance(curriculum, dict):
        curriculum["seed"] = seed
    return config


MONITOR_SECTIONS = ("tensorboard", "csv_monitor", "wandb")
"""DeepSpeed's monitor sections that may name an ``output_path``."""

_PATH_KEY = re.compile(r"(^|_)(path|dir|file|folder)$")
"""A DeepSpeed key naming a place it writes or reads: ``output_path``, ``nvme_path``,
``output_file``, ``save_dir``, ``data_cluster_path``..."""


def monitor_paths(config: Mapping[str, Any]) -> list[str]:
    """The monitor sections of ``config`` that set an explicit ``output_path``."""
    return [
        section
        for section in MONITOR_SECTIONS
        if isinstance(config.get(section), Mapping) and config[section].get("output_path")
    ]


def path_keys(patch: Any, where: str = "") -> list[str]:
    """The JSON paths of the path-valued DeepSpeed keys an arm's patch sets, in its order.

    Keys inside ``curriculum`` are not DeepSpeed's: an arm may change its stream paths.
    Path-valued: a key named ``path``/``dir``/``file``/``folder`` or ending in ``_path``,
    ``_dir``, ``_file``, ``_folder`` at any depth: a monitor's ``output_path``, ZeRO offload's
    ``nvme_path``, ``flops_profiler.output_file``, a ``checkpoint`` save folder (``save_dir``,
    ``checkpoint.*_path``). Such a key would send the run's writes outside ``--out``; an
    experiment file received from elsewhere must not be able to.
    """
    found: list[str] = []
    if not isinstance(patch, Mapping):
        return found
    for key, value in patch.items():
        sub = f"{where}.{key}" if where else str(key)
        if not where and key == "curriculum":
            continue
        if value is not None and _PATH_KEY.search(str(key)):
            found.append(sub)
        elif isinstance(value, Mapping):
            found += path_keys(value, sub)
    return found


def _schema_error(exc: ValidationError, path: Path) -> ConfigError:
    err = exc.errors()[0]
    loc = ".".join(str(part) for part in err["loc"])
    msg = err["msg"]
    if err["type"] == "extra_forbidden":
        msg = "unknown key (expected base, arms, reference, seeds, model)"
    elif err["type"] == "missing":
        msg = "required field is missing"
    elif err["type"] == "too_short" and loc in ("arms", "seeds"):
        msg = f"at least 2 {loc} are needed for a comparison, got {len(err['input'])}"
    return ConfigError(f"{path}: {loc}: {msg}")


def validate_arm(config: dict[str, Any], arm: str, model: str | None) -> Any:
    """The arm's RunConfig (:func:`~curriculum_ds.config.load_config` with the data checks)."""
    from curriculum_ds.config import load_config

    with tempfile.TemporaryDirectory(prefix="curriculum_ds_ablate_") as tmp:
        path = Path(tmp) / f"{arm}.json"
        path.write_text(json.dumps(config), encoding="utf-8")
        try:
            return load_config(path, check_data=True, model=model, strict=True)
        except ConfigError as exc:
            first = str(exc).splitlines()[0]
            raise ConfigError(f'arm "{arm}": {first}') from None


def load_experiment(path: str | Path) -> Experiment:
    """Read and check ``EXPERIMENT.json``; nothing is written.

    Args:
        path: the experiment file; its ``base`` is resolved relative to it.

    Returns:
        The checked :class:`Experiment`.

    Raises:
        ConfigError: one line: the file's shape (unknown key, fewer than 2 arms or seeds,
            repeated seeds), a ``reference`` that is not an arm, an arm that sets
            ``curriculum.seed`` itself, an arm whose ds_config does not validate (naming the arm
            and the field), arms with different ``max_duration`` or ``curriculum.eval``
            (streams, ``max_samples``, ``max_seq_len``), or none.
    """
    path = Path(path)
    raw = read_json_object(path, field="experiment")
    try:
        spec = _ExperimentFile.model_validate(raw)
    except ValidationError as exc:
        raise _schema_error(exc, path) from None
    if spec.reference not in spec.arms:
        raise ConfigError(
            f'{path}: reference: "{spec.reference}" is not an arm (arms: {", ".join(spec.arms)})'
        )
    repeated = sorted({s for s in spec.seeds if spec.seeds.count(s) > 1})
    if repeated:
        raise ConfigError(f"{path}: seeds: each seed once, {repeated[0]} is repeated")
    for arm, patch in spec.arms.items():
        if not _ARM_NAME.fullmatch(arm) or arm in (".", ".."):
            raise ConfigError(
                f"{path}: arms: {show_path(arm)} is not an arm name (it names the arm's run "
                'folder: 1 to 64 characters of A-Z a-z 0-9 . _ -, not "." or "..")'
            )
        written = path_keys(patch)
        if written:
            raise ConfigError(
                f'arm "{arm}": {written[0]}: an arm may not set where DeepSpeed writes (every '
                "run writes under --out); set it in the base config"
            )
        if isinstance(patch.get("curriculum"), dict) and "seed" in patch["curriculum"]:
            raise ConfigError(
                f'arm "{arm}": curriculum.seed: set by the experiment\'s seeds, not by an arm'
            )
    base_path = path.parent / spec.base
    base = read_json_object(base_path, field="base")
    preset = spec.model if spec.model in MODEL_PRESETS else "proxy"
    model = (
        None if spec.model is None or spec.model in MODEL_PRESETS else str(path.parent / spec.model)
    )
    experiment = Experiment(
        path=path,
        base=base,
        arms=dict(spec.arms),
        reference=spec.reference,
        seeds=tuple(spec.seeds),
        model=model,
        model_preset=preset,
        max_duration="",  # known once every arm validated (below)
        eval_streams=(),
    )
    yardsticks: dict[str, tuple[str, Any]] = {}
    for arm in spec.arms:
        curriculum = validate_arm(arm_config(experiment, arm, spec.seeds[0]), arm, model).curriculum
        if curriculum.eval is None:
            raise ConfigError(
                f'arm "{arm}": curriculum.eval: required by ablate (the held-out streams are '
                "the yardstick every arm is measured on)"
            )
        yardstick = curriculum.eval.model_dump(mode="json", exclude={"interval"})
        yardsticks[arm] = (str(curriculum.max_duration), yardstick)
    ref_duration, ref_eval = yardsticks[spec.reference]
    for arm, (duration, yardstick) in yardsticks.items():
        if duration != ref_duration:
            raise ConfigError(
                f'arm "{arm}": curriculum.max_duration: {duration}, but the reference '
                f'"{spec.reference}" has {ref_duration}: every arm must train on equal tokens'
            )
        if yardstick != ref_eval:
            where = first_difference(ref_eval, yardstick, "curriculum.eval")
            raise ConfigError(
                f'arm "{arm}": {where}: differs from the reference "{spec.reference}"\'s: every '
                "arm must be evaluated on the same streams and samples"
            )
    return dataclasses.replace(
        experiment,
        max_duration=ref_duration,
        eval_streams=tuple(s["name"] for s in ref_eval["streams"]),
    )
