"""A user's own training loop on the public API, written like the README's, with test hooks.

Its own model (``TinyLM``: embeddings, a causal transformer, a head; no HF), its own loss
variants, its own checkpoint cadence and a self-kill, launched by the integration tests as a
script: ``deepspeed --num_gpus 2 user_loop_script.py --deepspeed_config ds.json --run-dir DIR``.
It uses only ``curriculum_ds.initialize``, ``curriculum.load_checkpoint`` / ``save_checkpoint``,
``for step in curriculum``, ``step.backward`` / ``step.backward_token_losses`` and
``step.finish``. Options of its own:

* ``--log FILE``: rank 0 appends one JSON line per finished step: ``record`` (what
  ``step.finish()`` returned), ``trace`` (``step.trace_record()``: the global batch) and
  ``reweighting`` (``record.history``).
* ``--save-interval N``: ``curriculum.save_checkpoint(RUN_DIR/checkpoints)`` every N steps.
* ``--kill-after-step N``: SIGKILL this process once step N is finished, logged and (when due)
  checkpointed.
* ``--variants V1,V2,...``: the loss of step k is ``Vk`` (the last one repeats): ``ce``
  (``step.backward(logits)``), ``smooth`` (label-smoothed cross-entropy through
  ``step.backward_token_losses``), ``aux`` (``ce`` plus ``aux_loss=z_loss(...)``), ``smooth+aux``.
* ``--max-steps N``: stop after step N.
* ``--dump DIR``: rank 0 saves the parameters before the first step (``params0.pt``) and after
  each step k (``params{k}.pt``); every rank saves its micro-batches of step k
  (``rank{r}_step{k}.pt``).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

import curriculum_ds
from curriculum_ds.data import read_stream_info

LABEL_SMOOTHING = 0.1
Z_LOSS_COEF = 0.01
"""The ``aux`` variant's term: ``Z_LOSS_COEF × mean over real tokens of logsumexp(logits)²``."""


class TinyLM(nn.Module):
    """Token + position embeddings, a 1-layer causal transformer, an LM head (fp32, no dropout)."""

    def __init__(self, vocab_size: int, max_seq_len: int, dim: int = 32):
        super().__init__()
        self.tok = nn.Embedding(vocab_size, dim)
        self.pos = nn.Embedding(max_seq_len, dim)
        layer = nn.TransformerEncoderLayer(
            dim, nhead=2, dim_feedforward=2 * dim, dropout=0.0, batch_first=True, norm_first=True
        )
        self.blocks = nn.TransformerEncoder(layer, num_layers=1, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, vocab_size)

    def forward(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None
    ) -> torch.Tensor:
        seq_len = input_ids.size(1)
        x = self.tok(input_ids) + self.pos(torch.arange(seq_len, device=input_ids.device))
        causal = torch.ones(seq_len, seq_len, dtype=torch.bool, device=x.device).triu(1)
        padding = None if attention_mask is None else attention_mask == 0
        x = self.blocks(x, mask=causal, src_key_padding_mask=padding)
        return self.head(self.norm(x))


def build_model(ds_config: Path) -> TinyLM:
    """``TinyLM`` sized to the data (``prepare``'s recorded vocab_size), seeded: same on every
    rank and in the tests' oracle."""
    schedule = json.loads(ds_config.read_text())["curriculum"]["schedule"]
    loaders = [phase["train_loader"] for phase in schedule]
    vocab_size = max(
        read_stream_info(s["local"]).vocab_size for tl in loaders for s in tl["streams"]
    )
    torch.manual_seed(0)
    return TinyLM(vocab_size, max(tl["max_seq_len"] for tl in loaders))


def smoothed_token_losses(
    logits: torch.Tensor, labels: torch.Tensor, smoothing: float = LABEL_SMOOTHING
) -> torch.Tensor:
    """Label-smoothed next-token cross-entropy per position: ``(batch, seq_len - 1)``, nats; 0
    where the shifted label is -100."""
    shift_labels = labels[:, 1:]
    return F.cross_entropy(
        logits[:, :-1].flatten(0, 1).float(),
        shift_labels.flatten(),
        ignore_index=-100,
        label_smoothing=smoothing,
        reduction="none",
    ).view(shift_labels.shape)


def z_loss(logits: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    """``Z_LOSS_COEF × mean over real tokens of logsumexp(logits)²`` (PaLM's z-loss), a scalar."""
    lse = torch.logsumexp(logits.float(), dim=-1)
    mask = attention_mask.float()
    return Z_LOSS_COEF * (lse.pow(2) * mask).sum() / mask.sum()


def dump_params(engine: torch.nn.Module, path: Path) -> None:
    if dist.get_rank() == 0:
        named = engine.module.named_parameters()
        torch.save({n: p.detach().float().cpu().clone() for n, p in named}, path)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--deepspeed_config", type=Path, required=True)
    p.add_argument("--run-dir", type=Path, required=True)
    p.add_argument("--log", type=Path, required=True)
    p.add_argument("--save-interval", type=int, default=0)
    p.add_argument("--kill-after-step", type=int, default=None)
    p.add_argument("--variants", default="ce")
    p.add_argument("--max-steps", type=int, default=None)
    p.add_argument("--dump", type=Path, default=None)
    args, _ = p.parse_known_args()  # the launcher appends --local_rank=K
    variants = args.variants.split(",")

    model = build_model(args.deepspeed_config)
    engine, curriculum = curriculum_ds.initialize(model=model, config=args.deepspeed_config)
    ckpt_dir = args.run_dir / "checkpoints"
    curriculum.load_checkpoint(ckpt_dir)  # resume; a no-op on a fresh run dir
    rank = dist.get_rank()
    if args.dump is not None:
        args.dump.mkdir(parents=True, exist_ok=True)
        dump_params(engine, args.dump / f"params{curriculum.global_step}.pt")

    for step in curriculum:
        variant = variants[min(step.global_step, len(variants)) - 1]
        for mb in step.micro_batches:
            logits = engine(mb.input_ids, attention_mask=mb.attention_mask)
            aux = z_loss(logits, mb.attention_mask) if "aux" in variant else None
            if variant.startswith("smooth"):
                token_losses = smoothed_token_losses(logits, mb.labels)
                step.backward_token_losses(token_losses, mb.loss_mask, mb, aux_loss=aux)
            else:
                step.backward(logits, mb, aux_loss=aux)
        record = step.finish()
        if args.dump is not None:
            mbs = [
                {
                    "input_ids": mb.input_ids.cpu(),
                    "attention_mask": mb.attention_mask.cpu(),
                    "labels": mb.labels.cpu(),
                    "positions": torch.as_tensor(mb.positions),
                }
                for mb in step.micro_batches
            ]
            torch.save(mbs, args.dump / f"rank{rank}_step{record['step']}.pt")
            dump_params(engine, args.dump / f"params{record['step']}.pt")
        if rank == 0:
            row = {"record": record, "trace": step.trace_record(), "reweighting": record.history}
            with args.log.open("a") as f:
                f.write(json.dumps(row) + "\n")
        if args.save_interval and record["step"] % args.save_interval == 0:
            curriculum.save_checkpoint(ckpt_dir)
        if record["step"] == args.kill_after_step:
            dist.barrier()  # both ranks have logged and checkpointed
            os.kill(os.getpid(), signal.SIGKILL)
        if record["step"] == args.max_steps:
            break
    curriculum.close()
    dist.barrier()


if __name__ == "__main__":
    main()
