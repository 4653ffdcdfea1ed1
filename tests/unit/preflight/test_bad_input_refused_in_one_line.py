"""Bad data and bad input refused up front: one line naming the field, stream or file, exit 1.

Each case here used to pass ``curriculum-ds validate`` (and fail later inside the ranks), or to
end in a traceback: a non-finite value in the static metric column, an empty dataset, streams
prepared with different tokenizers of one vocabulary size, an absurd recorded vocab_size,
malformed ``index.json`` entries, JSON nested too deeply or with a huge integer literal, a NaN
``num_tokens`` (warnings before the error), ``--num-gpus 0``, a failed ``prepare`` that left the
folders it created, and corrupt shard bytes outside the probed samples. Nothing is written.
"""

from __future__ import annotations

import hashlib
import json
import struct
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from click.testing import CliRunner
from helpers import one_error_line, ragged_docs, two_phase_curriculum, write_ds_config

from curriculum_ds import data as _data
from curriculum_ds.cli import main as cli_main
from curriculum_ds.data import prepare, read_stream_info, verify_stream
from curriculum_ds.errors import DataError


def _prepared(root: Path, name: str, *, tokenizer: Path | None = None, **kw: Any) -> Path:
    src = root / f"{name}.jsonl"
    src.parent.mkdir(parents=True, exist_ok=True)
    docs = ragged_docs(30, seed=len(name), min_len=10, max_len=90)
    src.write_text("".join(json.dumps({"text": d}) + "\n" for d in docs))
    prepare([src], root / name, max_seq_len=64, tokenizer=tokenizer, **kw)
    return root / name


def _validate(tmp_path: Path, curriculum: dict[str, Any], *args: str) -> Any:
    cfg = write_ds_config(tmp_path / "ds.json", curriculum)
    return CliRunner().invoke(cli_main, ["validate", str(cfg), *args])


def _listing(*folders: Path) -> dict[str, bytes]:
    return {str(p): p.read_bytes() for folder in folders for p in folder.rglob("*") if p.is_file()}


def _edit_json(path: Path, edit: Any) -> None:
    data = json.loads(path.read_text())
    edit(data)
    path.write_text(json.dumps(data))


def _rewrite_metric(folder: Path, column: str, idx: int, value: float) -> None:
    with np.load(folder / "metrics.npz") as npz:
        arrays = {name: np.array(npz[name]) for name in npz.files}
    arrays[column] = arrays[column].astype(np.float64)
    arrays[column][idx] = value
    np.savez(folder / "metrics.npz", **arrays)  # type: ignore[arg-type]


LONG = 'curriculum.schedule[1] ("mix").train_loader.streams[1].local'


# ------------------------------------------------------------------ 1. non-finite static metric


@pytest.mark.parametrize("value", [float("nan"), float("inf")], ids=["nan", "inf"])
def test_validate_refuses_a_non_finite_static_metric_naming_stream_column_sample(
    tmp_path: Path, value: float
) -> None:
    short = _prepared(tmp_path, "short")
    long = _prepared(tmp_path, "long")
    _rewrite_metric(long, "token_entropy", 5, value)
    before = _listing(short, long)
    line = one_error_line(
        _validate(tmp_path, two_phase_curriculum(short, long, static_metric="token_entropy"))
    )
    assert line.startswith("Error: curriculum.dynamic.static_metric: ")
    assert f'stream "{long}"' in line
    assert '"token_entropy"' in line
    assert "at sample 5" in line
    assert "nan_policy" not in line
    assert _listing(short, long) == before
    # a column the schedule does not bucket by is not the schedule's concern
    ok = _validate(tmp_path, two_phase_curriculum(short, long, static_metric="compression_ratio"))
    assert ok.exit_code == 0, ok.output


# ------------------------------------------------------------------ 2. zero samples


def test_validate_refuses_a_dataset_with_zero_samples(tmp_path: Path) -> None:
    short = _prepared(tmp_path, "short")
    long = _prepared(tmp_path, "long")
    index = json.loads((long / "index.json").read_text())
    for shard in index["shards"]:
        empty = struct.pack("<II", 0, 8)  # num_samples 0, offsets[0] = end of the header
        (long / shard["raw_data"]["basename"]).write_bytes(empty)
        shard.update(samples=0)
        shard["raw_data"].update(bytes=len(empty), hashes={})
    (long / "index.json").write_text(json.dumps(index))
    _edit_json(long / "curriculum_meta.json", lambda m: m.update(num_samples=0, num_tokens=0))
    np.savez(
        long / "metrics.npz",
        num_tokens=np.zeros(0, np.int64),
        token_entropy=np.zeros(0),
        compression_ratio=np.zeros(0),
    )
    before = _listing(short, long)
    line = one_error_line(_validate(tmp_path, two_phase_curriculum(short, long)))
    assert line.startswith(f"Error: {LONG}: ")
    assert f"MDS dataset {long} holds no samples" in line
    assert _listing(short, long) == before


# ------------------------------------------------------------------ 3. tokenizers


def _wordlevel(path: Path, words: list[str]) -> Path:
    vocab = {w: i for i, w in enumerate(["[UNK]", "</s>", *words])}
    path.write_text(
        json.dumps(
            {
                "version": "1.0",
                "model": {"type": "WordLevel", "vocab": vocab, "unk_token": "[UNK]"},
                "pre_tokenizer": {"type": "Whitespace"},
            }
        )
    )
    return path


def test_validate_refuses_streams_of_different_tokenizers_with_one_vocab_size(
    tmp_path: Path,
) -> None:
    words = "the model reads data in phases and every token".split()
    tok_a = _wordlevel(tmp_path / "a.json", words)
    tok_b = _wordlevel(tmp_path / "b.json", list(reversed(words)))
    short = _prepared(tmp_path, "short", tokenizer=tok_a)
    long = _prepared(tmp_path, "long", tokenizer=tok_b)
    assert read_stream_info(short).vocab_size == read_stream_info(long).vocab_size
    before = _listing(short, long)
    line = one_error_line(_validate(tmp_path, two_phase_curriculum(short, long)))
    assert line.startswith(f"Error: {LONG}: ")
    assert f'"{long}" was prepared with tokenizer "{tok_b.resolve()}"' in line
    assert f'but "{short}"' in line
    assert f'with tokenizer "{tok_a.resolve()}"' in line
    assert _listing(short, long) == before
    # the same tokenizer file at another path is the same tokenizer
    copy = tmp_path / "copy" / "a.json"
    copy.parent.mkdir()
    copy.write_bytes(tok_a.read_bytes())
    other = _prepared(tmp_path, "other", tokenizer=copy)
    assert _validate(tmp_path, two_phase_curriculum(short, other)).exit_code == 0


# ------------------------------------------------------------------ 4. vocab_size bound


@pytest.mark.parametrize("vocab", [2**70, 2**31, 0, -5, True])
def test_validate_refuses_an_out_of_range_recorded_vocab_size(tmp_path: Path, vocab: Any) -> None:
    short = _prepared(tmp_path, "short")
    long = _prepared(tmp_path, "long")
    for folder in (short, long):
        _edit_json(folder / "curriculum_meta.json", lambda m: m.update(vocab_size=vocab))
    before = _listing(short, long)
    line = one_error_line(_validate(tmp_path, two_phase_curriculum(short, long)))
    assert f"{short / 'curriculum_meta.json'}: field 'vocab_size'" in line
    assert _listing(short, long) == before


# ------------------------------------------------------------------ 5. malformed index.json


@pytest.mark.parametrize(
    ("edit", "key"),
    [
        (lambda s: s.update(samples=2**70), "shards[0].samples"),
        (lambda s: s.update(samples=-1), "shards[0].samples"),
        (lambda s: s.update(samples=True), "shards[0].samples"),
        (lambda s: s["raw_data"].update(basename=5), "shards[0].raw_data.basename"),
        (lambda s: s["raw_data"].update(basename=["x"]), "shards[0].raw_data.basename"),
        (
            lambda s: s["raw_data"].update(basename="../short/shard.00000.mds"),
            "shards[0].raw_data.basename",
        ),
        (lambda s: s["raw_data"].update(basename="/etc/hostname"), "shards[0].raw_data.basename"),
        (lambda s: s["raw_data"].update(bytes="abc"), "shards[0].raw_data.bytes"),
        (lambda s: s.update(column_sizes=[8, None, "8", 8]), "shards[0].column_sizes[2]"),
        (lambda s: s.update(format="json"), "shards[0].format"),
        (lambda s: s.update(format=None), "shards[0].format"),
        (lambda s: s.update(raw_data=[1]), "shards[0].raw_data"),
    ],
    ids=[
        "samples-2**70",
        "samples-neg",
        "samples-bool",
        "basename-int",
        "basename-list",
        "basename-traversal",
        "basename-absolute",
        "bytes-str",
        "column-size-str",
        "format-json",
        "format-null",
        "raw-data-list",
    ],
)
def test_validate_malformed_index_entry_one_line_naming_file_shard_key(
    tmp_path: Path, edit: Any, key: str
) -> None:
    short = _prepared(tmp_path, "short")
    long = _prepared(tmp_path, "long")
    _edit_json(long / "index.json", lambda index: edit(index["shards"][0]))
    before = _listing(short, long)
    line = one_error_line(_validate(tmp_path, two_phase_curriculum(short, long)))
    assert line.startswith(f"Error: {LONG}: ")
    assert f"MDS index {long / 'index.json'}: {key}" in line
    assert _listing(short, long) == before
    with pytest.raises(DataError, match=r"index\.json: shards\[0\]"):
        read_stream_info(long)


# ------------------------------------------------------------------ 6. JSON limits


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        ('{"curriculum": ' + "[" * 100_000 + "]" * 100_000 + "}", "nested too deeply"),
        ('{"curriculum": ' + "9" * 5000 + "}", "more than 4300 digits"),
    ],
    ids=["deep", "huge-int"],
)
def test_validate_json_limits_one_line_naming_the_file(
    tmp_path: Path, body: str, reason: str
) -> None:
    cfg = tmp_path / "ds.json"
    cfg.write_text(body)
    line = one_error_line(CliRunner().invoke(cli_main, ["validate", str(cfg)]))
    assert line.startswith(f"Error: {cfg}: invalid JSON: ")
    assert reason in line
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ds.json"]


@pytest.mark.parametrize(
    ("line2", "reason"),
    [
        ("[" * 100_000 + "]" * 100_000, "nested too deeply"),
        ('{"text": ' + "9" * 5000 + "}", "more than 4300 digits"),
    ],
    ids=["deep", "huge-int"],
)
def test_prepare_jsonl_json_limits_name_file_and_line(
    tmp_path: Path, line2: str, reason: str
) -> None:
    src = tmp_path / "in.jsonl"
    src.write_text('{"text": "hello"}\n' + line2 + "\n")
    with pytest.raises(DataError, match=rf"in\.jsonl:2: invalid JSON \(.*{reason}") as err:
        prepare([src], tmp_path / "out")
    assert "\n" not in str(err.value)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.jsonl"]


# ------------------------------------------------------------------ 7. NaN num_tokens


def test_validate_nan_num_tokens_is_one_line_without_warnings(
    tmp_path: Path, recwarn: pytest.WarningsRecorder
) -> None:
    short = _prepared(tmp_path, "short")
    long = _prepared(tmp_path, "long")
    _rewrite_metric(short, "num_tokens", 3, float("nan"))
    with pytest.raises(DataError, match=r"metrics\.npz: num_tokens column"):
        read_stream_info(short)
    assert not [w for w in recwarn if issubclass(w.category, RuntimeWarning)]
    line = one_error_line(_validate(tmp_path, two_phase_curriculum(short, long)))
    assert "metrics.npz: num_tokens column" in line


# ------------------------------------------------------------------ 8. --num-gpus 0


def test_validate_num_gpus_zero_names_the_option(tmp_path: Path) -> None:
    short = _prepared(tmp_path, "short")
    long = _prepared(tmp_path, "long")
    result = _validate(tmp_path, two_phase_curriculum(short, long), "--num-gpus", "0")
    assert result.exit_code == 2
    assert "'--num-gpus'" in result.output
    assert "dp_world_size" not in result.output


# ------------------------------------------------------------------ 9. prepare cleans up


def test_failed_prepare_removes_the_parent_folders_it_created(tmp_path: Path) -> None:
    src = tmp_path / "empty.jsonl"
    src.write_text("\n")
    (tmp_path / "kept").mkdir()
    with pytest.raises(DataError, match="no documents found"):
        prepare([src], tmp_path / "kept" / "new" / "deep" / "x")
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["empty.jsonl", "kept"]
    result = CliRunner().invoke(
        cli_main, ["prepare", str(src), "--out", str(tmp_path / "a" / "b" / "c")]
    )
    assert result.exit_code == 1
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["empty.jsonl", "kept"]


# ------------------------------------------------------------------ 10. shard hashes


def test_prepare_records_shard_hashes_and_validate_checks_them(tmp_path: Path) -> None:
    short = _prepared(tmp_path, "short")
    long = _prepared(tmp_path, "long", size_limit=1024)
    index = json.loads((long / "index.json").read_text())
    for shard in index["shards"]:
        raw = shard["raw_data"]
        data = (long / raw["basename"]).read_bytes()
        assert set(raw["hashes"]) == set(getattr(_data, "SHARD_HASHES", ())) == {"sha1"}
        assert raw["hashes"]["sha1"] == hashlib.sha1(data).hexdigest()
    assert _validate(tmp_path, two_phase_curriculum(short, long)).exit_code == 0
    # flip one byte inside a sample that the 16-sample probe does not decode
    shard = index["shards"][1]
    path = long / shard["raw_data"]["basename"]
    data = bytearray(path.read_bytes())
    num = shard["samples"]
    offsets = np.frombuffer(bytes(data), dtype="<u4", count=num + 1, offset=4)
    total = sum(s["samples"] for s in index["shards"])
    probed = set(np.rint(np.linspace(0, total - 1, min(total, 16))).astype(int).tolist())
    first = index["shards"][0]["samples"]
    k = next(j for j in range(num) if first + j not in probed)
    data[int(offsets[k]) + (int(offsets[k + 1]) - int(offsets[k])) // 2] ^= 0xFF
    path.write_bytes(bytes(data))
    verify_stream(long)  # the launch's cheap check (no hashing) does not see it
    before = _listing(short, long)
    line = one_error_line(_validate(tmp_path, two_phase_curriculum(short, long)))
    assert line.startswith(f"Error: {LONG}: ")
    assert f"shard file {path.name} fails its sha1 hash" in line
    assert _listing(short, long) == before
