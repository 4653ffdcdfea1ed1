"""Side by side: the per-step cost of each adaptive-mixing unit × signal (issue 20, item 5).

Used by ``python bench/bench_dynamic_overhead.py --units``. In this process, on the demo's data
and config (its window, recompute interval and global batch), one loader and re-weighting per
arm draws the same number of steps; the arms take turns step by step (the order rotating), so
a drifting machine load hits them alike. Per step each arm pays what it adds to a training step:
its ``next_global_batch`` (bucketed sampler or moving stream proportions), ``observe`` (the
window push, the excess-loss lookup) and ``maybe_recompute`` with the update applied to the
loader (edges + bucket assignment, or per-stream means + new proportions), ``start_phase``
amortised over the phase. The per-sample loss all-gather is the same collective for every arm
and is not counted.

The reference is ``unit: "buckets", signal: "loss"`` (the re-weighting before units existed);
an arm's overhead is its extra time per step over the reference's, as a share of the demo's
mean step time.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import numpy as np

from curriculum_ds.config import CurriculumConfig, DynamicConfig
from curriculum_ds.core.loader import PhaseLoader
from curriculum_ds.data import read_stream_info
from curriculum_ds.dynamic import make_reweighter

REFERENCE_ARM = ("buckets", "loss")
ARMS = (
    REFERENCE_ARM,
    ("buckets", "excess_loss"),
    ("streams", "loss"),
    ("streams", "excess_loss"),
    ("streams", "learnability"),
)
COLUMN = "bench_ref_loss"
"""The reference-loss column the excess-loss arms read (random values: the cost is the same)."""


def add_reference_column(config_path: Path) -> None:
    """Give every train stream of the config a ``bench_ref_loss`` column, if it has none.

    The values are random (gamma, mean 2.4 nats): the excess-loss arms' cost does not depend on
    them. Written with the product's own atomic column writer (``curriculum-ds score``'s).
    """
    from curriculum_ds.data.metric_store import write_metric_column

    raw = json.loads(config_path.read_text())
    locals_ = {
        s["local"] for p in raw["curriculum"]["schedule"] for s in p["train_loader"]["streams"]
    }
    rng = np.random.default_rng(0)
    for local in sorted(locals_):
        info = read_stream_info(local)
        if COLUMN not in info.metrics:
            write_metric_column(local, COLUMN, rng.gamma(4.0, 0.6, size=info.num_samples))


def _arm_config(base: DynamicConfig, unit: str, signal: str) -> DynamicConfig:
    fields = base.model_dump()
    fields.update(unit=unit, signal=signal, enabled=True)
    fields["reference_metric"] = COLUMN if signal == "excess_loss" else None
    if unit == "streams":
        fields["temperature"] = 0.05 if signal == "learnability" else fields["temperature"]
    return DynamicConfig.model_validate(fields)


def time_units(config_path: Path, *, steps: int, dp_world_size: int = 2) -> dict[str, Any]:
    """Per-step seconds of each arm of :data:`ARMS`, interleaved step by step.

    Returns:
        ``{"per_step_s": {"unit/signal": seconds}, "global_batch": int, "steps": int}``.
    """
    raw = json.loads(config_path.read_text())
    cfg = CurriculumConfig.model_validate(raw["curriculum"])
    global_batch = (
        raw["train_micro_batch_size_per_gpu"] * raw["gradient_accumulation_steps"] * dp_world_size
    )
    names = [f"{unit}/{signal}" for unit, signal in ARMS]
    totals = dict.fromkeys(names, 0.0)
    rng = np.random.default_rng(0)
    counted = 0
    for phase_idx, phase in enumerate(cfg.schedule):
        arms = []
        for (unit, signal), name in zip(ARMS, names, strict=True):
            dyn_cfg = _arm_config(cfg.dynamic, unit, signal)
            reweighter = make_reweighter(dyn_cfg)
            num_buckets = reweighter.num_buckets
            loader = PhaseLoader(phase, phase_idx, seed=cfg.seed, num_buckets=num_buckets)
            t = time.perf_counter()
            loader.apply(reweighter.start_phase(loader.view(), None))  # once per phase
            totals[name] += time.perf_counter() - t
            arms.append((name, loader, reweighter))
        for step in range(1, steps + 1):
            losses = rng.gamma(4.0, 0.6, size=global_batch)
            losses[rng.random(global_batch) < 0.01] = np.nan
            shift = step % len(arms)
            for name, loader, reweighter in arms[shift:] + arms[:shift]:
                t = time.perf_counter()
                batch = loader.next_global_batch(global_batch)
                reweighter.observe(batch, losses)
                update = reweighter.maybe_recompute(step)
                if update is not None:  # as the curriculum applies it (plugin/curriculum.py)
                    loader.apply(update)
                totals[name] += time.perf_counter() - t
            counted += 1
        for _, loader, _ in arms:
            loader.close()
    return {
        "per_step_s": {name: total / counted for name, total in totals.items()},
        "global_batch": global_batch,
        "steps": counted,
    }


def units_report(timing: dict[str, Any], step_s: float | None) -> dict[str, Any]:
    """Each arm's per-step ms, its extra over the reference arm, and that extra's share of the
    step (``step_s``: the demo's mean step time; None leaves the share out)."""
    per_step = timing["per_step_s"]
    reference = per_step["/".join(REFERENCE_ARM)]
    arms = {}
    for name, seconds in per_step.items():
        extra = seconds - reference
        arms[name] = {
            "per_step_ms": round(1e3 * seconds, 4),
            "extra_ms": round(1e3 * extra, 4),
            "extra_pct_of_step": None if step_s is None else round(100 * extra / step_s, 4),
        }
    return {"reference": "/".join(REFERENCE_ARM), "step_s": step_s, "arms": arms}


def print_units(report: dict[str, Any]) -> None:
    """The side-by-side table (target: each arm's extra ≤ 0.5% of the step)."""
    step_s = report["step_s"]
    shown = "no step time" if step_s is None else f"mean step {1e3 * step_s:.1f} ms"
    print(f"adaptive mixing, unit/signal side by side ({shown}; reference {report['reference']}):")
    print(f"  {'unit/signal':<26} {'per step':>10} {'extra':>10} {'of the step':>12}")
    for name, row in report["arms"].items():
        share = row["extra_pct_of_step"]
        print(
            f"  {name:<26} {row['per_step_ms']:>8.3f} ms {row['extra_ms']:>+7.3f} ms "
            f"{'' if share is None else f'{share:+.3f}%':>12}"
        )
    if step_s is not None:
        worst = max(row["extra_pct_of_step"] for row in report["arms"].values())
        print(f"UNITS OVERHEAD: worst arm {worst:+.3f}% of the step (target ≤ 0.5%)")
