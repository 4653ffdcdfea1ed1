"""The phase loader at scale: ``python bench/bench_loader_scale.py --samples 1e7``.

Issue 12, item 5. On a synthetic stream of ``--samples`` samples (8–32 random tokens each,
written once with mosaicml-streaming's ``MDSWriter`` plus ``prepare``'s sidecar files, and cached
under ``--cache``) beside a long-sample stream (10^5 samples of 150–270 tokens, ~10× longer),
it reports:

1. **Building a phase loader** over the big stream (and the mix), in a fresh process: wall time
   and peak RSS (``ru_maxrss``, and what it grew by over the imports).
2. **Drawing global batches of 1,024** (``PhaseLoader.next_global_batch``) over the mix
   (proportions 0.7 / 0.3): samples/s, for ``proportion_unit`` ``"samples"`` and ``"tokens"``,
   and with 8 dynamic buckets.
3. **Fetching and collating** micro-batches of 32 from the big stream: non-padding tokens/s of
   ``PhaseLoader.micro_batches`` against mosaicml-streaming's own ``StreamingDataLoader``
   (``num_workers=0``, shuffled, the same padding collate) over the same shards, alternated over
   ``--rounds`` rounds, medians and their ratio.

Generating 10^7 samples takes ~5 minutes on 2 cores (``MDSWriter`` is ~30 µs per sample); later
runs reuse the cache. Example: ``python bench/bench_loader_scale.py --samples 1e6 --json``.
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path
from typing import Any

import numpy as np

GLOBAL_BATCH = 1024
MICRO_BATCH = 32
MAX_SEQ_LEN = 512
VOCAB = 50_257
LONG_SAMPLES = 100_000
CACHE = Path(tempfile.gettempdir()) / "curriculum_ds_bench"


# ---------------------------------------------------------------------------------- data
def write_stream(out: Path, num_samples: int, lengths: tuple[int, int], seed: int) -> Path:
    """A stream of ``num_samples`` samples of uniform random length in ``lengths`` (inclusive).

    Written with ``MDSWriter`` (column ``input_ids``, ``ndarray:int32``) into a temporary folder
    beside ``out`` and renamed into place, with ``prepare``'s ``metrics.npz`` (``num_tokens``) and
    ``curriculum_meta.json``; reused when ``out`` already exists.
    """
    from streaming import MDSWriter

    from curriculum_ds.data import DATASET_FORMAT, META_FILENAME, METRICS_FILENAME

    if (out / META_FILENAME).is_file():
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=out.name + ".", dir=out.parent))
    rng = np.random.default_rng(seed)
    lens = rng.integers(lengths[0], lengths[1] + 1, num_samples).astype(np.int64)
    chunk = 1_000_000
    start = time.perf_counter()
    with MDSWriter(out=str(tmp), columns={"input_ids": "ndarray:int32"}, size_limit=1 << 27) as w:
        for lo in range(0, num_samples, chunk):
            part = lens[lo : lo + chunk]
            tokens = rng.integers(1, VOCAB, int(part.sum()), dtype=np.int32)
            for piece in np.split(tokens, np.cumsum(part)[:-1]):
                w.write({"input_ids": piece})
            print(f"  wrote {lo + part.size:,} / {num_samples:,} samples", file=sys.stderr)
    with (
        zipfile.ZipFile(tmp / METRICS_FILENAME, "w", compression=zipfile.ZIP_STORED) as zf,
        zf.open("num_tokens.npy", "w", force_zip64=True) as fh,
    ):
        np.lib.format.write_array(fh, lens, allow_pickle=False)
    meta = {
        "format": DATASET_FORMAT,
        "vocab_size": VOCAB,
        "eos_id": None,
        "tokenizer": None,
        "max_seq_len": lengths[1],
        "num_samples": num_samples,
        "num_tokens": int(lens.sum()),
        "max_token_id": VOCAB - 1,
        "metric_columns": ["num_tokens"],
    }
    (tmp / META_FILENAME).write_text(json.dumps(meta, indent=2) + "\n", encoding="utf-8")
    tmp.rename(out)
    print(f"  generated {out} in {time.perf_counter() - start:.0f} s", file=sys.stderr)
    return out


def build_data(cache: Path, num_samples: int, long_samples: int) -> tuple[Path, Path]:
    """The big stream (8–32 tokens per sample) and the long one (150–270), cached."""
    big = write_stream(cache / f"short_{num_samples}", num_samples, (8, 32), seed=1)
    long = write_stream(cache / f"long_{long_samples}", long_samples, (150, 270), seed=2)
    return big, long


def phase(streams: list[tuple[Path, float]], unit: str = "samples") -> Any:
    """A one-phase config over ``(local, proportion)`` streams."""
    from curriculum_ds.config import PhaseConfig

    loader: dict[str, Any] = {
        "streams": [{"local": str(p), "proportion": w} for p, w in streams],
        "max_seq_len": MAX_SEQ_LEN,
    }
    if unit != "samples":
        loader["proportion_unit"] = unit
    return PhaseConfig.model_validate({"name": "bench", "duration": "1ep", "train_loader": loader})


# ---------------------------------------------------------------------------------- measuring
def measure_build(streams: list[tuple[Path, float]]) -> dict[str, float]:
    """Build a PhaseLoader in this (fresh) process: wall seconds and peak RSS in MiB."""
    import streaming  # noqa: F401  (imported before the clock starts, like in a training process)

    from curriculum_ds.core.loader import PhaseLoader

    cfg = phase(streams)
    base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    start = time.perf_counter()
    loader = PhaseLoader(cfg, 0, seed=0)
    seconds = time.perf_counter() - start
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    loader.close()
    return {"build_s": seconds, "peak_rss_mib": peak, "rss_added_mib": peak - base}


def build_in_subprocess(streams: list[tuple[Path, float]]) -> dict[str, float]:
    """:func:`measure_build` in a fresh interpreter (so that its peak RSS is the build's own)."""
    arg = json.dumps([[str(p), w] for p, w in streams])
    out = subprocess.run(
        [sys.executable, __file__, "--build-only", arg], check=True, capture_output=True, text=True
    )
    result: dict[str, float] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def measure_draw(
    streams: list[tuple[Path, float]], unit: str, num_buckets: int, batches: int
) -> float:
    """Samples per second of ``next_global_batch(1024)`` over ``batches`` batches."""
    from curriculum_ds.core.loader import PhaseLoader

    loader = PhaseLoader(phase(streams, unit), 0, seed=0, num_buckets=num_buckets)
    probs = np.full(num_buckets, 1.0 / num_buckets)
    if num_buckets > 1:
        rng = np.random.default_rng(0)
        loader.set_buckets(
            [rng.integers(0, num_buckets, info.num_samples) for info in loader.infos]
        )
    loader.next_global_batch(GLOBAL_BATCH, probs)  # warm-up
    start = time.perf_counter()
    for _ in range(batches):
        loader.next_global_batch(GLOBAL_BATCH, probs)
    seconds = time.perf_counter() - start
    loader.close()
    return batches * GLOBAL_BATCH / seconds


def fetch_side(side: str, big: Path, num_samples: int) -> dict[str, float]:
    """One side of the fetch comparison, in this (fresh) process: non-padding tokens per second.

    ``ours``: ``next_global_batch(1024)`` + ``micro_batches`` (micro-batches of 32) of a
    PhaseLoader over ``big``. ``streaming``: a shuffled ``StreamingDataset`` over the same shards
    through ``StreamingDataLoader(num_workers=0)`` with the same padding collate. Each side runs in
    its own process: streaming's iterator keeps background threads that would slow the other side.
    ``startup_s`` is the time to the first batch (not in the rate); ``cpu_s`` the process CPU
    seconds of the fetches (after the first batch).
    """
    import streaming  # noqa: F401  (imported before the clock starts, like in a training process)

    from curriculum_ds.core.loader import PhaseLoader, collate

    positions = np.arange(MICRO_BATCH, dtype=np.int64)

    def pad(samples: list[dict[str, Any]]) -> dict[str, Any]:
        """Our collate, as the dict of tensors a StreamingDataLoader batch usually is."""
        mb = collate([np.asarray(s["input_ids"])[:MAX_SEQ_LEN] for s in samples], positions)
        return {"input_ids": mb.input_ids, "attention_mask": mb.attention_mask, "labels": mb.labels}

    start = time.perf_counter()
    if side == "ours":
        loader = PhaseLoader(phase([(big, 1.0)]), 0, seed=0)

        def batches() -> Any:
            while True:
                batch = loader.next_global_batch(GLOBAL_BATCH)
                yield from loader.micro_batches(
                    batch, dp_rank=0, dp_world_size=1, micro_batch_size=MICRO_BATCH
                )

        iterator = (mb.attention_mask for mb in batches())
    else:
        from streaming import StreamingDataLoader, StreamingDataset

        dataset = StreamingDataset(
            local=str(big), batch_size=MICRO_BATCH, shuffle=True, shuffle_seed=0
        )
        loader = StreamingDataLoader(dataset, batch_size=MICRO_BATCH, num_workers=0, collate_fn=pad)
        iterator = (mb["attention_mask"] for mb in loader)
    next(iterator)
    startup = time.perf_counter() - start
    tokens = 0
    start, cpu_start = time.perf_counter(), time.process_time()
    for _ in range(num_samples // MICRO_BATCH):
        tokens += int(next(iterator).sum())
    seconds = time.perf_counter() - start
    cpu_seconds = time.process_time() - cpu_start
    if side == "ours":
        loader.close()
    # streaming's dataset is left to its own atexit cleanup: releasing its shared memory now, while
    # its iterator's background thread still runs, makes that thread fail
    return {"tokens_per_s": tokens / seconds, "cpu_s": cpu_seconds, "startup_s": startup}


def measure_fetch(big: Path, num_samples: int, rounds: int) -> dict[str, float]:
    """Tokens/s of ours and of streaming's StreamingDataLoader, alternated; medians, ratio."""
    runs: dict[str, list[dict[str, float]]] = {"ours": [], "streaming": []}
    for _ in range(rounds):
        for side, results in runs.items():
            out = subprocess.run(
                [sys.executable, __file__, "--fetch-only", side, str(big), str(num_samples)],
                check=True,
                capture_output=True,
                text=True,
            )
            results.append(json.loads(out.stdout.strip().splitlines()[-1]))
    ours = statistics.median(r["tokens_per_s"] for r in runs["ours"])
    theirs = statistics.median(r["tokens_per_s"] for r in runs["streaming"])
    return {
        "ours_tokens_per_s": ours,
        "streaming_tokens_per_s": theirs,
        "ratio": ours / theirs,
        "ours_startup_s": statistics.median(r["startup_s"] for r in runs["ours"]),
        "streaming_startup_s": statistics.median(r["startup_s"] for r in runs["streaming"]),
    }


# ---------------------------------------------------------------------------------- main
def _count(text: str) -> int:
    return int(float(text))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--samples", type=_count, default=10**6, help="big stream size, e.g. 1e7")
    parser.add_argument("--long-samples", type=_count, default=LONG_SAMPLES, help="long stream")
    parser.add_argument("--cache", type=Path, default=CACHE, help="where the streams are cached")
    parser.add_argument("--batches", type=int, default=300, help="global batches drawn per case")
    parser.add_argument("--fetch-samples", type=_count, default=32_768, help="per round and side")
    parser.add_argument("--rounds", type=int, default=3, help="alternated fetch rounds")
    parser.add_argument("--generate-only", action="store_true", help="write the streams, exit")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    parser.add_argument("--build-only", help=argparse.SUPPRESS)
    parser.add_argument("--fetch-only", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.fetch_only:
        side, path, count = args.fetch_only
        print(json.dumps(fetch_side(side, Path(path), int(count))))
        return
    if args.build_only:
        streams = [(Path(p), float(w)) for p, w in json.loads(args.build_only)]
        print(json.dumps(measure_build(streams)))
        return
    big, long = build_data(args.cache, args.samples, args.long_samples)
    if args.generate_only:
        return
    mix = [(big, 0.7), (long, 0.3)]
    result: dict[str, Any] = {"samples": args.samples}
    result["build_big"] = build_in_subprocess([(big, 1.0)])
    result["build_mix"] = build_in_subprocess(mix)
    print(f"  build: {result['build_big']}, {result['build_mix']}", file=sys.stderr)
    result["draw_samples_per_s"] = {
        "samples": measure_draw(mix, "samples", 1, args.batches),
        "tokens": measure_draw(mix, "tokens", 1, args.batches),
        "samples, 8 buckets": measure_draw(mix, "samples", 8, args.batches),
    }
    print(f"  draw: {result['draw_samples_per_s']}", file=sys.stderr)
    result["fetch"] = measure_fetch(big, args.fetch_samples, args.rounds)
    if args.json:
        print(json.dumps(result, indent=2))
        return
    b, m, f = result["build_big"], result["build_mix"], result["fetch"]
    print(f"big stream: {args.samples:,} samples of 8-32 tokens; mix 0.7 big / 0.3 long")
    print(
        f"build, big stream: {b['build_s']:.2f} s, peak RSS {b['peak_rss_mib']:.0f} MiB "
        f"(+{b['rss_added_mib']:.0f} MiB)"
    )
    print(
        f"build, mix: {m['build_s']:.2f} s, peak RSS {m['peak_rss_mib']:.0f} MiB "
        f"(+{m['rss_added_mib']:.0f} MiB)"
    )
    for case, rate in result["draw_samples_per_s"].items():
        print(f"draw, proportion_unit {case}: {rate / 1e6:.2f} M samples/s")
    print(
        f"fetch+collate: ours {f['ours_tokens_per_s'] / 1e6:.2f} M tokens/s, StreamingDataLoader "
        f"{f['streaming_tokens_per_s'] / 1e6:.2f} M tokens/s, ratio {f['ratio']:.2f} "
        f"(first batch after {f['ours_startup_s']:.2f} s vs {f['streaming_startup_s']:.2f} s)"
    )


if __name__ == "__main__":
    main()
