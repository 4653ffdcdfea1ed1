"""Reading checkpoint files without running code: torch's ``weights_only`` loader, one allow-list.

Why: a file written by ``torch.save`` is a pickle, and unpickling it calls whatever the file names
(a ``__reduce__`` that returns ``(os.system, ("...",))`` runs a shell command). DeepSpeed unpickles
a tag's files with ``torch.load(weights_only=False)``: ``engine.load_checkpoint`` (its
``TorchCheckpointEngine.load``), ``ds_to_universal`` (elastic resume) and
``get_fp32_state_dict_from_zero_checkpoint`` (``export``), and the HF Trainer's resume goes
through ``engine.load_checkpoint``. A checkpoint received from elsewhere must therefore be checked
before any of them opens it. This module is the one place curriculum_ds unpickles a checkpoint
file, and the check in front of those DeepSpeed calls:

* :func:`load` reads one file with ``torch.load(weights_only=True)`` (memory-mapped: tensors are
  not read until used), allowing beyond torch's own types (tensors, containers, dtypes) only
  :data:`ALLOWED_GLOBALS`;
* :func:`check_files` loads each file DeepSpeed is about to open that way, before it does
  (:func:`tag_files`: every ``*.pt`` file of a tag folder, its subfolders included). A file
  that needs any other global is refused with one line naming the file and the global
  (:class:`~curriculum_ds.errors.UnsafeCheckpointError`) and DeepSpeed never opens it; a file
  that loads here holds only allowed globals, which DeepSpeed's full unpickler then resolves from
  the same bytes.

The allow-list is what tags written by this package hold, found by saving tags with it (the
reference loop at ZeRO 0-3, fp32 and bf16, both dynamic units, FusedAdam with an lr scheduler;
the HF Trainer's ``checkpoint-N``; DeepSpeed's universal conversion of ZeRO 1-3 tags): numpy's
array reconstruction (the re-weighting window of the curriculum state, the HF Trainer's RNG
state) and DeepSpeed's bookkeeping types of its ZeRO and bf16 optimizer states (plus
``DynamicLossScaler``, the fp16 twin of ``LossScaler``). Nothing else a pickle can name is
needed: the curriculum state is plain ints, floats, strings, lists, dicts and numpy arrays.

The DeepSpeed types are resolved only when DeepSpeed's modules are imported already (in a
training process) or when a file needs one: importing DeepSpeed takes seconds, and ``report``
reads model states files that hold numpy arrays only.
"""

from __future__ import annotations

import importlib
import os
import re
import sys
import zipfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from curriculum_ds.errors import ResumeError, UnsafeCheckpointError

__all__ = [
    "ALLOWED_GLOBALS",
    "DEEPSPEED_GLOBALS",
    "NUMPY_GLOBALS",
    "Stamp",
    "check_files",
    "check_unchecked",
    "load",
    "stamp",
    "tag_files",
]

Stamp = tuple[str, int, int]
"""A file as it was checked: ``(path, size in bytes, modification time in ns)``."""

_NUMERIC_DTYPES = (
    "BoolDType",
    *(f"{sign}Int{bits}DType" for sign in ("", "U") for bits in (8, 16, 32, 64)),
    "LongLongDType",
    "ULongLongDType",
    *(f"Float{bits}DType" for bits in (16, 32, 64)),
)

NUMPY_GLOBALS: dict[str, str] = {
    "numpy._core.multiarray._reconstruct": "numpy._core.multiarray._reconstruct",
    "numpy.core.multiarray._reconstruct": "numpy._core.multiarray._reconstruct",  # numpy 1.x
    "numpy.ndarray": "numpy.ndarray",
    "numpy.dtype": "numpy.dtype",
    **{f"numpy.dtypes.{name}": f"numpy.dtypes.{name}" for name in _NUMERIC_DTYPES},
}
"""Global as a pickle names it -> the object it is: a numpy array of bools, integers or floats
(the dtype classes are what torch's loader checks when a dtype is rebuilt; no object arrays)."""

DEEPSPEED_GLOBALS: tuple[str, ...] = (
    "deepspeed.runtime.fp16.loss_scaler.LossScaler",
    "deepspeed.runtime.fp16.loss_scaler.DynamicLossScaler",
    "deepspeed.runtime.zero.config.ZeroStageEnum",
    "deepspeed.utils.tensor_fragment.fragment_address",
)
"""DeepSpeed's types in its ZeRO / bf16 / fp16 optimizer states (plain data classes, an enum)."""

ALLOWED_GLOBALS: tuple[str, ...] = (*NUMPY_GLOBALS, *DEEPSPEED_GLOBALS)
"""Every global a checkpoint file may need beyond torch's own ``weights_only`` types."""

_GLOBAL = re.compile(
    r"GLOBAL (\S+?)(?: was not| whose module|$)|but got <class '([^']+)'>"
    r"|unrecognized function (.+?)(?: which belongs|$)",
    re.MULTILINE,
)


def _resolve(path: str) -> Any:
    module, _, attr = path.rpartition(".")
    return getattr(importlib.import_module(module), attr)


def _allowed(*, import_deepspeed: bool) -> list[Any]:
    """The allow-list as torch's ``safe_globals`` takes it: ``(object, name)`` pairs.

    DeepSpeed's types are included when their module is imported already, or (with
    ``import_deepspeed``) after importing it with DeepSpeed's environment set.
    """
    allowed: list[Any] = [(_resolve(target), name) for name, target in NUMPY_GLOBALS.items()]
    if import_deepspeed and "deepspeed" not in sys.modules:
        import torch

        from curriculum_ds.distributed import set_deepspeed_env

        set_deepspeed_env(os.environ, cuda=bool(torch.cuda.is_available()))
    for name in DEEPSPEED_GLOBALS:
        module, _, attr = name.rpartition(".")
        if module in sys.modules or import_deepspeed:
            allowed.append((getattr(importlib.import_module(module), attr), name))
    return allowed


def _refused_global(exc: BaseException) -> str | None:
    """The global a ``weights_only`` refusal names (None: the refusal names none)."""
    match = _GLOBAL.search(str(exc))
    return next((g for g in match.groups() if g), None) if match else None


def _refusal_reason(exc: BaseException) -> str:
    """The first line of torch's own reason, after its preamble (``WeightsUnpickler error:``)."""
    text = str(exc).split("WeightsUnpickler error:", 1)[-1]
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[0] if lines else type(exc).__name__


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text.splitlines()[0]}" if text else type(exc).__name__


def load(path: Path) -> Any:
    """``torch.load(path, weights_only=True)`` with :data:`ALLOWED_GLOBALS`, on CPU, mmapped.

    A file in torch's zip format (every ``torch.save`` since torch 1.6) is memory-mapped: its
    tensors are read when used. Deterministic; runs no code the file names.

    Raises:
        UnsafeCheckpointError: the file needs a global (a function or class) outside the
            allow-list: one line naming the file and the global.
        ResumeError: the file cannot be read (missing, truncated, not a torch file, a pickle
            opcode torch's safe loader does not take): one line naming it.
    """
    import pickle

    import torch

    mmap = zipfile.is_zipfile(path) if path.is_file() else False
    for import_deepspeed in (False, True):
        try:
            with torch.serialization.safe_globals(_allowed(import_deepspeed=import_deepspeed)):
                return torch.load(path, map_location="cpu", weights_only=True, mmap=mmap)
        except pickle.UnpicklingError as exc:
            name = _refused_global(exc)
            if name in DEEPSPEED_GLOBALS and not import_deepspeed:
                continue  # the first file that needs DeepSpeed's types: import it, load again
            if name is None:  # no callable named: not a pickle torch can read (garbage)
                raise ResumeError(
                    f"{path}: cannot be read (not a checkpoint file torch's safe loader reads: "
                    f"{_refusal_reason(exc)})"
                ) from None
            raise UnsafeCheckpointError(
                f"{path}: refused: it needs the global {name}, which no checkpoint of "
                "curriculum_ds or DeepSpeed holds; unpickling it could run code "
                "(docs/security.md)"
            ) from None
        except Exception as exc:  # a truncated or foreign file: one line, not a traceback
            raise ResumeError(f"{path}: cannot be read ({_first_line(exc)})") from None
    raise AssertionError("unreachable")  # pragma: no cover - the loop returns or raises


def tag_files(tag_dir: Path) -> list[Path]:
    """Every file DeepSpeed may unpickle when it loads or converts the tag folder ``tag_dir``.

    Its ``*.pt`` files, in subfolders too (a universal tag keeps one folder per parameter):
    model states of every model-parallel and ZeRO-3 rank, optimizer states of every
    data-parallel rank. Sorted by path.
    """
    return sorted(p for p in tag_dir.rglob("*.pt") if p.is_file())


def check_files(paths: Iterable[Path]) -> None:
    """Load each of ``paths`` with :func:`load` and drop it: refuse what could run code.

    Call it on what DeepSpeed is about to open, before it does (see the module docstring).
    Each file is read once (memory-mapped: its pickle, not its tensors).

    Raises:
        UnsafeCheckpointError: a file needs a global outside :data:`ALLOWED_GLOBALS`.
        ResumeError: a file cannot be read.
    """
    for path in paths:
        load(path)


def stamp(path: Path) -> Stamp:
    """``path`` as it is now (:data:`Stamp`); take it before the file is checked."""
    st = path.stat()
    return (str(path), st.st_size, st.st_mtime_ns)


def check_unchecked(tag_dir: Path, checked: frozenset[Stamp]) -> None:
    """:func:`check_files` of the files of ``tag_dir`` not in ``checked`` as they are now.

    What DeepSpeed will open that an earlier check did not see: a file added since, or one
    rewritten (another size or modification time). Right before DeepSpeed opens the tag.

    Raises:
        UnsafeCheckpointError: such a file needs a global outside :data:`ALLOWED_GLOBALS`.
        ResumeError: such a file cannot be read.
    """
    check_files(p for p in tag_files(tag_dir) if stamp(p) not in checked)
