"""``curriculum-ds score``'s checks of the model and the folders beyond loading them.

:func:`check_causal`: the model's prediction at a position does not depend on later tokens
(``AutoModelForCausalLM`` also loads encoders); :func:`check_writable`: a file can be created in
every DATA folder. Both raise one line before anything is written in any folder.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from curriculum_ds.errors import ConfigError, DataError

__all__ = ["check_causal", "check_writable"]


def check_causal(model: Any, model_dir: Path, vocab: int) -> None:
    """Refuse a model whose prediction at a position depends on later tokens (not causal).

    ``AutoModelForCausalLM`` also loads encoders (BERT as ``BertLMHeadModel`` without
    ``is_decoder``): their "next-token loss" sees the token it predicts. Two sequences of
    ``min(8, positions)`` tokens (ids below ``vocab``) share their first token and differ in
    every later one, in one batch; the logits at position 0 must agree (to 1e-4 of their spread).

    Raises:
        ConfigError: one line naming the model folder.
    """
    import torch

    from curriculum_ds.preflight.model import model_max_positions

    found = model_max_positions(model)
    n = min(8, found[0]) if found is not None else 8
    if n < 2 or vocab < 2:
        return
    first = torch.arange(n) % vocab
    second = (torch.arange(n) * 7 + 3) % vocab
    second[0] = first[0]
    ids = torch.stack([first, second])
    with torch.no_grad():
        out = model(ids, attention_mask=torch.ones_like(ids))
    logits = (out.logits if hasattr(out, "logits") else out)[:, 0].double()
    spread = float(logits.std())
    if float((logits[0] - logits[1]).abs().max()) > 1e-4 * spread + 1e-6:
        raise ConfigError(
            f"score: --model {model_dir} is not a causal LM: its logits at position 0 change "
            "when a later token changes (a bidirectional model such as BERT?); the reference "
            "loss needs a model that sees only earlier tokens"
        )


def check_writable(folders: Sequence[Path]) -> None:
    """Refuse a folder where the column cannot be written (read-only folder or file system).

    A temporary file is created in each folder and removed, as the atomic write will.

    Raises:
        DataError: one line naming the folder and the system's reason.
    """
    import tempfile

    for folder in folders:
        try:
            fd, tmp = tempfile.mkstemp(prefix=".score_probe.", suffix=".tmp", dir=folder)
            os.close(fd)
            os.unlink(tmp)
        except OSError as err:
            raise DataError(
                f"score: cannot write in {folder} ({err.strerror or err}); nothing written in "
                "any folder"
            ) from None
