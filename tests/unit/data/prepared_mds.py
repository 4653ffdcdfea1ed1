"""Input files for prepare, and reading back the MDS datasets it writes."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from curriculum_ds.data import ByteTokenizer, close_stream, open_stream

BYTE = ByteTokenizer()
TEXT_A = "The quick brown fox jumps over the lazy dog.\nZwölf Boxkämpfer jagen Viktor — ✓ 🦊\n"
TEXT_B = "def f(x):\n    return x * 2  # doubles\n"


def read_all(local: Path) -> list[dict]:
    ds = open_stream(local)
    rows = [ds[i] for i in range(ds.num_samples)]
    close_stream(ds)
    return rows


def write(path: Path, text: str | bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text, encoding="utf-8")
    return path


def documents_of(rows: list[dict], eos_id: int) -> list[list[int]]:
    """Concatenate samples and cut at EOS: the token ids of each document (EOS dropped)."""
    ids = np.concatenate([np.asarray(r["input_ids"]) for r in rows]).tolist()
    docs: list[list[int]] = []
    cur: list[int] = []
    for i in ids:
        if i == eos_id:
            docs.append(cur)
            cur = []
        else:
            cur.append(i)
    assert not cur, "every document must end with EOS"
    return docs


def names(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


def assert_nothing_written(parent: Path, out: Path, before: set[str]) -> None:
    assert not out.exists()
    assert set(names(parent)) == before, "temp folder left behind"
