"""A small model in nanoGPT's convention, for ``--model-factory nanogpt_model:build``.

As Karpathy's nanoGPT ``model.py``: a ``GPTConfig`` dataclass whose ``block_size`` is the context,
and ``GPT.forward(idx, targets=None) -> (logits, loss)`` with the logits of every position and
the cross-entropy (``ignore_index=-1``) when ``targets`` is given, else the logits of the last
position only and ``loss=None``. Written for the tests (one causal attention layer, no dropout).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from curriculum_ds.model_factory import nanogpt_forward


@dataclass
class GPTConfig:
    block_size: int = 64
    vocab_size: int = 257
    n_embd: int = 32
    n_head: int = 2


class GPT(nn.Module):
    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        self.config = config
        self.wte = nn.Embedding(config.vocab_size, config.n_embd)
        self.wpe = nn.Embedding(config.block_size, config.n_embd)
        self.attn = nn.MultiheadAttention(config.n_embd, config.n_head, batch_first=True)
        self.ln_f = nn.LayerNorm(config.n_embd)
        self.lm_head = nn.Linear(config.n_embd, config.vocab_size, bias=False)

    def forward(
        self, idx: torch.Tensor, targets: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        t = idx.size(1)
        assert t <= self.config.block_size, f"sequence {t} > block_size {self.config.block_size}"
        x = self.wte(idx) + self.wpe(torch.arange(t, device=idx.device))
        causal = torch.ones(t, t, dtype=torch.bool, device=idx.device).triu(1)
        x = x + self.attn(x, x, x, attn_mask=causal, need_weights=False)[0]
        x = self.ln_f(x)
        if targets is None:  # inference: the last position only, as nanoGPT
            return self.lm_head(x[:, [-1], :]), None
        logits = self.lm_head(x)
        loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1), ignore_index=-1)
        return logits, loss


def build(vocab_size: int, max_seq_len: int) -> tuple[GPT, object]:
    """The ``--model-factory`` of the tests: the model and nanoGPT's forward adapter."""
    return GPT(GPTConfig(block_size=max_seq_len, vocab_size=vocab_size)), nanogpt_forward
