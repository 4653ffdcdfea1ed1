"""Overhead of dynamic re-weighting on the demo: ``python bench/bench_dynamic_overhead.py``.

Issue 6, item 9: the whole dynamic machinery may add at most 2% to the demo's step time on 2 CPU
ranks. One invocation measures it two ways, on the same data and schedule:

1. **End to end.** The demo's ds_config (stdlib corpus, two phases, 2 ranks under the deepspeed
   launcher) is run with ``curriculum.dynamic.enabled`` off and on, interleaved ABBA over
   ``--pairs`` pairs so that a drifting machine load hits both alike. The figure is the mean
   wall time per optimizer step and per 1k non-padding tokens (``step_tokens / tokens_per_s``
   from ``metrics.jsonl``), leaving out the first ``--warmup`` steps of each run. With dynamic on
   the sampler favours other (harder, longer) samples, so per-step time also moves with the data,
   not only with the machinery; time per token is the fairer end-to-end number.
2. **In-run profile** (the headline figure). A ``sitecustomize.py`` put on the ranks'
   ``PYTHONPATH`` times, inside every rank of the same runs, ``BucketReweighter.observe``,
   ``maybe_recompute``, ``start_phase``, the training loop's ``all_gather`` of per-sample losses
   and ``PhaseLoader.next_global_batch`` (its extra time over the dynamic-off runs' mean per call
   is the bucketed sampler's cost). Their sum over the run's summed step wall time is the
   overhead under exactly the load the runs saw, free of the data effect.
3. **The machinery alone**, in this process on the same data: per step, the bucketed
   ``next_global_batch`` (B buckets vs 1), ``observe`` and ``maybe_recompute`` (amortised), plus
   one ``all_gather`` of the step's per-sample losses between 2 gloo processes. Its sum over the
   mean step time of the dynamic-off runs is the overhead with the data effect removed.

4. **Units and signals side by side** (``--units``, issue 20): every ``dynamic.unit`` ×
   ``signal`` (:mod:`dynamic_units`) timed in this process, interleaved, against
   ``buckets/loss``; each one's extra per step as a share of the dynamic-on runs' mean step
   (target ≤ 0.5%).

Example: ``python bench/bench_dynamic_overhead.py --max-duration 120000 --pairs 1 --json``.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
from dynamic_units import add_reference_column, print_units, time_units, units_report

from curriculum_ds.commands.demo import build_demo_data, demo_ds_config
from curriculum_ds.commands.launch import build_command, launcher_env
from curriculum_ds.config import CurriculumConfig
from curriculum_ds.core.loader import PhaseLoader
from curriculum_ds.data import read_stream_info
from curriculum_ds.dynamic import BucketReweighter
from curriculum_ds.records.jsonl import read_jsonl

REPO = Path(__file__).resolve().parents[1]


# ---------------------------------------------------------------------------------- data
def build_data(out: Path, max_docs: int | None = None) -> Path:
    """The demo's datamixes (``train/`` and ``val/``: ``docstrings``, ``code``), reused when
    already prepared; ``max_docs``: a cut of at most that many documents per mix (a smoke run),
    in ``out/max-docs-N`` so that a full run in the same ``out`` never reuses it."""
    if max_docs is None:
        return build_demo_data(out)
    return build_demo_data(out / f"max-docs-{max_docs}", max_docs=max_docs)


def write_config(out: Path, data_dir: Path, *, max_duration: int, dynamic: bool) -> Path:
    config = demo_ds_config(data_dir, max_duration=max_duration, cuda=False)
    config["curriculum"]["dynamic"]["enabled"] = dynamic
    path = out / f"ds_dynamic_{'on' if dynamic else 'off'}.json"
    path.write_text(json.dumps(config, indent=2))
    return path


# ------------------------------------------------------------------------ in-run profile
PROFILE_HOOK = r"""
# Written by bench/bench_dynamic_overhead.py: times the dynamic machinery inside each rank.
import atexit, json, os, sys, time

_out = os.environ.get("CDS_PROFILE_DIR")
if _out:
    _acc = {}

    def _add(key, dt):
        total, count = _acc.get(key, (0.0, 0))
        _acc[key] = (total + dt, count + 1)

    def _timed(owner, name, key):
        fn = getattr(owner, name)

        def wrapper(*args, **kwargs):
            t = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                _add(key, time.perf_counter() - t)

        setattr(owner, name, wrapper)

    from curriculum_ds.dynamic import BucketReweighter
    from curriculum_ds.core.loader import PhaseLoader
    import torch.distributed as _dist

    _timed(BucketReweighter, "observe", "observe")
    _timed(BucketReweighter, "maybe_recompute", "maybe_recompute")
    _timed(BucketReweighter, "start_phase", "start_phase")
    _timed(PhaseLoader, "next_global_batch", "next_global_batch")
    _all_gather = _dist.all_gather

    def _gather(*args, **kwargs):
        # only the training loop's gather of per-sample losses (the dynamic machinery's)
        mine = sys._getframe(1).f_code.co_filename.endswith("train.py")
        t = time.perf_counter()
        try:
            return _all_gather(*args, **kwargs)
        finally:
            if mine:
                _add("all_gather", time.perf_counter() - t)

    _dist.all_gather = _gather

    @atexit.register
    def _dump():
        if not _acc:  # the launcher processes inherit this hook too; only ranks record anything
            return
        name = f"rank{os.environ.get('RANK', '0')}_pid{os.getpid()}.json"
        with open(os.path.join(_out, name), "w") as f:
            json.dump({k: {"total_s": v[0], "calls": v[1]} for k, v in _acc.items()}, f)
"""


def write_profile_hook(out: Path) -> Path:
    """A folder with a ``sitecustomize.py`` that times the machinery in every rank it starts in."""
    folder = out / "profile_hook"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "sitecustomize.py").write_text(PROFILE_HOOK)
    return folder


def read_profile(folder: Path) -> dict[str, dict[str, dict[str, float]]]:
    profiles = {p.stem: json.loads(p.read_text()) for p in sorted(folder.glob("rank*.json"))}
    if not profiles:
        sys.exit(f"{folder}: no rank wrote a profile (was the sitecustomize hook imported?)")
    return profiles


# ---------------------------------------------------------------------------- end to end
def run_once(
    config: Path, run_dir: Path, *, num_gpus: int, hook: Path | None = None
) -> tuple[list[str], float]:
    """Launch one training run; returns the command and its wall time (s).

    With ``hook`` (a folder holding the profiling ``sitecustomize.py``), each rank writes its
    timings to ``run_dir/profile/rank{k}.json``.
    """
    shutil.rmtree(run_dir, ignore_errors=True)
    cmd = build_command(
        config,
        num_gpus=num_gpus,
        train_args=["--run-dir", str(run_dir), "--no-progress", "--trace-samples"],
    )
    env = launcher_env(cuda=False)
    paths = [str(hook) if hook else "", str(REPO / "python"), env.get("PYTHONPATH", "")]
    env["PYTHONPATH"] = os.pathsep.join(p for p in paths if p)
    if hook is not None:
        (run_dir / "profile").mkdir(parents=True, exist_ok=True)
        env["CDS_PROFILE_DIR"] = str(run_dir / "profile")
    for attempt in range(3):
        start = time.perf_counter()
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, cwd=config.parent)
        wall = time.perf_counter() - start
        # streaming picks a shared-memory prefix per job; two jobs starting at the same moment on
        # one machine can race for it ("File exists"): start again
        if proc.returncode == 0 or "File exists" not in proc.stderr or attempt == 2:
            break
        shutil.rmtree(run_dir / "checkpoints", ignore_errors=True)
        for name in ("metrics.jsonl", "curriculum_history.jsonl"):
            (run_dir / name).unlink(missing_ok=True)
    (run_dir.parent / f"{run_dir.name}.log").write_text(proc.stdout + proc.stderr)
    if proc.returncode != 0:
        sys.exit(f"run failed ({proc.returncode}): {shlex.join(cmd)}\n{proc.stderr[-3000:]}")
    return cmd, wall


def padded_tokens(config: Path, run_dir: Path, num_ranks: int) -> dict[int, int]:
    """Per step, the tokens the model really processed: padding included.

    From ``sample_trace.jsonl``: each rank's contiguous slice of the global batch is cut into
    micro-batches, and each micro-batch is padded to its longest sample (``collate``).
    """
    raw = json.loads(config.read_text())
    cfg = CurriculumConfig.model_validate(raw["curriculum"])
    micro = raw["train_micro_batch_size_per_gpu"]
    lengths: dict[tuple[int, str], Any] = {}
    for phase_idx, phase in enumerate(cfg.schedule):
        for stream in phase.train_loader.streams:
            info = read_stream_info(stream.local)
            column = np.asarray(info.metrics["num_tokens"], dtype=np.int64)
            name = stream.name or Path(stream.local).name
            lengths[phase_idx, name] = np.minimum(column, phase.train_loader.max_seq_len)
    out = {}
    for rec in read_jsonl(run_dir / "sample_trace.jsonl"):
        lens = np.array([lengths[rec["phase"], s][i] for s, i in rec["samples"]])
        per_rank = len(lens) // num_ranks
        total = 0
        for start in range(0, num_ranks * per_rank, micro):
            chunk = lens[start : start + micro]
            total += len(chunk) * int(chunk.max())
        out[int(rec["step"])] = total
    return out


def step_times(run_dir: Path, warmup: int, padded: dict[int, int]) -> dict[str, Any]:
    """Per-step wall times (s), s per 1k tokens and per 1k padded tokens, after ``warmup`` steps."""
    all_rows = read_jsonl(run_dir / "metrics.jsonl")
    rows = all_rows[warmup:]
    if len(rows) < 3:
        sys.exit(f"{run_dir}: only {len(rows)} steps after warm-up; raise --max-duration")
    seconds = [r["step_tokens"] / r["tokens_per_s"] for r in rows]
    per_1k = [1000 / r["tokens_per_s"] for r in rows]
    per_1k_padded = [1000 * t / padded[r["step"]] for t, r in zip(seconds, rows, strict=True)]
    return {
        "steps": len(rows),
        "step_s": seconds,
        "s_per_1k_tok": per_1k,
        "s_per_1k_padded_tok": per_1k_padded,
        "step_tokens": [r["step_tokens"] for r in rows],
        "step_padded_tokens": [padded[r["step"]] for r in rows],
        # every step, warm-up included: what the in-run profile's totals are divided by
        "all_step_s": sum(r["step_tokens"] / r["tokens_per_s"] for r in all_rows),
    }


# ------------------------------------------------------------------------- the machinery
def _gather_worker(rank: int, init: str, values: int, iters: int, out: str) -> None:
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=2)
    local = torch.full((values,), float(rank), dtype=torch.float64)
    for _ in range(20):
        dist.all_gather([torch.empty_like(local) for _ in range(2)], local)
    dist.barrier()
    start = time.perf_counter()
    for _ in range(iters):
        gathered = [torch.empty_like(local) for _ in range(2)]
        dist.all_gather(gathered, local)
        torch.cat(gathered).numpy()
    elapsed = (time.perf_counter() - start) / iters
    if rank == 0:
        Path(out).write_text(str(elapsed))
    dist.destroy_process_group()


def time_all_gather(per_rank: int, iters: int = 300) -> float:
    """Seconds per ``all_gather`` of ``per_rank`` float64 values between 2 gloo processes."""
    import torch.multiprocessing as mp

    with tempfile.TemporaryDirectory() as tmp:
        init = f"file://{tmp}/store"
        out = f"{tmp}/result"
        mp.spawn(_gather_worker, args=(init, per_rank, iters, out), nprocs=2, join=True)
        return float(Path(out).read_text())


def time_machinery(config_path: Path, *, steps: int, dp_world_size: int = 2) -> dict[str, float]:
    """Per-step cost (s) of each part of the dynamic machinery on the demo's data and config."""
    raw = json.loads(config_path.read_text())
    cfg = CurriculumConfig.model_validate(raw["curriculum"])
    global_batch = (
        raw["train_micro_batch_size_per_gpu"] * raw["gradient_accumulation_steps"] * dp_world_size
    )
    dyn_cfg = cfg.dynamic
    rng = np.random.default_rng(0)
    totals = {"batch_on": 0.0, "batch_off": 0.0, "observe": 0.0, "recompute": 0.0}
    counted = 0
    for phase_idx, phase in enumerate(cfg.schedule):
        on = PhaseLoader(phase, phase_idx, seed=cfg.seed, num_buckets=dyn_cfg.num_buckets)
        off = PhaseLoader(phase, phase_idx, seed=cfg.seed, num_buckets=1)
        dyn = BucketReweighter(dyn_cfg)
        t = time.perf_counter()
        on.apply(dyn.start_phase(on.view(), None))  # once per phase: counted into recompute
        totals["recompute"] += time.perf_counter() - t
        for step in range(1, steps + 1):
            t0 = time.perf_counter()
            batch = on.next_global_batch(global_batch, dyn.probs)
            t1 = time.perf_counter()
            off.next_global_batch(global_batch, None)
            t2 = time.perf_counter()
            losses = rng.gamma(4.0, 0.6, size=global_batch)
            losses[rng.random(global_batch) < 0.01] = np.nan
            t3 = time.perf_counter()
            dyn.observe(batch, losses)
            t4 = time.perf_counter()
            update = dyn.maybe_recompute(step)
            if update is not None:
                on.apply(update)  # as the curriculum applies it
            t5 = time.perf_counter()
            totals["batch_on"] += t1 - t0
            totals["batch_off"] += t2 - t1
            totals["observe"] += t4 - t3
            totals["recompute"] += t5 - t4
            counted += 1
        on.close()
        off.close()
    per_step = {k: v / counted for k, v in totals.items()}
    per_step["sampler_extra"] = per_step["batch_on"] - per_step["batch_off"]
    per_step["all_gather"] = time_all_gather(global_batch // dp_world_size)
    per_step["total"] = (
        per_step["sampler_extra"]
        + per_step["observe"]
        + per_step["recompute"]
        + per_step["all_gather"]
    )
    per_step["global_batch"] = global_batch
    return per_step


def in_run_overhead(results: dict[bool, list[dict[str, Any]]]) -> dict[str, Any]:
    """The machinery's share of the step, timed inside the ranks of the same runs.

    Per rank of each dynamic-on run: (observe + maybe_recompute + start_phase + the loss
    all_gather + the extra time of the bucketed next_global_batch over the dynamic-off runs' mean
    per call) / the run's whole-step wall time (sum over its metrics.jsonl steps). The worst rank
    and run is reported, with the mean.
    """
    off_batch = [
        prof["next_global_batch"]["total_s"] / prof["next_global_batch"]["calls"]
        for r in results[False]
        for prof in r["profile"].values()
        if "next_global_batch" in prof
    ]
    off_per_call = statistics.fmean(off_batch) if off_batch else 0.0
    shares, parts = [], []
    for r in results[True]:
        step_total = r["all_step_s"]
        for prof in r["profile"].values():
            get = lambda key, p=prof: p.get(key, {"total_s": 0.0, "calls": 0})  # noqa: E731
            batch = get("next_global_batch")
            machinery = {
                "observe": get("observe")["total_s"],
                "maybe_recompute": get("maybe_recompute")["total_s"],
                "start_phase": get("start_phase")["total_s"],
                "all_gather": get("all_gather")["total_s"],
                "sampler_extra": batch["total_s"] - off_per_call * batch["calls"],
            }
            steps = max(1, get("observe")["calls"])
            parts.append({k: 1e3 * v / steps for k, v in machinery.items()})
            shares.append(100 * sum(machinery.values()) / step_total)
    if not shares:
        return {}
    mean_parts = {k: statistics.fmean(p[k] for p in parts) for k in parts[0]}
    return {
        "overhead_pct_max": max(shares),
        "overhead_pct_mean": statistics.fmean(shares),
        "per_step_ms": {k: round(v, 4) for k, v in mean_parts.items()},
        "per_step_total_ms": round(sum(mean_parts.values()), 4),
    }


# ---------------------------------------------------------------------------------- main
def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--out",
        type=Path,
        default=None,
        help="work folder (data is reused there); default: a temporary folder",
    )
    parser.add_argument(
        "--max-duration", type=int, default=120_000, help="tokens per run (global, non-padding)"
    )
    parser.add_argument("--pairs", type=int, default=1, help="off/on pairs, run ABBA-interleaved")
    parser.add_argument("--warmup", type=int, default=5, help="first steps of each run left out")
    parser.add_argument("--num-gpus", type=int, default=2, help="ranks (CPU ranks without CUDA)")
    parser.add_argument(
        "--machinery-steps",
        type=int,
        default=400,
        help="steps per phase of the in-process machinery timing",
    )
    parser.add_argument("--skip-runs", action="store_true", help="only the in-process timing")
    parser.add_argument(
        "--max-docs",
        type=int,
        default=None,
        help="documents per mix of the demo's corpus (a smoke run; default: the whole corpus)",
    )
    parser.add_argument(
        "--units",
        action="store_true",
        help="also time each dynamic.unit x signal side by side against buckets/loss (issue 20)",
    )
    parser.add_argument(
        "--step-ms",
        type=float,
        default=None,
        help="with --units --skip-runs: the step time (ms) the units' extra is a share of",
    )
    parser.add_argument("--json", action="store_true", help="print JSON instead of a report")
    args = parser.parse_args()

    tmp = None
    if args.out is None:
        tmp = tempfile.TemporaryDirectory(prefix="bench_dynamic_")
        out = Path(tmp.name)
    else:
        out = args.out.resolve()
        out.mkdir(parents=True, exist_ok=True)
    data_dir = build_data(out, args.max_docs)
    configs = {
        flag: write_config(out, data_dir, max_duration=args.max_duration, dynamic=flag)
        for flag in (False, True)
    }
    report: dict[str, Any] = {
        "command": shlex.join([sys.executable, *sys.argv]),
        "max_duration_tokens": args.max_duration,
        "pairs": args.pairs,
        "warmup_steps": args.warmup,
        "num_ranks": args.num_gpus,
    }

    if not args.skip_runs:
        hook = write_profile_hook(out)
        results: dict[bool, list[dict[str, Any]]] = {False: [], True: []}
        order = []
        for pair in range(args.pairs):
            order += [False, True] if pair % 2 == 0 else [True, False]
        for i, flag in enumerate(order):
            run_dir = out / f"run{i}_{'on' if flag else 'off'}"
            cmd, wall = run_once(configs[flag], run_dir, num_gpus=args.num_gpus, hook=hook)
            padded = padded_tokens(configs[flag], run_dir, args.num_gpus)
            stats = step_times(run_dir, args.warmup, padded)
            stats["profile"] = read_profile(run_dir / "profile")
            stats["wall_s"] = wall
            stats["command"] = shlex.join(cmd)
            results[flag].append(stats)
            if not args.json:
                print(
                    f"  run {i + 1}/{len(order)} dynamic {'on ' if flag else 'off'}: "
                    f"{stats['steps']} steps, mean step {statistics.fmean(stats['step_s']):.4f} s, "
                    f"{statistics.fmean(stats['s_per_1k_tok']):.4f} s/1k tok",
                    file=sys.stderr,
                )

        def pooled(flag: bool, key: str) -> list[float]:
            return [x for r in results[flag] for x in r[key]]

        summary = {}
        for key in ("step_s", "s_per_1k_tok", "s_per_1k_padded_tok"):
            off, on = pooled(False, key), pooled(True, key)
            summary[key] = {
                "off_mean": statistics.fmean(off),
                "on_mean": statistics.fmean(on),
                "off_median": statistics.median(off),
                "on_median": statistics.median(on),
                "overhead_pct_mean": 100 * (statistics.fmean(on) / statistics.fmean(off) - 1),
                "overhead_pct_median": 100 * (statistics.median(on) / statistics.median(off) - 1),
            }
        summary["mean_step_padded_tokens"] = {
            "off": statistics.fmean(pooled(False, "step_padded_tokens")),
            "on": statistics.fmean(pooled(True, "step_padded_tokens")),
        }
        summary["mean_step_tokens"] = {
            "off": statistics.fmean(pooled(False, "step_tokens")),
            "on": statistics.fmean(pooled(True, "step_tokens")),
        }
        report["end_to_end"] = summary
        report["in_run"] = in_run_overhead(results)
        report["launch_commands"] = {
            "off": results[False][0]["command"],
            "on": results[True][0]["command"],
        }

    # after the runs: the loaders below keep streaming's shared memory for the data folders for
    # the life of this process, and ranks launched later would collide with it
    machinery = time_machinery(configs[True], steps=args.machinery_steps)
    report["machinery_per_step_ms"] = {
        k: round(v * 1e3, 4) for k, v in machinery.items() if k != "global_batch"
    }

    if "end_to_end" in report:
        off_step = report["end_to_end"]["step_s"]["off_mean"]
        report["machinery_overhead_pct"] = 100 * machinery["total"] / off_step
    if args.units:  # issue 20: every unit x signal against buckets/loss, on the same data
        add_reference_column(configs[True])
        timing = time_units(configs[True], steps=args.machinery_steps)
        step_s = (
            report["end_to_end"]["step_s"]["on_mean"]
            if "end_to_end" in report
            else None
            if args.step_ms is None
            else args.step_ms / 1e3
        )
        report["units"] = units_report(timing, step_s)
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        print(f"command: {report['command']}")
        m = report["machinery_per_step_ms"]
        print(
            f"machinery per step (global batch {machinery['global_batch']}): "
            f"sampler extra {m['sampler_extra']:.3f} ms, observe {m['observe']:.3f} ms, "
            f"recompute (amortised) {m['recompute']:.3f} ms, all_gather {m['all_gather']:.3f} ms"
            f" = {m['total']:.3f} ms"
        )
        if "end_to_end" in report:
            e = report["end_to_end"]
            print(f"launch (dynamic on): {report['launch_commands']['on']}")
            print(
                f"mean step time: off {e['step_s']['off_mean']:.4f} s, "
                f"on {e['step_s']['on_mean']:.4f} s "
                f"({e['step_s']['overhead_pct_mean']:+.2f}%; medians "
                f"{e['step_s']['overhead_pct_median']:+.2f}%)"
            )
            print(
                f"time per 1k tokens: off {e['s_per_1k_tok']['off_mean']:.4f} s, "
                f"on {e['s_per_1k_tok']['on_mean']:.4f} s "
                f"({e['s_per_1k_tok']['overhead_pct_mean']:+.2f}%; medians "
                f"{e['s_per_1k_tok']['overhead_pct_median']:+.2f}%)"
            )
            print(
                f"time per 1k padded tokens (the work done): "
                f"off {e['s_per_1k_padded_tok']['off_mean']:.4f} s, "
                f"on {e['s_per_1k_padded_tok']['on_mean']:.4f} s "
                f"({e['s_per_1k_padded_tok']['overhead_pct_mean']:+.2f}%; medians "
                f"{e['s_per_1k_padded_tok']['overhead_pct_median']:+.2f}%)"
            )
            print(
                f"mean padded tokens per step: off {e['mean_step_padded_tokens']['off']:.0f}, "
                f"on {e['mean_step_padded_tokens']['on']:.0f}"
            )
            print(
                f"mean tokens per step: off {e['mean_step_tokens']['off']:.0f}, "
                f"on {e['mean_step_tokens']['on']:.0f} (the weights change the data)"
            )
            r = report["in_run"]
            if r:
                m = r["per_step_ms"]
                print(
                    "in-run machinery per step (timed inside the ranks): "
                    + ", ".join(f"{k} {v:.3f} ms" for k, v in m.items())
                    + f" = {r['per_step_total_ms']:.3f} ms"
                )
                print(
                    f"DYNAMIC OVERHEAD (in-run): {r['overhead_pct_mean']:.3f}% of the step time "
                    f"(worst rank/run {r['overhead_pct_max']:.3f}%; target ≤ 2%)"
                )
            print(
                f"in-process machinery cost / mean step (off): "
                f"{report['machinery_overhead_pct']:.3f}%"
            )
    if "units" in report and not args.json:
        print_units(report["units"])
    if tmp is not None:
        tmp.cleanup()


if __name__ == "__main__":
    main()
