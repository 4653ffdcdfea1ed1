"""Each mixing method's overhead, side by side: ``python bench/bench_mixers.py``.

Issue 33, acceptance "Overhead": each method (``dynamic.method``) may cost at most 0.5% of the
demo's step time. One invocation:

1. **The demo's step time** (unless ``--step-ms`` gives it): one launched demo run with dynamic
   re-weighting off (2 CPU ranks under the deepspeed launcher, as ``bench_dynamic_overhead.py``
   runs it), its mean optimizer-step wall time after ``--warmup`` steps.
2. **Every registered method** (``curriculum_ds.dynamic.registry.methods()``, over
   ``unit: "streams"``), in this process, on the same synthetic steps: the demo's global batch
   (its micro-batch × gradient accumulation × 2 ranks) over K streams, each sample's loss a
   decaying power law of its stream plus noise (a NaN now and then). The methods take turns
   step by step, the order rotating, so a drifting machine load hits them alike. Timed per
   step: the CPU time (``time.process_time``, all threads) of ``observe`` + ``maybe_recompute``,
   the calls the curriculum makes after every optimizer step. A method's own keys come from
   :data:`METHOD_KEYS` (a method missing there runs with its section's defaults; one that
   cannot run on synthetic streams is listed with its reason).
3. **ADO's refit, separately**: the time of its fits (``ADOReweighter.refit``, rank 0's work in a
   run) is taken out of its per-step figure and reported amortised over the steps and per fit.
4. **Aioli's and Skill-it's evaluations, separately** (a ``ProbingReweighter``): after each step
   for which ``probe_due`` is true the curriculum evaluates the held-out streams and hands the
   losses to ``observe_probe``. Here the losses are synthetic; the method's own work on them
   (``probe_due`` + ``observe_probe``) is taken out of its per-step figure and reported apart,
   with the number of evaluations, and their cost: evaluations per step × the demo run's mean
   evaluation (``eval.jsonl``'s ``eval_time_s``: a forward over its two held-out streams, the
   same evaluation a probe runs), or ``--eval-ms``. Aioli's probe steps are ordinary training
   steps (they train on a leaning mixture) and cost nothing extra: their share of the steps is
   shown.

The methods run as a launched rank runs them: one BLAS thread (``OMP_NUM_THREADS=1``, the
launcher's setting, set here before numpy loads unless already set).

Example: ``python bench/bench_mixers.py --steps 300`` (about a minute plus the demo run);
``--quick`` is the smoke run the unit test makes (a few steps, no demo run).
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")  # before numpy/scipy load their BLAS

import argparse
import dataclasses
import json
import shlex
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch.distributed  # noqa: F401  (a training process has torch loaded: not timed)

from curriculum_ds.config import DynamicConfig
from curriculum_ds.dynamic import PhaseView, make_reweighter
from curriculum_ds.dynamic.protocol import ProbingReweighter
from curriculum_ds.dynamic.registry import methods
from curriculum_ds.records.jsonl import read_jsonl

TARGET_PCT = 0.5
"""Each method's cost as a share of the demo's step (issue 33)."""
REFERENCE_COLUMN = "bench_ref_loss"
"""A reference-loss column every synthetic stream has (random; for methods that read one)."""
METHOD_KEYS: dict[str, dict[str, Any]] = {
    "softmax": {"signal": "loss"},
    "doremi": {"reference_metric": REFERENCE_COLUMN},
    "odm": {"recompute_every_n_steps": 1},
    "ado": {
        "recompute_every_n_steps": 1,
        "ado": {"skip_steps": 5, "warmup_steps": 20, "refit_every": 10},
    },
    # the noisy-domain experiment's arm: rounds of 20 steps, 6 of them probes (K = 3)
    "aioli": {"recompute_every_n_steps": 20, "aioli": {"lp_rounds": 1, "probe_steps": 2}},
}
"""Per method, the ``curriculum.dynamic`` keys it runs with here (besides ``enabled``,
``method`` and ``unit: "streams"``); other helpers add their method's row."""
QUICK_KEYS: dict[str, dict[str, Any]] = {
    "aioli": {"recompute_every_n_steps": 5, "aioli": {"lp_rounds": 1, "probe_steps": 1}},
    "skillit": {"recompute_every_n_steps": 2},
    "ado": {
        "recompute_every_n_steps": 1,
        "ado": {"skip_steps": 1, "warmup_steps": 4, "refit_every": 3, "fit_starts": 2},
    },
}
"""``--quick``: keys that make a method act within a few steps."""


def method_config(
    method: str, base: dict[str, Any], quick: bool, work: Path | None = None
) -> DynamicConfig:
    """``curriculum.dynamic`` for ``method`` over streams: ``base`` + its :data:`METHOD_KEYS`
    (the ``file`` method reads ``work/weights.json``)."""
    keys = {**base, "enabled": True, "method": method, "unit": "streams"}
    keys.update(METHOD_KEYS.get(method, {}))
    if method == "file" and work is not None:
        keys["file"] = {"path": str(work / "weights.json")}
    if quick:
        keys.update(QUICK_KEYS.get(method, {}))
    return DynamicConfig.model_validate(keys)


def synthetic_steps(
    num_streams: int, num_steps: int, global_batch: int, seed: int = 0
) -> list[tuple[np.ndarray, np.ndarray]]:
    """Per step, the global batch ``(B, 2)`` and its per-sample losses ``(B,)``."""
    rng = np.random.default_rng(seed)
    floor = rng.uniform(1.0, 3.0, num_streams)
    scale, rate = rng.uniform(1.0, 4.0, num_streams), rng.uniform(0.2, 0.6, num_streams)
    steps = []
    for i in range(num_steps):
        streams = rng.integers(0, num_streams, global_batch)
        n = global_batch * (i + 1)
        losses = floor[streams] + scale[streams] * n ** -rate[streams]
        losses += rng.normal(0.0, 0.05, global_batch)
        losses[rng.random(global_batch) < 0.01] = np.nan
        batch = np.stack([streams, rng.integers(0, 1000, global_batch)], axis=1)
        steps.append((batch.astype(np.int64), losses))
    return steps


def phase_view(num_streams: int, seed: int = 0) -> PhaseView:
    """A phase of ``num_streams`` streams of 1,000 samples, natural proportions, one column."""
    rng = np.random.default_rng(seed)
    proportions = rng.dirichlet(np.full(num_streams, 4.0))
    return PhaseView(
        phase_idx=0,
        stream_names=tuple(f"stream{i}" for i in range(num_streams)),
        proportions=proportions,
        num_samples=(1000,) * num_streams,
        metrics=tuple({REFERENCE_COLUMN: rng.gamma(4.0, 0.6, 1000)} for _ in range(num_streams)),
    )


def eval_losses(names: tuple[str, ...], step: int, seed: int = 1) -> dict[str, float]:
    """A held-out evaluation's synthetic loss per stream after ``step``: a decaying power law."""
    rng = np.random.default_rng([seed, step])
    return {
        name: 2.0 + (1.0 + i) * step**-0.3 + float(rng.normal(0.0, 0.01))
        for i, name in enumerate(names)
    }


def time_methods(
    *, steps: int, num_streams: int, global_batch: int, base: dict[str, Any], quick: bool = False
) -> dict[str, Any]:
    """Every registered stream method's CPU seconds per step, interleaved step by step.

    Returns:
        ``{"per_step_s": {method: s}, "refit": {method: {"total_s", "count"}}, "probe":
        {method: {"total_s", "count", "probe_steps"}}, "not_timed": {method: reason}, "steps":
        int, "global_batch": int, "num_streams": int}``. ``per_step_s`` leaves out the refits
        and the probe hooks (``probe``: ``probe_due`` + ``observe_probe`` of the evaluations,
        ``count`` of them, ``probe_steps`` the steps trained on a probe's mixture).
    """
    # the file method: a weights file to read at each boundary, the run dir it journals in
    with tempfile.TemporaryDirectory(prefix="bench_mixers_") as tmp:
        return _time_methods(
            Path(tmp),
            steps=steps,
            num_streams=num_streams,
            global_batch=global_batch,
            base=base,
            quick=quick,
        )


def _time_methods(
    work: Path,
    *,
    steps: int,
    num_streams: int,
    global_batch: int,
    base: dict[str, Any],
    quick: bool,
) -> dict[str, Any]:
    view = phase_view(num_streams)
    (work / "weights.json").write_text(json.dumps(dict.fromkeys(view.stream_names, 1.0)))
    view = dataclasses.replace(view, run_dir=work)
    arms: list[tuple[str, Any]] = []
    refit: dict[str, dict[str, float]] = {}
    not_timed: dict[str, str] = {}
    for method, units in methods().items():
        if "streams" not in units:
            continue
        try:
            reweighter = make_reweighter(method_config(method, base, quick, work))
            reweighter.start_phase(view, None)
        except Exception as exc:  # a method that needs what synthetic streams lack
            not_timed[method] = f"{type(exc).__name__}: {exc}"
            continue
        if hasattr(reweighter, "refit"):  # fits (rank 0's work in a run): timed apart
            refit[method] = {"total_s": 0.0, "count": 0}
            reweighter.refit = _timed(reweighter.refit, refit[method])
        arms.append((method, reweighter))
    probe = {
        m: {"total_s": 0.0, "count": 0, "probe_steps": 0}
        for m, r in arms
        if isinstance(r, ProbingReweighter)
    }
    totals = dict.fromkeys([m for m, _ in arms], 0.0)
    for step, (batch, losses) in enumerate(synthetic_steps(num_streams, steps, global_batch), 1):
        shift = step % max(len(arms), 1)
        for method, reweighter in arms[shift:] + arms[:shift]:
            before = refit[method]["total_s"] if method in refit else 0.0
            probing, start = 0.0, time.process_time()
            reweighter.observe(batch, losses)
            if method in probe:  # the evaluation between (not timed: the demo's, below)
                probing = _probe(reweighter, step, view.stream_names, probe[method])
            reweighter.maybe_recompute(step)
            spent = time.process_time() - start
            totals[method] += (
                spent - probing - ((refit[method]["total_s"] - before) if method in refit else 0)
            )
    return {
        "per_step_s": {m: total / steps for m, total in totals.items()},
        "refit": refit,
        "probe": probe,
        "not_timed": not_timed,
        "steps": steps,
        "global_batch": global_batch,
        "num_streams": num_streams,
    }


def _probe(reweighter: Any, step: int, names: tuple[str, ...], into: dict[str, Any]) -> float:
    """A probing method's hooks after ``step``; returns their CPU seconds (added to ``into``).

    ``probe_due`` (asked as the curriculum asks it) and, when due, ``observe_probe`` with a
    synthetic evaluation (``into["count"]``); a step trained inside an Aioli round (a probe's
    mixture held) adds to ``into["probe_steps"]``.
    """
    losses = eval_losses(names, step)  # what the evaluation would hand: not timed
    into["probe_steps"] += int(getattr(reweighter, "round", None) is not None)  # not timed
    start = time.process_time()
    if reweighter.probe_due(step):
        reweighter.observe_probe(step, losses)
        into["count"] += 1
    spent = time.process_time() - start
    into["total_s"] += spent
    return spent


def _timed(fn: Any, into: dict[str, float]) -> Any:
    def wrapped(*args: Any, **kwargs: Any) -> Any:
        start = time.process_time()
        try:
            return fn(*args, **kwargs)
        finally:
            into["total_s"] += time.process_time() - start
            into["count"] += 1

    return wrapped


def report(
    timing: dict[str, Any], step_s: float | None, eval_s: float | None = None
) -> dict[str, Any]:
    """Per method: ms per step and its share of ``step_s``; fits amortised and per fit; a
    probing method's evaluations (count, its hooks' CPU, and at ``eval_s`` per evaluation their
    cost per step) and its probe steps."""

    def share(seconds: float) -> float | None:
        return None if step_s is None else round(100 * seconds / step_s, 4)

    rows: dict[str, Any] = {}
    for method, seconds in timing["per_step_s"].items():
        row: dict[str, Any] = {
            "per_step_ms": round(1e3 * seconds, 4),
            "pct_of_step": share(seconds),
        }
        fits = timing["refit"].get(method)
        if fits is not None:
            amortised = fits["total_s"] / timing["steps"]
            row["refit"] = {
                "count": int(fits["count"]),
                "per_refit_ms": round(1e3 * fits["total_s"] / max(fits["count"], 1), 3),
                "amortised_ms_per_step": round(1e3 * amortised, 4),
                "amortised_pct_of_step": share(amortised),
            }
        probes = timing["probe"].get(method)
        if probes is not None:
            per_step = None if eval_s is None else probes["count"] * eval_s / timing["steps"]
            row["evals"] = {
                "count": int(probes["count"]),
                "per_100_steps": round(100 * probes["count"] / timing["steps"], 2),
                "hooks_ms_per_step": round(1e3 * probes["total_s"] / timing["steps"], 4),
                "eval_ms_per_step": None if per_step is None else round(1e3 * per_step, 3),
                "eval_pct_of_step": None if per_step is None else share(per_step),
                "probe_steps_pct": round(100 * probes["probe_steps"] / timing["steps"], 2),
            }
        rows[method] = row
    return {"step_s": step_s, "eval_s": eval_s, "methods": rows, "not_timed": timing["not_timed"]}


def print_report(rep: dict[str, Any], timing: dict[str, Any]) -> None:
    """The side-by-side table and the verdict line (target: each ≤ 0.5% of the step)."""
    step_s = rep["step_s"]
    shown = "no step time" if step_s is None else f"the demo's mean step {1e3 * step_s:.1f} ms"
    if rep.get("eval_s") is not None:
        shown += f", its mean evaluation {1e3 * rep['eval_s']:.0f} ms"
    print(
        f"mixing methods, observe + maybe_recompute CPU time per step ({shown}; "
        f"{timing['steps']} steps of {timing['global_batch']} samples over "
        f"{timing['num_streams']} streams):"
    )
    print(f"  {'method':<10} {'per step':>11} {'of the step':>12}")
    for method, row in rep["methods"].items():
        pct = row["pct_of_step"]
        print(
            f"  {method:<10} {row['per_step_ms']:>8.4f} ms "
            f"{'' if pct is None else f'{pct:.4f}%':>12}"
        )
        fits = row.get("refit")
        if fits is not None:
            pct = fits["amortised_pct_of_step"]
            print(
                f"  {'':<10} + refit: {fits['count']} fits, {fits['per_refit_ms']:.1f} ms each, "
                f"{fits['amortised_ms_per_step']:.4f} ms per step amortised"
                + ("" if pct is None else f" ({pct:.4f}% of the step)")
            )
        evals = row.get("evals")
        if evals is not None:
            cost = (
                ""
                if evals["eval_ms_per_step"] is None
                else f", at {1e3 * rep['eval_s']:.0f} ms each {evals['eval_ms_per_step']:.1f} ms "
                f"per step"
                + (
                    ""
                    if evals["eval_pct_of_step"] is None
                    else f" ({evals['eval_pct_of_step']:.2f}% of the step)"
                )
            )
            print(
                f"  {'':<10} + evals: {evals['count']} ({evals['per_100_steps']:g} per 100 "
                f"steps){cost}; hooks {evals['hooks_ms_per_step']:.4f} ms per step; "
                f"{evals['probe_steps_pct']:g}% of the steps on a probe's mixture"
            )
    for method, why in rep["not_timed"].items():
        print(f"  {method:<10} not timed: {why}")
    if step_s is not None and rep["methods"]:
        worst = max(rep["methods"].items(), key=lambda kv: kv[1]["pct_of_step"])
        print(
            f"MIXERS OVERHEAD: worst {worst[0]} {worst[1]['pct_of_step']:.4f}% of the step "
            f"(target ≤ {TARGET_PCT}%; refits and evaluations apart)"
        )


def demo_step_s(out: Path, *, max_duration: int, warmup: int, num_gpus: int) -> dict[str, Any]:
    """The demo's mean step wall time (s) with re-weighting off, and its mean evaluation's
    (``eval_time_s``, s): one launched run."""
    from bench_dynamic_overhead import build_data, padded_tokens, run_once, step_times
    from bench_dynamic_overhead import write_config as write_demo_config

    data_dir = build_data(out)
    config = write_demo_config(out, data_dir, max_duration=max_duration, dynamic=False)
    run_dir = out / "demo_off"
    cmd, _ = run_once(config, run_dir, num_gpus=num_gpus)
    stats = step_times(run_dir, warmup, padded_tokens(config, run_dir, num_gpus))
    evals = [float(r["eval_time_s"]) for r in read_jsonl(run_dir / "eval.jsonl")]
    return {
        "step_s": statistics.fmean(stats["step_s"]),
        "steps": stats["steps"],
        "eval_s": statistics.fmean(evals) if evals else None,
        "evals": len(evals),
        "command": cmd,
    }


def demo_batch(num_gpus: int) -> tuple[int, dict[str, Any]]:
    """The demo's global batch (samples) at ``num_gpus`` ranks, and its ``dynamic`` section."""
    from curriculum_ds.commands.demo import demo_ds_config

    config = demo_ds_config(Path("data"), max_duration=1000, cuda=False)
    batch = config["train_micro_batch_size_per_gpu"] * config["gradient_accumulation_steps"]
    dynamic = {
        k: v
        for k, v in config["curriculum"].get("dynamic", {}).items()
        if k in ("window", "recompute_every_n_steps")
    }
    return batch * num_gpus, dynamic


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=300, help="synthetic steps per method")
    parser.add_argument("--streams", type=int, default=3, help="streams (K) of the phase")
    parser.add_argument("--num-gpus", type=int, default=2, help="ranks of the demo run")
    parser.add_argument("--step-ms", type=float, default=None, help="the step time; no demo run")
    parser.add_argument(
        "--eval-ms", type=float, default=None, help="an evaluation's time (with --step-ms)"
    )
    parser.add_argument("--max-duration", type=int, default=120_000, help="demo run tokens")
    parser.add_argument("--warmup", type=int, default=5, help="demo steps left out")
    parser.add_argument("--out", type=Path, default=None, help="work folder of the demo run")
    parser.add_argument("--quick", action="store_true", help="smoke run: 12 steps, no demo run")
    parser.add_argument("--json", action="store_true", help="print JSON instead of the table")
    args = parser.parse_args(argv)

    global_batch, base = demo_batch(args.num_gpus)
    result: dict[str, Any] = {"command": shlex.join([sys.executable, *(argv or sys.argv[1:])])}
    step_s = None if args.step_ms is None else args.step_ms / 1e3
    eval_s = None if args.eval_ms is None else args.eval_ms / 1e3
    if step_s is None and not args.quick:
        with tempfile.TemporaryDirectory(prefix="bench_mixers_") as tmp:
            out = args.out.resolve() if args.out else Path(tmp)
            demo = demo_step_s(
                out, max_duration=args.max_duration, warmup=args.warmup, num_gpus=args.num_gpus
            )
        step_s, eval_s = demo["step_s"], demo["eval_s"]
        result["demo"] = {
            "steps": demo["steps"],
            "evals": demo["evals"],
            "command": shlex.join(demo["command"]),
        }
    timing = time_methods(
        steps=12 if args.quick else args.steps,
        num_streams=args.streams,
        global_batch=global_batch,
        base=base,
        quick=args.quick,
    )
    rep = report(timing, step_s, eval_s)
    result.update(rep)
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print_report(rep, timing)


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    main()
