"""Side-by-side benchmarks of the Rust kernels and their numpy / torch counterparts.

Every case runs each implementation on the same data in the same process, one thread
(``torch.set_num_threads(1)``; the Rust kernels' pool at its thread count, one thread on inputs
below 2^20), and reports the median,
min and max wall time of ``repeats`` calls after one warm-up call, the time per element, and the
ratio ``other median / curriculum_ds median`` (above 1: ``curriculum_ds`` is faster).

Data: window and queries are independent float32 lognormal(0, 1) draws of size ``N = M``;
weights are float64 U(0.01, 1.01); all from ``np.random.default_rng`` with fixed seeds (no
global RNG is touched). Benchmarks are not tests: they measure, they do not assert.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np

from curriculum_ds.commands.kernel_bench.cases import (
    LARGE_N,
    OURS,
    PENDING,
    beyond_2_24,
    bucket_sampler,
    bucketing,
    flush,
    rolling_window,
    with_replacement,
    without_replacement,
)
from curriculum_ds.commands.kernel_bench.report import check_targets, format_table, format_targets
from curriculum_ds.commands.kernel_bench.threads import all_cpus, format_threads, thread_rows

__all__ = ["OURS", "check_targets", "format_table", "format_targets", "run"]


def run(
    sizes: list[int], as_json: bool, repeats: int = 5, *, extras: bool = True
) -> dict[str, Any]:
    """Run every benchmark case at each size and print a table (or JSON).

    Args:
        sizes: window sizes / numbers of weights ``N`` (e.g. ``[10**6, 10**7]``). Cases that
            need it also run at 2^24 + 1 and the BucketSampler case always includes 1e7. Sizes
            above 2e7 (e.g. 1e8) run only the with-replacement draws. The thread-pool table
            (:mod:`~curriculum_ds.commands.kernel_bench.threads`: one thread vs every CPU) runs
            at every size.
        extras: also run the fixed-size cases (BucketSampler at 1e7, the 2^24 + 1 cases);
            ``False`` gives a quick smoke run.
        as_json: print JSON instead of a table.
        repeats: timed calls per measurement (after one warm-up); the slowest baselines
            (numpy ``choice(replace=False, p=)``) run once.

    Returns:
        ``{"meta": {...}, "rows": [...]}``; each row has ``case``, ``impl``, ``n``,
        ``median_s``, ``min_s``, ``max_s``, ``ns_per_el``, ``unit``, ``ratio`` (other / ours)
        and ``note``, or ``error`` when an implementation refused the input.
    """
    torch: Any
    try:
        import torch
    except ImportError:  # pragma: no cover - torch is a dependency, but keep the bench usable
        torch = None
    old_threads = torch.get_num_threads() if torch is not None else None
    if torch is not None:
        torch.set_num_threads(1)
    rows: list[dict[str, Any]] = []
    try:
        for n in sizes:
            if n > LARGE_N:
                with_replacement(rows, n, repeats, torch)
                flush()
                continue
            for group in (bucketing, with_replacement, without_replacement):
                group(rows, n, repeats, torch)
                flush()
            for other in (rolling_window, bucket_sampler):
                other(rows, n, repeats)
                flush()
        if extras:
            if 10_000_000 not in sizes:
                bucket_sampler(rows, 10_000_000, repeats)
                flush()
            beyond_2_24(rows, repeats, torch)
            flush()
    finally:
        PENDING.clear()
        if torch is not None and old_threads is not None:
            torch.set_num_threads(old_threads)
    threads = thread_rows(sizes, repeats)
    targets = check_targets(rows, threads)
    result: dict[str, Any] = {
        "meta": {
            "sizes": sizes,
            "repeats": repeats,
            "numpy": np.__version__,
            "torch": getattr(torch, "__version__", None),
            "threads": 1,
            "pool_threads": all_cpus(),
        },
        "rows": rows,
        "thread_rows": threads,
        "targets": targets,
    }
    if as_json:
        print(json.dumps(result, indent=2))
    else:
        print(format_table(rows))
        print(format_threads(threads))
        print(format_targets(targets))
    return result
