"""Real tokens per second, unpacked vs packed: ``python bench/bench_packing_throughput.py``.

Also the cost of document masking (issue 32): the same packed micro-batches, side by side, with
``position_ids`` restarting per document (``attention_mask=None``: the model builds the
block-diagonal causal mask, :mod:`curriculum_ds.core.documents`) and without (plain causal
attention over the whole row), reported as masked / unmasked CPU time per micro-batch.

Issue 12: in the demo's docstrings stream (79 tokens per document on average, first phase at
``max_seq_len`` 128), 38% of the token slots of a micro-batch of 8 are padding; ``prepare --pack``
fills every row. This measures what that is worth in training throughput, on the demo's own data
and model, in one process:

* data: the demo's docstrings corpus (``curriculum_ds.commands.corpus.build_stdlib_corpus``, no
  download) prepared twice with the byte tokenizer: unpacked (``max_seq_len`` 256, as the demo did
  before
  packing, truncated to 128 by the phase) and ``--pack`` at 128 (the demo now);
* model and step: the demo's default model (``curriculum_ds.train.build_model``: GPT-2, 2 layers,
  width 128, 256 positions, byte vocabulary), forward + backward + AdamW on micro-batches of 8
  collated by the trainer's own ``curriculum_ds.core.loader.collate`` (right-padded to the longest
  row
  of the micro-batch, padding masked);
* timing: blocks of ``--block`` micro-batches of the two layouts alternate (drift cancels within a
  round), on the CPU clock (``process_time``, which other jobs on a shared machine disturb far
  less than the wall clock), one torch thread (what each of the demo's 2 CPU ranks gets).

Reported: real (non-padding) tokens per CPU second of each layout, the padding share of the
slots, packed/unpacked as the median over rounds of the per-round ratio, and masked/unmasked
step time (packed rows with and without document masking) the same way. Every forward runs
without a KV cache (``use_cache=False``, as the reference loop calls the model).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import torch

from curriculum_ds.commands.corpus import build_stdlib_corpus
from curriculum_ds.core.loader import collate
from curriculum_ds.data import close_stream, open_stream, prepare

MICRO_BATCH = 8
PHASE_MAX_SEQ_LEN = 128


def _rows(local: Path, limit: int) -> list[np.ndarray]:
    ds = open_stream(local)
    rows = [np.asarray(ds[i]["input_ids"])[:PHASE_MAX_SEQ_LEN] for i in range(ds.num_samples)]
    close_stream(ds)
    return rows[:limit]


def _starts(local: Path, limit: int) -> list[np.ndarray]:
    """Each packed row's document starts (``doc_starts``), the first ``limit`` rows."""
    ds = open_stream(local)
    starts = [np.asarray(ds[i]["doc_starts"]) for i in range(min(limit, ds.num_samples))]
    close_stream(ds)
    return starts


def _micro_batches(
    rows: list[np.ndarray], seed: int, starts: list[np.ndarray] | None = None
) -> list:
    """Micro-batches of ``rows`` in a seeded order; with ``starts``, document-masked."""
    order = np.random.default_rng(seed).permutation(len(rows))
    usable = len(order) // MICRO_BATCH * MICRO_BATCH
    out = []
    for s in range(0, usable, MICRO_BATCH):
        picked = order[s : s + MICRO_BATCH]
        mb = collate([rows[i] for i in picked], np.arange(MICRO_BATCH))
        if starts is not None:
            counts = np.array([len(starts[i]) for i in picked], dtype=np.int64)
            mb = mb.with_documents(np.concatenate([starts[i] for i in picked]), counts)
        out.append(mb)
    return out


def main(argv: list[str] | None = None) -> dict[str, float]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=30, help="alternating rounds")
    parser.add_argument("--block", type=int, default=4, help="micro-batches per timed block")
    parser.add_argument("--max-rows", type=int, default=4000, help="rows read per layout")
    parser.add_argument(
        "--max-docs", type=int, default=None, help="cap the corpus's documents (quick runs)"
    )
    parser.add_argument("--json", type=Path, default=None, help="also write the figures here")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    torch.manual_seed(0)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        easy = build_stdlib_corpus(root / "corpus", max_docs=args.max_docs)["easy"]
        prepare([easy], root / "unpacked", max_seq_len=256)
        summary = prepare([easy], root / "packed", max_seq_len=PHASE_MAX_SEQ_LEN, pack=True)
        packed_rows = _rows(root / "packed", args.max_rows)
        layouts = {
            "unpacked": _micro_batches(_rows(root / "unpacked", args.max_rows), 0),
            "packed": _micro_batches(packed_rows, 0),
            # the same rows in the same order, document-masked
            "masked": _micro_batches(packed_rows, 0, _starts(root / "packed", args.max_rows)),
        }
        cfg = SimpleNamespace(
            schedule=[
                SimpleNamespace(
                    train_loader=SimpleNamespace(
                        streams=[SimpleNamespace(local=str(root / "packed"), remote=None)]
                    )
                )
            ]
        )
        from curriculum_ds.default_model import build_model

        model = build_model(None, cfg, 256)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)

    def run_block(name: str, start: int) -> tuple[int, int, float]:
        batches = layouts[name]
        real = slots = 0
        t0 = time.process_time()
        for k in range(args.block):
            mb = batches[(start + k) % len(batches)]
            out = model(mb.input_ids, **mb.forward_kwargs(), labels=mb.labels, use_cache=False)
            out.loss.backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            real += int(mb.attention_mask.sum())
            slots += mb.input_ids.numel()
        return real, slots, time.process_time() - t0

    for name in layouts:  # warm-up, untimed
        run_block(name, 0)
    totals = {name: [0, 0, 0.0] for name in layouts}
    ratios, masking = [], []
    for r in range(args.rounds):
        rates, seconds = {}, {}
        for name in (
            ("unpacked", "packed", "masked") if r % 2 == 0 else ("masked", "packed", "unpacked")
        ):
            real, slots, secs = run_block(name, r * args.block)
            totals[name][0] += real
            totals[name][1] += slots
            totals[name][2] += secs
            rates[name] = real / secs
            seconds[name] = secs
        ratios.append(rates["packed"] / rates["unpacked"])
        masking.append(seconds["masked"] / seconds["packed"])  # same rows: step time ratio
    result = {
        f"{name}_{key}": value
        for name, (real, slots, secs) in totals.items()
        for key, value in (("tokens_per_cpu_s", real / secs), ("padding", 1 - real / slots))
    }
    result["packed_over_unpacked"] = statistics.median(ratios)
    result["masked_over_unmasked_step_time"] = statistics.median(masking)
    result["prepare_padding_unpacked_at_128"] = summary.padding_unpacked
    for name in layouts:
        print(
            f"{name:>9}: {result[name + '_tokens_per_cpu_s']:>9,.0f} real tokens per CPU s, "
            f"{result[name + '_padding']:.1%} of the micro-batch slots padding"
        )
    print(
        f"packed / unpacked: {result['packed_over_unpacked']:.2f}x (median of {args.rounds} rounds)"
    )
    print(
        f"document masking, step time masked / unmasked: "
        f"{result['masked_over_unmasked_step_time']:.3f}x (median of {args.rounds} rounds)"
    )
    if args.json is not None:
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    return result


if __name__ == "__main__":
    main(sys.argv[1:])
