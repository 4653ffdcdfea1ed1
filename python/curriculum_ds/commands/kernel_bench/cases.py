"""The benchmark cases: each implementation on the same data, timed side by side.

See :mod:`curriculum_ds.commands.kernel_bench` for the method (one thread, median of ``repeats``
after a warm-up, ratio other / ours).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from curriculum_ds import kernels as K

__all__ = [
    "LARGE_N",
    "OURS",
    "PENDING",
    "beyond_2_24",
    "bucket_sampler",
    "bucketing",
    "flush",
    "rolling_window",
    "with_replacement",
    "without_replacement",
]

OURS = "curriculum_ds"
TORCH_CATEGORY_LIMIT = 2**24
#: Sizes above this only run the with-replacement case (e.g. N = 1e8: the weights alone are
#: 800 MB and the numpy/torch bucketing baselines would take minutes).
LARGE_N = 20_000_000


class _Case:
    """Rows of one case; the first implementation registered is the reference (ours).

    Implementations are registered with :meth:`measure` and timed by :meth:`finish`, each on
    its own (as benchmark harnesses do): one warm-up call, then its timed calls back to back.
    (Interleaving them round-robin was tried: it mostly added the baselines' side effects to our
    timings: their large temporaries evict our data from the caches, and freeing them returns
    memory to the OS, so our next output buffer is page-faulted in again, ~400 faults per 8 MB.)
    """

    def __init__(self, rows: list[dict[str, Any]], case: str, n: int, elements: int, unit: str):
        self.rows, self.case, self.n, self.elements, self.unit = rows, case, n, elements, unit
        self.pending: list[tuple[str, Callable[[], object], int, str]] = []
        PENDING.append(self)

    def measure(self, impl: str, fn: Callable[[], object], repeats: int, note: str = "") -> None:
        """Register ``fn`` for ``max(repeats, 1)`` timed calls."""
        self.pending.append((impl, fn, max(repeats, 1), note))

    def finish(self) -> None:
        """Time the registered implementations and append their rows."""
        times: dict[str, list[float]] = {}
        errors: dict[str, str] = {}
        for impl, fn, repeats, _ in self.pending:
            times[impl] = []
            try:
                fn()  # warm-up; a failing baseline (torch's 2^24 limit) is a result to report
            except Exception as exc:
                errors[impl] = f"{type(exc).__name__}: {exc}".splitlines()[0]
                continue
            for _ in range(repeats):
                t0 = time.perf_counter()
                fn()
                times[impl].append(time.perf_counter() - t0)
        ours: float | None = None
        for impl, _, _, note in self.pending:
            row: dict[str, Any] = {"case": self.case, "impl": impl, "n": self.n, "note": note}
            if impl in errors:
                row["error"] = errors[impl]
                self.rows.append(row)
                continue
            med = statistics.median(times[impl])
            if impl == OURS:
                ours = med
            row.update(
                {
                    "median_s": med,
                    "min_s": min(times[impl]),
                    "max_s": max(times[impl]),
                    "ns_per_el": med * 1e9 / self.elements,
                    "unit": self.unit,
                    "ratio": 1.0 if impl == OURS else (None if ours is None else med / ours),
                }
            )
            self.rows.append(row)
        self.pending = []


#: Cases registered but not yet timed (flushed by :func:`flush` after each group).
PENDING: list[_Case] = []


def flush() -> None:
    """Finish the pending cases: compute their ratios and append their rows."""
    while PENDING:
        PENDING.pop(0).finish()


def _compare_passes(queries: np.ndarray, edges: np.ndarray) -> np.ndarray:
    """One vectorised compare pass per edge (8x faster than searchsorted on few edges)."""
    acc = np.zeros(queries.size, dtype=np.int8)
    for e in edges:
        acc += queries >= e
    return acc


def _numpy_sort_bucketing(window: np.ndarray, queries: np.ndarray, b: int) -> np.ndarray:
    """Exact numpy pipeline: sort, take the order statistics, one compare pass per edge."""
    s = np.sort(window[np.isfinite(window)])
    n = s.size
    return _compare_passes(queries, s[[-(-j * n // b) - 1 for j in range(1, b)]])


def _numpy_partition_bucketing(window: np.ndarray, queries: np.ndarray, b: int) -> np.ndarray:
    """Exact numpy pipeline: multi-kth partition, the order statistics, compare passes."""
    finite = window[np.isfinite(window)]
    n = finite.size
    ks = [-(-j * n // b) - 1 for j in range(1, b)]
    return _compare_passes(queries, np.partition(finite, ks)[ks])


def bucketing(rows: list[dict[str, Any]], n: int, repeats: int, torch: Any) -> None:
    """Exact bucketing of N queries by B = 16 percentile edges of an N-window vs numpy/torch."""
    rng = np.random.default_rng(0)
    window = rng.lognormal(0.0, 1.0, n).astype(np.float32)
    queries = rng.lognormal(0.0, 1.0, n).astype(np.float32)
    b = 16
    qs = np.arange(1, b) / b
    case = _Case(rows, f"bucketing edges+assign B={b} (M=N)", n, n, "ns/value")
    case.measure(OURS, lambda: K.assign_buckets(queries, K.bucket_edges(window, b)), repeats)
    case.measure(
        "numpy quantile+searchsorted",
        lambda: np.searchsorted(np.quantile(window, qs), queries, side="right"),
        repeats,
        "interpolated quantiles: not exact",
    )
    case.measure(
        "numpy sort + compares",
        lambda: _numpy_sort_bucketing(window, queries, b),
        repeats,
        "exact",
    )
    case.measure(
        "numpy partition(kth) + compares",
        lambda: _numpy_partition_bucketing(window, queries, b),
        repeats,
        "exact",
    )
    if torch is not None:
        tw, tq = torch.from_numpy(window), torch.from_numpy(queries)
        tqs = torch.from_numpy(qs.astype(np.float32))
        case.measure(
            "torch quantile+bucketize",
            lambda: torch.bucketize(tq, torch.quantile(tw, tqs), right=True),
            repeats,
            "interpolated; fails beyond 2^24",
        )
    case.measure("numpy max (one read pass)", lambda: np.max(window), repeats, "floor")
    case.measure(
        "numpy full int64 (output write only)",
        lambda: np.full(n, 1, dtype=np.int64),
        repeats,
        "floor of the int64 output",
    )
    rolling = K.RollingWindow(n)
    rolling.push(window)
    case.measure(
        "curriculum_ds RollingWindow.edges+assign",
        lambda: K.assign_buckets(queries, rolling.edges(b)),
        repeats,
        "training path: push keeps the histogram",
    )

    edges_case = _Case(rows, f"edges only B={b}", n, n, "ns/value")
    edges_case.measure(OURS, lambda: K.bucket_edges(window, b), repeats)
    edges_case.measure(
        "numpy sort order stats",
        lambda: np.sort(window)[[-(-j * n // b) - 1 for j in range(1, b)]],
        repeats,
    )
    edges_case.measure("numpy quantile", lambda: np.quantile(window, qs), repeats)
    e = K.bucket_edges(window, b)
    assign_case = _Case(rows, f"assign only B={b}", n, n, "ns/value")
    assign_case.measure(OURS, lambda: K.assign_buckets(queries, e), repeats)
    assign_case.measure(
        "numpy searchsorted", lambda: np.searchsorted(e, queries, side="right"), repeats
    )


def rolling_window(rows: list[dict[str, Any]], n: int, repeats: int) -> None:
    """``RollingWindow.push`` (window full) and the training path ``edges`` + assign."""
    rng = np.random.default_rng(1)
    batch = 4096
    pushes = max(1, min(n, 1_000_000) // batch)
    data = rng.lognormal(0.0, 1.0, pushes * batch).astype(np.float32)
    win = K.RollingWindow(n)
    win.push(rng.lognormal(0.0, 1.0, n).astype(np.float32))  # full window: every push evicts
    batches = [data[i * batch : (i + 1) * batch] for i in range(pushes)]

    def push_all() -> None:
        for x in batches:
            win.push(x)

    ring = np.zeros(n, dtype=np.float32)

    def numpy_ring() -> None:
        pos = 0
        for x in batches:
            end = pos + x.size
            if end <= n:
                ring[pos:end] = x
            else:
                k = n - pos
                ring[pos:] = x[:k]
                ring[: end - n] = x[k:]
            pos = end % n

    name = f"RollingWindow push (batches of {batch}, full)"
    case = _Case(rows, name, n, pushes * batch, "ns/value")
    case.measure(OURS, push_all, repeats, "evict + insert + exact histogram")
    case.measure("numpy ring-buffer copy", numpy_ring, repeats, "copy only, no order statistics")
    b = 16
    edges = _Case(rows, f"RollingWindow edges B={b}", n, n, "ns/value")
    edges.measure(OURS, lambda: win.edges(b), repeats, "maintained histogram: one pass")
    values = win.values()
    edges.measure(
        "numpy sort order stats",
        lambda: np.sort(values)[[-(-j * n // b) - 1 for j in range(1, b)]],
        repeats,
    )


def with_replacement(
    rows: list[dict[str, Any]], n: int, repeats: int, torch: Any, draws: int = 1_000_000
) -> None:
    """N weighted draws with replacement over N weights vs ``torch.multinomial``/numpy."""
    rng = np.random.default_rng(2)
    weights = rng.uniform(0.01, 1.01, n)
    sampler = K.WeightedSampler(weights, 0)
    case = _Case(rows, f"weighted draws with replacement, {draws:.0e} draws", n, draws, "ns/draw")
    case.measure(OURS, lambda: sampler.sample(draws), repeats, "alias table, build excluded")
    if torch is not None:
        tw = torch.from_numpy(weights)
        gen = torch.Generator().manual_seed(0)
        case.measure(
            "torch.multinomial",
            lambda: torch.multinomial(tw, draws, replacement=True, generator=gen),
            repeats,
        )
    p = weights / weights.sum()
    npg = np.random.default_rng(0)
    big = n > LARGE_N
    case.measure(
        "numpy Generator.choice(p=)",
        lambda: npg.choice(n, draws, p=p),
        0 if big else repeats,
        "run once" if big else "",
    )
    build = _Case(rows, "WeightedSampler build (per weight)", n, n, "ns/weight")
    build.measure(
        OURS, lambda: K.WeightedSampler(weights, 0), 0 if big else max(1, repeats // 2), "Vose"
    )


def without_replacement(rows: list[dict[str, Any]], n: int, repeats: int, torch: Any) -> None:
    """Draws without replacement, k = N over N weights, vs numpy ``choice``/torch."""
    rng = np.random.default_rng(3)
    weights = rng.uniform(0.01, 1.01, n)
    k = min(n, 1_000_000)
    case = _Case(rows, f"without replacement k={k:.0e}", n, k, "ns/index")
    case.measure(OURS, lambda: K.sample_without_replacement(weights, k, 0), repeats, "E-S")
    if torch is not None and n <= TORCH_CATEGORY_LIMIT:
        tw = torch.from_numpy(weights)
        gen = torch.Generator().manual_seed(0)
        case.measure(
            "torch.multinomial(replacement=False)",
            lambda: torch.multinomial(tw, k, replacement=False, generator=gen),
            repeats,
        )
    p = weights / weights.sum()
    npg = np.random.default_rng(0)
    case.measure(
        "numpy Generator.choice(replace=False, p=)",
        lambda: npg.choice(n, k, replace=False, p=p),
        0,
        "run once",
    )


def _numpy_bucket_batch(
    lists: list[np.ndarray], cursors: list[int], probs: np.ndarray, k: int, g: np.random.Generator
) -> np.ndarray:
    """DeepSpeed-style: choose buckets, then consume pre-shuffled per-bucket lists."""
    picks = g.choice(len(lists), k, p=probs)
    out = np.empty(k, dtype=np.int64)
    for b in np.unique(picks):
        where = np.flatnonzero(picks == b)
        lst, c = lists[b], cursors[b]
        take = np.take(lst, np.arange(c, c + where.size) % lst.size)
        out[where] = take
        cursors[b] = (c + where.size) % lst.size
    return out


def bucket_sampler(rows: list[dict[str, Any]], n: int, repeats: int) -> None:
    """1024 indices from 16 buckets over N samples vs numpy choice + pre-shuffled lists."""
    rng = np.random.default_rng(4)
    b, k = 16, 1024
    idx = rng.integers(0, b, n)
    sampler = K.BucketSampler(idx, b, 0)
    probs = rng.uniform(0.5, 1.5, b)
    probs /= probs.sum()
    calls = 200
    case = _Case(rows, f"BucketSampler {k} indices, {b} buckets (per call)", n, calls, "ns/call")

    def ours() -> None:
        for _ in range(calls):
            sampler.sample(probs, k)

    case.measure(OURS, ours, repeats, "lazy per-bucket Fisher-Yates")
    g = np.random.default_rng(0)
    lists = [g.permutation(np.flatnonzero(idx == j)) for j in range(b)]
    cursors = [0] * b

    def numpy_batches() -> None:
        for _ in range(calls):
            _numpy_bucket_batch(lists, cursors, probs, k, g)

    case.measure("numpy choice + pre-shuffled lists", numpy_batches, repeats, "shuffles excluded")
    build = _Case(rows, "BucketSampler build", n, n, "ns/sample")
    build.measure(OURS, lambda: K.BucketSampler(idx, b, 0), max(1, repeats // 2))
    build.measure(
        "numpy per-bucket permutations",
        lambda: [g.permutation(np.flatnonzero(idx == j)) for j in range(b)],
        max(1, repeats // 2),
    )


def beyond_2_24(rows: list[dict[str, Any]], repeats: int, torch: Any) -> None:
    """Draws over 2^24 + 1 categories, where ``torch.multinomial`` refuses."""
    n = TORCH_CATEGORY_LIMIT + 1
    weights = np.ones(n)
    sampler = K.WeightedSampler(weights, 0)
    draws = 1_000_000
    case = _Case(rows, "2^24+1 categories, 1e6 draws with replacement", n, draws, "ns/draw")
    case.measure(OURS, lambda: sampler.sample(draws), repeats)
    if torch is not None:
        tw = torch.from_numpy(weights)
        case.measure("torch.multinomial", lambda: torch.multinomial(tw, draws, True), 1)
        window = np.random.default_rng(5).lognormal(0.0, 1.0, n).astype(np.float32)
        q = _Case(rows, "2^24+1 values, edges B=16", n, n, "ns/value")
        q.measure(OURS, lambda: K.bucket_edges(window, 16), repeats)
        tq = torch.from_numpy(np.arange(1, 16, dtype=np.float32) / 16)
        tw32 = torch.from_numpy(window)
        q.measure("torch.quantile", lambda: torch.quantile(tw32, tq), 1)
