"""Exact match of QA records under teacher forcing: every answer token the model's argmax.

A QA record (:mod:`curriculum_ds.data.qa`) is a hit when, fed the record's own tokens (teacher
forcing, one forward pass), the model's most likely next token at every loss-bearing position
is the record's token there: its answer's tokens and the EOS after them. That is exactly the
records that greedy decoding from the prompt would answer token for token and then stop, found
without generating: deterministic, one forward per micro-batch like the loss, and exact over
ranks (hit and record counts are summed, never shares averaged). Ties in the argmax go to the
lowest token id (``torch.argmax``).
"""

from __future__ import annotations

import torch

from curriculum_ds.core.loss import IGNORE_INDEX

__all__ = ["answer_hits"]


def answer_hits(logits: torch.Tensor, labels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Per row: whether every loss-bearing next token is the argmax, and whether it has any.

    Args:
        logits: float ``(batch, seq_len, vocab)``; position t predicts token t+1.
        labels: int64 ``(batch, seq_len)``, ``IGNORE_INDEX`` where no loss is borne (a QA
            record's prompt, padding, a placeholder row).

    Returns:
        ``(hits, records)``: bool ``(batch,)`` each, on ``labels``' device: ``records`` marks
        the rows with at least one loss-bearing token, ``hits`` those of them whose every such
        token is the argmax. Deterministic.
    """
    targets = labels[:, 1:]
    mask = targets != IGNORE_INDEX
    predicted = logits[:, :-1].argmax(dim=-1).to(targets.device)
    correct = (predicted == targets) | ~mask
    records = mask.any(dim=1)
    return correct.all(dim=1) & records, records
