"""A user's own training loop on the public API, one optimizer step, with a parameter dump.

Launched by ``test_user_loop_same_update.py`` as a script under the deepspeed launcher
(``deepspeed --num_gpus 2 user_loop_one_step.py --deepspeed_config X --out DIR``); each
``--also CONFIG,DIR,LOSS`` is one more such step after it, in the same processes (a new model and
``initialize`` each, as a launch of its own makes them: one launch for every variant). It uses only
what a user of the plugin would: ``curriculum_ds.initialize``, ``for step in curriculum``,
``step.backward`` (or ``step.backward_token_losses`` with a loss computed here) and
``step.finish``. The model is built as the reference loop builds it (``torch.manual_seed(seed)``
then ``curriculum_ds.train.build_model``), so both start from the same initial parameters.

Writes, under ``--out``:

* ``init.pt`` / ``after.pt``: the full fp32 parameters before and after the step (rank 0;
  gathered under ZeRO-3), ``{name: tensor}``.
* ``record.json``: what ``step.finish()`` returned, plus ``step.trace_record()`` (rank 0).
* ``rank{r}.json``: this rank's micro-batch sizes, real tokens and padded positions.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser()
    p.add_argument("--deepspeed_config", type=Path, required=True)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument(
        "--loss",
        choices=["logits", "token-losses"],
        default="logits",
        help="step.backward(logits) or step.backward_token_losses(our own cross-entropy)",
    )
    p.add_argument(
        "--also",
        action="append",
        default=[],
        metavar="CONFIG,DIR,LOSS",
        help="one more step after the first: its ds_config, --out and --loss",
    )
    p.add_argument("--local_rank", type=int, default=None)  # appended by the launcher
    return p.parse_args(argv)


def dump_params(engine: Any, path: Path) -> None:
    """The full fp32 parameters to ``path`` (rank 0 writes; every rank joins the gather)."""
    import deepspeed
    import torch
    import torch.distributed as dist

    named = list(engine.module.named_parameters())
    zero3 = engine.zero_optimization_stage() == 3
    with deepspeed.zero.GatheredParameters([p for _, p in named], enabled=zero3):
        if dist.get_rank() == 0:
            torch.save({n: p.detach().float().cpu().clone() for n, p in named}, path)
    dist.barrier()


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    one_step(args.deepspeed_config, args.out, args.loss)
    for also in args.also:
        config, out, loss = also.split(",")
        one_step(Path(config), Path(out), loss)
    return 0


def one_step(deepspeed_config: Path, out_dir: Path, loss: str) -> None:
    """One optimizer step of a new model on ``deepspeed_config``; its dumps under ``out_dir``."""
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F

    import curriculum_ds as cds
    from curriculum_ds.core.loss import IGNORE_INDEX
    from curriculum_ds.plugin import load_run_config
    from curriculum_ds.train import build_model

    run = load_run_config(deepspeed_config)
    cfg = run.curriculum
    torch.manual_seed(cfg.seed)  # the reference loop's model init
    model = build_model(None, cfg, max(p.train_loader.max_seq_len for p in cfg.schedule))
    engine, curriculum = cds.initialize(model=model, config=run)
    out_dir.mkdir(parents=True, exist_ok=True)
    rank = dist.get_rank()
    dump_params(engine, out_dir / "init.pt")

    for step in curriculum:
        shapes = []
        for mb in step.micro_batches:
            out = engine(mb.input_ids, attention_mask=mb.attention_mask)
            if loss == "logits":
                step.backward(out, mb)
            else:
                # our own per-token cross-entropy: position t predicts token t+1
                logits = out.logits[:, :-1].float()
                labels = mb.labels[:, 1:]
                token_losses = F.cross_entropy(
                    logits.reshape(-1, logits.size(-1)),
                    labels.reshape(-1),
                    ignore_index=IGNORE_INDEX,
                    reduction="none",
                ).view(labels.shape)
                step.backward_token_losses(token_losses, labels != IGNORE_INDEX, mb)
            shapes.append(
                {
                    "shape": list(mb.input_ids.shape),
                    "real_tokens": int(mb.attention_mask.sum()),
                    "padded_positions": int((mb.attention_mask == 0).sum()),
                }
            )
        record = step.finish()
        (out_dir / f"rank{rank}.json").write_text(json.dumps(shapes))
        if rank == 0:
            (out_dir / "record.json").write_text(
                json.dumps({"record": record, "trace": step.trace_record()})
            )
        break  # one optimizer step
    dump_params(engine, out_dir / "after.pt")
    curriculum.close()


if __name__ == "__main__":
    sys.exit(main())
