"""DeepSpeed's own sequence-length curricula translated into a ``curriculum`` section.

DeepSpeed's legacy top-level ``curriculum_learning`` (``curriculum_type: "seqlen"``) and the
``seqlen_truncate`` / ``seqlen_reshape`` metric of ``data_efficiency.data_sampling.
curriculum_learning`` grow the sequence length with the optimizer step (Li et al. 2022, "The
Stability-Efficiency Dilemma"); a ``max_seq_len`` ramp does the same in tokens. The translation
asks DeepSpeed's own ``CurriculumScheduler`` (``deepspeed.runtime.data_pipeline.
curriculum_scheduler``) for the length of every step of the curriculum, converts steps to
tokens at the config's global batch and those lengths (step ``k`` starts after ``global_batch ×
sum of the lengths of steps 1..k-1`` tokens, every sample assumed at least that long), and
writes one point where each length starts and one where it ends: at every step's start the
ramp's value (rounded down to a multiple of 8) is within one ``difficulty_step`` of DeepSpeed's.
Anything else (another metric, a ``custom`` schedule) is named as not translatable.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from curriculum_ds.errors import ConfigError

__all__ = ["global_batch_of", "legacy_seqlen_curriculum", "migrate_config", "translate_legacy"]

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
    """The ``curriculum`` section equivalent to a DeepSpeed sequence-length curriculum.

    Args:
        where: the block's JSON path (for messages).
        block: DeepSpeed's ``min_difficulty``, ``max_difficulty``, ``schedule_type``,
            ``schedule_config``.
        global_batch_size: samples per optimizer step over all ranks.
        local: the stream of the section's phases (a placeholder to edit).
        total_steps: optimizer steps of the whole run; None: the curriculum's own steps only.

    Returns:
        ``(section, note)``: the section (phase ``seqlen_warmup`` with the ramp, then phase
        ``full`` at ``max_difficulty`` for the steps after it), and one line saying how steps
        became tokens and the largest difference from DeepSpeed's lengths at a step's start.

    Raises:
        ConfigError: one line for a schedule type that cannot be translated or a missing key.
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
    lengths = deepspeed_lengths(block, steps)
    starts = [0]
    for length in lengths:
        starts.append(starts[-1] + global_batch_size * length)
    duration = starts[-1]
    points: list[list[float | int]] = []
    for k, length in enumerate(lengths):  # a point where each length starts and where it ends
        first = k == 0 or lengths[k - 1] != length
        last = k == len(lengths) - 1 or lengths[k + 1] != length
        if first or last:
            points.append([starts[k] / duration, max(8, length)])
    points[0][0] = 0.0
    if points[-1][0] != 1.0:
        points.append([1.0, max(8, lengths[-1])])
    points = [p for i, p in enumerate(points) if i == 0 or p[0] > points[i - 1][0]]
    phases: list[dict[str, Any]] = [_phase("seqlen_warmup", duration, local, points)]
    total = duration
    rest = (total_steps or steps) - steps
    if rest > 0:
        phases.append(_phase("full", rest * global_batch_size * top, local, top))
        total += rest * global_batch_size * top
    section = {"max_duration": f"{total}tok", "schedule": phases}
    error = _max_error(points, starts[:-1], duration, lengths)
    step = int(config.get("difficulty_step", 8))
    note = (
        f"{where}: {steps} DeepSpeed steps became {duration} tokens at the global batch "
        f"{global_batch_size} and the schedule's sequence lengths ({len(points)}-point "
        f"max_seq_len ramp; largest difference from DeepSpeed's length at a step's start: "
        f"{error} tokens, difficulty_step {step})"
    )
    return section, note


def _phase(name: str, tokens: int, local: str, max_seq_len: Any) -> dict[str, Any]:
    return {
        "name": name,
        "duration": f"{tokens}tok",
        "train_loader": {"streams": [{"local": local}], "max_seq_len": max_seq_len},
    }


def _max_error(
    points: list[list[float | int]], starts: list[int], duration: int, lengths: list[int]
) -> int:
    """The largest ``|ramp(step start) - DeepSpeed's length|`` over the curriculum's steps."""
    from curriculum_ds.config.ramps import value_at

    spec = tuple((float(x), float(v)) for x, v in points)
    worst = 0
    for start, length in zip(starts, lengths, strict=True):
        value = int(value_at(spec, start / duration) + 1e-9)
        ours = max(8, value - value % 8)
        worst = max(worst, abs(ours - length))
    return worst


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
