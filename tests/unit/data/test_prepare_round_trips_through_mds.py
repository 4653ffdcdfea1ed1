"""Real MDS round trips for curriculum_ds.data: prepare → StreamingDataset → decode."""

from __future__ import annotations

import json
import pickle
from pathlib import Path

import numpy as np
import pytest
from prepared_mds import BYTE, TEXT_A, TEXT_B, documents_of, names, read_all, write

from curriculum_ds.data import (
    DATASET_FORMAT,
    METRIC_COLUMNS,
    PrepareSummary,
    compression_ratio,
    prepare,
    read_stream_info,
    token_entropy,
)


def test_text_file_round_trip(tmp_path: Path) -> None:
    src = write(tmp_path / "a.txt", TEXT_A)
    summary = prepare([src], tmp_path / "ds")
    assert isinstance(summary, PrepareSummary)
    assert summary.num_documents == 1
    assert summary.num_samples == 1
    assert summary.num_tokens == len(TEXT_A.encode()) + 1
    assert summary.vocab_size == 257
    rows = read_all(tmp_path / "ds")
    ids = rows[0]["input_ids"]
    assert ids.dtype == np.int32
    assert ids[-1] == 256
    assert BYTE.decode(ids) == TEXT_A
    assert rows[0]["num_tokens"] == ids.size


def test_split_at_max_seq_len_and_min_tokens(tmp_path: Path) -> None:
    text = "abcdefghijklmnopqrstuvwxy"  # 25 bytes + EOS = 26 tokens
    src = write(tmp_path / "doc.md", text)
    prepare([src], tmp_path / "ds", max_seq_len=10)
    rows = read_all(tmp_path / "ds")
    assert [r["num_tokens"] for r in rows] == [10, 10, 6]
    assert BYTE.decode(np.concatenate([r["input_ids"] for r in rows])) == text
    # min_tokens=7 drops the 6-token tail (which holds the EOS)
    prepare([src], tmp_path / "ds2", max_seq_len=10, min_tokens=7)
    rows = read_all(tmp_path / "ds2")
    assert [r["num_tokens"] for r in rows] == [10, 10]
    assert BYTE.decode(np.concatenate([r["input_ids"] for r in rows])) == text[:20]


def test_jsonl_round_trip_samples_never_span_documents(tmp_path: Path) -> None:
    texts = ["first document", "", "second — with ünïcode\u2028and\x85seps\r\n", "x" * 30]
    lines = [json.dumps({"text": t, "id": i}, ensure_ascii=False) for i, t in enumerate(texts)]
    lines[0] += "\r"  # CRLF line endings are fine
    lines.insert(2, "   ")  # blank lines are skipped
    src = write(tmp_path / "d.jsonl", "\n".join(lines) + "\n")
    summary = prepare([src], tmp_path / "ds", max_seq_len=8)
    assert summary.num_documents == 3  # the empty text has no tokens
    rows = read_all(tmp_path / "ds")
    docs = documents_of(rows, eos_id=256)
    assert [bytes(d).decode() for d in docs] == [t for t in texts if t]
    # every sample lies inside one document: EOS only ever at a sample's end
    for r in rows:
        ids = np.asarray(r["input_ids"])
        assert 256 not in ids[:-1]
        assert r["num_tokens"] == ids.size <= 8


def test_folder_recursive_sorted_reads_text_by_content_and_skips_binaries(tmp_path: Path) -> None:
    root = tmp_path / "corpus"
    write(root / "b.txt", "bee")
    write(root / "a" / "z.py", "zed")
    write(root / "a" / "y.jsonl", json.dumps({"text": "why"}) + "\n")
    write(root / "c.bin", b"\x00\x01\x02binary")
    write(root / "latin1.txt", "caf\xe9".encode("latin-1"))
    write(root / ".hidden" / "h.txt", "hidden")
    write(root / ".dotfile", "dot")
    summary = prepare([root], tmp_path / "ds")
    assert summary.skipped_suffixes == {".bin": 1, ".txt": 1}  # binary; latin1.txt not UTF-8
    assert summary.num_skipped_files == 2
    assert summary.describe_skipped() == (
        "2 binary, not UTF-8 or unreadable files (.bin 1, .txt 1)"
    )
    docs = documents_of(read_all(tmp_path / "ds"), eos_id=256)
    # sorted by relative path: a/y.jsonl, a/z.py (text by content), b.txt
    assert [bytes(d).decode() for d in docs] == ["why", "zed", "bee"]
    # format="text" reads every file as text: the binary and latin-1 files skipped for content
    summary = prepare([root], tmp_path / "ds_text", format="text")
    assert summary.skipped_suffixes == {".bin": 1, ".txt": 1}
    assert summary.num_skipped_files == 2
    docs = documents_of(read_all(tmp_path / "ds_text"), eos_id=256)
    assert [bytes(d).decode() for d in docs] == ['{"text": "why"}\n', "zed", "bee"]


def test_inputs_kept_in_given_order(tmp_path: Path) -> None:
    a = write(tmp_path / "a.txt", "alpha")
    b = write(tmp_path / "b.md", "beta")
    prepare([b, a], tmp_path / "ds")
    docs = documents_of(read_all(tmp_path / "ds"), eos_id=256)
    assert [bytes(d).decode() for d in docs] == ["beta", "alpha"]


def test_small_size_limit_gives_several_shards_in_order(tmp_path: Path) -> None:
    texts = [f"document number {i} " * (i + 1) for i in range(40)]
    src = write(tmp_path / "d.jsonl", "".join(json.dumps({"text": t}) + "\n" for t in texts))
    prepare([src], tmp_path / "ds", max_seq_len=64, size_limit=2048)
    index = json.loads((tmp_path / "ds" / "index.json").read_text())
    assert len(index["shards"]) > 2
    docs = documents_of(read_all(tmp_path / "ds"), eos_id=256)
    assert [bytes(d).decode() for d in docs] == texts


def test_meta_and_metrics_agree_with_shards(tmp_path: Path) -> None:
    src = write(tmp_path / "d.txt", (TEXT_A + TEXT_B) * 7)
    summary = prepare([src], tmp_path / "ds", max_seq_len=50, progress=True)
    out = tmp_path / "ds"
    meta = json.loads((out / "curriculum_meta.json").read_text())
    rows = read_all(out)
    assert meta["format"] == DATASET_FORMAT
    assert meta["vocab_size"] == 257
    assert meta["eos_id"] == 256
    assert meta["tokenizer"] == "byte"
    assert meta["max_seq_len"] == 50
    assert meta["num_samples"] == len(rows) == summary.num_samples
    assert meta["num_tokens"] == sum(r["input_ids"].size for r in rows) == summary.num_tokens
    assert meta["metric_columns"] == list(METRIC_COLUMNS)
    with np.load(out / "metrics.npz") as npz:
        assert sorted(npz.files) == sorted(METRIC_COLUMNS)
        assert npz["num_tokens"].dtype == np.int64
        np.testing.assert_array_equal(npz["num_tokens"], [r["input_ids"].size for r in rows])
        np.testing.assert_array_equal(npz["num_tokens"], [r["num_tokens"] for r in rows])
        for col in ("token_entropy", "compression_ratio"):
            assert npz[col].dtype == np.float64
            np.testing.assert_array_equal(npz[col], [r[col] for r in rows])
        np.testing.assert_allclose(
            npz["token_entropy"], [token_entropy(r["input_ids"]) for r in rows]
        )
    info = read_stream_info(out)
    assert info.num_samples == len(rows)
    assert info.num_tokens == meta["num_tokens"]
    assert (info.vocab_size, info.eos_id, info.max_seq_len, info.tokenizer) == (
        257,
        256,
        50,
        "byte",
    )
    assert set(info.metrics) == set(METRIC_COLUMNS)
    np.testing.assert_array_equal(info.metrics["num_tokens"], [r["num_tokens"] for r in rows])
    with pytest.raises(ValueError, match="read-only"):
        info.metrics["num_tokens"][0] = 1
    clone = pickle.loads(pickle.dumps(info))  # travels to DataLoader workers / other ranks
    np.testing.assert_array_equal(clone.metrics["token_entropy"], info.metrics["token_entropy"])


def test_metric_values_rank_difficulty() -> None:
    rep = BYTE.encode("ab" * 100)
    varied = BYTE.encode(TEXT_A * 2)
    assert token_entropy(np.full(5, 7)) == 0.0
    assert token_entropy(np.array([1, 2, 3, 4])) == pytest.approx(2.0)
    assert token_entropy(rep) < token_entropy(varied)

    def ratio(ids: np.ndarray) -> float:
        return compression_ratio(ids, eos_id=256, pack_dtype=np.uint8)

    assert ratio(rep) < ratio(varied)
    assert ratio(np.array([256])) == 1.0


def test_deterministic_byte_identical(tmp_path: Path) -> None:
    root = tmp_path / "in"
    write(root / "one.txt", TEXT_A * 50)
    write(root / "two.jsonl", "".join(json.dumps({"text": TEXT_B * i}) + "\n" for i in range(1, 9)))
    prepare([root], tmp_path / "x", max_seq_len=64, size_limit=4096)
    prepare([root], tmp_path / "y", max_seq_len=64, size_limit=4096)
    files = names(tmp_path / "x")
    assert files == names(tmp_path / "y")
    assert any(n.endswith(".mds") for n in files)
    for name in files:
        assert (tmp_path / "x" / name).read_bytes() == (tmp_path / "y" / name).read_bytes(), name


def test_prepare_into_existing_empty_folder(tmp_path: Path) -> None:
    (tmp_path / "ds").mkdir()
    src = write(tmp_path / "a.txt", "hello")
    prepare([src], tmp_path / "ds")
    assert (tmp_path / "ds" / "index.json").is_file()
    assert read_stream_info(tmp_path / "ds").num_samples == 1
