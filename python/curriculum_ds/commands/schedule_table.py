"""The schedule as a table, for ``curriculum-ds validate``: phases, datamixes, estimated steps.

Reads the streams' recorded metadata (token counts per sample) to estimate optimizer steps per
phase; never fails on unreadable data (it shows ``?``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from curriculum_ds.config import read_stream_info_checked
from curriculum_ds.config.hf_auto import BATCH_KEYS
from curriculum_ds.config.ramps import is_ramp
from curriculum_ds.core.lr_schedule import LRSchedule
from curriculum_ds.core.schedule import PhaseSchedule, duration_str

if TYPE_CHECKING:
    from curriculum_ds.config import CurriculumConfig, LoaderConfig, RunConfig, StreamConfig

__all__ = ["describe_schedule", "mix_shares"]


def _mean_tokens(info: Any, max_seq_len: int) -> float | None:
    metrics = getattr(info, "metrics", None)
    if not isinstance(metrics, Mapping) or "num_tokens" not in metrics:
        return None
    values = metrics["num_tokens"]
    try:
        arr = np.minimum(np.asarray(values, dtype=np.float64), max_seq_len)
        return float(arr.mean()) if arr.size else None
    except (TypeError, ValueError):
        return None


def mix_shares(
    proportions: list[float], means: list[float], unit: str
) -> tuple[list[float], list[float]] | None:
    """Expected sample and token shares of a datamix from its streams' mean sample lengths.

    Args:
        proportions: the streams' proportions (> 0; normalised here).
        means: mean non-padding tokens per sample of each stream (after truncation).
        unit: ``train_loader.proportion_unit``: ``"samples"`` (the proportions are the sample
            shares) or ``"tokens"`` (they are the token shares).

    Returns:
        ``(sample_shares, token_shares)``, each summing to 1, or None when a mean is not positive.
    """
    if not means or min(means) <= 0:
        return None
    p = np.asarray(proportions, dtype=np.float64) / sum(proportions)
    m = np.asarray(means, dtype=np.float64)
    if unit == "tokens":
        samples = p / m
        return (samples / samples.sum()).tolist(), p.tolist()
    return p.tolist(), (p * m / (p * m).sum()).tolist()


def _shares_line(k: int, phase: Any, shares: tuple[list[float], list[float]]) -> str:
    loader = phase.train_loader
    parts = ", ".join(
        f"{s.name} {100 * a:.3g}% / {100 * b:.3g}%"
        for s, a, b in zip(loader.streams, *shares, strict=True)
    )
    return (
        f"phase {k} ({phase.name}) mix in {loader.proportion_unit}; "
        f"~realised shares, samples / tokens: {parts}"
    )


def describe_schedule(run: RunConfig, dp_world_size: int = 1) -> str:
    """A readable table of the schedule, for ``curriculum-ds validate``.

    Columns: phase index, name, duration, cumulative end, datamix (``stream: proportion``),
    max_seq_len and estimated optimizer steps. Steps: for ``tok``, duration / (global batch size ×
    mean of ``min(num_tokens, max_seq_len)`` over the mix, weighted by the sample shares); for
    ``ep``, duration × epoch size / global batch size. Shows ``?`` where a stream's info cannot be
    read. Below the table, each phase of several streams whose lengths are known gets a line
    with the expected realised sample and token shares (:func:`mix_shares`). A footer line sums
    the run up; with ``curriculum.lr_schedule`` one more line describes it, and one with
    ``curriculum.eval``.

    Args:
        run: the loaded config.
        dp_world_size: data-parallel ranks, for the global batch size.

    Raises:
        ConfigError: the batch-size keys are inconsistent for ``dp_world_size``.
    """
    cfg = run.curriculum
    schedule = PhaseSchedule(cfg)
    # HF's "auto" batch sizes: the global batch is the Trainer's, the steps unknown here
    auto = any(run.ds_config.get(key) == "auto" for key in BATCH_KEYS)
    gbs = None if auto else run.global_batch_size(dp_world_size)
    infos: dict[str, Any] = {}

    def info(stream: StreamConfig) -> Any:
        if stream.local not in infos:
            try:
                infos[stream.local] = read_stream_info_checked(stream.local, remote=stream.remote)
            except Exception:  # describing must not fail on unreadable data
                infos[stream.local] = None
        return infos[stream.local]

    rows = [("phase", "name", "duration", "ends at", "datamix", "max_seq_len", "~steps")]
    share_lines: list[str] = []
    total_steps: int | None = 0
    for k, phase in enumerate(cfg.schedule):
        loader = phase.train_loader
        # a moving mix: its average shares over the phase (the estimates), its ramp in the cell
        average = _average_shares(loader)
        psum = sum(average)
        mix = _mix_cell(loader, average)
        steps: int | None = None
        means = [_mean_tokens(info(s), loader.peak_seq_len) for s in loader.streams]
        known = [m for m in means if m is not None]
        shares = None
        if len(known) == len(means):
            proportions = average
            shares = mix_shares(proportions, known, loader.proportion_unit)
            if len(known) > 1 and shares is not None:
                share_lines.append(_shares_line(k, phase, shares))
        if schedule.unit == "tok":
            if len(known) == len(means):
                if shares is None or loader.proportion_unit == "samples":
                    weighted = zip(average, known, strict=True)
                    mean = sum(p * m for p, m in weighted) / psum
                else:
                    mean = sum(a * m for a, m in zip(shares[0], known, strict=True))
                if mean > 0 and gbs is not None:
                    steps = math.ceil(phase.duration.value / (gbs * mean))
        else:
            epoch_size = loader.epoch_size
            if epoch_size is None:
                counts = [getattr(info(s), "num_samples", None) for s in loader.streams]
                if all(isinstance(c, int) for c in counts):
                    epoch_size = sum(counts)  # type: ignore[arg-type]
            if epoch_size is not None and gbs is not None:
                steps = math.ceil(phase.duration.value * epoch_size / gbs)
        if steps is None or total_steps is None:
            total_steps = None
        else:
            total_steps += steps
        rows.append(
            (
                str(k),
                phase.name,
                str(phase.duration),
                duration_str(schedule.unit, schedule.ends[k]),
                mix,
                _seq_len_cell(loader),
                "?" if steps is None else str(steps),
            )
        )
    widths = [max(len(r[c]) for r in rows) for c in range(len(rows[0]))]
    lines = [
        "  ".join(cell.ljust(w) for cell, w in zip(r, widths, strict=True)).rstrip() for r in rows
    ]
    lines.insert(1, "  ".join("-" * w for w in widths))
    lines += share_lines
    footer = (
        f"max_duration {cfg.max_duration}, {schedule.num_phases} phase(s), global batch "
        f"{'auto (HF Trainer)' if gbs is None else gbs} samples (dp_world_size {dp_world_size}), "
        f"~{'?' if total_steps is None else total_steps} "
        f"optimizer steps, loss_weighting {cfg.loss_weighting}, seed {cfg.seed}, dynamic "
        f"{_dynamic_summary(cfg)}"
    )
    lines.append(footer)
    lr = LRSchedule.from_config(cfg)
    if lr is not None:
        params = (run.ds_config.get("optimizer") or {}).get("params") or {}
        peak = params.get("lr") if isinstance(params.get("lr"), int | float) else None
        last_phase = cfg.lr_schedule is not None and cfg.lr_schedule.decay == "last_phase"
        lines.append(lr.describe(schedule.unit, peak=peak, last_phase=last_phase))
    if cfg.eval is not None:
        every = f"every {cfg.eval.interval} and " if cfg.eval.interval is not None else ""
        names = ", ".join(s.name or s.local for s in cfg.eval.streams)
        lines.append(
            f"eval: {len(cfg.eval.streams)} held-out stream(s) ({names}), {every}at each phase "
            f"end, the first {cfg.eval.max_samples} samples of each"
        )
    return "\n".join(lines)


def _average_shares(loader: LoaderConfig) -> list[float]:
    """The streams' proportions (constant), or a moving mix's mean shares over the phase."""
    if not loader.is_moving_mix:
        return [float(s.proportion) for s in loader.streams]  # type: ignore[arg-type]
    grid = [loader.proportions_at(i / 100) for i in range(101)]
    return [sum(column) / len(grid) for column in zip(*grid, strict=True)]


def _ramp_fractions(loader: LoaderConfig) -> list[float]:
    return sorted(
        {x for s in loader.streams if is_ramp(s.proportion) for x, _ in s.proportion}  # type: ignore[union-attr]
    )


def _mix_cell(loader: LoaderConfig, average: list[float]) -> str:
    """``web: 0.7, code: 0.3``, or a ramp's shares at its points: ``web: 0.9→0.9@0.85→0.1, ...``.

    An inner point carries its fraction of the phase (``@0.85``), as :func:`_seq_len_cell` does.
    """
    if not loader.is_moving_mix:
        total = sum(average)
        return ", ".join(
            f"{s.name}: {p / total:.3g}" for s, p in zip(loader.streams, average, strict=True)
        )
    at = [(x, loader.proportions_at(x)) for x in _ramp_fractions(loader)]
    return ", ".join(
        f"{s.name}: "
        + "→".join(
            f"{shares[j]:.3g}" if x in (0.0, 1.0) else f"{shares[j]:.3g}@{x:g}" for x, shares in at
        )
        for j, s in enumerate(loader.streams)
    )


def _seq_len_cell(loader: LoaderConfig) -> str:
    """``1024``, or a warmup ramp's points: ``64→256@0.5→1024``."""
    points = loader.max_seq_len
    if not is_ramp(points):
        return str(points)
    return "→".join(
        f"{int(v)}" if x in (0.0, 1.0) else f"{int(v)}@{x:g}"
        for x, v in points  # type: ignore[union-attr]
    )


def _dynamic_summary(cfg: CurriculumConfig) -> str:
    """``off``, or ``on`` with what is weighted and by which signal (``on (streams, loss)``)."""
    dynamic = cfg.dynamic
    if not dynamic.enabled:
        return "off"
    what = f"{dynamic.num_buckets} buckets" if dynamic.unit == "buckets" else "streams"
    return f"on ({what}, signal {dynamic.signal})"
