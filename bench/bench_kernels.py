"""Benchmark the Rust kernels against numpy and torch: ``python bench/bench_kernels.py``.

Example: ``python bench/bench_kernels.py --sizes 1e6,1e7 --json``. See
``curriculum_ds.bench.run`` for what each case measures.
"""

from __future__ import annotations

import argparse

from curriculum_ds import bench


def _sizes(text: str) -> list[int]:
    return [int(float(s)) for s in text.split(",") if s.strip()]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sizes", type=_sizes, default=[10**6], help="e.g. 1e6,1e7")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    parser.add_argument("--repeats", type=int, default=5, help="timed calls per measurement")
    parser.add_argument(
        "--no-extras",
        action="store_true",
        help="skip the fixed-size cases (BucketSampler at 1e7, 2^24 + 1): a quick smoke run",
    )
    args = parser.parse_args()
    bench.run(args.sizes, as_json=args.json, repeats=args.repeats, extras=not args.no_extras)


if __name__ == "__main__":
    main()
