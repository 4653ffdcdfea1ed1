"""The DeepSpeed part of a ds_config, checked by DeepSpeed's own config models before launch.

DeepSpeed validates its config only inside ``deepspeed.initialize`` (after the ranks started and
``torch.distributed`` rendezvoused), ignores unknown top-level keys silently, and builds the lr
scheduler with ``Scheduler(optimizer, **params)`` (a missing parameter is a ``TypeError`` in
every rank). :func:`deepspeed_config_errors` runs the same checks up front, in one process, with
no distributed state:

* every top-level key must be one DeepSpeed reads (:func:`known_top_level_keys`, learnt from
  DeepSpeed itself) or ``curriculum``; an unknown key gets a did-you-mean (:mod:`difflib`).
  Escape hatch: a key starting with ``_`` (``"_comment"``) is the user's own and is not checked;
* ``deepspeed.runtime.config.DeepSpeedConfig`` is built over the DeepSpeed part (world size 1,
  ``train_batch_size`` left out: :meth:`~curriculum_ds.config.RunConfig.global_batch_size`
  checks it against the launch's world size), so ZeRO, fp16/bf16, monitor and every other
  section pass DeepSpeed's pydantic models; an error names the key (``zero_optimization.stage``);
* ``scheduler.params`` must fit the signature of DeepSpeed's scheduler class (required
  parameters present, no unknown one, numbers where numbers are expected, no HF-Trainer
  ``"auto"``), and ``optimizer.params`` must hold no ``"auto"``;
* an enabled monitor (``tensorboard``, ``wandb``, ``comet``) needs its package installed;
* a ``scheduler`` beside ``curriculum.lr_schedule`` is refused (:func:`lr_schedule_conflicts`):
  both would set the learning rate;
* DeepSpeed's own curricula beside ours are refused (:func:`curriculum_conflicts`): the legacy
  top-level ``curriculum_learning`` and an enabled
  ``data_efficiency.data_sampling.curriculum_learning``; two curricula would drive the data.

Every problem is one line; all are returned. Importing DeepSpeed sets ``DS_ACCELERATOR=cpu``
without CUDA first (:func:`curriculum_ds.distributed.set_deepspeed_env`), so no CUDA warning is
printed; DeepSpeed's log output is silenced while its config is built. Deterministic.
"""

from __future__ import annotations

import contextlib
import difflib
import functools
import importlib.util
import inspect
import logging
import os
import re
from collections.abc import Iterator, Mapping
from typing import Any

from pydantic import BaseModel, ValidationError

from curriculum_ds.config.messages import show_value, validation_error_lines

__all__ = [
    "MONITOR_PACKAGES",
    "curriculum_conflicts",
    "deepspeed_config_errors",
    "known_top_level_keys",
    "lr_schedule_conflicts",
    "top_level_errors",
]

MONITOR_PACKAGES: Mapping[str, str] = {
    "tensorboard": "tensorboard",
    "wandb": "wandb",
    "comet": "comet_ml",
}
"""The Python package each DeepSpeed monitor section imports when enabled (``csv_monitor`` needs
none)."""

_EXTRA_TOP_LEVEL_KEYS = ("sequence_parallel_size",)
"""Top-level keys DeepSpeed reads outside :class:`DeepSpeedConfig`'s parsing (only with
``torch.distributed`` initialised), so :func:`known_top_level_keys` cannot observe them."""


@contextlib.contextmanager
def _quiet_deepspeed() -> Iterator[None]:
    """Import DeepSpeed without its CPU-accelerator warning and mute its logger meanwhile."""
    import torch

    from curriculum_ds.distributed import set_deepspeed_env

    set_deepspeed_env(os.environ, cuda=bool(torch.cuda.is_available()))
    from deepspeed.utils import logger

    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        logger.setLevel(level)


class _RecordingDict(dict[str, Any]):
    """A dict that records every key looked up in it (``get``, ``[]``, ``in``, ``in keys()``)."""

    def __init__(self, data: Mapping[str, Any], seen: set[str]) -> None:
        super().__init__(data)
        self.seen = seen

    def get(self, key: Any, default: Any = None) -> Any:
        self.seen.add(key)
        return super().get(key, default)

    def __getitem__(self, key: Any) -> Any:
        self.seen.add(key)
        return super().__getitem__(key)

    def __contains__(self, key: object) -> bool:
        if isinstance(key, str):
            self.seen.add(key)
        return super().__contains__(key)

    def keys(self) -> Any:
        return _RecordingKeys(self)


class _RecordingKeys:
    """``dict.keys()`` of a :class:`_RecordingDict`: ``KEY in d.keys()`` is recorded too."""

    def __init__(self, owner: _RecordingDict) -> None:
        self._owner = owner

    def __contains__(self, key: object) -> bool:
        return key in self._owner

    def __iter__(self) -> Iterator[str]:
        return iter(dict.keys(self._owner))

    def __len__(self) -> int:
        return len(self._owner)


@functools.cache
def known_top_level_keys() -> frozenset[str]:
    """The top-level ds_config keys this DeepSpeed version reads.

    Learnt from DeepSpeed itself: ``DeepSpeedConfig`` is built over a minimal config whose dict
    records every key looked up, plus :data:`_EXTRA_TOP_LEVEL_KEYS`. Cached; deterministic for
    one installed DeepSpeed.
    """
    with _quiet_deepspeed():
        from deepspeed.runtime.config import DeepSpeedConfig

        seen: set[str] = set()
        DeepSpeedConfig(_RecordingDict({"train_micro_batch_size_per_gpu": 1}, seen))
    return frozenset(k for k in seen if isinstance(k, str)) | frozenset(_EXTRA_TOP_LEVEL_KEYS)


def top_level_errors(raw: Mapping[str, Any]) -> list[str]:
    """One line per unknown top-level key of a ds_config, with a did-you-mean when one is close.

    Known: :func:`known_top_level_keys` and ``curriculum``; a key starting with ``_`` is the
    user's own (a comment) and is skipped.
    """
    known = sorted(known_top_level_keys() | {"curriculum"})
    errors = []
    for key in raw:
        if key in known or key.startswith("_"):
            continue
        close = difflib.get_close_matches(key, known, n=1, cutoff=0.75)
        if close:
            errors.append(f'{key}: unknown top-level key (did you mean "{close[0]}"?)')
        else:
            errors.append(
                f"{key}: unknown top-level key (neither DeepSpeed's nor curriculum; DeepSpeed "
                'would ignore it; a note\'s key may start with "_")'
            )
    return errors


def _package_installed(name: str) -> bool:
    """Whether ``import name`` would find a package (no import)."""
    return importlib.util.find_spec(name) is not None


def _monitor_errors(ds_config: Mapping[str, Any]) -> list[str]:
    errors = []
    for key, package in MONITOR_PACKAGES.items():
        section = ds_config.get(key)
        enabled = isinstance(section, Mapping) and section.get("enabled") is True
        if enabled and not _package_installed(package):
            errors.append(
                f"{key}.enabled: the {key} monitor needs the Python package {package!r}, "
                f"which is not installed (pip install {package}, or set enabled to false)"
            )
    return errors


LEGACY_CURRICULUM_KEY = "curriculum_learning"
"""DeepSpeed's legacy top-level curriculum block (removed upstream, DeepSpeed issue #8489)."""


def curriculum_conflicts(ds_config: Mapping[str, Any]) -> dict[str, str]:
    """DeepSpeed's curricula in a ds_config that also has our ``curriculum`` section.

    Refused: a top-level ``curriculum_learning`` (DeepSpeed's legacy curriculum, whatever its
    value) and ``data_efficiency.data_sampling.curriculum_learning.enabled: true`` (DeepSpeed's
    data-efficiency curriculum). Deterministic.

    Args:
        ds_config: the DeepSpeed part (without ``curriculum``).

    Returns:
        ``{top-level key: one line naming the key}``, empty when there is no conflict (the
        caller leaves those keys out of DeepSpeed's own checks, which would only add noise).
    """
    errors = {}
    if LEGACY_CURRICULUM_KEY in ds_config:
        errors[LEGACY_CURRICULUM_KEY] = (
            f"{LEGACY_CURRICULUM_KEY}: DeepSpeed's legacy curriculum beside the curriculum "
            "section (two curricula would drive the data); remove it, the curriculum section "
            "replaces it"
        )
    block: Any = ds_config.get("data_efficiency")
    for key in ("data_sampling", "curriculum_learning"):
        block = block.get(key) if isinstance(block, Mapping) else None
    if isinstance(block, Mapping) and block.get("enabled") is True:
        errors["data_efficiency"] = (
            "data_efficiency.data_sampling.curriculum_learning.enabled: DeepSpeed's "
            "data-efficiency curriculum beside the curriculum section (two curricula would "
            "drive the data); set it to false or remove the block"
        )
    if errors:
        equivalent = _equivalent_section(ds_config)
        if equivalent is not None:
            for key in errors:
                errors[key] += equivalent
    return errors


def _equivalent_section(ds_config: Mapping[str, Any]) -> str | None:
    """``; its equivalent ...: {...}`` for a translatable sequence-length curriculum, else None.

    The section of :func:`curriculum_ds.config.legacy.migrate_config` (one line of compact
    JSON, at one rank's global batch when the file has no ``train_batch_size``).
    """
    import json

    from curriculum_ds.config.legacy import migrate_config
    from curriculum_ds.errors import ConfigError

    try:
        migrated, _ = migrate_config(dict(ds_config))
    except (ConfigError, ImportError, AssertionError, RuntimeError):
        return None  # not translatable: the refusal alone (migrate names why)
    section = json.dumps(migrated["curriculum"], separators=(",", ":"))
    return (
        "; the equivalent curriculum section (`curriculum-ds migrate DS_CONFIG` writes the "
        f'whole file): "curriculum": {section}'
    )


def lr_schedule_conflicts(ds_config: Mapping[str, Any], curriculum: Any) -> list[str]:
    """One line when the ds_config has a ``scheduler`` and the curriculum an ``lr_schedule``.

    Args:
        ds_config: the DeepSpeed part (without ``curriculum``).
        curriculum: the raw ``curriculum`` value (any JSON; only a mapping can conflict).

    Returns:
        ``["scheduler: ..."]`` or ``[]``. Deterministic.
    """
    if (
        ds_config.get("scheduler") is None
        or not isinstance(curriculum, Mapping)
        or curriculum.get("lr_schedule") is None
    ):
        return []
    return [
        "scheduler: a DeepSpeed scheduler beside curriculum.lr_schedule (both would set the "
        'learning rate); remove "scheduler" (curriculum.lr_schedule warms up and decays by '
        "tokens) or curriculum.lr_schedule"
    ]


def _auto_errors(ds_config: Mapping[str, Any], section: str) -> list[str]:
    params = (
        ds_config.get(section, {}).get("params")
        if isinstance(ds_config.get(section), Mapping)
        else None
    )
    if not isinstance(params, Mapping):
        return []
    return [
        f'{section}.params.{name}: "auto" is filled in only by the HF Trainer\'s DeepSpeed '
        "integration; give a value"
        for name, value in params.items()
        if value == "auto"
    ]


def _scheduler_errors(ds_config: Mapping[str, Any]) -> list[str]:
    """``scheduler.params`` against the signature of DeepSpeed's scheduler class."""
    scheduler = ds_config.get("scheduler")
    if scheduler is None:
        return []
    if not isinstance(scheduler, Mapping):
        return [f"scheduler: expected an object, got {show_value(scheduler)}"]
    from deepspeed.runtime import lr_schedules

    name = scheduler.get("type")
    if name not in lr_schedules.VALID_LR_SCHEDULES:
        import torch.optim.lr_scheduler

        if isinstance(name, str) and hasattr(torch.optim.lr_scheduler, name):
            return []  # a torch scheduler: DeepSpeed passes params through unchecked
        close = difflib.get_close_matches(str(name), lr_schedules.VALID_LR_SCHEDULES, n=1)
        hint = (
            f'did you mean "{close[0]}"?'
            if close
            else "one of " + ", ".join(lr_schedules.VALID_LR_SCHEDULES)
        )
        return [f"scheduler.type: unknown scheduler {show_value(name)} ({hint})"]
    params = scheduler.get("params", {})
    if not isinstance(params, Mapping):
        return [f"scheduler.params: expected an object, got {show_value(params)}"]
    signature = inspect.signature(getattr(lr_schedules, str(name)).__init__)
    accepted = {
        p.name: p
        for p in list(signature.parameters.values())[1:]  # self
        if p.name not in ("optimizer", "last_batch_iteration")
        and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)
    }
    errors = []
    for key, value in params.items():
        where = f"scheduler.params.{key}"
        if key not in accepted:
            close = difflib.get_close_matches(key, list(accepted), n=1)
            hint = f'did you mean "{close[0]}"?' if close else "accepted: " + ", ".join(accepted)
            errors.append(f"{where}: unknown parameter of {name} ({hint})")
        elif value == "auto":
            errors.append(
                f'{where}: "auto" is filled in only by the HF Trainer\'s DeepSpeed integration; '
                f"{name} needs a value"
            )
        elif not _fits(accepted[key].annotation, value):
            expected = _shown_type(accepted[key].annotation)
            errors.append(f"{where}: expected {expected}, got {show_value(value)}")
    for key, p in accepted.items():
        if p.default is inspect.Parameter.empty and key not in params:
            errors.append(f"scheduler.params.{key}: required by {name}, missing")
    return errors


def _fits(annotation: Any, value: Any) -> bool:
    """Whether a JSON value fits a scheduler parameter's annotation (int, float, str; else yes)."""
    if isinstance(value, bool):
        return annotation not in (int, float, "int", "float")
    if annotation in (int, "int"):
        return isinstance(value, int)
    if annotation in (float, "float"):
        return isinstance(value, int | float)
    if annotation in (str, "str"):
        return isinstance(value, str)
    return True


def _shown_type(annotation: Any) -> str:
    return {int: "an integer", "int": "an integer", str: "a string", "str": "a string"}.get(
        annotation, "a number"
    )


def _validation_errors(exc: ValidationError, ds_config: Mapping[str, Any]) -> list[str]:
    """A DeepSpeed sub-model's ValidationError as lines that start with the ds_config key path.

    The sub-model validated one section (``zero_optimization``) or the top level (the monitor
    model): the section is the one that, validated alone by that model, fails the same way.
    """
    model = _deepspeed_model(exc.title)
    want = [(tuple(e["loc"]), e["type"]) for e in exc.errors()]
    top = want[0][0][0] if want and want[0][0] else None
    root = ""
    if model is not None and top not in ds_config:
        for key, section in ds_config.items():
            if not isinstance(section, Mapping):
                continue
            try:
                model(**section)
            except ValidationError as again:
                if [(tuple(e["loc"]), e["type"]) for e in again.errors()] == want:
                    root = key
                    break
            except Exception:  # another section's own check: not this one
                continue
    raw = ds_config.get(root, {}) if root else ds_config
    lines = validation_error_lines(exc, raw, model=model or BaseModel, root=root)
    # DeepSpeed's own messages may repeat the path ("fp16.loss_scale: fp16.loss_scale must be")
    return [_drop_repeated_path(line) for line in lines]


def _drop_repeated_path(line: str) -> str:
    path, _, detail = line.partition(": ")
    return f"{path}: {detail.removeprefix(path + ' ')}"


def _deepspeed_model(title: str) -> type[BaseModel] | None:
    """DeepSpeed's pydantic config model of that class name (for the allowed keys), if any."""
    from deepspeed.runtime.config_utils import DeepSpeedConfigModel

    stack: list[type[BaseModel]] = [DeepSpeedConfigModel]
    while stack:
        cls = stack.pop()
        if cls.__name__ == title:
            return cls
        stack.extend(cls.__subclasses__())
    return None


def deepspeed_config_errors(ds_config: Mapping[str, Any], *, build: bool = True) -> list[str]:
    """Every problem of the DeepSpeed part of a ds_config, one line each (empty when valid).

    Args:
        ds_config: the ds_config without ``curriculum`` (parsed JSON). Not modified.
        build: run DeepSpeed's config models (``DeepSpeedConfig``); off when the batch-size
            keys are already known bad (DeepSpeed's batch assertions would repeat them).

    Returns:
        Lines ``<key path>: <problem>``: unknown top-level keys (:func:`top_level_errors`), a
        monitor whose package is missing, ``"auto"`` in optimizer/scheduler params, scheduler
        params that do not fit DeepSpeed's scheduler, and what DeepSpeed's own config models
        refuse (``zero_optimization.stage: expected one of 0, 1, 2 or 3, got 5``). Deterministic;
        reads no file.
    """
    errors = top_level_errors(ds_config)
    errors += _monitor_errors(ds_config)
    errors += _auto_errors(ds_config, "optimizer")
    with _quiet_deepspeed():
        errors += _scheduler_errors(ds_config)
        if not build:
            return errors
        from deepspeed.runtime.config import DeepSpeedConfig, DeepSpeedConfigError

        checked = {k: v for k, v in ds_config.items() if k != "train_batch_size"}
        try:
            DeepSpeedConfig(checked)
        except ValidationError as exc:
            errors += _validation_errors(exc, ds_config)
        except (
            AssertionError,
            ValueError,
            TypeError,
            KeyError,
            AttributeError,
            DeepSpeedConfigError,  # e.g. a key DeepSpeed removed ("elasticity")
        ) as exc:
            errors.append(_plain_error(exc, ds_config))
    return errors


def _plain_error(exc: Exception, ds_config: Mapping[str, Any]) -> str:
    """A DeepSpeed assertion or ValueError as one line, naming the first key it mentions."""
    text = " ".join(str(exc).split()) or type(exc).__name__
    text = text.removeprefix("DeepSpeedConfig: ")
    for key in ds_config:  # a key the message quotes first ("the 'elasticity' block")
        if f"'{key}'" in text or f'"{key}"' in text:
            return f"{key}: {text}"
    for key in ds_config:
        if re.search(rf"\b{re.escape(key)}\b", text):
            return f"{key}: {text}"
    return f"ds_config: {text} (DeepSpeed's check)"
