"""prepare's readers stream: an input much larger than the memory they may use reads fine.

A fresh interpreter reads every document of a ~100 MB input (gzip JSONL, zstd JSONL, plain JSONL,
a Parquet file) and reports its peak RSS growth (``ru_maxrss``) from before the first byte is read
to the last document. Reading the whole file, as prepare did before issue 12, grows it by about
the input's size (91 MB of the 96 MB of plain JSONL, measured); the streaming readers must stay
under a quarter of it. (Saved HF datasets are memory-mapped by
``datasets``: their pages are file-backed, counted in RSS yet reclaimable, so they are not
measured this way; they are read in batches, never materialised.)
"""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import zstandard

DOC_CHARS = 4096
NUM_DOCS = 24_576  # 24,576 x 4 KiB = 96 MiB of text, more in JSON
ALLOWED_GROWTH = 24 * 2**20  # bytes: a quarter of the text

_READER = """
import json, resource, sys
from pathlib import Path
import pyarrow.parquet, zstandard  # imported before the baseline: their code is not the data
from curriculum_ds.data.documents import ReadStats, check_inputs, iter_documents

stats = ReadStats()
docs = iter_documents(check_inputs([Path(sys.argv[1])]), stats)
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # before the first byte is read
num, chars = 0, 0
for doc in docs:
    num += 1
    chars += len(doc)
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(json.dumps({"num": num, "chars": chars, "growth": (peak - base) * 1024}))
"""


def _doc(i: int) -> str:
    head = f"document {i:06d} "
    return head + "lorem ipsum dolor sit amet " * ((DOC_CHARS - len(head)) // 27 + 1)


def _lines() -> bytes:
    return b"".join(
        json.dumps({"text": _doc(i)[:DOC_CHARS]}).encode() + b"\n" for i in range(NUM_DOCS)
    )


def _write_gzip(path: Path) -> None:
    path.write_bytes(gzip.compress(_lines(), compresslevel=1))


def _write_zstd(path: Path) -> None:
    path.write_bytes(zstandard.ZstdCompressor(level=1).compress(_lines()))


def _write_plain(path: Path) -> None:
    path.write_bytes(_lines())


def _write_parquet(path: Path) -> None:
    schema = pa.schema([("text", pa.string())])
    with pq.ParquetWriter(path, schema) as writer:
        for start in range(0, NUM_DOCS, 1024):
            docs = [_doc(i)[:DOC_CHARS] for i in range(start, start + 1024)]
            writer.write_table(pa.table({"text": docs}, schema=schema))


@pytest.mark.parametrize(
    ("name", "make"),
    [
        ("big.jsonl.gz", _write_gzip),
        ("big.jsonl.zst", _write_zstd),
        ("big.jsonl", _write_plain),
        ("big.parquet", _write_parquet),
    ],
)
def test_reading_a_large_input_needs_a_fraction_of_its_size(tmp_path: Path, name, make) -> None:
    path = tmp_path / name
    make(path)
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[3] / "python")}
    proc = subprocess.run(
        [sys.executable, "-c", _READER, str(path)],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    assert report["num"] == NUM_DOCS
    assert report["chars"] == NUM_DOCS * DOC_CHARS  # every document read, whole
    assert report["growth"] < ALLOWED_GROWTH, (
        f"reading {report['chars'] / 2**20:.0f} MiB of text grew the peak RSS by "
        f"{report['growth'] / 2**20:.1f} MiB"
    )
