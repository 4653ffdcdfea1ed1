"""CurriculumTrainer vs a plain HF Trainer, step time: ``python bench/bench_hf_trainer.py``.

Issue 21: what the curriculum costs a Hugging Face Trainer user. One process (a DeepSpeed world
of one, ZeRO-1, fp32 on CPU, one torch thread) trains the same model — the demo's GPT-2 (2 layers,
width 128, 128 positions, byte vocabulary, no dropout), the same initial weights every run —
with micro-batch 8 × GAS 2 and AdamW at a constant lr, twice:

* ``plain``: ``transformers.Trainer`` over fixed ``(8, 128)`` blocks kept in memory (a list
  dataset, HF's collator, HF's loss with ``labels``);
* ``curriculum``: ``curriculum_ds.hf.CurriculumTrainer`` over an MDS stream of documents longer
  than ``max_seq_len`` (every sample truncated to 128 tokens), so every micro-batch is the same
  full ``(8, 128)`` block: the compute per step is identical, the difference is the curriculum
  (draw from the shards, token-weighted loss and its all-reduce, finish, records, logs).

Runs alternate (``--rounds`` of each, plain first), each ``--steps`` optimizer steps; a callback
times every step (``on_step_begin`` → ``on_step_end``, wall and CPU clocks) and the first
``--warmup`` of each run are dropped. Reported: the median ms/step of each trainer and
curriculum/plain, the median over rounds of the per-round ratio (drift cancels within a round).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

SEQ = 128


def _env() -> None:
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    for key, value in {"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1", "LOCAL_WORLD_SIZE": "1",
                       "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29671"}.items():  # fmt: skip
        os.environ.setdefault(key, value)


def _model(folder: Path) -> Path:
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    config = GPT2Config(vocab_size=257, n_positions=SEQ, n_embd=128, n_layer=2, n_head=4,
                        resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)  # fmt: skip
    GPT2LMHeadModel(config).save_pretrained(folder)
    return folder


class _Timer:
    """A TrainerCallback timing each optimizer step on the wall and CPU clocks."""

    def __init__(self) -> None:
        from transformers import TrainerCallback

        timer = self

        class Callback(TrainerCallback):
            def on_step_begin(self, *_: Any, **__: Any) -> None:
                timer.t0 = (time.perf_counter(), time.process_time())

            def on_step_end(self, *_: Any, **__: Any) -> None:
                wall, cpu = time.perf_counter(), time.process_time()
                timer.steps.append((wall - timer.t0[0], cpu - timer.t0[1]))

        self.callback = Callback()
        self.steps: list[tuple[float, float]] = []
        self.t0 = (0.0, 0.0)


def _run(kind: str, root: Path, model_dir: Path, ds: dict, steps: int, seed_data: list) -> list:
    from transformers import GPT2LMHeadModel, Trainer, TrainingArguments

    from curriculum_ds.hf import CurriculumTrainer

    model = GPT2LMHeadModel.from_pretrained(model_dir)
    out = root / f"out_{kind}"
    common = {
        "output_dir": str(out), "per_device_train_batch_size": 8, "gradient_accumulation_steps": 2,
        "learning_rate": 1e-3, "lr_scheduler_type": "constant", "save_strategy": "no",
        "logging_steps": 10, "report_to": [], "disable_tqdm": True, "use_cpu": True,
    }  # fmt: skip
    timer = _Timer()
    if kind == "plain":
        plain = {k: v for k, v in ds.items() if k != "curriculum"}
        args = TrainingArguments(deepspeed=plain, max_steps=steps, **common)
        trainer = Trainer(model=model, args=args, train_dataset=seed_data,
                          callbacks=[timer.callback])  # fmt: skip
    else:
        args = TrainingArguments(deepspeed=ds, max_steps=steps, **common)
        trainer = CurriculumTrainer(model=model, args=args, callbacks=[timer.callback])
    trainer.train()
    return timer.steps


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--rounds", type=int, default=3)
    args = p.parse_args()
    _env()
    import torch

    from curriculum_ds.data import prepare

    torch.set_num_threads(1)
    root = Path(tempfile.mkdtemp(prefix="bench_hf_"))
    docs = [f"{i:06d} " + "the curriculum orders the data " * 8 for i in range(4096)]
    src = root / "docs.jsonl"
    src.write_text("".join(json.dumps({"text": d}) + "\n" for d in docs))
    prepare([src], root / "data", max_seq_len=SEQ)
    model_dir = _model(root / "gpt2")
    total = 10 * args.steps * 16 * SEQ  # never reached: max_steps ends each run
    ds = {
        "train_micro_batch_size_per_gpu": 8, "gradient_accumulation_steps": 2,
        "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}},
        "zero_optimization": {"stage": 1}, "steps_per_print": 10**9,
        "curriculum": {"max_duration": f"{total}tok", "schedule": [
            {"name": "all", "duration": f"{total}tok",
             "train_loader": {"max_seq_len": SEQ, "streams": [{"local": str(root / "data")}]}}]},
    }  # fmt: skip
    gen = torch.Generator().manual_seed(0)
    blocks = torch.randint(0, 256, (512, SEQ), generator=gen)
    seed_data = [
        {"input_ids": b, "attention_mask": torch.ones_like(b), "labels": b} for b in blocks
    ]
    times: dict[str, list[list[tuple[float, float]]]] = {"plain": [], "curriculum": []}
    try:
        for _ in range(args.rounds):
            for kind in times:
                steps = _run(kind, root, model_dir, ds, args.steps, seed_data)
                times[kind].append(steps[args.warmup :])
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print(f"{args.rounds} rounds × {args.steps} steps (first {args.warmup} dropped), ms/step:")
    med = {}
    for kind, rounds in times.items():
        flat = [s for r in rounds for s in r]
        med[kind] = tuple(1e3 * statistics.median(s[i] for s in flat) for i in (0, 1))
        print(f"  {kind:<10} wall {med[kind][0]:7.1f}  cpu {med[kind][1]:7.1f}")
    for i, clock in enumerate(("wall", "cpu")):
        ratios = [
            statistics.median(s[i] for s in c) / statistics.median(s[i] for s in b)
            for b, c in zip(times["plain"], times["curriculum"], strict=True)
        ]
        print(f"  curriculum / plain ({clock}): {statistics.median(ratios):.3f} per round "
              f"{', '.join(f'{r:.3f}' for r in ratios)}")  # fmt: skip


if __name__ == "__main__":
    main()
