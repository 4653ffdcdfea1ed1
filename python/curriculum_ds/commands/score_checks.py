"""``curriculum-ds score``'s model, device and folder checks.

:func:`load_model`: the reference model folder, loaded or refused in one line;
:func:`torch_device`: ``--device`` or the default; :func:`check_causal`: the model's prediction
at a position does not depend on later tokens (``AutoModelForCausalLM`` also loads encoders);
:func:`check_writable`: a file can be created in every DATA folder. Each raises one line before
anything is written in any folder.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from curriculum_ds.errors import ConfigError, DataError

if TYPE_CHECKING:
    import torch

__all__ = ["check_causal", "check_writable", "load_model", "torch_device"]


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


def load_model(model_dir: Path) -> Any:
    """``AutoModelForCausalLM.from_pretrained(model_dir, local_files_only=True)``, in eval mode.

    Raises:
        ConfigError: the folder is missing or does not load as a causal LM (one line).
    """
    if not model_dir.is_dir():
        raise ConfigError(f"score: --model {model_dir} is not a folder (no download ever)")
    from transformers import AutoModelForCausalLM
    from transformers.utils import logging as hf_logging

    verbosity = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()  # its warnings would break the one-line refusal
    try:
        model = AutoModelForCausalLM.from_pretrained(
            model_dir,
            local_files_only=True,
            trust_remote_code=False,  # its own code: refused
        )
    except Exception as err:  # HF raises OSError, ValueError, KeyError, ... for a bad folder
        text = str(err).strip()
        detail = text.splitlines()[0] if text else type(err).__name__
        detail = detail.split(". Should have")[0]  # HF then lists every model type it knows
        hint = ""
        if (model_dir / "latest").is_file() or any(model_dir.glob("global_step*")):
            hint = f"; it holds checkpoints: `curriculum-ds export {model_dir} OUT` makes one"
        raise ConfigError(
            f"score: --model {model_dir} is not a loadable causal-LM folder: {detail}{hint}"
        ) from None
    finally:
        hf_logging.set_verbosity(verbosity)
    return model.eval()


def torch_device(device: str | None) -> torch.device:
    """``device``, or cuda when available else cpu.

    Raises:
        ConfigError: not a torch device, or CUDA asked for where there is none.
    """
    import torch

    if device is None:
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        chosen = torch.device(device)
    except (RuntimeError, ValueError):
        raise ConfigError(f'score: --device "{device}" is not a torch device') from None
    if chosen.type == "cuda" and not torch.cuda.is_available():
        raise ConfigError(f'score: --device "{device}": CUDA is not available here')
    return chosen
