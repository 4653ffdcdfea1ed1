"""The sampler at pre-training scale: ``python bench/bench_sampler_scale.py --samples 1e10 --json``.

Issue 35, item 4. A simulated corpus (no shards on disk): ``--samples`` samples over
``--streams`` streams, the stream sizes from a seeded generator (Dirichlet shares, each stream
at least one sample), proportions from another, sample lengths (8–2,048 tokens) from a seeded
generator. One case, in a fresh process, prints one JSON object:

* ``build_s``: building the phase loader's per-stream order (what ``PhaseLoader.__init__`` builds
  besides the stream readers): in **order version 2** a
  :class:`~curriculum_ds.core.stream_order.PermutedOrder` (a cursor and a seed per stream; the
  token lengths stay in the shards' offset tables, so none are simulated); in **version 1**
  (today's order before issue 35) each stream's ``num_tokens`` as int64 and its truncated copy
  (as ``PhaseLoader`` holds them) and a :class:`~curriculum_ds.kernels.BucketSampler` per stream;
* ``rss_growth_mib``: the process's peak RSS (``VmHWM``) over its RSS after the imports (the peak
  is reset there through ``/proc/self/clear_refs``), build and draws included;
* ``samples_per_s``: global batches of ``--batch`` drawn for ``--seconds``: the stream of each slot
  by the largest-deficit kernel (``blend_samples``) and each slot's sample from the order, the
  loader's ``proportion_unit: "samples"`` path; ``samples_per_cpu_s`` the same over the process's
  CPU time (one thread), which a loaded machine slows less.

Without ``--samples``, the grid of the issue runs (10^7 … 10^10 samples over 16 and 10^4 streams in
version 2; version 1 where it fits in memory: ``--v1-max``), each case in its own process, and
prints a table (``--json``: the list). Version 1 refuses more than 2^32 - 1 samples per stream.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

SIZES = (10**7, 10**8, 10**9, 10**10)
STREAMS = (16, 10_000)
SEQ_LEN = 2048


def _status(key: str) -> int:
    """A ``/proc/self/status`` field in KiB."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1])
    raise KeyError(key)


def _corpus(num_samples: int, num_streams: int) -> tuple[list[int], np.ndarray]:
    """Stream sizes (summing to ``num_samples``) and proportions, from seeded generators."""
    rng = np.random.default_rng(35)
    shares = rng.dirichlet(np.ones(num_streams))
    sizes = np.maximum(np.floor(shares * (num_samples - num_streams)).astype(np.int64), 0) + 1
    sizes[0] += num_samples - int(sizes.sum())
    proportions = rng.dirichlet(np.ones(num_streams))
    return [int(n) for n in sizes], proportions


def _build(version: int, sizes: list[int]) -> Any:
    from curriculum_ds.core.stream_order import make_order

    if version == 1:  # PhaseLoader's per-sample arrays of before: num_tokens twice, the samplers
        rng = np.random.default_rng(7)
        raw = [rng.integers(8, 2 * SEQ_LEN, size=n, dtype=np.int64) for n in sizes]
        truncated = [np.minimum(t, SEQ_LEN) for t in raw]
        return make_order(1, sizes, 1, seed=1234, phase_idx=0), (raw, truncated)
    # version 2: only the streams' seeds and cursors
    return make_order(2, sizes, 1, seed=1234, phase_idx=0), None


def run_case(num_samples: int, num_streams: int, version: int, batch: int, seconds: float) -> dict:
    """One case in this process (call it in a fresh one); see the module docs."""
    from curriculum_ds.kernels import blend_samples

    sizes, proportions = _corpus(num_samples, num_streams)
    Path("/proc/self/clear_refs").write_text("5")  # VmHWM := VmRSS, after the imports
    base_kib = _status("VmRSS")
    start = time.perf_counter()
    order, _held = _build(version, sizes)
    build_s = time.perf_counter() - start
    probs = np.ones(1)
    counts = np.zeros(num_streams, dtype=np.int64)
    drawn, start, cpu = 0, time.perf_counter(), time.process_time()
    while (elapsed := time.perf_counter() - start) < seconds or drawn == 0:
        streams = blend_samples(proportions, counts, drawn, batch)
        samples = order.take(streams, probs)
        counts += np.bincount(streams, minlength=num_streams)
        drawn += batch
    cpu_s = time.process_time() - cpu
    assert samples.shape == (batch,)
    return {
        "samples": num_samples,
        "streams": num_streams,
        "order_version": version,
        "build_s": round(build_s, 4),
        "rss_growth_mib": round((_status("VmHWM") - base_kib) / 1024, 1),
        "samples_per_s": round(drawn / elapsed),
        "samples_per_cpu_s": round(drawn / cpu_s),
        "batch": batch,
        "draws": drawn,
    }


def _fresh(num_samples: int, num_streams: int, version: int, args: argparse.Namespace) -> dict:
    cmd = [sys.executable, __file__, "--samples", str(num_samples), "--streams", str(num_streams),
           "--order-version", str(version), "--batch", str(args.batch),
           "--seconds", str(args.seconds), "--json"]  # fmt: skip
    out = subprocess.run(cmd, check=True, capture_output=True, text=True)
    result: dict = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=float, help="one case of this many samples")
    parser.add_argument("--streams", type=int, default=10_000)
    parser.add_argument("--order-version", type=int, choices=(1, 2), default=2)
    parser.add_argument("--batch", type=int, default=1024, help="global batch size")
    parser.add_argument("--seconds", type=float, default=3.0, help="of draws per case")
    parser.add_argument("--v1-max", type=float, default=1e8, help="largest version-1 case")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    if args.samples is not None:
        result = run_case(int(args.samples), args.streams, args.order_version, args.batch,
                          args.seconds)  # fmt: skip
        print(json.dumps(result) if args.json else result)
        return
    results = []
    for num_streams in STREAMS:
        for num_samples in SIZES:
            for version in (2, 1):
                too_big = num_samples > args.v1_max or (num_streams > 16 and num_samples > 1e7)
                if version == 1 and too_big:
                    continue
                results.append(_fresh(num_samples, num_streams, version, args))
                print(results[-1], file=sys.stderr, flush=True)
    if args.json:
        print(json.dumps(results))
        return
    print("| samples | streams | order | build | RSS growth | draws (wall) | draws (CPU time) |")
    print("|---|---|---|---|---|---|---|")
    for r in results:
        print(f"| {r['samples']:.0e} | {r['streams']:,} | v{r['order_version']} | "
              f"{r['build_s']:.3f} s | {r['rss_growth_mib']:,.1f} MiB | "
              f"{r['samples_per_s'] / 1e6:.2f} M samples/s | "
              f"{r['samples_per_cpu_s'] / 1e6:.2f} M samples/s |")  # fmt: skip


if __name__ == "__main__":
    main()
