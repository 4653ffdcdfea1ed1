"""A whole ds_config: :class:`RunConfig`, :func:`load_config` and :func:`parse_curriculum`.

The user's ds_config is one JSON file: the usual DeepSpeed keys plus a ``curriculum`` object
(see docs/config.md). :func:`load_config` splits it into the DeepSpeed part (passed untouched to
``deepspeed.initialize``) and a validated, frozen :class:`CurriculumConfig`, and checks the batch
sizes; with ``check_data`` it also runs the data checks of :mod:`curriculum_ds.preflight`.
Every failure is a :class:`~curriculum_ds.errors.ConfigError` of one line.
"""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from curriculum_ds.config.base import MAX_GLOBAL_BATCH_SIZE, MAX_MICRO_BATCH_TOKENS
from curriculum_ds.config.messages import (
    format_validation_error,
    join_errors,
    show_value,
    validation_error_lines,
)
from curriculum_ds.config.mixers import AioliConfig
from curriculum_ds.config.models import CurriculumConfig
from curriculum_ds.errors import ConfigError

__all__ = ["RunConfig", "load_config", "parse_curriculum", "parse_run", "read_json_object"]


def parse_curriculum(raw: Any) -> CurriculumConfig:
    """Validate a ``curriculum`` section (the parsed JSON object) into a CurriculumConfig.

    Args:
        raw: the JSON value of the ``curriculum`` key.

    Returns:
        The frozen, validated config.

    Raises:
        ConfigError: one line per problem, ``curriculum.<path> [("<phase>")]...: <problem>``
            (at most :data:`~curriculum_ds.config.messages.MAX_ERROR_LINES`, then a count).
    """
    if not isinstance(raw, dict):
        raise ConfigError(f"curriculum: expected an object, got {show_value(raw)}")
    try:
        return CurriculumConfig.model_validate(raw)
    except ValidationError as exc:
        raise ConfigError(format_validation_error(exc, raw, model=CurriculumConfig)) from None


def _curriculum_errors(raw: Any) -> tuple[CurriculumConfig | None, list[str]]:
    """The parsed section, or None and its problems, one line each."""
    if not isinstance(raw, dict):
        return None, [f"curriculum: expected an object, got {show_value(raw)}"]
    try:
        return CurriculumConfig.model_validate(raw), []
    except ValidationError as exc:
        return None, validation_error_lines(exc, raw, model=CurriculumConfig)


def _positive_int(ds_config: dict[str, Any], key: str, default: int | None) -> int:
    value = ds_config.get(key, default)
    if value is None:
        raise ConfigError(f"{key}: required field is missing (a positive integer)")
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ConfigError(f"{key}: must be a positive integer, got {show_value(value)}")
    return value


def _batch_key_errors(ds_config: dict[str, Any]) -> list[str]:
    """The batch-size keys' type problems, one line each (positive ints; micro batch required).

    A key that is HF's ``"auto"`` is left to :mod:`curriculum_ds.config.hf_auto`.
    """
    errors = []
    for key, default in (
        ("train_micro_batch_size_per_gpu", None),
        ("gradient_accumulation_steps", 1),
        ("train_batch_size", 1),
    ):
        if ds_config.get(key) == "auto":
            continue
        try:
            _positive_int(ds_config, key, default)
        except ConfigError as exc:
            errors.append(str(exc))
    return errors


@dataclasses.dataclass(frozen=True, kw_only=True)
class RunConfig:
    """A loaded ds_config: the DeepSpeed part and the validated curriculum."""

    ds_config: dict[str, Any]
    """The ds_config WITHOUT the ``curriculum`` key: what goes to ``deepspeed.initialize``."""
    curriculum: CurriculumConfig
    """The validated ``curriculum`` section."""
    path: Path | None
    """The file it was loaded from (None: parsed from a dict, :func:`parse_run`)."""

    @property
    def micro_batch_size(self) -> int:
        """``train_micro_batch_size_per_gpu``: samples per micro-batch per dp rank (required).

        At most :data:`MAX_MICRO_BATCH_TOKENS` (2^24) tokens per micro-batch with the schedule's
        largest ``max_seq_len`` (checked by :func:`load_config`).
        """
        return _positive_int(self.ds_config, "train_micro_batch_size_per_gpu", None)

    @property
    def gradient_accumulation_steps(self) -> int:
        """Micro-batches per optimizer step per dp rank (default 1).

        ``micro_batch_size × gradient_accumulation_steps`` is at most
        :data:`MAX_GLOBAL_BATCH_SIZE` (2^24) samples (checked by :func:`load_config`).
        """
        return _positive_int(self.ds_config, "gradient_accumulation_steps", 1)

    def check_batch_sizes(self) -> None:
        """Refuse a micro-batch or an accumulated batch too large to train on any machine.

        Raises:
            ConfigError: ``train_micro_batch_size_per_gpu`` × the largest ``max_seq_len`` of the
                schedule exceeds :data:`MAX_MICRO_BATCH_TOKENS` tokens, or
                ``gradient_accumulation_steps`` × the micro batch size exceeds
                :data:`MAX_GLOBAL_BATCH_SIZE` samples (one rank's share of a global batch).
        """
        mbs, gas = self.micro_batch_size, self.gradient_accumulation_steps
        phase_idx, phase = max(
            enumerate(self.curriculum.schedule), key=lambda p: p[1].train_loader.peak_seq_len
        )
        seq = phase.train_loader.peak_seq_len
        if mbs * seq > MAX_MICRO_BATCH_TOKENS:
            raise ConfigError(
                f"train_micro_batch_size_per_gpu: {mbs} samples × max_seq_len {seq} "
                f"(curriculum.schedule[{phase_idx}] ({show_value(phase.name)})) = {mbs * seq:,} "
                f"tokens per micro-batch, more than {MAX_MICRO_BATCH_TOKENS:,} (2^24); use a "
                "smaller micro-batch and more gradient_accumulation_steps"
            )
        if mbs * gas > MAX_GLOBAL_BATCH_SIZE:
            raise ConfigError(
                f"gradient_accumulation_steps: {gas} × train_micro_batch_size_per_gpu {mbs} = "
                f"{mbs * gas:,} samples per optimizer step per rank, more than "
                f"{MAX_GLOBAL_BATCH_SIZE:,} (2^24)"
            )

    def check_method_warmup(self) -> None:
        """Refuse an ODM/ADO ``warmup_steps`` that no phase of the schedule can outlast.

        A ``tok`` phase of D tokens lasts at most ``D // (micro_batch_size ×
        gradient_accumulation_steps)`` optimizer steps (every step has at least that many
        samples, of at least one token each, whatever the world size); an ``ep`` phase's length
        is not known before its data is read, so a schedule with one is not checked. The
        warmup counts each phase's own steps.

        Raises:
            ConfigError: ``curriculum.dynamic.<method>.warmup_steps`` ≥ every phase's bound.
        """
        dynamic = self.curriculum.dynamic
        section = dynamic.method_config if dynamic.enabled else None
        warmup = getattr(section, "warmup_steps", 0) if dynamic.method in ("odm", "ado") else 0
        phases = self.curriculum.schedule
        if not warmup or any(p.duration.unit != "tok" for p in phases):
            return
        per_step = self.micro_batch_size * self.gradient_accumulation_steps
        longest = max(int(p.duration.value) // per_step for p in phases)
        if warmup >= longest:
            raise ConfigError(
                f"curriculum.dynamic.{dynamic.method}.warmup_steps: {warmup} steps, but no phase "
                f"lasts more than {longest} (its tokens over train_micro_batch_size_per_gpu × "
                f"gradient_accumulation_steps = {per_step} samples per step): the method would "
                "never act"
            )

    def check_probe_rounds(self) -> None:
        """Refuse an Aioli probe round that no phase of the schedule can hold.

        A round of a phase of K ≥ 2 streams takes ``K × lp_rounds × probe_steps`` optimizer
        steps; a ``tok`` phase lasts at most its tokens over ``micro_batch_size ×
        gradient_accumulation_steps`` steps (as :meth:`check_method_warmup` bounds it). A
        schedule with an ``ep`` phase of two streams or more is not checked.

        Raises:
            ConfigError: ``curriculum.dynamic.aioli.probe_steps``: no phase of two streams or
                more lasts longer than its round, naming the first such phase.
        """
        dynamic = self.curriculum.dynamic
        section = dynamic.method_config if dynamic.enabled else None
        if not isinstance(section, AioliConfig):
            return
        phases = [
            (i, p)
            for i, p in enumerate(self.curriculum.schedule)
            if len(p.train_loader.streams) > 1
        ]
        if not phases or any(p.duration.unit != "tok" for _, p in phases):
            return
        per_step = self.micro_batch_size * self.gradient_accumulation_steps
        rounds = [
            (i, p, len(p.train_loader.streams) * section.lp_rounds * section.probe_steps)
            for i, p in phases
        ]
        if any(probes < int(p.duration.value) // per_step for _, p, probes in rounds):
            return
        i, phase, probes = rounds[0]
        where = f'schedule[{i}] ("{phase.name}")'
        raise ConfigError(
            f"curriculum.dynamic.aioli.probe_steps: a probe round of {where} takes "
            f"{len(phase.train_loader.streams)} streams × lp_rounds {section.lp_rounds} × "
            f"probe_steps {section.probe_steps} = {probes} steps, but the phase lasts at most "
            f"{int(phase.duration.value) // per_step} (its tokens over "
            f"train_micro_batch_size_per_gpu × gradient_accumulation_steps = {per_step} samples "
            f"per step){'; nor does any other phase' if len(rounds) > 1 else ''}: no round "
            "would end"
        )

    def global_batch_size(self, dp_world_size: int) -> int:
        """Samples per optimizer step, global across dp ranks.

        Equals ``micro_batch_size × gradient_accumulation_steps × dp_world_size``, at most
        :data:`MAX_GLOBAL_BATCH_SIZE` (2^24).

        Raises:
            ConfigError: ``train_batch_size`` is given and differs from that product, or the
                product exceeds :data:`MAX_GLOBAL_BATCH_SIZE`.
            ValueError: ``dp_world_size`` < 1.
        """
        if dp_world_size < 1:
            raise ValueError(f"dp_world_size must be >= 1, got {dp_world_size}")
        mbs, gas = self.micro_batch_size, self.gradient_accumulation_steps
        product = mbs * gas * dp_world_size
        if product > MAX_GLOBAL_BATCH_SIZE:
            raise ConfigError(
                f"train_batch_size: train_micro_batch_size_per_gpu {mbs} × "
                f"gradient_accumulation_steps {gas} × dp_world_size {dp_world_size} = "
                f"{product:,} samples per optimizer step, more than {MAX_GLOBAL_BATCH_SIZE:,} "
                "(2^24)"
            )
        if "train_batch_size" in self.ds_config:
            given = _positive_int(self.ds_config, "train_batch_size", None)
            if given != product:
                raise ConfigError(
                    f"train_batch_size: {given} != train_micro_batch_size_per_gpu {mbs} × "
                    f"gradient_accumulation_steps {gas} × dp_world_size {dp_world_size} = "
                    f"{product}"
                )
        return product


def read_json_object(path: str | os.PathLike[str], *, field: str | None = None) -> dict[str, Any]:
    """A JSON file whose top level is an object (a ds_config, an experiment), as a dict.

    Args:
        path: the JSON file.
        field: what the file is to the caller (e.g. ``TrainingArguments.deepspeed``), put before
            the message; None for none.

    Raises:
        ConfigError: one line naming the file: missing, unreadable, invalid JSON (with
            line:col), or not an object at the top level.
    """
    path = Path(path)
    where = str(path) if field is None else f"{field}: {path}"
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(f"{where}: no such file") from None
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{where}: cannot read: {exc}") from None
    except (OSError, ValueError) as exc:  # ValueError: a NUL byte in the path
        from curriculum_ds.files.user_paths import os_reason

        raise ConfigError(f"{where}: cannot read: {os_reason(exc)}") from None
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{where}:{exc.lineno}:{exc.colno}: invalid JSON: {exc.msg}") from None
    except (ValueError, RecursionError) as exc:
        from curriculum_ds.data import json_limit_reason

        raise ConfigError(f"{where}: invalid JSON: {json_limit_reason(exc)}") from None
    if not isinstance(raw, dict):
        raise ConfigError(
            f"{where}: expected a JSON object at the top level, got {show_value(raw)}"
        )
    return raw


def load_config(
    path: str | Path,
    *,
    check_data: bool = False,
    model: str | Path | None = None,
    strict: bool = False,
    hf_auto: bool = False,
) -> RunConfig:
    """Read a ds_config JSON file, parse it and check the run.

    :func:`parse_run` checks the file alone; :func:`curriculum_ds.preflight.check_run` checks
    the model's context and (``check_data``) the streams.

    Args:
        path: the ds_config JSON file.
        check_data: also check the streams' data
            (:func:`~curriculum_ds.preflight.check_streams`: every stream exists and is an MDS
            dataset whose shards match its index, whose token ids fit the vocabulary when it is
            known).
        model: the ``--model`` folder the run will use (its context length; with
            ``check_data`` its vocabulary); see :func:`~curriculum_ds.preflight.check_run`.
        strict: with ``check_data``: the checks of ``curriculum-ds validate``; see
            :func:`~curriculum_ds.preflight.check_streams`.
        hf_auto: accept HF's ``"auto"`` values (:mod:`curriculum_ds.config.hf_auto`) for a
            config the HF Trainer will fill: DeepSpeed's checks see stand-ins, the batch-size
            checks are the Trainer's (``validate``, ``launch --script``); False (the reference
            loop, the plugin): each is one line saying to give a value.

    Returns:
        The RunConfig (DeepSpeed part without ``curriculum``, validated curriculum, path).

    Raises:
        ConfigError: one line naming the file (missing, unreadable, bad JSON with line:col), the
            JSON path of the invalid field, or the batch-size key that is too large
            (:meth:`RunConfig.check_batch_sizes`).
    """
    from curriculum_ds.preflight import check_run

    path = Path(path)
    run = parse_run(read_json_object(path), path=path, hf_auto=hf_auto)
    check_run(run, model=model, check_data=check_data, strict=strict)
    return run


def parse_run(raw: dict[str, Any], *, path: Path | None = None, hf_auto: bool = False) -> RunConfig:
    """Parse a ds_config's JSON object into a :class:`RunConfig`: the file's own checks only.

    Every problem of the object at once, one line each: unknown top-level keys (a misspelt
    ``curriculum`` among them), the ``curriculum`` section, DeepSpeed's part (its own config
    models, the keys we read), the batch-size keys. Reads no data and no model (that is
    :func:`curriculum_ds.preflight.check_run`'s). Relative stream paths stay as written: they
    resolve against each rank's working directory.

    Args:
        raw: the ds_config as parsed JSON.
        path: the file it came from, for the messages (None: a dict given in code).
        hf_auto: as in :func:`load_config`.

    Raises:
        ConfigError: one line per problem, naming the JSON path.
    """
    from curriculum_ds.config.deepspeed import (
        curriculum_conflicts,
        deepspeed_config_errors,
        lr_schedule_conflicts,
    )
    from curriculum_ds.config.deepspeed_types import deepspeed_type_errors
    from curriculum_ds.config.hf_auto import BATCH_KEYS, hf_auto_refusals, without_hf_auto

    ds_config = {k: v for k, v in raw.items() if k != "curriculum"}
    conflicts = curriculum_conflicts(ds_config)
    batch_errors = _batch_key_errors(ds_config)
    refusals = [] if hf_auto else hf_auto_refusals(ds_config)
    errors = [*conflicts.values(), *refusals, *batch_errors]
    # the keys we read: a number, or "auto" (once per key: a batch key's own check comes first)
    type_errors = deepspeed_type_errors(ds_config)
    reported = {line.split(":")[0] for line in batch_errors}
    errors += [line for key, line in type_errors.items() if key not in reported]
    # DeepSpeed's own batch assertions would repeat a bad batch key less clearly, and its
    # checks of a refused curriculum block would only add noise; HF's "auto" values are seen
    # as stand-ins
    checked = {k: v for k, v in without_hf_auto(ds_config).items() if k not in conflicts}
    batch_ok = not batch_errors and all(key.startswith("optimizer.") for key in type_errors)
    errors += deepspeed_config_errors(checked, build=batch_ok)
    errors += lr_schedule_conflicts(ds_config, raw.get("curriculum"))
    curriculum: CurriculumConfig | None = None
    if "curriculum" in raw:
        curriculum, curriculum_errors = _curriculum_errors(raw["curriculum"])
        errors = curriculum_errors + errors
    elif not any('did you mean "curriculum"' in line for line in errors):
        where = "the config" if path is None else str(path)
        errors.insert(0, f'curriculum: required field is missing (no "curriculum" in {where})')
    if errors or curriculum is None:
        raise ConfigError(join_errors(errors))
    run = RunConfig(ds_config=ds_config, curriculum=curriculum, path=path)
    if not any(ds_config.get(key) == "auto" for key in BATCH_KEYS):  # else the Trainer's
        run.check_batch_sizes()  # also validates the two keys' types
        run.check_method_warmup()
        run.check_probe_rounds()
    return run
