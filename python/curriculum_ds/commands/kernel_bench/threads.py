"""One thread against every core: the kernels that run on the thread pool (issue 23 item 3).

At each size ``N``: exact edges (16 buckets) + assignment of ``N`` float32 lognormal(0, 1) values
(the window's own values, as a re-weighting recompute assigns them), the rolling window's edges
(``N`` up to its 10^7 capacity) and the alias-table build of ``N`` float64 weights (up to 2e7),
each with one thread and with every CPU this process may use, alternated call by call so that
both see the same machine load; medians. At ``N >= 1e8`` also the peak memory of edges + assign
in a fresh process, as a multiple of the input's bytes.
"""

from __future__ import annotations

import json
import os
import resource
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from curriculum_ds import kernels as K

__all__ = ["all_cpus", "format_threads", "peak_memory", "thread_rows"]

WINDOW_LIMIT = 10_000_000  # RollingWindow's largest capacity
ALIAS_LIMIT = 20_000_000  # the weights alone are 8 bytes each


def all_cpus() -> int:
    """The CPUs this process may run on (its affinity mask)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def _alternated(fn: Callable[[], object], threads: tuple[int, int], repeats: int) -> list[float]:
    """Median seconds of ``fn`` under each thread count, calls alternated after a warm-up."""
    times: dict[int, list[float]] = {t: [] for t in threads}
    try:
        for t in threads:
            K.set_num_threads(t)
            fn()
        for _ in range(max(repeats, 1)):
            for t in threads:
                K.set_num_threads(t)
                t0 = time.perf_counter()
                fn()
                times[t].append(time.perf_counter() - t0)
    finally:
        K.set_num_threads(0)
    return [statistics.median(times[t]) for t in threads]


def thread_rows(sizes: list[int], repeats: int) -> list[dict[str, Any]]:
    """Rows ``case, n, threads, one_s, all_s, speedup`` (plus ``peak_x_input`` at 1e8)."""
    cpus = all_cpus()
    rows: list[dict[str, Any]] = []
    for n in sizes:
        values = np.random.default_rng(0).lognormal(0.0, 1.0, n).astype(np.float32)
        window = K.RollingWindow(min(n, WINDOW_LIMIT))

        def edges_assign(values: np.ndarray = values) -> None:
            K.assign_buckets(values, K.bucket_edges(values, 16))

        cases: list[tuple[str, Callable[[], object]]] = [("edges+assign", edges_assign)]
        if n <= WINDOW_LIMIT:
            window.push(values)

            def window_edges(w: K.RollingWindow = window) -> object:
                return w.edges(16)

            cases.append(("RollingWindow edges", window_edges))
        if n <= ALIAS_LIMIT:
            weights = values.astype(np.float64)

            def alias(w: np.ndarray = weights) -> object:
                return K.WeightedSampler(w, 1)

            cases.append(("alias table build", alias))
        for case, fn in cases:
            one, every = _alternated(fn, (1, cpus), repeats)
            rows.append(
                {
                    "case": case,
                    "n": n,
                    "threads": cpus,
                    "one_s": one,
                    "all_s": every,
                    "speedup": one / every,
                }
            )
        del values
        if n >= 100_000_000:
            rows[-len(cases)]["peak_x_input"] = peak_memory(n)
    return rows


def peak_memory(n: int) -> float:
    """Peak RSS added by edges + assign of ``n`` float32 values, over the input's bytes.

    Measured in a fresh interpreter (:func:`_peak_here`): peak RSS after the
    call minus the RSS with the input allocated (its ``int64`` output alone is ``2×``),
    divided by ``4 n``.
    """
    out = subprocess.run(
        [
            sys.executable,
            "-c",
            f"import json, {__name__} as t; print(json.dumps(t._peak_here({n})))",
        ],
        check=True,
        capture_output=True,
        text=True,
    )
    return float(json.loads(out.stdout.strip().splitlines()[-1])["peak_x_input"])


def _rss_bytes() -> int:
    with open("/proc/self/statm", encoding="ascii") as fh:
        return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _high_water_bytes() -> int:
    """This process's peak RSS in bytes (``VmHWM`` of ``/proc/self/status``).

    Not ``getrusage``'s ``ru_maxrss``: Linux carries that over from the parent across fork and
    exec, so the child of a large bench process read 8.4× the input.
    """
    with open("/proc/self/status", encoding="ascii") as fh:
        for line in fh:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # no /proc: the estimate


def _peak_here(n: int) -> dict[str, float]:
    # lognormal float32 drawn without a float64 temporary, so the peak so far is the input's
    values = np.random.default_rng(0).standard_normal(n, dtype=np.float32)
    np.exp(values, out=values)
    before = _rss_bytes()
    start = time.perf_counter()
    out = K.assign_buckets(values, K.bucket_edges(values, 16))
    seconds = time.perf_counter() - start
    peak = _high_water_bytes()
    del out
    return {"peak_x_input": (peak - before) / values.nbytes, "seconds": seconds}


def format_threads(rows: list[dict[str, Any]]) -> str:
    """The table: one thread, all threads, speed-up."""
    if not rows:
        return ""
    lines = ["", f"{'thread pool case':<28} {'N':>11} {'1 thread ms':>12} {'all ms':>10} "
             f"{'threads':>8} {'speed-up':>9}"]  # fmt: skip
    for r in rows:
        peak = f"  peak {r['peak_x_input']:.2f}x input" if "peak_x_input" in r else ""
        lines.append(
            f"{r['case']:<28} {r['n']:>11} {r['one_s'] * 1e3:>12.2f} {r['all_s'] * 1e3:>10.2f} "
            f"{r['threads']:>8} {r['speedup']:>8.2f}x{peak}"
        )
    return "\n".join(lines)
