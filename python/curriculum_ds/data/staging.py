"""A prepared folder's staging: a temporary folder renamed into place when complete.

The folder is written beside its target and renamed when complete; its metric columns go in a
byte-deterministic ``.npz``.

Shared by :func:`~curriculum_ds.data.writer.prepare`, the parts of a spread prepare
(:mod:`curriculum_ds.data.sharded`) and :func:`~curriculum_ds.data.merge.merge_parts`.
"""

from __future__ import annotations

import contextlib
import shutil
import tempfile
import zipfile
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

import numpy as np

from curriculum_ds.errors import DataError

__all__ = [
    "check_out_empty",
    "move_into_place",
    "remove_empty_folders",
    "staged_folder",
    "write_npz",
]


def check_out_empty(out: Path) -> None:
    """Refuse an output path that is a file, or a folder that is not empty (one line)."""
    if out.exists() or out.is_symlink():
        if not out.is_dir():
            raise DataError(f"output path exists and is not a folder: {out}")
        if any(out.iterdir()):
            raise DataError(f"output folder is not empty: {out}")


@contextlib.contextmanager
def staged_folder(out: Path) -> Iterator[Path]:
    """A temporary folder beside ``out`` that becomes ``out`` when the block ends without error.

    ``out`` (resolved) is checked empty again before the rename (:func:`move_into_place`). On an
    error the folder is removed, and so are the parent folders of ``out`` that this created.

    Raises:
        DataError: the folder cannot be created (one line naming ``out``).
    """
    created = [p for p in (out.parent, *out.parent.parents) if not p.exists()]  # deepest first
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.tmp-", dir=out.parent))
    except OSError as err:
        remove_empty_folders(created)
        raise DataError(f"cannot create the output folder {out}: {err.strerror or err}") from None
    try:
        yield tmp
        move_into_place(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        remove_empty_folders(created)
        raise


def move_into_place(tmp: Path, out: Path) -> None:
    """Rename the finished folder ``tmp`` to ``out`` (checked still absent or empty again)."""
    check_out_empty(out)  # still empty? (someone may have written there meanwhile)
    if out.is_dir():
        out.rmdir()
    tmp.chmod(0o755)  # mkdtemp makes it 0700
    tmp.rename(out)


def write_npz(path: Path, arrays: Mapping[str, np.ndarray]) -> None:
    """Like ``np.savez`` but byte-deterministic (fixed zip timestamps)."""
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_STORED) as zf:
        for name, arr in arrays.items():
            info = zipfile.ZipInfo(f"{name}.npy", date_time=(1980, 1, 1, 0, 0, 0))
            info.external_attr = 0o644 << 16
            with zf.open(info, "w", force_zip64=True) as fh:
                np.lib.format.write_array(fh, np.ascontiguousarray(arr), allow_pickle=False)


def remove_empty_folders(folders: Sequence[Path]) -> None:
    """Remove each folder (deepest first) if it is empty; stop at the first that is not."""
    for folder in folders:
        try:
            folder.rmdir()
        except OSError:
            return
