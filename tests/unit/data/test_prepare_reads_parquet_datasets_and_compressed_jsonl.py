"""prepare reads Parquet files and folders, saved HF datasets, gzip/zstd JSONL (issue 12 part 2).

Each input gives shards identical, byte for byte, to the same text given as plain JSONL. A bad
row is one line naming the file and the row, and nothing is left behind.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import datasets
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import zstandard
from click.testing import CliRunner
from helpers import one_error_line, ragged_docs
from prepared_mds import assert_nothing_written, documents_of, names, read_all, write

from curriculum_ds.cli import main
from curriculum_ds.data import prepare
from curriculum_ds.errors import DataError

DOCS = [*ragged_docs(60, seed=3, min_len=5, max_len=300), "ünï — ✓ 🦊\u2028line", "x" * 700]


def _jsonl_bytes(docs: list[str], field: str = "text") -> bytes:
    return "".join(
        json.dumps({field: d, "id": i}, ensure_ascii=False) + "\n" for i, d in enumerate(docs)
    ).encode()


def _files(folder: Path) -> dict[str, bytes]:
    """Every file of a dataset folder, by relative path: shards, index, metrics, meta."""
    return {
        p.relative_to(folder).as_posix(): p.read_bytes() for p in folder.rglob("*") if p.is_file()
    }


@pytest.fixture(scope="module")
def plain(tmp_path_factory: pytest.TempPathFactory) -> dict[str, bytes]:
    root = tmp_path_factory.mktemp("plain")
    src = write(root / "d.jsonl", _jsonl_bytes(DOCS))
    prepare([src], root / "ds", max_seq_len=64, size_limit=4096)
    files = _files(root / "ds")
    assert sum(name.startswith("shard.") for name in files) > 1  # several shards compared
    decoded = [bytes(d).decode() for d in documents_of(read_all(root / "ds"), eos_id=256)]
    assert decoded == DOCS
    return files


def _gzip(root: Path) -> list[Path]:
    return [write(root / "d.jsonl.gz", gzip.compress(_jsonl_bytes(DOCS)))]


def _zstd(root: Path) -> list[Path]:
    return [write(root / "d.JSONL.ZST", zstandard.ZstdCompressor().compress(_jsonl_bytes(DOCS)))]


def _parquet_file(root: Path) -> list[Path]:
    table = pa.table({"id": list(range(len(DOCS))), "text": DOCS})
    path = root / "d.parquet"
    pq.write_table(table, path, row_group_size=7)  # several row groups and record batches
    return [path]


def _parquet_folder(root: Path) -> list[Path]:
    folder = root / "parts"
    folder.mkdir()
    for i, start in enumerate(range(0, len(DOCS), 25)):  # part-0, part-1, part-2: sorted order
        chunk = DOCS[start : start + 25]
        pq.write_table(
            pa.table({"text": pa.array(chunk, pa.large_string())}), folder / f"part-{i}.parquet"
        )
    return [folder]


def _saved_dataset(root: Path) -> list[Path]:
    folder = root / "hf"
    datasets.Dataset.from_dict({"text": DOCS, "id": list(range(len(DOCS)))}).save_to_disk(
        str(folder),
        max_shard_size=2000,  # several Arrow files
    )
    return [folder]


@pytest.mark.parametrize(
    "make_inputs", [_gzip, _zstd, _parquet_file, _parquet_folder, _saved_dataset]
)
def test_each_input_gives_the_shards_of_plain_jsonl(
    tmp_path: Path, plain: dict[str, bytes], make_inputs
) -> None:
    inputs = make_inputs(tmp_path)
    prepare(inputs, tmp_path / "ds", max_seq_len=64, size_limit=4096)
    assert _files(tmp_path / "ds") == plain


def test_text_field_picks_the_column_and_the_cli_reads_parquet(tmp_path: Path) -> None:
    pq.write_table(pa.table({"body": ["one", "two"], "text": ["no", "no"]}), tmp_path / "d.parquet")
    result = CliRunner().invoke(
        main,
        [
            "prepare",
            str(tmp_path / "d.parquet"),
            "--out",
            str(tmp_path / "ds"),
            "--text-field",
            "body",
        ],
    )
    assert result.exit_code == 0, result.output
    assert [bytes(d).decode() for d in documents_of(read_all(tmp_path / "ds"), eos_id=256)] == [
        "one",
        "two",
    ]


def _bad_parquet_null(root: Path) -> tuple[Path, str]:
    path = root / "d.parquet"
    pq.write_table(pa.table({"text": ["ok"] * 1500 + [None]}), path, row_group_size=1000)
    return path, rf"^{path}\[1500\]: field 'text' is null$"


def _bad_parquet_type(root: Path) -> tuple[Path, str]:
    path = root / "d.parquet"
    pq.write_table(pa.table({"text": [1, 2]}), path)
    return path, rf"^{path}: field 'text' must be a string column, got int64$"


def _bad_parquet_missing(root: Path) -> tuple[Path, str]:
    path = root / "d.parquet"
    pq.write_table(pa.table({"body": ["a"], "id": [1]}), path)
    return path, rf"^{path}: missing field 'text' in every row \(fields: body, id\)$"


def _bad_parquet_utf8(root: Path) -> tuple[Path, str]:
    path = root / "d.parquet"
    pq.write_table(pa.table({"text": pa.array([b"fine", b"bad \xff"], pa.binary())}), path)
    return path, rf"^{path}\[1\]: field 'text' is not UTF-8 text \(invalid byte at offset 4\)$"


def _bad_parquet_bytes(root: Path) -> tuple[Path, str]:
    path = write(root / "d.parquet", b"PAR1\x00")
    return path, rf"^{path}: not a readable Parquet file \("


def _bad_dataset_null(root: Path) -> tuple[Path, str]:
    folder = root / "hf"
    datasets.Dataset.from_dict({"text": ["a", "b", None, "d"]}).save_to_disk(str(folder))
    return folder, rf"^{folder}\[2\]: field 'text' is null$"


def _bad_dataset_dict(root: Path) -> tuple[Path, str]:
    folder = root / "hfdict"
    ds = datasets.Dataset.from_dict({"text": ["a"]})
    datasets.DatasetDict({"train": ds, "test": ds}).save_to_disk(str(folder))
    return (
        folder,
        rf"^{folder}: a saved DatasetDict \(splits: train, test\); name one split's folder, "
        rf"e\.g\. {folder}/train$",
    )


def _bad_gzip_line(root: Path) -> tuple[Path, str]:
    body = b'{"text": "a"}\n{"txt": "b"}\n'
    path = write(root / "d.jsonl.gz", gzip.compress(body))
    return path, rf"^{path}:2: missing field 'text' \(fields: txt\)$"


def _bad_zstd_utf8(root: Path) -> tuple[Path, str]:
    body = b'{"text": "a"}\n{"text": "\xff"}\n'
    path = write(root / "d.jsonl.zst", zstandard.ZstdCompressor().compress(body))
    return path, rf"^{path}:2: not UTF-8 text \(invalid byte at offset 24\)$"


def _truncated_gzip(root: Path) -> tuple[Path, str]:
    data = gzip.compress(_jsonl_bytes(DOCS))
    path = write(root / "d.jsonl.gz", data[: len(data) // 2])
    return path, rf"^{path}: corrupt or truncated gzip data \("


def _corrupt_zstd(root: Path) -> tuple[Path, str]:
    path = write(root / "d.jsonl.zst", b"\x28\xb5\x2f\xfd" + b"\x00garbage" * 10)
    return path, rf"^{path}: corrupt or truncated zstd data \("


@pytest.mark.parametrize(
    "make_bad",
    [
        _bad_parquet_null,
        _bad_parquet_type,
        _bad_parquet_missing,
        _bad_parquet_utf8,
        _bad_parquet_bytes,
        _bad_dataset_null,
        _bad_dataset_dict,
        _bad_gzip_line,
        _bad_zstd_utf8,
        _truncated_gzip,
        _corrupt_zstd,
    ],
)
def test_bad_row_is_one_line_naming_file_and_row(tmp_path: Path, make_bad) -> None:
    (tmp_path / "in").mkdir()
    src, match = make_bad(tmp_path / "in")
    good = write(tmp_path / "in" / "first.jsonl", _jsonl_bytes(DOCS * 3))  # rows written first
    before = set(names(tmp_path))
    with pytest.raises(DataError, match=match):
        prepare([good, src], tmp_path / "ds", size_limit=4096)
    assert_nothing_written(tmp_path, tmp_path / "ds", before)
    line = one_error_line(
        CliRunner().invoke(main, ["prepare", str(good), str(src), "--out", str(tmp_path / "ds")])
    )
    assert str(src) in line
    assert_nothing_written(tmp_path, tmp_path / "ds", before)
