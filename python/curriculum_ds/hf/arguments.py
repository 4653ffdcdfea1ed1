"""What ``CurriculumTrainer`` checks before anything is built, and the run's step counts.

:func:`curriculum_run` turns ``TrainingArguments`` (its ``deepspeed`` ds_config) into the
plugin's :class:`~curriculum_ds.config.RunConfig`: every user mistake is one
:class:`~curriculum_ds.errors.ConfigError` line naming the argument or key, raised in the
Trainer's constructor (before the engine, the data or any file). HF's ``"auto"`` batch sizes
take ``TrainingArguments``' values, as HF's own DeepSpeed integration fills them.

:func:`step_bound` is an upper bound of the run's optimizer steps (the Trainer's ``max_steps``,
which only has to be reached never: the run ends at ``max_duration``); :func:`estimated_steps`
is the horizon HF's own lr scheduler decays over when ``curriculum.lr_schedule`` is absent.
"""

from __future__ import annotations

import dataclasses
import math
import os
from typing import TYPE_CHECKING, Any

from curriculum_ds.config import read_json_object
from curriculum_ds.errors import ConfigError

if TYPE_CHECKING:
    from curriculum_ds.config import RunConfig

__all__ = [
    "curriculum_run",
    "estimated_steps",
    "read_ds_config",
    "step_bound",
    "trainer_arguments",
]

_BATCH_KEYS = (
    ("train_micro_batch_size_per_gpu", "per_device_train_batch_size"),
    ("gradient_accumulation_steps", "gradient_accumulation_steps"),
)


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
    from curriculum_ds.plugin.engine import load_run_config

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
    return load_run_config({**sizes, "curriculum": ds["curriculum"]}, check_data=check_data)


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


def trainer_arguments(args: Any, run: RunConfig) -> tuple[Any, int | None]:
    """The Trainer's own copy of the caller's ``TrainingArguments``, and its scheduler horizon.

    ``dataclasses.replace`` (HF's ``__post_init__`` runs again on the copy; ``args`` is left as
    it was) with ``ignore_data_skip=True`` (HF's batch skipping off: the curriculum restores its
    cursor) and, when ``max_steps`` is not set (``<= 0``), ``max_steps`` =
    :func:`step_bound` (the Trainer needs a bound for a feed without length).

    Returns:
        The copy, and the horizon of HF's lr scheduler: the caller's ``max_steps`` when set, else
        :func:`estimated_steps`.
    """
    world = int(args.world_size)
    changes: dict[str, Any] = {"ignore_data_skip": True}
    horizon = args.max_steps if args.max_steps > 0 else None
    if horizon is None:
        changes["max_steps"] = step_bound(run, world)
        horizon = estimated_steps(run, world)
    return dataclasses.replace(args, **changes), horizon


def step_bound(run: RunConfig, dp_world_size: int) -> int:
    """An upper bound of the run's optimizer steps: the Trainer's ``max_steps``.

    A ``tok`` schedule takes at most ``ceil(max_duration / global_batch_size)`` steps (every
    sample holds at least one token); an ``ep`` schedule is bounded by ``10**9``. The run ends at
    ``max_duration`` (the callback stops the Trainer), so the bound is never reached.
    """
    if run.curriculum.max_duration.unit == "tok":
        total = int(run.curriculum.max_duration.value)
        return math.ceil(total / run.global_batch_size(dp_world_size)) + 1
    return 10**9


def estimated_steps(run: RunConfig, dp_world_size: int) -> int:
    """The run's optimizer steps, estimated from its streams: HF's scheduler's horizon.

    Per phase, a ``tok`` duration over the global batch's expected tokens (each stream's mean
    tokens per sample, capped at the phase's ``max_seq_len``, weighted by its proportion); an
    ``ep`` duration times the phase's samples over the global batch. Streams whose info cannot
    be read (remote, not yet downloaded) count ``max_seq_len`` tokens. At least 1.
    """
    from curriculum_ds.data import read_stream_info

    global_batch = run.global_batch_size(dp_world_size)
    unit = run.curriculum.max_duration.unit
    steps = 0.0
    for phase in run.curriculum.schedule:
        loader = phase.train_loader
        means, samples, weights = [], 0, []
        for stream in loader.streams:
            try:
                info = read_stream_info(stream.local)
                mean = info.num_tokens / max(info.num_samples, 1)
                samples += info.num_samples
            except Exception:  # an estimate: fall back to the longest sample
                mean = float(loader.max_seq_len if isinstance(loader.max_seq_len, int) else 1)
            means.append(min(mean, _longest(loader.max_seq_len)))
            weights.append(_proportion(stream))
        duration = float(phase.duration.value)
        if unit == "tok":
            total = sum(weights) or 1.0
            per_sample = sum(m * w for m, w in zip(means, weights, strict=True)) / total
            steps += duration / (global_batch * max(per_sample, 1.0))
        else:
            steps += duration * samples / global_batch
    return max(1, math.ceil(steps))


def _longest(max_seq_len: Any) -> float:
    """A phase's longest sample: its ``max_seq_len`` (the largest point of a ramp)."""
    if isinstance(max_seq_len, int):
        return float(max_seq_len)
    return float(max(value for _, value in max_seq_len))


def _proportion(stream: Any) -> float:
    """A stream's share for the estimate: its proportion (a ramp's mean point), default 1."""
    value = getattr(stream, "proportion", None)
    if value is None:
        return 1.0
    if isinstance(value, int | float):
        return float(value)
    points = [float(v) for _, v in value]
    return sum(points) / len(points)
