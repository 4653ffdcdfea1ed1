"""``TrainingArguments`` against a ds_config: the checks ``CurriculumTrainer`` makes first.

:func:`curriculum_run` turns ``TrainingArguments`` (its ``deepspeed`` ds_config) into the
plugin's :class:`~curriculum_ds.config.RunConfig`: every user mistake is one
:class:`~curriculum_ds.errors.ConfigError` line naming the argument or key. HF's ``"auto"`` batch
sizes take ``TrainingArguments``' values, as HF's own DeepSpeed integration fills them. Only the
fields read are used (``getattr``), so a ``TrainingArguments.to_json_string()`` dump read by
:func:`arguments_from_json` is checked the same way without importing transformers
(``curriculum-ds validate --hf-args``). The Trainer's constructor calls it through
:func:`curriculum_ds.hf.arguments.checked_run`.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from curriculum_ds.config.run import read_json_object
from curriculum_ds.errors import ConfigError

if TYPE_CHECKING:
    from curriculum_ds.config.run import RunConfig

__all__ = ["arguments_from_json", "curriculum_run", "read_ds_config"]

_BATCH_KEYS = (
    ("train_micro_batch_size_per_gpu", "per_device_train_batch_size"),
    ("gradient_accumulation_steps", "gradient_accumulation_steps"),
)

_HF_DEFAULTS = {
    "per_device_train_batch_size": 8,
    "gradient_accumulation_steps": 1,
    "group_by_length": False,
}
"""``TrainingArguments``' defaults of the fields the checks read (a dump may leave them out)."""


def arguments_from_json(
    path: str | os.PathLike[str], *, deepspeed: str | os.PathLike[str], world_size: int
) -> Any:
    """The fields of a ``TrainingArguments.to_json_string()`` dump that the checks read.

    For ``curriculum-ds validate --hf-args``: the Trainer's checks
    (:func:`curriculum_run`) without starting ranks or importing transformers. ``deepspeed`` is
    the ds_config being validated (the dump's own ``deepspeed`` is not read), ``world_size``
    the ``--num-gpus``.

    Raises:
        ConfigError: the file is missing or not a JSON object, or a field read has the wrong
            type (one line naming ``--hf-args`` and the field).
    """
    import types

    raw = read_json_object(path, field="--hf-args")
    fields: dict[str, Any] = {}
    for name, default in _HF_DEFAULTS.items():
        value = raw.get(name, default)
        kind = bool if isinstance(default, bool) else int
        if type(value) is not kind or (kind is int and value < 1):
            wanted = "true or false" if kind is bool else "a positive integer"
            raise ConfigError(f"--hf-args {path}: {name}: expected {wanted}, got {value!r}")
        fields[name] = value
    return types.SimpleNamespace(**fields, deepspeed=os.fspath(deepspeed), world_size=world_size)


def read_ds_config(deepspeed: Any) -> dict[str, Any]:
    """The ds_config ``TrainingArguments.deepspeed`` names: a JSON path or an already parsed dict.

    Raises:
        ConfigError: it is neither, the file is missing, or it is not a JSON object.
    """
    if isinstance(deepspeed, dict):
        return dict(deepspeed)
    if not isinstance(deepspeed, str | os.PathLike):
        raise ConfigError(
            "TrainingArguments.deepspeed: CurriculumTrainer needs a ds_config (a JSON path or "
            f"dict) with a curriculum section, got {type(deepspeed).__name__}"
        )
    return read_json_object(deepspeed, field="TrainingArguments.deepspeed")


def curriculum_run(args: Any, *, train_dataset: Any = None, check_data: bool = True) -> RunConfig:
    """The plugin's run config for a Trainer's arguments, or one line saying what is wrong.

    Args:
        args: the ``transformers.TrainingArguments`` (its ``deepspeed``,
            ``per_device_train_batch_size``, ``gradient_accumulation_steps``, ``world_size``,
            ``group_by_length``).
        train_dataset: what the user passed as ``train_dataset`` (must be None).
        check_data: run the data preflight (``curriculum-ds validate``'s checks).

    Returns:
        The :class:`~curriculum_ds.config.RunConfig` of the ``curriculum`` section with the batch
        sizes ``TrainingArguments`` gives (its DeepSpeed part holds only those: HF builds the
        engine from the ds_config itself).

    Raises:
        ConfigError: a ``train_dataset`` was passed; no ``deepspeed`` ds_config, or one without a
            ``curriculum`` section; ``group_by_length=True``; a batch size of the ds_config
            (not ``"auto"``) differs from ``TrainingArguments``'; ``curriculum.lr_schedule``
            beside a ds_config ``scheduler``; any error of the section or its data (one line each,
            naming the field).
        DataError: a stream's data is missing or malformed.
    """
    from curriculum_ds.config.run import parse_run
    from curriculum_ds.preflight import check_run

    if train_dataset is not None:
        raise ConfigError(
            "train_dataset: CurriculumTrainer draws its batches from the ds_config's curriculum "
            "section; do not pass a train_dataset"
        )
    if args is None or getattr(args, "deepspeed", None) is None:
        raise ConfigError(
            "TrainingArguments.deepspeed: CurriculumTrainer needs a ds_config with a curriculum "
            'section (TrainingArguments(deepspeed="ds.json", ...))'
        )
    if getattr(args, "group_by_length", False):
        raise ConfigError(
            "TrainingArguments.group_by_length: not supported by CurriculumTrainer (the "
            "curriculum's phases and buckets order the samples); leave it False"
        )
    ds = read_ds_config(args.deepspeed)
    if "curriculum" not in ds:
        raise ConfigError(
            "curriculum: the ds_config of TrainingArguments.deepspeed has no curriculum section; "
            "CurriculumTrainer needs one (docs/hf-trainer.md)"
        )
    sizes = {key: _agreed(ds, key, int(getattr(args, name)), name) for key, name in _BATCH_KEYS}
    world = int(args.world_size)
    global_batch = sizes["train_micro_batch_size_per_gpu"] * sizes["gradient_accumulation_steps"]
    sizes["train_batch_size"] = _agreed(
        ds,
        "train_batch_size",
        global_batch * world,
        f"per_device_train_batch_size × gradient_accumulation_steps × world_size {world}",
    )
    if ds["curriculum"].get("lr_schedule") is not None and "scheduler" in ds:
        raise ConfigError(
            "scheduler: the ds_config has a scheduler section beside curriculum.lr_schedule "
            "(both would set the learning rate); keep one of them"
        )
    run = parse_run({**sizes, "curriculum": ds["curriculum"]})
    check_run(run, check_data=check_data, strict=True)
    return run


def _agreed(ds: dict[str, Any], key: str, hf_value: int, hf_name: str) -> int:
    """``hf_value``, after checking the ds_config's ``key`` (absent or ``"auto"``: HF's value)."""
    value = ds.get(key)
    if value is None or value == "auto":
        return hf_value
    if not isinstance(value, int) or value != hf_value:
        raise ConfigError(
            f"{key}: the ds_config has {value!r} but TrainingArguments gives {hf_value} "
            f'({hf_name}); make them agree, or set "auto"'
        )
    return value
