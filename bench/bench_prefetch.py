"""Prefetch on vs off, the time a step waits for its data: ``python bench/bench_prefetch.py``.

Issue 23 ("Prefetch mechanism") and issue 35 (item 7, at any gradient accumulation): with
``curriculum.prefetch_micro_batches`` at its default (2), the mean ``data_wait_s`` per optimizer
step (the metrics row's field: the training thread's time deciding, waiting for, reading,
collating and copying the step's micro-batches, at the draw and at each micro-batch's first use)
must be at most 1/5 of what it is with prefetch off, on a model that stands in for an
asynchronous accelerator, with the same micro-batches, at GAS 4 and GAS 16; and the same with
dynamic re-weighting on, whose step after a recompute reads its first micro-batch when drawn.

One process, one CPU rank, four real DeepSpeed engines built by ``curriculum_ds.initialize`` (ZeRO
0, fp32, torch AdamW), each over the same one-phase stream of short documents (8-32 byte tokens) in
micro-batches of ``--micro`` (64) samples × each GAS of ``--gas`` (4 and 16): prefetch off / on (2),
each with dynamic re-weighting off and on (4 buckets, recompute every 10 steps). The model's forward
sleeps ``--sleep-ms`` (25 ms; ``time.sleep`` releases the GIL, as a CUDA kernel launch returns at
once) and then computes one learned loss per token (an embedding of width 1, squared), so the CPU
work per step is the loop's, not a model's. Blocks of ``--block`` steps of the four loops alternate
(each round in a new order), after ``--warmup`` steps each, so a shared machine's load hits all four
alike. Reported per loop and GAS: mean and median ``data_wait_s``, ms per step, the micro-batches
read on the prefetch thread, and on/off as the ratio of the mean waits; the loops' micro-batches are
compared bit for bit (a blake2b digest per step).

``--versus-streaming`` (what ``bench/gpu_check.sh`` runs on CUDA) trains the demo's GPT-2 (2
layers, width 128: a model whose step is milliseconds on a GPU, where the data path decides)
instead, bf16 on CUDA, in three interleaved loops over the same data: the plugin with prefetch
off and on, and a bare DeepSpeed loop fed by mosaicml-streaming's ``StreamingDataLoader(
num_workers=4, pin_memory=True)`` (HF's loss; its wait is the time of ``next()`` plus the copy to
the device). Reported: ms per step (CUDA synchronised at each block's end), the mean wait, and
plugin/bare step time.

Example: ``python bench/bench_prefetch.py`` (about 4 min on 2 idle CPU cores);
``--quick`` for a smoke run (GAS 4, 10 steps).
"""

from __future__ import annotations

import argparse
import hashlib
import itertools
import json
import random
import shlex
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

VARIANTS = ("off", "on", "off, dynamic", "on, dynamic")
TARGET = 1 / 5
"""Prefetch on's mean data wait over off's, at most (issue 23)."""
RECOMPUTE_EVERY = 10


def build_data(out: Path, *, num_docs: int = 4096, seed: int = 0) -> Path:
    """An MDS stream of ``num_docs`` documents of 8-32 bytes (reused if there)."""
    from curriculum_ds.data import prepare

    target = out / "short"
    if (target / "curriculum_meta.json").is_file():
        return target
    rng = random.Random(seed)
    letters = "abcdefghijklmnopqrstuvwxyz     "
    docs = [
        "".join(rng.choice(letters) for _ in range(rng.randint(8, 32))) for _ in range(num_docs)
    ]
    src = out / "short.jsonl"
    src.write_text("".join(json.dumps({"text": d}) + "\n" for d in docs))
    prepare([src], target, max_seq_len=32)
    return target


def ds_config(
    data: Path, *, prefetch: int, dynamic: bool, micro: int, gas: int = 2
) -> dict[str, Any]:
    """One phase over ``data``; ``prefetch_micro_batches`` and re-weighting as given."""
    curriculum: dict[str, Any] = {
        "max_duration": f"{10**12}tok",
        "seed": 7,
        "prefetch_micro_batches": prefetch,
        "schedule": [
            {
                "name": "short",
                "duration": f"{10**12}tok",
                "train_loader": {"streams": [{"local": str(data)}], "max_seq_len": 32},
            }
        ],
        "dynamic": {
            "enabled": dynamic,
            "num_buckets": 4,
            "window": 4096,
            "recompute_every_n_steps": RECOMPUTE_EVERY,
        },
    }
    return {
        "train_micro_batch_size_per_gpu": micro,
        "gradient_accumulation_steps": gas,
        "steps_per_print": 10**9,
        "optimizer": {"type": "AdamW", "params": {"lr": 1e-3, "torch_adam": True}},
        "zero_optimization": {"stage": 0},
        "curriculum": curriculum,
    }


class Loop:
    """One curriculum on its engine: ``run(n)`` trains n steps, keeping rows and digests."""

    def __init__(self, engine: Any, curriculum: Any) -> None:
        self.engine, self.curriculum = engine, curriculum
        self.steps = iter(curriculum)
        self.rows: list[dict[str, Any]] = []
        self.digests: list[str] = []
        self.seconds: list[float] = []

    def run(self, n: int, *, keep: bool = True) -> None:
        for _ in range(n):
            start = time.perf_counter()
            step = next(self.steps)
            digest = hashlib.blake2b(digest_size=16)
            for mb in step.micro_batches:
                digest.update(mb.input_ids.numpy().tobytes())
                step.backward_token_losses(self.engine(mb.input_ids), mb.loss_mask, mb)
            row = step.finish()
            self.digests.append(digest.hexdigest())
            if keep:
                self.rows.append(dict(row))
                self.seconds.append(time.perf_counter() - start)


def build_loops(data: Path, *, micro: int, gas: int, sleep_s: float) -> dict[str, Loop]:
    import torch

    import curriculum_ds as cds

    class SleepingTokenLosses(torch.nn.Module):
        """Forward: sleep (the GIL released), then one learned loss per predicted token."""

        def __init__(self) -> None:
            super().__init__()
            self.embed = torch.nn.Embedding(512, 1)

        def forward(self, input_ids: torch.Tensor, attention_mask: Any = None) -> torch.Tensor:
            time.sleep(sleep_s)
            return self.embed(input_ids[:, 1:]).squeeze(-1).square()

    loops = {}
    for name in VARIANTS:
        prefetch = 2 if name.startswith("on") else 0
        config = ds_config(data, prefetch=prefetch, dynamic="dynamic" in name, micro=micro, gas=gas)
        torch.manual_seed(0)
        engine, curriculum = cds.initialize(model=SleepingTokenLosses(), config=config)
        loops[name] = Loop(engine, curriculum)
    return loops


def measure(loops: dict[str, Loop], *, steps: int, block: int, warmup: int) -> None:
    """Warm up, then alternate blocks of the loops, each round in another order."""
    for loop in loops.values():
        loop.run(warmup, keep=False)
    orders = list(itertools.permutations(loops))
    for r in range(steps // block):
        for name in orders[r % len(orders)]:
            loops[name].run(block)


def summarize(loops: dict[str, Loop]) -> dict[str, Any]:
    """Per loop: the waits and step times; on/off ratios; whether the batches agree."""
    per: dict[str, Any] = {}
    for name, loop in loops.items():
        waits = [r["data_wait_s"] for r in loop.rows]
        per[name] = {
            "mean_wait_ms": 1e3 * statistics.fmean(waits),
            "median_wait_ms": 1e3 * statistics.median(waits),
            "step_ms": 1e3 * statistics.median(loop.seconds),
            "read_ahead": sum(r["prefetched"] for r in loop.rows),
            "micro_batches": len(loop.rows) * loop.engine.gradient_accumulation_steps(),
        }
    ratios = {
        "static": per["on"]["mean_wait_ms"] / per["off"]["mean_wait_ms"],
        "dynamic": per["on, dynamic"]["mean_wait_ms"] / per["off, dynamic"]["mean_wait_ms"],
    }
    same = {
        "static": loops["on"].digests == loops["off"].digests,
        "dynamic": loops["on, dynamic"].digests == loops["off, dynamic"].digests,
    }
    return {"loops": per, "ratio": ratios, "same_batches": same}


def report(summaries: dict[int, dict[str, Any]], header: dict[str, Any]) -> str:
    """The table (a row per loop and GAS) and the SUMMARY line."""
    lines = [
        f"prefetch bench: micro-batch {header['micro']}, forward sleeps {header['sleep_ms']} ms, "
        f"{header['steps']} steps per loop in blocks of {header['block']}",
        "",
        f"{'loop':<14} {'GAS':>4} {'mean wait ms':>12} {'median ms':>10} {'step ms':>8} "
        f"{'read ahead':>11}",
    ]
    verdicts = []
    for gas, summary in summaries.items():
        for name, row in summary["loops"].items():
            lines.append(
                f"{name:<14} {gas:>4} {row['mean_wait_ms']:>12.3f} {row['median_wait_ms']:>10.3f} "
                f"{row['step_ms']:>8.1f} {row['read_ahead']:>5}/{row['micro_batches']:<5}"
            )
        for kind in ("static", "dynamic"):
            ratio, same = summary["ratio"][kind], summary["same_batches"][kind]
            ok = ratio <= TARGET and same
            verdicts.append(
                f"GAS {gas} {kind} on/off {ratio:.3f} (target <= {TARGET:.2f}), same batches "
                f"{same}: {'MET' if ok else 'MISSED'}"
            )
    lines += ["", "SUMMARY prefetch data wait: " + "; ".join(verdicts) + f"  [{header['command']}]"]
    return "\n".join(lines)


STREAMING_VARIANTS = ("plugin, prefetch off", "plugin, prefetch on", "bare + StreamingDataLoader")


class BareLoop:
    """DeepSpeed fed by ``StreamingDataLoader(num_workers=4, pin_memory=True)``, HF's loss."""

    def __init__(self, engine: Any, loader: Any) -> None:
        self.engine, self.batches = engine, iter(loader)
        self.rows: list[dict[str, Any]] = []
        self.seconds: list[float] = []

    def run(self, n: int, *, keep: bool = True) -> None:
        device = self.engine.device
        for _ in range(n):
            start = time.perf_counter()
            wait = 0.0
            for _ in range(self.engine.gradient_accumulation_steps()):
                t = time.perf_counter()
                batch = {k: v.to(device, non_blocking=True) for k, v in next(self.batches).items()}
                wait += time.perf_counter() - t
                loss = self.engine(**batch).loss
                self.engine.backward(loss)
                self.engine.step()
            if keep:
                self.rows.append({"data_wait_s": wait})
                self.seconds.append(time.perf_counter() - start)


class HFLoop(Loop):
    """The plugin loop on a HF model: ``step.backward(engine(input_ids, ...), mb)``."""

    def run(self, n: int, *, keep: bool = True) -> None:
        for _ in range(n):
            start = time.perf_counter()
            step = next(self.steps)
            for mb in step.micro_batches:
                logits = self.engine(mb.input_ids, attention_mask=mb.attention_mask)
                step.backward(logits, mb)
            row = step.finish()
            if keep:
                self.rows.append(dict(row))
                self.seconds.append(time.perf_counter() - start)


def pad_collate(samples: list[dict[str, Any]]) -> dict[str, Any]:
    """Right-pad a StreamingDataset batch; padding bears no loss and no attention."""
    import numpy as np

    from curriculum_ds.core.microbatch import collate

    mb = collate([np.asarray(s["input_ids"])[:32] for s in samples], np.zeros(0, dtype=np.int64))
    return {"input_ids": mb.input_ids, "attention_mask": mb.attention_mask, "labels": mb.labels}


def build_streaming_loops(data: Path, *, micro: int) -> dict[str, Any]:
    """The plugin (prefetch off, on) and the bare streaming loop, the demo's GPT-2 each."""
    import shutil

    import deepspeed
    import torch
    from streaming import StreamingDataLoader, StreamingDataset

    import curriculum_ds as cds
    from curriculum_ds.default_model import build_model
    from curriculum_ds.plugin import load_run_config

    cuda = torch.cuda.is_available()
    loops: dict[str, Any] = {}
    for name, prefetch in zip(STREAMING_VARIANTS[:2], (0, 2), strict=True):
        config = ds_config(data, prefetch=prefetch, dynamic=False, micro=micro)
        if cuda:
            config["bf16"] = {"enabled": True}
        run = load_run_config(config)
        torch.manual_seed(0)
        model = build_model(None, run.curriculum, 64)
        engine, curriculum = cds.initialize(model=model, config=run)
        loops[name] = HFLoop(engine, curriculum)
    bare_data = data.parent / "short_bare"  # streaming's own registration of its local folder
    if not bare_data.is_dir():
        shutil.copytree(data, bare_data)
    torch.manual_seed(0)
    model = build_model(None, run.curriculum, 64)
    engine, *_ = deepspeed.initialize(
        model=model, model_parameters=model.parameters(), config=cds.deepspeed_config(run)
    )
    dataset = StreamingDataset(local=str(bare_data), batch_size=micro, shuffle=True, shuffle_seed=1)
    loader = StreamingDataLoader(
        dataset,
        batch_size=micro,
        num_workers=4,
        pin_memory=cuda,
        collate_fn=pad_collate,
        persistent_workers=True,
    )
    loops[STREAMING_VARIANTS[2]] = BareLoop(engine, loader)
    return loops


def versus_streaming(args: argparse.Namespace, data: Path, command: str) -> int:
    import torch

    loops = build_streaming_loops(data, micro=args.micro)
    sync = torch.cuda.synchronize if torch.cuda.is_available() else (lambda: None)

    class Synced:
        def __init__(self, loop: Any) -> None:
            self.loop = loop

        def run(self, n: int, *, keep: bool = True) -> None:
            self.loop.run(n, keep=keep)
            sync()

    try:
        measure({k: Synced(v) for k, v in loops.items()}, steps=args.steps, block=args.block,
                warmup=args.warmup)  # fmt: skip
    finally:
        for loop in loops.values():
            if isinstance(loop, Loop):
                loop.curriculum.close()
    per = {
        name: {
            "mean_wait_ms": 1e3 * statistics.fmean(r["data_wait_s"] for r in loop.rows),
            "step_ms": 1e3 * statistics.median(loop.seconds),
        }
        for name, loop in loops.items()
    }
    off, on, bare = (per[n] for n in STREAMING_VARIANTS)
    device = torch.cuda.get_device_name() if torch.cuda.is_available() else "CPU"
    print(f"prefetch vs StreamingDataLoader(num_workers=4, pin_memory=True) on {device}, "
          f"micro-batch {args.micro} x GAS 2, {args.steps} steps per loop")  # fmt: skip
    for name, row in per.items():
        print(f"{name:<28} step {row['step_ms']:8.2f} ms  data wait {row['mean_wait_ms']:8.3f} ms")
    print(
        f"SUMMARY prefetch vs streaming: data wait on/off "
        f"{on['mean_wait_ms'] / off['mean_wait_ms']:.3f}; plugin (prefetch on)/bare step time "
        f"{on['step_ms'] / bare['step_ms']:.3f}  [{command}]",
        flush=True,
    )
    if args.json is not None:
        args.json.write_text(json.dumps({"command": command, "device": device, "loops": per}))
    return 0


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=120, help="timed optimizer steps per loop")
    parser.add_argument("--block", type=int, default=10, help="steps per timed block")
    parser.add_argument("--warmup", type=int, default=3, help="untimed steps of each loop first")
    parser.add_argument("--micro", type=int, default=64, help="samples per micro-batch")
    parser.add_argument("--sleep-ms", type=float, default=25.0, help="the forward's sleep")
    parser.add_argument(
        "--gas", default="4,16", help="gradient accumulation steps, comma-separated (each a table)"
    )
    parser.add_argument("--quick", action="store_true", help="a smoke run: 10 steps per loop")
    parser.add_argument("--out", type=Path, default=None, help="work folder (data reused there)")
    parser.add_argument("--json", type=Path, default=None, help="also write the figures")
    parser.add_argument(
        "--versus-streaming",
        action="store_true",
        help="the demo's GPT-2: prefetch off/on against a bare StreamingDataLoader loop (CUDA)",
    )
    args = parser.parse_args()
    if args.quick:
        args.steps, args.block, args.warmup, args.gas = 10, 10, 1, "4"
    if args.block < 1 or args.steps < args.block:
        parser.error(f"need 1 <= --block <= --steps, got {args.block} and {args.steps}")
    try:
        args.gas = [int(g) for g in str(args.gas).split(",")]
    except ValueError:
        parser.error(f"--gas: comma-separated integers, got {args.gas!r}")
    if any(g < 1 for g in args.gas):
        parser.error(f"--gas: each at least 1, got {args.gas}")
    return args


def main() -> int:
    args = parse_args()
    command = shlex.join([Path(sys.executable).name, *sys.argv])
    tmp = None
    if args.out is None:
        tmp = tempfile.TemporaryDirectory(prefix="bench_prefetch_")
        out = Path(tmp.name)
    else:
        out = args.out.resolve()
        out.mkdir(parents=True, exist_ok=True)
    from curriculum_ds.distributed import prepare_environment

    prepare_environment()  # a world of one, before torch/DeepSpeed read the environment
    import torch

    torch.set_num_threads(1)
    data = build_data(out)
    if args.versus_streaming:
        code = versus_streaming(args, data, command)
        if tmp is not None:
            tmp.cleanup()
        return code
    summaries = {}
    for gas in args.gas:
        loops = build_loops(data, micro=args.micro, gas=gas, sleep_s=args.sleep_ms / 1e3)
        try:
            measure(loops, steps=args.steps, block=args.block, warmup=args.warmup)
        finally:
            for loop in loops.values():
                loop.curriculum.close()
        summaries[gas] = summarize(loops)
    header = {
        "command": command,
        "micro": args.micro,
        "sleep_ms": args.sleep_ms,
        "steps": args.steps,
        "block": args.block,
    }
    print(report(summaries, header), flush=True)
    if args.json is not None:
        args.json.write_text(json.dumps({**header, "by_gas": summaries}, indent=2))
    if tmp is not None:
        tmp.cleanup()
    return 0


if __name__ == "__main__":
    sys.exit(main())
