"""A decision made on global rank 0 and broadcast to every rank, bit for bit.

A method that reads an outside file (``file``) or fits a model decides on one rank and hands
every rank the same value, so the weights stay bit-identical without each rank reading or
fitting on its own. :func:`decide_on_rank0` runs the decision on global rank 0 only, encodes
what it returns as JSON (floats in Python's shortest round-trip form: float64 values come back
bit-identical) and broadcasts the bytes over the world (two ``torch.distributed.broadcast``
calls: the length, then the bytes; no pickle). A :class:`~curriculum_ds.errors.CurriculumError`
or ``OSError`` of the decision is sent instead of a value and raised on every rank, so no rank
waits for a broadcast that never comes. Without an initialised process group (one process) the
decision runs in place. :func:`broadcast_from_rank0` does the same for an array of a known shape
as one float64 tensor (ADO's fits; NaN allowed).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import numpy as np
import numpy.typing as npt

from curriculum_ds.errors import CurriculumError

__all__ = ["broadcast_from_rank0", "decide_on_rank0", "is_rank0"]

_ERROR = "__curriculum_ds_error__"


def _world() -> Any | None:
    """``torch.distributed`` when a process group of more than one rank is up, else None."""
    try:
        import torch.distributed as dist
    except ImportError:  # pragma: no cover - torch is a dependency
        return None
    if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
        return dist
    return None


def is_rank0() -> bool:
    """True on global rank 0, and in a process without a process group of several ranks."""
    dist = _world()
    return dist is None or dist.get_rank() == 0


def decide_on_rank0(decide: Callable[[], Any]) -> Any:
    """``decide()`` on global rank 0, its JSON value on every rank; collective.

    Every rank must call it at the same point (it is a broadcast).

    Args:
        decide: runs on global rank 0 only; returns a JSON-encodable value (dicts, lists,
            strings, finite floats, ints, bools, None).

    Returns:
        What ``decide`` returned on rank 0, decoded from its JSON on every rank (rank 0 too, so
        every rank holds equal values of equal types: tuples come back as lists).

    Raises:
        CurriculumError: ``decide`` raised a ``CurriculumError`` or an ``OSError`` on rank 0
            (its message, on every rank; the class is kept on rank 0).
        ValueError: the value is not JSON-encodable (NaN, an object).
    """
    dist = _world()
    payload = b""
    error: BaseException | None = None
    if dist is None or dist.get_rank() == 0:
        try:
            value = decide()
        except (CurriculumError, OSError) as exc:
            error = exc
            value = {_ERROR: str(exc)}
        payload = json.dumps(value, separators=(",", ":"), allow_nan=False).encode("utf-8")
    if dist is not None:
        payload = _broadcast_bytes(dist, payload)
    decoded = json.loads(payload.decode("utf-8"))
    if isinstance(decoded, dict) and _ERROR in decoded:
        if isinstance(error, CurriculumError):
            raise error
        raise CurriculumError(decoded[_ERROR]) from error
    return decoded


def _broadcast_bytes(dist: Any, payload: bytes) -> bytes:
    """Rank 0's ``payload`` on every rank: its length, then its bytes (uint8 tensors)."""
    import torch

    device = (
        torch.device("cuda", torch.cuda.current_device())
        if dist.get_backend() == "nccl"
        else torch.device("cpu")
    )
    size = torch.tensor([len(payload)], dtype=torch.int64, device=device)
    dist.broadcast(size, src=0)
    if dist.get_rank() == 0:
        data = torch.frombuffer(bytearray(payload), dtype=torch.uint8).to(device)
    else:
        data = torch.empty(int(size.item()), dtype=torch.uint8, device=device)
    if data.numel():
        dist.broadcast(data, src=0)
    return bytes(data.cpu().numpy().tobytes())


def broadcast_from_rank0(
    decide: Callable[[], npt.ArrayLike], shape: tuple[int, ...]
) -> npt.NDArray[np.float64]:
    """``decide()`` on global rank 0, broadcast to every rank as a float64 tensor (bit-exact).

    Args:
        decide: computes the value; called on rank 0 only (every rank without a process group).
        shape: the value's shape (the other ranks allocate it).

    Returns:
        float64 ``shape``: rank 0's value on every rank (NaN kept). A collective: every rank
        must call it at the same point. With NCCL the tensor goes through the current device.

    Raises:
        ValueError: rank 0's value has another shape (raised on rank 0, before the broadcast).
    """
    dist = _world()
    if dist is None:
        return np.asarray(decide(), dtype=np.float64).reshape(shape)
    import torch

    device = (
        torch.device("cuda", torch.cuda.current_device())
        if dist.get_backend() == "nccl"
        else torch.device("cpu")
    )
    if dist.get_rank() == 0:
        value = np.asarray(decide(), dtype=np.float64)
        if value.shape != shape:
            raise ValueError(f"rank 0 decided a value of shape {value.shape}, not {shape}")
        tensor = torch.from_numpy(value.copy()).to(device)
    else:
        tensor = torch.empty(shape, dtype=torch.float64, device=device)
    dist.broadcast(tensor, src=0)
    return np.asarray(tensor.cpu().numpy(), dtype=np.float64)
