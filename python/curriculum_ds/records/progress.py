"""Run logs for humans: the start banner and one line per log interval, for any training loop.

The reference loop (:mod:`curriculum_ds.train`) prints these when stderr is not a terminal (or
with ``--no-progress``), instead of a progress bar; a loop of your own gets the same lines from
the same functions::

    from curriculum_ds.records.progress import StepLogger, banner

    print(banner(engine, curriculum), flush=True)          # once, on global rank 0
    logger = StepLogger(interval_steps=0, schedule=curriculum.schedule)  # 0: every ~10 s
    for step in curriculum:
        ...
        record = step.finish()
        line = logger.line(record)                          # None between intervals
        if line is not None and dist.get_rank() == 0:
            print(line, flush=True)

Every line starts with ``curriculum_ds:`` and is at most :data:`MAX_LINE` characters (user text
such as a phase name or a checkpoint path is shortened in the middle, never the numbers).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from curriculum_ds.core.schedule import PhaseSchedule
    from curriculum_ds.plugin import Curriculum
    from curriculum_ds.records.schema import MetricsRow

__all__ = [
    "DEFAULT_INTERVAL_S",
    "MAX_LINE",
    "StepLogger",
    "banner",
    "count_parameters",
    "format_log_line",
    "human_count",
    "precision",
    "schedule_bar",
]

MAX_LINE = 300
"""The longest line (characters) :func:`format_log_line` and :func:`banner` return."""

DEFAULT_INTERVAL_S = 10.0
"""Seconds of wall time between two lines when the interval is time-based (``interval_steps=0``)."""

_MAX_NAME = 48  # characters of a phase name or model class name shown


def human_count(n: float) -> str:
    """``n`` with a k/M/B/T suffix and 3 significant digits: ``1234567 -> "1.23M"``.

    Args:
        n: a count (tokens, parameters, tokens per second); negative values keep their sign.

    Returns:
        The text; values under 1000 are printed whole (``"999"``), or with one decimal when
        they are not integers below 10 (``"2.5"``). Deterministic.
    """
    sign = "-" if n < 0 else ""
    n = abs(n)
    for suffix, scale in (("T", 1e12), ("B", 1e9), ("M", 1e6), ("k", 1e3)):
        if n >= scale * 0.9995:
            return f"{sign}{n / scale:.3g}{suffix}"
    if n < 10 and n != int(n):
        return f"{sign}{n:.1f}"
    return f"{sign}{n:.0f}"


def _shorten(text: str, width: int) -> str:
    """``text`` cut to ``width`` characters by an ellipsis in the middle (keeps both ends)."""
    if len(text) <= width:
        return text
    head = (width - 1) // 2
    tail = width - 1 - head
    return text[:head] + "…" + text[len(text) - tail :]


def format_log_line(record: MetricsRow, *, schedule: PhaseSchedule | None = None) -> str:
    """One log line for a step's record (what :meth:`curriculum_ds.Step.finish` returns).

    Shape: ``curriculum_ds: step 120 | phase 1 mix | 1.23M tok (41% of 3M tok) | loss 3.412 |
    lr 2.95e-04 | 12.3k tok/s | data wait 0.4 ms``. ``tokens`` is the cumulative global count of
    non-padding input tokens; the percentage (with ``schedule``) is progress over ``max_duration``
    in the schedule's unit (tokens, or passes for an ``ep`` schedule); ``loss`` is what the
    optimizer saw (nats), ``skipped`` for a step without loss-bearing tokens; ``lr`` the learning
    rate of the step; ``tok/s`` the step's non-padding tokens over its wall time, all ranks
    together; ``data wait`` (when the row has ``data_wait_s``) what the step's draw waited for
    its micro-batches on this rank.

    Args:
        record: a metrics row with ``step``, ``phase``, ``phase_name``, ``tokens``, ``loss``,
            ``lr`` and ``tokens_per_s`` (``progress`` too, for the percentage).
        schedule: the run's :class:`~curriculum_ds.core.schedule.PhaseSchedule`
            (``curriculum.schedule``), for the percentage; optional.

    Returns:
        One line of at most :data:`MAX_LINE` characters (the phase name is shortened if
        needed). Deterministic.

    Raises:
        KeyError: a required field is missing from ``record``.
    """
    phase = f"phase {record['phase']} {_shorten(str(record['phase_name']), _MAX_NAME)}"
    tokens = f"{human_count(int(record['tokens']))} tok"
    if schedule is not None and "progress" in record and schedule.total:
        from curriculum_ds.core.schedule import progress_from_str

        done = progress_from_str(str(record["progress"]), schedule.unit)
        total = schedule.total
        total_text = f"{human_count(float(total))} {schedule.unit}"
        tokens += f" ({float(done) / float(total):.0%} of {total_text})"
    loss = record["loss"]
    parts = [
        f"curriculum_ds: step {record['step']}",
        phase,
        tokens,
        "loss skipped" if loss is None else f"loss {float(loss):.4f}",
        f"lr {float(record['lr']):.3e}",
        f"{human_count(float(record['tokens_per_s']))} tok/s",
    ]
    if (wait := record.get("data_wait_s")) is not None:
        parts.append(f"data wait {float(wait) * 1e3:.1f} ms")
    return _shorten(" | ".join(parts), MAX_LINE)


class StepLogger:
    """Decides which steps get a log line: every ``interval_steps`` steps, or every ~10 s.

    Args:
        interval_steps: a line at every step divisible by it (global step, optimizer steps);
            0 for time-based: a line for the first step logged, then for the first step that
            ends at least ``interval_s`` seconds after the previous line.
        interval_s: seconds of wall time between lines when ``interval_steps`` is 0.
        schedule: passed to :func:`format_log_line` for the percentage of the run done.
        clock: the time source in seconds (``time.monotonic``; replaceable for tests).

    Raises:
        ValueError: ``interval_steps < 0`` or ``interval_s <= 0``.
    """

    def __init__(
        self,
        interval_steps: int = 0,
        *,
        interval_s: float = DEFAULT_INTERVAL_S,
        schedule: PhaseSchedule | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if interval_steps < 0:
            raise ValueError(
                f"interval_steps must be >= 0 (0: every ~{interval_s:g} s), got {interval_steps}"
            )
        if not interval_s > 0:
            raise ValueError(f"interval_s must be > 0, got {interval_s}")
        self.interval_steps = interval_steps
        self.interval_s = interval_s
        self.schedule = schedule
        self._clock = clock
        self._last: float | None = None

    def due(self, step: int) -> bool:
        """Whether global step ``step`` (just finished) gets a line; time-based calls count."""
        if self.interval_steps:
            return step % self.interval_steps == 0
        now = self._clock()
        if self._last is None or now - self._last >= self.interval_s:
            self._last = now
            return True
        return False

    def line(self, record: MetricsRow) -> str | None:
        """The log line of ``record`` when its step is due (:meth:`due`), else None."""
        if not self.due(int(record["step"])):
            return None
        return format_log_line(record, schedule=self.schedule)


def count_parameters(model: Any) -> int:
    """Number of parameters of ``model`` (a ``torch.nn.Module``), whole even under ZeRO-3.

    ZeRO-3 leaves each rank a partition and records the full size as ``ds_numel``; that is what
    is counted. Shared (tied) parameters count once.
    """
    seen: set[int] = set()
    total = 0
    for p in model.parameters():
        if id(p) in seen:
            continue
        seen.add(id(p))
        total += int(getattr(p, "ds_numel", p.numel()))
    return total


def precision(engine: Any) -> str:
    """``"bf16"``, ``"fp16"`` or ``"fp32"``: the training dtype of a DeepSpeed engine.

    Read from the engine (which read the ds_config's ``bf16``/``fp16`` sections).
    """
    if bool(getattr(engine, "bfloat16_enabled", lambda: False)()):
        return "bf16"
    if bool(getattr(engine, "fp16_enabled", lambda: False)()):
        return "fp16"
    return "fp32"


def banner(engine: Any, curriculum: Curriculum) -> str:
    """The start line of a run: model, parameters, ranks, batch, dtype, ZeRO stage, resume.

    Shape: ``curriculum_ds: start | GPT2LMHeadModel 858k params | world 2 | micro-batch 4 × GAS
    2 × 2 ranks = global batch 16 samples | fp32 | ZeRO 2 | 2 phases, 24k tok | resumed from
    runs/a/checkpoints/global_step40`` (``fresh start`` without a resume); a run in order
    version 1 (``curriculum.order_version``) says ``order version 1`` before it.

    Args:
        engine: the ``DeepSpeedEngine`` (its ``module``, dtype and ZeRO stage are read).
        curriculum: the run's :class:`~curriculum_ds.Curriculum`, after ``load_checkpoint``
            (``resumed_from`` is read).

    Returns:
        One line of at most :data:`MAX_LINE` characters (a long model class name or checkpoint
        path is shortened in the middle). Deterministic. Reads only: no collective.
    """
    module = getattr(engine, "module", engine)
    name = _shorten(type(module).__name__, _MAX_NAME)
    num_params = count_parameters(module)
    schedule = curriculum.schedule
    head = " | ".join(
        [
            "curriculum_ds: start",
            f"{name} {human_count(num_params)} params",
            f"world {curriculum.dp_world_size}",
            f"micro-batch {curriculum.micro_batch_size} × GAS "
            f"{curriculum.gradient_accumulation_steps} × {curriculum.dp_world_size} ranks = "
            f"global batch {curriculum.global_batch_size} samples",
            precision(engine),
            f"ZeRO {int(engine.zero_optimization_stage())}",
            f"{schedule.num_phases} phases, {human_count(float(schedule.total))} {schedule.unit}",
        ]
        # the order of before (curriculum.order_version): a resumed old run, the bucket unit
        + ([] if curriculum.order_version == 2 else [f"order version {curriculum.order_version}"])
    )
    resumed: Path | None = curriculum.resumed_from
    if resumed is None:
        return _shorten(head + " | fresh start", MAX_LINE)
    prefix = head + " | resumed from "
    return prefix + _shorten(str(resumed), max(MAX_LINE - len(prefix), 20))


def schedule_bar(curriculum: Curriculum) -> Any:
    """A tqdm bar over the schedule, on stderr, at the curriculum's progress.

    In the schedule's unit (tokens, scaled as k/M/G, or epochs as a float), up to its
    ``max_duration``; a resumed run's bar starts where the checkpoint left it. The reference
    loop's :class:`~curriculum_ds.RunDir` and the HF Trainer's progress callback show this bar.
    """
    import sys

    from tqdm.auto import tqdm

    unit = curriculum.schedule.unit
    total = curriculum.schedule.total
    bar = tqdm(
        total=float(total) if unit == "ep" else int(total),
        unit=unit,
        unit_scale=unit == "tok",
        dynamic_ncols=True,
        file=sys.stderr,
    )
    bar.update(float(curriculum.progress) if unit == "ep" else int(curriculum.progress))
    return bar
