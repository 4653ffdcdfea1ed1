"""What ``CurriculumTrainer`` checks before anything is built, and the run's step counts.

:func:`checked_run` is the constructor's check: :func:`curriculum_ds.config.hf_args.curriculum_run`
(``TrainingArguments`` against the ds_config, which ``curriculum-ds validate --hf-args`` runs too,
without transformers) and the model's context; every user mistake is one
:class:`~curriculum_ds.errors.ConfigError` line naming the argument or key, before the engine, the
data or any file. In a launched rank that line ends the process (rank 0 prints it, every rank
exits 1).

:func:`step_bound` is an upper bound of the run's optimizer steps (the Trainer's ``max_steps``,
which only has to be reached never: the run ends at ``max_duration``); :func:`estimated_steps`
is the horizon HF's own lr scheduler decays over when ``curriculum.lr_schedule`` is absent.
"""

from __future__ import annotations

import dataclasses
import math
import os
from typing import TYPE_CHECKING, Any

from curriculum_ds.config.hf_args import arguments_from_json, curriculum_run, read_ds_config

if TYPE_CHECKING:
    from curriculum_ds.config import RunConfig

__all__ = [
    "arguments_from_json",
    "checked_run",
    "curriculum_run",
    "estimated_steps",
    "read_ds_config",
    "step_bound",
    "trainer_arguments",
]


def checked_run(args: Any, model: Any, *, train_dataset: Any, check_data: bool) -> RunConfig:
    """:func:`curriculum_run` and the model's context: ``CurriculumTrainer``'s checks.

    In a launched rank (``LOCAL_RANK`` set by DeepSpeed's or torch's launcher) a refusal ends
    the process: global rank 0 prints the one line (``curriculum_ds: error: ...``), every rank
    exits 1 (``SystemExit``: no traceback), before any engine is built. Outside a launcher (a
    notebook, a test) the :class:`~curriculum_ds.errors.CurriculumError` is raised as is.
    """
    import sys

    from curriculum_ds.errors import CurriculumError
    from curriculum_ds.preflight import check_model_context

    try:
        run = curriculum_run(args, train_dataset=train_dataset, check_data=check_data)
        check_model_context(run.curriculum, model)
    except CurriculumError as exc:
        if "LOCAL_RANK" not in os.environ:
            raise
        if os.environ.get("RANK", "0") == "0":  # every rank reaches the same verdict
            print(f"curriculum_ds: error: {exc}", file=sys.stderr, flush=True)
        raise SystemExit(1) from None
    return run


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
