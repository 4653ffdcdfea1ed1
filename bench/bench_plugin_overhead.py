"""Plugin loop vs a bare DeepSpeed loop, step time: ``python bench/bench_plugin_overhead.py``.

Issue 10: a training loop on ``curriculum_ds.initialize`` + ``for step in curriculum`` may cost at
most 3% more per optimizer step than the bare DeepSpeed loop it replaces (5% with dynamic
re-weighting on). One process measures three loops side by side, each with its own engine over
the same model (the demo's default: ``curriculum_ds.train.build_model``'s GPT-2, 2 layers, width
128, 256 positions, byte vocabulary, same seed) and the demo's DeepSpeed settings (micro-batch 8,
GAS 2, AdamW, WarmupLR, clipping 1.0, ZeRO 1, fp32 on CPU):

* ``bare``: ``loss = engine(input_ids, attention_mask=..., labels=...).loss`` (HF's token mean of
  the micro-batch), ``engine.backward(loss)``, ``engine.step()``, over micro-batches collated once
  and kept in memory (no loader, no curriculum);
* ``plugin, dynamic off``: the reference loop's body (``curriculum_ds.train``): ``for step in
  curriculum``, ``step.backward(engine(...), mb)`` per micro-batch, ``step.finish()``: draws from
  the MDS stream, token-weighted loss with its all-reduce, counters, metrics row;
* ``plugin, dynamic on``: the same with the demo's re-weighting (4 buckets, recompute every 5
  steps): per-sample losses, their all-gather, the rolling window, bucketed sampling.

The data make the work of every step identical whatever the sampler picks: documents of 130-255
bytes, truncated to the phase's ``max_seq_len`` (128, the demo's first phase), so every
micro-batch is a full ``(8, 128)`` block, in all three loops; a different sample choice (dynamic
on) cannot change the compute. The bare loop's micro-batches are the first 16 global batches the
plugin (dynamic off) draws, collated before timing and cycled.

Timing: blocks of ``--block`` optimizer steps (a multiple of the recompute interval, so every
block holds the same number of recomputes) of the three loops alternate, each round in another of
the 6 orders, after ``--warmup`` untimed steps of each loop. Per block, ms/step on two clocks:
wall (``perf_counter``) and CPU (``process_time``, all threads of the process), which other jobs
on a shared machine disturb far less; and, for the plugin loops, the wall time of the draw
(``next(curriculum)``) and of ``step.finish()`` alone: API time the bare loop has no counterpart
for, measured directly. Reported: medians over blocks, and plugin/bare as the median over rounds
of the ratio of the two loops' blocks in that round (drift cancels within a round). On a loaded
machine a block's wall time varies by ~20%, its CPU time by ~5%: a ratio to ±1% needs ~60
rounds (the default: 300 steps in blocks of 5).

One torch thread per process by default: what each of the demo's 2 CPU ranks gets on a 2-core
machine (``OMP_NUM_THREADS=1``), and two threads fighting other jobs time spin-waits, not work.
``--num-gpus 2`` runs the same under the deepspeed launcher (2 CPU gloo ranks); rank 0 reports
(its draw/finish then include waiting for the other rank at the collectives). ``--profile`` then
cProfiles ``--profile-steps`` steps of each loop and shows, per plugin loop, the curriculum_ds
functions by cumulative time and the functions whose own time differs most from the bare loop's.

``--streams`` measures issue 11's per-stream accounting and monitors instead, against a 1%
target: two plugin loops (dynamic off) over a phase of two streams (0.5/0.5, the same kind of
data), side by side as above: ``plugin, accounting off`` (the step's token-loss total alone, as
before per-stream accounting: ``StreamAccounting`` replaced by a total-only stand-in during that
loop's blocks, no monitor) and ``plugin, accounting + monitors`` (per-stream samples, tokens and
losses in every metrics row, and DeepSpeed's ``tensorboard`` and ``csv_monitor`` enabled, so each
step also writes the ``curriculum/...`` events and DeepSpeed's own ``Train/Samples/lr``).

``--moving`` measures issue 22's mixtures that move, against a 0.5% target: two plugin loops
(dynamic off) over the same two streams, ``plugin, constant mix`` (0.5/0.5) and ``plugin, ramp +
loss weights`` (proportion ramps 0.9→0.1 / 0.1→0.9 and loss weights 0.5 / 2: the shares read at
every step's start, the blend from per-stream targets, the weighted denominators in the count's
all-reduce).

Example: ``python bench/bench_plugin_overhead.py --profile`` (about 4 minutes on 2 CPU cores);
``python bench/bench_plugin_overhead.py --streams``.
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import itertools
import json
import os
import pstats
import random
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
MAX_SEQ_LEN = 128
"""Tokens per sample in the phase (the demo's first phase); every sample is truncated to it."""
N_POSITIONS = 256
"""The demo model's positions (the longest ``max_seq_len`` of the demo's schedule)."""
VARIANTS = ("bare", "plugin, dynamic off", "plugin, dynamic on")
TARGETS = {"plugin, dynamic off": 1.03, "plugin, dynamic on": 1.05}
STREAM_VARIANTS = ("plugin, accounting off", "plugin, accounting + monitors")
"""``--streams``: the reference loop first, as ``bare`` is in the default mode."""
STREAM_TARGETS = {"plugin, accounting + monitors": 1.01}
MOVING_VARIANTS = ("plugin, constant mix", "plugin, ramp + loss weights")
"""``--moving``: the constant two-stream mix first."""
MOVING_TARGETS = {"plugin, ramp + loss weights": 1.005}


# ---------------------------------------------------------------------------------- data
def build_data(out: Path, *, num_docs: int = 2048, name: str = "fixed128", seed: int = 0) -> Path:
    """An MDS stream of ``num_docs`` English-like documents of 130-255 bytes (reused if there)."""
    from curriculum_ds.data import prepare

    target = out / name
    if (target / "curriculum_meta.json").is_file():
        return target
    rng = random.Random(seed)
    words = (
        "the model reads data in phases and every token of a step weighs the same curriculum "
        "learning starts easy and ends hard while ranks agree on each global batch"
    ).split()
    lines = []
    for _ in range(num_docs):
        n = rng.randint(MAX_SEQ_LEN + 2, N_POSITIONS - 1)  # + EOS: 131..256 tokens
        text = ""
        while len(text) < n:
            text += rng.choice(words) + " "
        lines.append(json.dumps({"text": text[:n]}) + "\n")
    src = out / f"{name}.jsonl"
    src.write_text("".join(lines))
    prepare([src], target, max_seq_len=N_POSITIONS)
    return target


def second_stream(data: Path) -> Path:
    """``--streams``: the phase's second stream, beside ``data``."""
    return data.parent / "fixed128b"


PREFETCH: int | None = None
"""``--prefetch N``: the plugin loops' ``curriculum.prefetch_micro_batches`` (None: default)."""


def ds_config(data: Path, *, dynamic: bool) -> dict[str, Any]:
    """The demo's ds_config with one phase over ``data`` at ``MAX_SEQ_LEN``."""
    from curriculum_ds.commands.demo import demo_ds_config

    config = demo_ds_config(data.parent, max_duration=10**12, cuda=False)
    curriculum = config["curriculum"]
    curriculum["schedule"] = [
        {
            "name": "fixed",
            "duration": f"{10**12}tok",
            "train_loader": {"streams": [{"local": str(data)}], "max_seq_len": MAX_SEQ_LEN},
        }
    ]
    curriculum["dynamic"]["enabled"] = dynamic
    curriculum.pop("eval", None)  # the demo's held-out evaluation is not part of a step's time
    if PREFETCH is not None:
        curriculum["prefetch_micro_batches"] = PREFETCH
    return config


# --------------------------------------------------------------------------------- loops
class BareLoop:
    """A plain DeepSpeed loop over micro-batches collated once (no loader, no curriculum)."""

    def __init__(self, engine: Any, micro_batches: list[list[Any]]) -> None:
        self.engine = engine
        self.micro_batches = micro_batches
        self.num_steps = 0

    def run(self, num_steps: int) -> None:
        engine = self.engine
        for _ in range(num_steps):
            for mb in self.micro_batches[self.num_steps % len(self.micro_batches)]:
                loss = engine(mb.input_ids, attention_mask=mb.attention_mask, labels=mb.labels).loss
                engine.backward(loss)
                engine.step()
            self.num_steps += 1


class PluginLoop:
    """The reference loop's body on the public API (``curriculum_ds.train``, minus logging).

    ``for step in curriculum`` written out as ``next(curriculum)`` so that the draw (the loader,
    the all-reduce of the step's token count) and ``finish`` (counters, re-weighting, metrics
    row) are timed on their own: API time that the bare loop has no counterpart for.
    """

    def __init__(self, engine: Any, curriculum: Any) -> None:
        self.engine = engine
        self.curriculum = curriculum
        self.draw_s = 0.0  # seconds in next(curriculum), summed over steps
        self.finish_s = 0.0  # seconds in step.finish(), summed over steps

    def run(self, num_steps: int) -> None:
        engine = self.engine
        for _ in range(num_steps):
            start = time.perf_counter()
            step = next(self.curriculum)
            drawn = time.perf_counter()
            for mb in step.micro_batches:
                logits = engine(mb.input_ids, attention_mask=mb.attention_mask)
                step.backward(logits, mb)  # token-weighted loss -> engine.backward + engine.step
            backward_done = time.perf_counter()
            step.finish()
            self.draw_s += drawn - start
            self.finish_s += time.perf_counter() - backward_done


def build_loops(data: Path, *, num_distinct: int) -> dict[str, Any]:
    """The three loops, each with its own engine over the same initial model."""
    import deepspeed
    import torch
    import torch.distributed as dist

    import curriculum_ds as cds
    from curriculum_ds.core.loader import PhaseLoader
    from curriculum_ds.default_model import build_model
    from curriculum_ds.plugin import load_run_config

    loops: dict[str, Any] = {}
    runs = {flag: load_run_config(ds_config(data, dynamic=flag)) for flag in (False, True)}
    for flag, run in runs.items():
        torch.manual_seed(run.curriculum.seed)
        model = build_model(None, run.curriculum, N_POSITIONS)
        engine, curriculum = cds.initialize(model=model, config=run)
        loops[VARIANTS[2 if flag else 1]] = PluginLoop(engine, curriculum)

    run = runs[False]
    torch.manual_seed(run.curriculum.seed)
    model = build_model(None, run.curriculum, N_POSITIONS)
    engine, *_ = deepspeed.initialize(
        model=model,
        model_parameters=[p for p in model.parameters() if p.requires_grad],
        config=cds.deepspeed_config(run),
    )
    # the global batches the plugin (dynamic off) draws first, this rank's slice, collated once
    loader = PhaseLoader(run.curriculum.schedule[0], 0, seed=run.curriculum.seed)
    rank, world = dist.get_rank(), dist.get_world_size()
    steps = []
    for _ in range(num_distinct):
        batch = loader.next_global_batch(run.global_batch_size(world))
        mbs = loader.micro_batches(
            batch, dp_rank=rank, dp_world_size=world, micro_batch_size=run.micro_batch_size
        )
        steps.append([mb.to(engine.device) for mb in mbs])
    loader.close()
    loops[VARIANTS[0]] = BareLoop(engine, steps)
    return {name: loops[name] for name in VARIANTS}


class TotalOnlyAccounting:
    """``--streams``' accounting off: the step's token-loss total alone, no per-stream rows.

    What ``Step`` summed before per-stream accounting (one loss sum and one count per rank in the
    statistics all-reduce); stands in for ``curriculum_ds.plugin.accounting.StreamAccounting``.
    """

    def __init__(self, *args: Any) -> None:
        pass

    def local_sums(self, loss_sums: Any, num_valid: Any) -> Any:
        import torch

        return torch.stack([loss_sums.sum(), num_valid.sum()])

    def loss_sum(self, global_sums: Any) -> float:
        return float(global_sums[0])

    def records(self, global_sums: Any) -> dict[str, Any]:
        return {}


class AccountingOffLoop(PluginLoop):
    """The plugin loop with :class:`TotalOnlyAccounting` in place during its own blocks."""

    def run(self, num_steps: int) -> None:
        import curriculum_ds.plugin.step as step_module

        real = step_module.StreamAccounting
        step_module.StreamAccounting = TotalOnlyAccounting  # type: ignore[assignment,misc]
        try:
            super().run(num_steps)
        finally:
            step_module.StreamAccounting = real  # type: ignore[misc]


def build_stream_loops(data: Path, *, monitor_dir: Path) -> dict[str, Any]:
    """``--streams``: accounting off, and accounting + TensorBoard + CSV monitors on."""
    import torch

    import curriculum_ds as cds
    from curriculum_ds.default_model import build_model
    from curriculum_ds.plugin import load_run_config

    config = ds_config(data, dynamic=False)
    (phase,) = config["curriculum"]["schedule"]
    phase["train_loader"]["streams"] = [
        {"local": str(data), "proportion": 0.5},
        {"local": str(second_stream(data)), "proportion": 0.5},
    ]
    monitors = {
        key: {"enabled": True, "output_path": str(monitor_dir), "job_name": key}
        for key in ("tensorboard", "csv_monitor")
    }
    loops: dict[str, Any] = {}
    for name, loop_class, extra in (
        (STREAM_VARIANTS[0], AccountingOffLoop, {}),
        (STREAM_VARIANTS[1], PluginLoop, monitors),
    ):
        run = load_run_config({**config, **extra})
        torch.manual_seed(run.curriculum.seed)
        model = build_model(None, run.curriculum, N_POSITIONS)
        engine, curriculum = cds.initialize(model=model, config=run)
        loops[name] = loop_class(engine, curriculum)
    return loops


def build_moving_loops(data: Path) -> dict[str, Any]:
    """``--moving``: a constant two-stream mix, and the same streams ramped with loss weights."""
    import torch

    import curriculum_ds as cds
    from curriculum_ds.default_model import build_model
    from curriculum_ds.plugin import load_run_config

    loops: dict[str, Any] = {}
    for name, extras in (
        (MOVING_VARIANTS[0], ({"proportion": 0.5}, {"proportion": 0.5})),
        (
            MOVING_VARIANTS[1],
            (
                {"proportion": [[0.0, 0.9], [1.0, 0.1]], "loss_weight": 0.5},
                {"proportion": [[0.0, 0.1], [1.0, 0.9]], "loss_weight": 2.0},
            ),
        ),
    ):
        config = ds_config(data, dynamic=False)
        (phase,) = config["curriculum"]["schedule"]
        phase["train_loader"]["streams"] = [
            {"local": str(local), **extra}
            for local, extra in zip((data, second_stream(data)), extras, strict=True)
        ]
        run = load_run_config(config)
        torch.manual_seed(run.curriculum.seed)
        model = build_model(None, run.curriculum, N_POSITIONS)
        engine, curriculum = cds.initialize(model=model, config=run)
        loops[name] = PluginLoop(engine, curriculum)
    return loops


# ------------------------------------------------------------------------------ measuring
def measure(
    loops: dict[str, Any], *, steps: int, block: int, warmup: int
) -> dict[str, dict[str, list[float]]]:
    """Alternate timed blocks of the loops; per loop, the ms/step of each block, in round order.

    Two clocks: ``wall`` (``perf_counter``) and ``cpu`` (``process_time``: this process's CPU
    time, all threads), which other jobs on the machine disturb far less; and, for the plugin
    loops, the wall time of the draw and of ``finish`` alone (``draw``, ``finish``; 0 for bare).
    """
    import torch.distributed as dist

    for loop in loops.values():
        loop.run(warmup)
    orders = list(itertools.permutations(loops))
    times: dict[str, dict[str, list[float]]] = {
        clock: {name: [] for name in loops} for clock in ("wall", "cpu", "draw", "finish")
    }
    for round_idx in range(max(1, steps // block)):
        for name in orders[round_idx % len(orders)]:
            loop = loops[name]
            api = (getattr(loop, "draw_s", 0.0), getattr(loop, "finish_s", 0.0))
            gc.collect()
            dist.barrier()
            start, start_cpu = time.perf_counter(), time.process_time()
            loop.run(block)
            times["wall"][name].append(1e3 * (time.perf_counter() - start) / block)
            times["cpu"][name].append(1e3 * (time.process_time() - start_cpu) / block)
            times["draw"][name].append(1e3 * (getattr(loop, "draw_s", 0.0) - api[0]) / block)
            times["finish"][name].append(1e3 * (getattr(loop, "finish_s", 0.0) - api[1]) / block)
    return times


def summarize(
    times: dict[str, dict[str, list[float]]],
    variants: tuple[str, ...] = VARIANTS,
    targets: dict[str, float] | None = None,
) -> list[dict[str, Any]]:
    """Per loop and clock: median ms/step, quartiles, and the ratio to the first (bare) loop.

    ``ratio``: the median over rounds of (this loop's block / the bare loop's block of the same
    round); ``ratio_of_medians``: median / median.
    """
    targets = TARGETS if targets is None else targets
    rows = []
    for name in variants:
        row: dict[str, Any] = {"loop": name, "blocks": len(times["wall"][name])}
        for clock, per_loop in times.items():
            ms, bare = per_loop[name], per_loop[variants[0]]
            quartiles = statistics.quantiles(ms, n=4) if len(ms) > 1 else [ms[0]] * 3
            row[clock] = {"median_ms": statistics.median(ms), "q1_ms": quartiles[0]}
            row[clock]["q3_ms"] = quartiles[2]
            if name != variants[0] and clock in ("wall", "cpu"):
                paired = [p / b for p, b in zip(ms, bare, strict=True)]
                row[clock]["ratio"] = statistics.median(paired)
                row[clock]["ratio_of_medians"] = statistics.median(ms) / statistics.median(bare)
        if name in targets:
            row["target"] = targets[name]
        rows.append(row)
    return rows


Profile = dict[tuple[str, int, str], tuple[float, float, float]]
"""Per function ``(file, line, name)``: calls, own ms and cumulative ms, per optimizer step."""


def profile_loop(loop: Any, *, steps: int) -> Profile:
    """cProfile ``steps`` steps of one loop, per optimizer step."""
    profiler = cProfile.Profile()
    profiler.enable()
    loop.run(steps)
    profiler.disable()
    raw = pstats.Stats(profiler).stats  # type: ignore[attr-defined]
    return {
        key: (calls / steps, 1e3 * own / steps, 1e3 * cum / steps)
        for key, (_, calls, own, cum, _) in raw.items()
    }


def _where(key: tuple[str, int, str]) -> str:
    filename, line, func = key
    short = filename.replace(str(REPO) + "/", "").split("site-packages/")[-1]
    return f"{func} ({short}:{line})" if line else func


def profile_report(
    profiles: dict[str, Profile], *, steps: int, top: int = 15, variants: tuple[str, ...] = VARIANTS
) -> str:
    """Where the plugin's extra time goes, per optimizer step, against the bare loop.

    For each plugin loop: the curriculum_ds functions by cumulative time (what the API itself
    costs, its calls into torch included), then every function whose own time differs most from
    the bare loop's (a positive difference is time the plugin loop spends and the bare one does
    not; forward/backward kernels differ by noise of a few percent).
    """
    bare = profiles[variants[0]]
    lines = [f"cProfile, {steps} steps per loop (ms per optimizer step; profiling inflates them)"]
    for name in variants[1:]:
        prof = profiles[name]
        lines += ["", f"--- {name}: curriculum_ds functions by cumulative time"]
        lines.append(f"{'cum ms':>9}{'own ms':>9}{'calls':>8}  function")
        ours = [k for k in prof if "curriculum_ds" in k[0] and "bench_" not in k[0]]
        for key in sorted(ours, key=lambda k: prof[k][2], reverse=True)[:top]:
            calls, own, cum = prof[key]
            lines.append(f"{cum:9.3f}{own:9.3f}{calls:8.1f}  {_where(key)}")
        lines += ["", f"--- {name} minus bare: own time per function (largest differences)"]
        lines.append(f"{'delta ms':>9}{'plugin':>9}{'bare':>9}  function")
        delta = {k: prof.get(k, (0, 0, 0))[1] - bare.get(k, (0, 0, 0))[1] for k in prof | bare}
        for key in sorted(delta, key=lambda k: abs(delta[k]), reverse=True)[:top]:
            lines.append(
                f"{delta[key]:+9.3f}{prof.get(key, (0, 0, 0))[1]:9.3f}"
                f"{bare.get(key, (0, 0, 0))[1]:9.3f}  {_where(key)}"
            )
        lines.append(f"{sum(delta.values()):+9.3f}  total own-time difference")
    return "\n".join(lines)


def report(
    rows: list[dict[str, Any]], header: dict[str, Any], *, label: str = "plugin/bare"
) -> str:
    reference = rows[0]["loop"]
    width = max(21, *(len(r["loop"]) + 1 for r in rows))
    ratio_w = max(12, len(label) + 1)  # "moving/constant" is wider than the default column
    lines = [
        f"command: {header['command']}",
        f"{header['world_size']} rank(s), {header['threads']} torch thread(s) each, "
        f"micro-batch {header['micro_batch_size']} x GAS {header['gas']} x seq {MAX_SEQ_LEN}; "
        f"{header['rounds']} rounds of {header['block']}-step blocks per loop after "
        f"{header['warmup']} warm-up steps; medians over blocks, ratio = median over rounds",
        "",
        f"{'loop':<{width}}{'wall ms/step':>13}{'IQR':>15}{label:>{ratio_w}}"
        f"{'CPU ms/step':>13}{label:>{ratio_w}}{'target':>8}{'draw ms':>9}{'finish ms':>10}",
    ]
    for r in rows:
        w, c = r["wall"], r["cpu"]
        iqr = f"{w['q1_ms']:.1f}-{w['q3_ms']:.1f}"
        wall_ratio = f"{w['ratio']:.3f}" if "ratio" in w else ""
        cpu_ratio = f"{c['ratio']:.3f}" if "ratio" in c else ""
        target = f"≤{r['target']:g}" if "target" in r else ""
        draw = f"{r['draw']['median_ms']:.3f}" if "target" in r else ""
        finish = f"{r['finish']['median_ms']:.3f}" if "target" in r else ""
        lines.append(
            f"{r['loop']:<{width}}{w['median_ms']:>13.2f}{iqr:>15}{wall_ratio:>{ratio_w}}"
            f"{c['median_ms']:>13.2f}{cpu_ratio:>{ratio_w}}{target:>8}{draw:>9}{finish:>10}"
        )
    verdicts = []
    for r in rows:
        if "target" in r:
            worst = max(r["wall"]["ratio"], r["cpu"]["ratio"])
            api_ms = r["draw"]["median_ms"] + r["finish"]["median_ms"]
            if rows[0]["finish"]["median_ms"] > 0:  # against a plugin loop: the API's difference
                draw = r["draw"]["median_ms"] - rows[0]["draw"]["median_ms"]
                finish = r["finish"]["median_ms"] - rows[0]["finish"]["median_ms"]
                api = (
                    f"draw {draw:+.2f} ms, finish {finish:+.2f} ms = "
                    f"{100 * finish / rows[0]['cpu']['median_ms']:+.1f}% of {reference}'s CPU step"
                )
            else:
                api = (
                    f"draw + finish {api_ms:.2f} ms = "
                    f"{100 * api_ms / rows[0]['wall']['median_ms']:.1f}% of {reference}"
                )
            verdicts.append(
                f"{r['loop']} {r['wall']['ratio']:.3f} wall / {r['cpu']['ratio']:.3f} CPU "
                f"({'ok' if worst <= r['target'] else 'OVER'} ≤{r['target']:g}; {api})"
            )
    lines += [
        "",
        f"SUMMARY {label} step time: " + "; ".join(verdicts) + f"  [{header['command']}]",
    ]
    return "\n".join(lines)


# ---------------------------------------------------------------------------------- main
def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=300, help="timed optimizer steps per loop")
    parser.add_argument(
        "--block", type=int, default=5, help="steps per timed block (a multiple of 5)"
    )
    parser.add_argument("--warmup", type=int, default=10, help="untimed steps of each loop first")
    parser.add_argument(
        "--quick", action="store_true", help="a smoke run: one block of 5 steps, 1 warm-up"
    )
    parser.add_argument(
        "--num-gpus", type=int, default=1, help="ranks; > 1 runs under the deepspeed launcher"
    )
    parser.add_argument(
        "--profile",
        action="store_true",
        help="after the timing, cProfile each loop and show where the plugin's extra time goes",
    )
    parser.add_argument(
        "--profile-steps", type=int, default=50, help="steps per loop under --profile"
    )
    parser.add_argument(
        "--threads",
        type=int,
        default=1,
        help="torch threads per rank (default 1: what each of the demo's 2 CPU ranks gets)",
    )
    parser.add_argument(
        "--streams",
        action="store_true",
        help="per-stream accounting + monitors on vs off (issue 11) instead of plugin vs bare",
    )
    parser.add_argument(
        "--moving",
        action="store_true",
        help="proportion ramps + loss weights vs a constant mix (issue 22) instead",
    )
    parser.add_argument("--out", type=Path, default=None, help="work folder (data reused there)")
    parser.add_argument(
        "--prefetch",
        type=int,
        default=None,
        help="curriculum.prefetch_micro_batches of the plugin loops (default: the config default)",
    )
    parser.add_argument(
        "--json", type=Path, default=None, help="also write the figures and every block's times"
    )
    parser.add_argument("--data", type=Path, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--command", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--local_rank", type=int, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.quick:
        args.steps, args.block, args.warmup = 5, 5, 1
    if args.block < 1 or args.steps < args.block:
        parser.error(f"need 1 <= --block <= --steps, got {args.block} and {args.steps}")
    return args


def launch_ranks(args: argparse.Namespace, data: Path, command: str) -> int:
    """Run this script on ``--num-gpus`` CPU ranks under the deepspeed launcher."""
    from curriculum_ds.commands.launch import launcher_env
    from curriculum_ds.distributed import free_port, venv_bin_dir

    forwarded = [a for a in sys.argv[1:] if not a.startswith("--num-gpus")]
    if "--num-gpus" in sys.argv:  # "--num-gpus N" as two words
        at = sys.argv.index("--num-gpus")
        forwarded = sys.argv[1:at] + sys.argv[at + 2 :]
    cmd = [
        str(venv_bin_dir() / "deepspeed"),
        "--num_gpus",
        str(args.num_gpus),
        "--master_port",
        str(free_port()),
        str(Path(__file__).resolve()),
        *forwarded,
        "--data",
        str(data),
        "--command",
        command,
    ]
    env = launcher_env(cuda=False)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO / "python"), env.get("PYTHONPATH")]))
    return subprocess.run(cmd, env=env, check=False).returncode


def main() -> int:
    global PREFETCH
    args = parse_args()
    PREFETCH = args.prefetch
    command = args.command or shlex.join([Path(sys.executable).name, *sys.argv])
    tmp = None
    if args.data is None:
        if args.out is None:
            tmp = tempfile.TemporaryDirectory(prefix="bench_plugin_")
            out = Path(tmp.name)
        else:
            out = args.out.resolve()
            out.mkdir(parents=True, exist_ok=True)
        data = build_data(out)
        if args.streams or args.moving:
            build_data(out, name=second_stream(data).name, seed=1)
        if args.num_gpus > 1:
            code = launch_ranks(args, data, command)
            if tmp is not None:
                tmp.cleanup()
            return code
    else:
        data = args.data

    from curriculum_ds.distributed import prepare_environment

    prepare_environment()  # before torch/DeepSpeed read their environment (a world of one here)
    import torch
    import torch.distributed as dist

    torch.set_num_threads(args.threads)
    if args.moving:
        variants, targets, label = MOVING_VARIANTS, MOVING_TARGETS, "moving/constant"
        loops = build_moving_loops(data)
    elif args.streams:
        variants, targets, label = STREAM_VARIANTS, STREAM_TARGETS, "on/off"
        monitor_dir = Path(tempfile.mkdtemp(prefix="bench_monitors_", dir=data.parent))
        loops = build_stream_loops(data, monitor_dir=monitor_dir)
    else:
        variants, targets, label = VARIANTS, TARGETS, "plugin/bare"
        loops = build_loops(data, num_distinct=16)
    times = measure(loops, steps=args.steps, block=args.block, warmup=args.warmup)
    profile = None
    if args.profile:
        profiles = {
            name: profile_loop(loop, steps=args.profile_steps) for name, loop in loops.items()
        }
        profile = profile_report(profiles, steps=args.profile_steps, variants=variants)
    for loop in loops.values():
        if isinstance(loop, PluginLoop):
            loop.curriculum.close()
    if dist.get_rank() == 0:
        run = loops[variants[1]].curriculum
        header = {
            "command": command,
            "world_size": dist.get_world_size(),
            "threads": torch.get_num_threads(),
            "micro_batch_size": run.micro_batch_size,
            "gas": run.gradient_accumulation_steps,
            "rounds": len(times["wall"][variants[0]]),
            "block": args.block,
            "warmup": args.warmup,
        }
        rows = summarize(times, variants, targets)
        if args.json is not None:
            args.json.write_text(json.dumps({**header, "rows": rows, "block_ms": times}, indent=2))
        print(report(rows, header, label=label))
        if profile is not None:
            print("\n" + profile)
    if tmp is not None:
        tmp.cleanup()
    return 0


if __name__ == "__main__":
    sys.exit(main())
