"""Crafted checkpoints for the tests of issue 31: files whose unpickling runs a shell command.

:class:`CodePayload` is the break-in report's payload (F1): its ``__reduce__`` names
``os.system``, so any ``torch.load(..., weights_only=False)`` of a file holding it runs ``touch
MARKER``. :func:`crafted_tag` writes a DeepSpeed-shaped tag carrying it in its model states file
(the report's reproduction) or, with whole model states, in its ZeRO-2 optimizer states file;
:func:`inject_payload` puts it into a real file a run wrote. A test then asserts the one-line
refusal and that ``MARKER`` never appears.
"""

from __future__ import annotations

import os
import shlex
from pathlib import Path
from typing import Any

MODEL_STATES = "mp_rank_00_model_states.pt"
OPTIM_STATES = "zero_pp_rank_0_mp_rank_00_optim_states.pt"


class CodePayload:
    """Unpickled, runs ``touch MARKER`` (the pickle names the global ``posix.system``)."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[Any, tuple[str]]:
        return (os.system, (f"touch {shlex.quote(str(self.marker))}",))


def crafted_tag(
    ckpts: Path,
    marker: Path,
    *,
    payload_in: str,
    tag: str = "global_step2",
    curriculum: dict[str, Any] | None = None,
) -> Path:
    """A tag ``ckpts/tag`` (``latest`` naming it) whose ``payload_in`` file carries the payload.

    ``payload_in="model_states"``: a ZeRO-0 tag whose model states hold the payload as the
    curriculum state (F1's reproduction). ``payload_in="optimizer_states"``: a ZeRO-2 tag with
    whole model states (``curriculum``: the curriculum state, default none) and the payload in
    the optimizer states, where DeepSpeed keeps its loss scaler. ``payload_in="none"``: a whole
    ZeRO-2 tag. Returns the tag folder.
    """
    import torch

    folder = ckpts / tag
    folder.mkdir(parents=True)
    zero2 = payload_in != "model_states"
    states = {
        "module": {"weight": torch.zeros(2, 2)},
        "dp_world_size": 1,
        "mp_world_size": 1,
        "global_steps": 2,
        "ds_version": "0.19.8",
        "ds_config": {"train_batch_size": 4, "zero_optimization": {"stage": 2 if zero2 else 0}},
        "curriculum": CodePayload(marker) if payload_in == "model_states" else curriculum,
    }
    torch.save(states, folder / MODEL_STATES)
    if zero2:
        loss_scaler = CodePayload(marker) if payload_in == "optimizer_states" else None
        optim = {"optimizer_state_dict": {"loss_scaler": loss_scaler, "partition_count": [1]}}
        torch.save({**optim, "ds_version": "0.19.8"}, folder / OPTIM_STATES)
    (ckpts / "latest").write_text(tag)
    return folder


def inject_payload(path: Path, marker: Path) -> None:
    """Rewrite the torch file ``path`` (a dict a run wrote) with the payload under a new key."""
    import torch

    state = torch.load(path, map_location="cpu", weights_only=False)  # the test's own file
    state["payload"] = CodePayload(marker)
    torch.save(state, path)
