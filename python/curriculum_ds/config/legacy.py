"""DeepSpeed's own sequence-length curricula translated into a ``curriculum`` section.

DeepSpeed's legacy top-level ``curriculum_learning`` (``curriculum_type: "seqlen"``) and the
``seqlen_truncate`` / ``seqlen_reshape`` metric of ``data_efficiency.data_sampling.
curriculum_learning`` grow the sequence length with the optimizer step (Li et al. 2022, "The
Stability-Efficiency Dilemma"); a ``max_seq_len`` ramp does the same in tokens. The translation
asks DeepSpeed's own ``CurriculumScheduler`` (``deepspeed.runtime.data_pipeline.
curriculum_scheduler``) for the length of every step of the curriculum, converts steps to
tokens at the config's global batch and those lengths (step ``k`` starts after ``global_batch ×
sum of the lengths of steps 1..k-1`` tokens, every sample assumed at least that long), and
writes one point where each length starts and one where it ends, with ``seq_len_multiple`` set
to the ``difficulty_step``: at every step's start the ramp's value is DeepSpeed's length. The
section is then replayed step by step with the loader's own rule and refused, naming the step,
unless it trains DeepSpeed's length at every step and as many steps (a length below 2 tokens
cannot be). Anything else (another metric, a ``custom`` schedule) is named as not translatable.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any

from curriculum_ds.errors import ConfigError

__all__ = [
    "global_batch_of",
    "legacy_seqlen_curriculum",
    "migrate_config",
    "replay_lengths",
    "translate_legacy",
]

_SCHEDULES = ("fixed_linear", "fixed_root", "fixed_discrete")


def legacy_seqlen_curriculum(ds_config: Mapping[str, Any]) -> tuple[str, dict[str, Any]] | None:
    """The DeepSpeed sequence-length curriculum of a ds_config, if it has one.

    Returns:
        ``(where, block)``: the JSON path of the block and its ``min_difficulty`` /
        ``max_difficulty`` / ``schedule_type`` / ``schedule_config`` mapping; None when the config
        has neither a legacy ``curriculum_learning`` nor an enabled data-efficiency curriculum.

    Raises:
        ConfigError: one line naming what cannot be translated (a curriculum type or metric other
            than a sequence length, or several metrics).
    """
    legacy = ds_config.get("curriculum_learning")
    if isinstance(legacy, Mapping):
        kind = legacy.get("curriculum_type", "seqlen")
        if kind != "seqlen":
            raise ConfigError(
                f"curriculum_learning.curriculum_type: {kind!r} cannot be translated (only "
                '"seqlen" has a curriculum section equivalent)'
            )
        return "curriculum_learning", dict(legacy)
    block: Any = ds_config.get("data_efficiency")
    for key in ("data_sampling", "curriculum_learning"):
        block = block.get(key) if isinstance(block, Mapping) else None
    if not (isinstance(block, Mapping) and block.get("enabled") is True):
        return None
    metrics = block.get("curriculum_metrics") or {}
    others = sorted(m for m in metrics if not str(m).startswith("seqlen"))
    if others or len(metrics) != 1:
        named = ", ".join(others) if others else f"{len(metrics)} metrics"
        raise ConfigError(
            "data_efficiency.data_sampling.curriculum_learning.curriculum_metrics: "
            f"{named} cannot be translated (only one seqlen_truncate/seqlen_reshape metric has "
            "a curriculum section equivalent)"
        )
    ((name, metric),) = metrics.items()
    return (
        f"data_efficiency.data_sampling.curriculum_learning.curriculum_metrics.{name}",
        dict(metric),
    )


def deepspeed_lengths(block: Mapping[str, Any], num_steps: int) -> list[int]:
    """DeepSpeed's own sequence length of optimizer steps ``1..num_steps``.

    DeepSpeed's engine calls ``update_difficulty(global_steps + 1)`` before every forward, so the
    k-th step (1-based) trains at ``update_difficulty(k)``.
    """
    from deepspeed.runtime.data_pipeline.curriculum_scheduler import CurriculumScheduler

    scheduler = CurriculumScheduler(dict(block))
    return [int(scheduler.update_difficulty(k)) for k in range(1, num_steps + 1)]


def translate_legacy(
    where: str,
    block: Mapping[str, Any],
    *,
    global_batch_size: int,
    local: str = "data/train",
    total_steps: int | None = None,
) -> tuple[dict[str, Any], str]:
    """The ``curriculum`` section that trains DeepSpeed's sequence-length curriculum exactly.

    Args:
        where: the block's JSON path (for messages).
        block: DeepSpeed's ``min_difficulty``, ``max_difficulty``, ``schedule_type``,
            ``schedule_config``.
        global_batch_size: samples per optimizer step over all ranks.
        local: the stream of the section's phases (a placeholder to edit).
        total_steps: optimizer steps of the whole run; None: the curriculum's own steps only.

    Returns:
        ``(section, note)``: the section (phase ``seqlen_warmup`` with the ramp and
        ``seq_len_multiple`` set to the ``difficulty_step``, then phase ``full`` at
        ``max_difficulty`` for the steps after it), and one line saying how steps became tokens.
        Replayed step by step (:func:`replay_lengths`), the section trains DeepSpeed's length at
        every step and as many steps (every sample at least that long).

    Raises:
        ConfigError: one line for a schedule type that cannot be translated, a missing key, or a
            schedule that cannot be reproduced step for step (named: the step and both lengths,
            or a length below 2 tokens).
    """
    kind = block.get("schedule_type")
    if kind not in _SCHEDULES:
        raise ConfigError(
            f"{where}.schedule_type: {kind!r} cannot be translated (one of {', '.join(_SCHEDULES)})"
        )
    config = block.get("schedule_config") or {}
    try:
        steps = (
            int(config["max_step"][-1]) + 1
            if kind == "fixed_discrete"
            else int(config["total_curriculum_step"])
        )
        top = int(block["max_difficulty"])
    except (KeyError, TypeError, ValueError, IndexError) as err:
        raise ConfigError(f"{where}: cannot read {err} of the {kind} schedule") from None
    num_steps = total_steps or steps
    lengths = deepspeed_lengths(block, num_steps)
    short = next(((k, n) for k, n in enumerate(lengths, 1) if n < _SHORTEST), None)
    if short is not None:
        raise ConfigError(
            f"{where}: cannot reproduce DeepSpeed's schedule step for step: its length "
            f"{short[1]} at step {short[0]} is below {_SHORTEST} tokens, the shortest sequence "
            "with a token to predict"
        )
    # the ramp holds every step up to the last one below max_difficulty; `full` the rest
    ramped = max(
        min(steps, num_steps), max((k for k, n in enumerate(lengths, 1) if n != top), default=1)
    )
    warmup = lengths[:ramped]
    multiple = _seq_len_multiple(config.get("difficulty_step"), warmup)
    starts = [0]
    for length in warmup:
        starts.append(starts[-1] + global_batch_size * length)
    duration = starts[-1]
    points: list[list[float | int]] = []
    for k, length in enumerate(warmup):  # a point where each length starts and where it ends
        first = k == 0 or warmup[k - 1] != length
        last = k == len(warmup) - 1 or warmup[k + 1] != length
        if first or last:
            points.append([starts[k] / duration, length])
    points[0][0] = 0.0
    if points[-1][0] != 1.0:
        points.append([1.0, warmup[-1]])
    phases: list[dict[str, Any]] = [_phase("seqlen_warmup", duration, local, points, multiple)]
    _check_step_for_step(where, phases[0], warmup, global_batch_size)
    total = duration
    rest = num_steps - ramped
    if rest > 0:
        phases.append(_phase("full", rest * global_batch_size * top, local, top))
        total += rest * global_batch_size * top
    section = {"max_duration": f"{total}tok", "schedule": phases}
    note = (
        f"{where}: {ramped} DeepSpeed steps became {duration} tokens at the global batch "
        f"{global_batch_size} and the schedule's sequence lengths ({len(points)}-point "
        f"max_seq_len ramp, seq_len_multiple {multiple}; replayed step by step, every step "
        "trains DeepSpeed's length when every sample is at least that long)"
    )
    return section, note


_SHORTEST = 2
"""Tokens of the shortest trainable sequence: one input and the next token it predicts."""


def _seq_len_multiple(difficulty_step: Any, lengths: list[int]) -> int:
    """DeepSpeed's ``difficulty_step`` when it divides every length, else their gcd."""
    step = difficulty_step if isinstance(difficulty_step, int) and difficulty_step > 0 else 0
    if step and all(n % step == 0 for n in lengths):
        return step
    return math.gcd(*lengths)


def replay_lengths(
    train_loader: Mapping[str, Any], duration: int, global_batch_size: int
) -> list[int]:
    """Each step's sequence length when a phase of ``duration`` tokens runs ``train_loader``.

    The loader's own rule (:meth:`~curriculum_ds.config.LoaderConfig.seq_len_at` at the step's
    start fraction, computed as the curriculum computes it), every sample assumed at least as
    long as the step's length, so a step consumes ``global_batch_size × length`` tokens.
    Deterministic.

    Raises:
        ConfigError: the loader does not validate (one line).
    """
    from pydantic import ValidationError

    from curriculum_ds.config.models import LoaderConfig

    try:
        loader = LoaderConfig.model_validate(dict(train_loader))
    except ValidationError as err:
        raise ConfigError(f"train_loader: {err.errors()[0]['msg']}") from None
    consumed, trained = 0, []
    while consumed < duration:
        trained.append(loader.seq_len_at(min(1.0, consumed / duration)))
        consumed += global_batch_size * trained[-1]
    return trained


def _check_step_for_step(
    where: str, phase: Mapping[str, Any], lengths: list[int], global_batch_size: int
) -> None:
    """Refuse, naming the first step that differs, unless the phase replays ``lengths``."""
    duration = int(str(phase["duration"]).removesuffix("tok"))
    trained = replay_lengths(phase["train_loader"], duration, global_batch_size)
    for k, (ours, theirs) in enumerate(zip(trained, lengths, strict=False), 1):
        if ours != theirs:
            raise ConfigError(
                f"{where}: cannot reproduce DeepSpeed's schedule step for step: step {k} would "
                f"train {ours} tokens where DeepSpeed trains {theirs}"
            )
    if len(trained) != len(lengths):
        raise ConfigError(
            f"{where}: cannot reproduce DeepSpeed's schedule step for step: the ramp would "
            f"take {len(trained)} steps where DeepSpeed takes {len(lengths)}"
        )


def _phase(
    name: str, tokens: int, local: str, max_seq_len: Any, seq_len_multiple: int | None = None
) -> dict[str, Any]:
    loader: dict[str, Any] = {"streams": [{"local": local}], "max_seq_len": max_seq_len}
    if seq_len_multiple is not None:
        loader["seq_len_multiple"] = seq_len_multiple
    return {"name": name, "duration": f"{tokens}tok", "train_loader": loader}


def global_batch_of(ds_config: dict[str, Any], num_gpus: int) -> int:
    """``train_batch_size``, else micro-batch × GAS × ``num_gpus``.

    Raises:
        ConfigError: neither ``train_batch_size`` nor ``train_micro_batch_size_per_gpu`` is a
            positive integer.
    """
    total = ds_config.get("train_batch_size")
    if isinstance(total, int) and total > 0:
        return total
    micro = ds_config.get("train_micro_batch_size_per_gpu")
    gas = ds_config.get("gradient_accumulation_steps", 1)
    if not (isinstance(micro, int) and micro > 0 and isinstance(gas, int) and gas > 0):
        raise ConfigError(
            "train_batch_size: needed (or train_micro_batch_size_per_gpu) to turn DeepSpeed's "
            "steps into tokens"
        )
    return micro * gas * num_gpus


def migrate_config(
    ds_config: dict[str, Any],
    *,
    num_gpus: int = 1,
    local: str = "data/train",
    total_steps: int | None = None,
) -> tuple[dict[str, Any], str]:
    """The ds_config with its DeepSpeed curriculum replaced by the ``curriculum`` section.

    Returns:
        ``(migrated, note)``: the new ds_config (``curriculum_learning`` removed, a
        data-efficiency curriculum set to ``enabled: false``) and the translation's one-line note.

    Raises:
        ConfigError: one line: no DeepSpeed curriculum in the file, or a part that cannot be
            translated (named).
    """
    found = legacy_seqlen_curriculum(ds_config)
    if found is None:
        raise ConfigError(
            "curriculum_learning: the file has no DeepSpeed curriculum to migrate (neither "
            "curriculum_learning nor an enabled data_efficiency curriculum)"
        )
    where, block = found
    section, note = translate_legacy(
        where,
        block,
        global_batch_size=global_batch_of(ds_config, num_gpus),
        local=local,
        total_steps=total_steps,
    )
    migrated = {
        k: v for k, v in ds_config.items() if k not in ("curriculum_learning", "curriculum")
    }
    if "curriculum_learning" not in ds_config:  # the data-efficiency block: switched off
        migrated = json.loads(json.dumps(migrated))
        migrated["data_efficiency"]["data_sampling"]["curriculum_learning"] = {"enabled": False}
    migrated["curriculum"] = section
    return migrated, note
