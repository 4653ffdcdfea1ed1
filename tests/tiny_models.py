"""Tiny torch models for in-process tests: no download, seeded, built in microseconds."""

from __future__ import annotations

from typing import Any

import torch


class ByteLM(torch.nn.Module):
    """Embedding + linear head over the byte tokenizer's ids: logits ``(batch, seq_len, 512)``."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.embed = torch.nn.Embedding(512, 8)
        self.head = torch.nn.Linear(8, 512)

    def forward(self, input_ids: torch.Tensor, attention_mask: Any = None) -> torch.Tensor:
        return self.head(self.embed(input_ids))
