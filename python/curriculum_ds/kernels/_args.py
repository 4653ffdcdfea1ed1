"""Argument normalisation shared by the kernel wrappers: dtype, contiguity, integer ranges.

Each helper turns one Python argument into the plain value the native module takes, or raises
``TypeError`` (wrong dtype) / ``ValueError`` (bad value) naming the argument.
"""

from __future__ import annotations

import os
from typing import Literal

import numpy as np
from numpy.typing import ArrayLike, NDArray

__all__ = [
    "NanPolicy",
    "count_arg",
    "float64_array",
    "floats_array",
    "int64_array",
    "int_arg",
    "one_d",
    "u64_arg",
]

NanPolicy = Literal["raise", "omit"]


def one_d(arr: np.ndarray, name: str) -> None:
    if arr.ndim != 1:
        raise ValueError(f"{name} must be 1-D, got shape {arr.shape}")


def floats_array(x: ArrayLike, name: str) -> NDArray[np.float32] | NDArray[np.float64]:
    """float32/float64 stay as they are; other real numeric dtypes become float64."""
    arr = np.asarray(x)
    one_d(arr, name)
    if arr.dtype == np.float32 or arr.dtype == np.float64:
        return np.ascontiguousarray(arr)
    if arr.dtype.kind in "biuf":
        return np.ascontiguousarray(arr, dtype=np.float64)
    raise TypeError(f"{name} must have a real numeric dtype (float32/float64), got {arr.dtype}")


def float64_array(x: ArrayLike, name: str) -> NDArray[np.float64]:
    arr = np.asarray(x)
    one_d(arr, name)
    if arr.dtype.kind not in "biuf":
        raise TypeError(f"{name} must have a real numeric dtype, got {arr.dtype}")
    return np.ascontiguousarray(arr, dtype=np.float64)


def int64_array(x: ArrayLike, name: str) -> NDArray[np.int64]:
    arr = np.asarray(x)
    one_d(arr, name)
    if arr.dtype.kind not in "iu":
        raise TypeError(f"{name} must have an integer dtype, got {arr.dtype}")
    if arr.dtype.kind == "u" and arr.size and int(arr.max()) > np.iinfo(np.int64).max:
        raise ValueError(f"{name} has values beyond the int64 range")
    return np.ascontiguousarray(arr, dtype=np.int64)


_I64_MIN, _I64_MAX = -(2**63), 2**63 - 1
_U64_MAX = 2**64 - 1


def int_arg(x: object, name: str) -> int:
    """An int argument the native module takes as an int64 (a length, count or index).

    A Python int beyond the int64 range is refused here with a ValueError naming the argument
    (the native conversion would raise OverflowError); the kernel checks the documented range.
    """
    if isinstance(x, bool) or not isinstance(x, (int, np.integer)):
        raise TypeError(f"{name} must be an int, got {type(x).__name__}")
    n = int(x)
    if not _I64_MIN <= n <= _I64_MAX:
        raise ValueError(f"{name} = {n} is out of range (beyond the int64 range)")
    return n


def u64_arg(x: object, name: str) -> int:
    """A seed or counter: an int in ``[0, 2**64)`` (ValueError naming the argument otherwise)."""
    if isinstance(x, bool) or not isinstance(x, (int, np.integer)):
        raise TypeError(f"{name} must be an int, got {type(x).__name__}")
    n = int(x)
    if not 0 <= n <= _U64_MAX:
        raise ValueError(f"{name} must be in [0, 2**64), got {n}")
    return n


def _physical_memory_bytes() -> int:
    try:
        return int(os.sysconf("SC_PHYS_PAGES")) * int(os.sysconf("SC_PAGE_SIZE"))
    except (ValueError, OSError, AttributeError):  # not POSIX: no guard beyond the kernel's own
        return 1 << 62


def count_arg(x: object, name: str, *, bytes_per_item: int = 8) -> int:
    """An output length: an int whose int64 result must fit in this machine's memory.

    A Rust allocation that fails aborts the process (no exception can be caught), so a length
    that cannot possibly be allocated is refused here with a ValueError instead.
    """
    n = int_arg(x, name)
    limit = _physical_memory_bytes()
    if n > 0 and n * bytes_per_item > limit:
        raise ValueError(
            f"{name} = {n} would need {n * bytes_per_item / 2**30:.1f} GiB, more than this "
            f"machine's {limit / 2**30:.1f} GiB of memory"
        )
    return n
