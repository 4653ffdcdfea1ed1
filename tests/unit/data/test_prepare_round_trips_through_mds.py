"""Real MDS round trips for curriculum_ds.data: prepare → StreamingDataset → decode."""

from __future__ import annotations

import json
import os
import pathlib
import pickle
from pathlib import Path

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from curriculum_ds.data import (
    DATASET_FORMAT,
    METRIC_COLUMNS,
    ByteTokenizer,
    HFTokenizer,
    PrepareSummary,
    close_stream,
    compression_ratio,
    ensure_local_world_size,
    open_stream,
    prepare,
    read_stream_info,
    split_document,
    token_entropy,
)
from curriculum_ds.errors import CurriculumError, DataError

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


# ------------------------------------------------------------------------------- round trips


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


def test_folder_recursive_sorted_skips_binaries(tmp_path: Path) -> None:
    root = tmp_path / "corpus"
    write(root / "b.txt", "bee")
    write(root / "a" / "z.py", "zed")
    write(root / "a" / "y.jsonl", json.dumps({"text": "why"}) + "\n")
    write(root / "c.bin", b"\x00\x01\x02binary")
    write(root / "latin1.txt", "caf\xe9".encode("latin-1"))
    write(root / ".hidden" / "h.txt", "hidden")
    write(root / ".dotfile", "dot")
    summary = prepare([root], tmp_path / "ds")
    assert summary.num_skipped_files == 2
    docs = documents_of(read_all(tmp_path / "ds"), eos_id=256)
    # sorted by relative path: a/y.jsonl, a/z.py, b.txt
    assert [bytes(d).decode() for d in docs] == ["why", "zed", "bee"]


def test_inputs_kept_in_given_order(tmp_path: Path) -> None:
    a = write(tmp_path / "a.txt", "alpha")
    b = write(tmp_path / "b.rst", "beta")
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


# ------------------------------------------------------------------------------- HF tokenizer


def make_wordlevel(path: Path, specials: list[str]) -> Path:
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    tok = Tokenizer(models.WordLevel(unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    corpus = ["the cat sat on the mat", "a dog ate the cat food", "hello world"]
    tok.train_from_iterator(corpus, trainers.WordLevelTrainer(special_tokens=["[UNK]", *specials]))
    tok.save(str(path))
    return path


def test_hf_tokenizer_json(tmp_path: Path) -> None:
    from tokenizers import Tokenizer

    tok_path = make_wordlevel(tmp_path / "tokenizer.json", ["</s>"])
    ref = Tokenizer.from_file(str(tok_path))
    eos = ref.token_to_id("</s>")
    texts = ["the cat sat on the mat", "hello world the dog", "unknown words here"]
    src = write(tmp_path / "d.jsonl", "".join(json.dumps({"text": t}) + "\n" for t in texts))
    summary = prepare([src], tmp_path / "ds", tokenizer=tok_path, max_seq_len=4, min_tokens=1)
    assert summary.vocab_size == ref.get_vocab_size()
    rows = read_all(tmp_path / "ds")
    assert all(r["num_tokens"] <= 4 for r in rows)
    docs = documents_of(rows, eos_id=eos)
    assert docs == [ref.encode(t, add_special_tokens=False).ids for t in texts]
    assert ref.decode(docs[0]) == texts[0]
    meta = json.loads((tmp_path / "ds" / "curriculum_meta.json").read_text())
    assert meta["vocab_size"] == ref.get_vocab_size()
    assert meta["eos_id"] == eos
    assert meta["tokenizer"]["path"] == str(tok_path.resolve())
    assert len(meta["tokenizer"]["sha256"]) == 64
    info = read_stream_info(tmp_path / "ds")
    assert info.eos_id == eos
    assert info.tokenizer == str(tok_path.resolve())


def test_hf_tokenizer_eos_candidates_and_none(tmp_path: Path) -> None:
    assert HFTokenizer(make_wordlevel(tmp_path / "sep.json", ["[SEP]"])).eos_id is not None
    t = HFTokenizer(make_wordlevel(tmp_path / "end.json", ["<|endoftext|>"]))
    assert t.eos_id == t._tok.token_to_id("<|endoftext|>")
    plain = make_wordlevel(tmp_path / "plain.json", [])
    assert HFTokenizer(plain).eos_id is None
    src = write(tmp_path / "a.txt", "the cat sat")
    prepare([src], tmp_path / "ds", tokenizer=plain)
    rows = read_all(tmp_path / "ds")
    assert [int(i) for i in rows[0]["input_ids"]] == HFTokenizer(plain)._tok.encode(
        "the cat sat"
    ).ids
    assert json.loads((tmp_path / "ds" / "curriculum_meta.json").read_text())["eos_id"] is None


# ------------------------------------------------------------------------------- errors


def _bad_jsonl(tmp_path: Path, body: str) -> list[Path]:
    return [write(tmp_path / "in" / "bad.jsonl", body)]


@pytest.mark.parametrize(
    ("make_inputs", "kwargs", "match"),
    [
        (lambda p: [], {}, r"^no inputs given"),
        (lambda p: [p / "in" / "missing.txt"], {}, r"^input not found: .*missing\.txt$"),
        (lambda p: [write(p / "in" / "empty.txt", "")], {}, r"^no documents found in inputs: "),
        (
            lambda p: [(p / "in" / "emptydir").mkdir(parents=True) or p / "in" / "emptydir"],
            {},
            r"^no documents found",
        ),
        (
            lambda p: [write(p / "in" / "bin.txt", b"ok\xff\xfe")],
            {},
            r"bin\.txt:1: not UTF-8 text \(invalid byte at offset 2\)$",
        ),
        (
            lambda p: _bad_jsonl(p, '{"text": "ok"}\n{"txt": "oops", "id": 1}\n'),
            {},
            r"bad\.jsonl:2: missing field 'text' \(fields: id, txt\)$",
        ),
        (
            lambda p: _bad_jsonl(p, '{"text": "ok"}\n\n{"text": 5}\n'),
            {},
            r"bad\.jsonl:3: field 'text' must be a string, got int$",
        ),
        (lambda p: _bad_jsonl(p, "{not json\n"), {}, r"bad\.jsonl:1: invalid JSON \("),
        (lambda p: _bad_jsonl(p, '["text"]\n'), {}, r"bad\.jsonl:1: expected a JSON object"),
        (
            lambda p: [write(p / "in" / "a.txt", "x")],
            {"min_tokens": 3},
            r"^no samples: all 1 documents are shorter than min_tokens=3",
        ),
        (lambda p: [write(p / "in" / "a.txt", "x")], {"max_seq_len": 1}, r"max_seq_len.*>= 2"),
        (
            lambda p: [write(p / "in" / "a.txt", "x")],
            {"max_seq_len": 4, "min_tokens": 5},
            r"min_tokens must be in \[1, max_seq_len=4\], got 5",
        ),
        (lambda p: [write(p / "in" / "a.txt", "x")], {"size_limit": 0}, r"size_limit"),
        (
            lambda p: [write(p / "in" / "a.txt", "x")],
            {"tokenizer": Path("/nonexistent/tokenizer.json")},
            r"^tokenizer file not found: /nonexistent/tokenizer\.json$",
        ),
        (
            lambda p: [write(p / "in" / "a.txt", "x")],
            {"tokenizer": "BAD_TOKENIZER"},
            r"^cannot load tokenizer .*bad_tok\.json: ",
        ),
    ],
)
def test_errors_write_nothing(tmp_path: Path, make_inputs, kwargs, match) -> None:
    inputs = make_inputs(tmp_path)
    if kwargs.get("tokenizer") == "BAD_TOKENIZER":
        kwargs = {**kwargs, "tokenizer": write(tmp_path / "in" / "bad_tok.json", '{"model": 1}')}
    before = set(names(tmp_path))
    with pytest.raises(DataError, match=match) as info:
        prepare(inputs, tmp_path / "ds", **kwargs)
    assert "\n" not in str(info.value)
    assert isinstance(info.value, CurriculumError)
    assert_nothing_written(tmp_path, tmp_path / "ds", before)


def test_error_after_samples_were_written_leaves_nothing(tmp_path: Path) -> None:
    good = "".join(json.dumps({"text": f"doc {i} " * 50}) + "\n" for i in range(600))
    src = write(tmp_path / "in" / "d.jsonl", good + '{"body": "late"}\n')
    before = set(names(tmp_path))
    with pytest.raises(DataError, match=r"d\.jsonl:601: missing field 'text'"):
        prepare([src], tmp_path / "ds", max_seq_len=16)
    assert_nothing_written(tmp_path, tmp_path / "ds", before)


def test_refuses_non_empty_out(tmp_path: Path) -> None:
    src = write(tmp_path / "a.txt", "hello")
    write(tmp_path / "ds" / "keep.txt", "precious")
    with pytest.raises(DataError, match=r"^output folder is not empty: .*ds$"):
        prepare([src], tmp_path / "ds")
    assert names(tmp_path / "ds") == ["keep.txt"]
    write(tmp_path / "file_out", "x")
    with pytest.raises(DataError, match=r"^output path exists and is not a folder"):
        prepare([src], tmp_path / "file_out")


def test_jsonl_lone_surrogate_names_file_and_line(tmp_path: Path) -> None:
    # json.loads turns the escape "\\ud800" into a lone surrogate, which no tokenizer can encode
    src = write(tmp_path / "in" / "bad.jsonl", '{"text": "ok"}\n\n{"text": "bad \\ud800 x"}\n')
    before = set(names(tmp_path))
    with pytest.raises(
        DataError,
        match=(
            r"^.*bad\.jsonl:3: field 'text' is not valid Unicode "
            r"\(lone surrogate U\+D800 at character 4\)$"
        ),
    ):
        prepare([src], tmp_path / "ds")
    assert_nothing_written(tmp_path, tmp_path / "ds", before)


def test_undecodable_text_names_file_and_line(tmp_path: Path) -> None:
    jsonl = write(tmp_path / "in" / "d.jsonl", b'{"text": "a"}\n{"text": "b"}\n{"text": "\xff"}\n')
    txt = write(tmp_path / "in" / "d.txt", b"line one\nline two\r\nbad \xc3\x28 here\n")
    before = set(names(tmp_path))
    with pytest.raises(
        DataError, match=r"d\.jsonl:3: not UTF-8 text \(invalid byte at offset 38\)$"
    ):
        prepare([jsonl], tmp_path / "ds")
    with pytest.raises(DataError, match=r"d\.txt:3: not UTF-8 text \(invalid byte at offset 23\)$"):
        prepare([txt], tmp_path / "ds")
    assert_nothing_written(tmp_path, tmp_path / "ds", before)


@pytest.mark.parametrize("out", ["corpus/mds", "corpus/sub/deeper/mds", "corpus", "link/mds"])
def test_out_inside_an_input_folder_is_refused(tmp_path: Path, out: str) -> None:
    # a later run over corpus/ would read the shards, index.json and metadata back as documents
    corpus = tmp_path / "corpus"
    write(corpus / "a.txt", "alpha")
    write(corpus / "sub" / "b.txt", "beta")
    (tmp_path / "link").symlink_to(corpus)
    before = set(names(tmp_path))
    before_corpus = sorted(p.relative_to(corpus).as_posix() for p in corpus.rglob("*"))
    with pytest.raises(
        DataError,
        match=(
            r"^output folder .*corpus(/mds|/sub/deeper/mds)? is inside the input folder "
            r".*corpus: its shards would be read back as documents; choose an output folder "
            r"outside the inputs$"
        ),
    ):
        prepare([corpus], tmp_path / out)
    assert set(names(tmp_path)) == before
    assert sorted(p.relative_to(corpus).as_posix() for p in corpus.rglob("*")) == before_corpus
    # beside the input folder, or next to an input file, is fine
    prepare([corpus], tmp_path / "mds")
    prepare([corpus / "a.txt"], corpus / "only_a")
    assert read_stream_info(corpus / "only_a").num_samples == 1


def test_meta_records_max_token_id_and_old_meta_stays_readable(tmp_path: Path) -> None:
    src = write(tmp_path / "a.txt", "hello world")
    prepare([src], tmp_path / "ds", max_seq_len=4)
    meta_path = tmp_path / "ds" / "curriculum_meta.json"
    meta = json.loads(meta_path.read_text())
    rows = read_all(tmp_path / "ds")
    assert meta["max_token_id"] == max(int(r["input_ids"].max()) for r in rows) == 256  # EOS
    info = read_stream_info(tmp_path / "ds")
    assert (info.min_token_id, info.max_token_id) == (None, 256)
    del meta["max_token_id"]  # a dataset prepared before the field existed
    meta_path.write_text(json.dumps(meta))
    assert read_stream_info(tmp_path / "ds").max_token_id is None
    meta_path.write_text(json.dumps({**meta, "max_token_id": "256"}))
    with pytest.raises(DataError, match=r"field 'max_token_id' must be an integer$"):
        read_stream_info(tmp_path / "ds")


def test_unreadable_named_file_is_an_error_but_skipped_in_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Tests may run as root, where chmod 000 does not stop reads: simulate EACCES instead.
    secret = write(tmp_path / "in" / "secret.txt", "top secret")
    write(tmp_path / "in" / "open.txt", "fine")
    real = pathlib.Path.read_bytes

    def read_bytes(self: Path) -> bytes:
        if self.name == "secret.txt":
            raise PermissionError(13, "Permission denied", str(self))
        return real(self)

    monkeypatch.setattr(pathlib.Path, "read_bytes", read_bytes)
    with pytest.raises(DataError, match=r"^cannot read .*secret\.txt: permission denied$"):
        prepare([secret], tmp_path / "ds")
    assert not (tmp_path / "ds").exists()
    summary = prepare([tmp_path / "in"], tmp_path / "ds")
    assert summary.num_documents == 1
    assert summary.num_skipped_files == 1


# ------------------------------------------------------------------------------- read_stream_info


def write_plain_mds(out: Path, lengths: list[int], *, with_ids: bool = True) -> None:
    from streaming import MDSWriter

    cols = {"input_ids": "ndarray:int32", "label": "int"} if with_ids else {"text": "str"}
    with MDSWriter(out=str(out), columns=cols, progress_bar=False) as writer:
        for n in lengths:
            if with_ids:
                writer.write({"input_ids": np.arange(n, dtype=np.int32), "label": n % 3})
            else:
                writer.write({"text": "x" * n})


def test_read_stream_info_plain_mds(tmp_path: Path) -> None:
    lengths = [3, 1, 7, 12, 5]
    write_plain_mds(tmp_path / "plain", lengths)
    info = read_stream_info(tmp_path / "plain")
    assert info.num_samples == 5
    assert info.num_tokens == sum(lengths)
    assert info.vocab_size is None
    assert info.eos_id is None
    assert info.max_seq_len is None
    assert list(info.metrics) == ["num_tokens"]
    assert info.metrics["num_tokens"].dtype == np.int64
    np.testing.assert_array_equal(info.metrics["num_tokens"], lengths)
    assert (info.min_token_id, info.max_token_id) == (0, 11)  # foreign data is read whole


def test_read_stream_info_errors(tmp_path: Path) -> None:
    with pytest.raises(DataError, match=r"^dataset folder not found: .*nope$"):
        read_stream_info(tmp_path / "nope")
    (tmp_path / "empty").mkdir()
    with pytest.raises(DataError, match=r"^not an MDS dataset \(no index\.json\): .*empty$"):
        read_stream_info(tmp_path / "empty")
    write(tmp_path / "noshards" / "index.json", '{"shards": [], "version": 2}')
    with pytest.raises(DataError, match=r"^MDS index lists no shards: .*noshards"):
        read_stream_info(tmp_path / "noshards")
    write(tmp_path / "badjson" / "index.json", "{")
    with pytest.raises(DataError, match=r"^cannot read MDS index .*badjson"):
        read_stream_info(tmp_path / "badjson")
    write_plain_mds(tmp_path / "text_only", [2, 3], with_ids=False)
    with pytest.raises(DataError, match=r"shards\[0\] has no 'input_ids' column"):
        read_stream_info(tmp_path / "text_only")

    src = write(tmp_path / "a.txt", "hello world")
    prepare([src], tmp_path / "ds", max_seq_len=4)
    meta_path = tmp_path / "ds" / "curriculum_meta.json"
    meta = json.loads(meta_path.read_text())
    meta_path.write_text(json.dumps({**meta, "num_samples": 99}))
    with pytest.raises(DataError, match=r"num_samples 99 disagrees with index\.json \(3\)"):
        read_stream_info(tmp_path / "ds")
    meta_path.write_text(json.dumps({**meta, "format": "other/9"}))
    with pytest.raises(DataError, match=r"format must be 'curriculum_ds/1', got 'other/9'"):
        read_stream_info(tmp_path / "ds")
    meta_path.write_text(json.dumps(meta))
    (tmp_path / "ds" / "metrics.npz").unlink()
    with pytest.raises(DataError, match=r"^cannot read .*metrics\.npz"):
        read_stream_info(tmp_path / "ds")
    (tmp_path / "ds" / "shard.00000.mds").unlink()
    with pytest.raises(DataError, match=r"shard file missing: shard\.00000\.mds$"):
        read_stream_info(tmp_path / "ds")
    with pytest.raises(DataError, match=r"shard file missing"):
        open_stream(tmp_path / "ds")


# ------------------------------------------------------------------------------- streaming env


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({}, "1"),
        ({"LOCAL_SIZE": "4", "WORLD_SIZE": "8"}, "4"),  # DeepSpeed's launcher
        ({"WORLD_SIZE": "2"}, "2"),
        ({"LOCAL_WORLD_SIZE": "2", "WORLD_SIZE": "4"}, "2"),  # kept (torchrun)
        # DeepSpeed's launcher: its LOCAL_SIZE wins over an inherited LOCAL_WORLD_SIZE
        ({"LOCAL_WORLD_SIZE": "2", "LOCAL_SIZE": "4", "WORLD_SIZE": "4"}, "4"),
    ],
)
def test_local_world_size(monkeypatch: pytest.MonkeyPatch, env: dict, expected: str) -> None:
    for name in ("LOCAL_WORLD_SIZE", "LOCAL_SIZE", "WORLD_SIZE"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert ensure_local_world_size() == int(expected)
    assert os.environ["LOCAL_WORLD_SIZE"] == expected


@pytest.mark.parametrize(
    ("env", "match"),
    [
        (
            {"LOCAL_WORLD_SIZE": "zero"},
            r"^LOCAL_WORLD_SIZE must be a positive integer, got 'zero'$",
        ),
        ({"LOCAL_SIZE": "0"}, r"^LOCAL_WORLD_SIZE must be a positive integer, got '0'$"),
        (
            {"LOCAL_SIZE": "3", "WORLD_SIZE": "4"},
            r"^LOCAL_WORLD_SIZE=3 does not divide WORLD_SIZE=4$",
        ),
    ],
)
def test_local_world_size_errors(monkeypatch: pytest.MonkeyPatch, env: dict, match: str) -> None:
    for name in ("LOCAL_WORLD_SIZE", "LOCAL_SIZE", "WORLD_SIZE"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(DataError, match=match):
        ensure_local_world_size()


def test_open_stream_sets_local_world_size(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("LOCAL_WORLD_SIZE", "LOCAL_SIZE", "WORLD_SIZE", "RANK"):
        monkeypatch.delenv(name, raising=False)
    src = write(tmp_path / "a.txt", "hello")
    prepare([src], tmp_path / "ds")
    ds = open_stream(tmp_path / "ds")
    assert os.environ["LOCAL_WORLD_SIZE"] == "1"
    assert BYTE.decode(ds[0]["input_ids"]) == "hello"
    close_stream(ds)


def test_several_streams_on_one_folder_and_reopen_after_delete(tmp_path: Path) -> None:
    src = write(tmp_path / "d.txt", TEXT_A * 20)
    prepare([src], tmp_path / "ds", max_seq_len=32)
    n = read_stream_info(tmp_path / "ds").num_samples
    first = open_stream(tmp_path / "ds")
    second = open_stream(tmp_path / "ds")  # a phase that reuses a stream, while the old one lives
    assert first.num_samples == second.num_samples == n
    for i in (0, n // 2, n - 1):
        np.testing.assert_array_equal(first[i]["input_ids"], second[i]["input_ids"])
    expected = second[n - 1]["input_ids"]
    close_stream(first)
    close_stream(second)
    for _ in range(3):  # the next phase's loader, built after the previous one was dropped
        again = open_stream(tmp_path / "ds")
        np.testing.assert_array_equal(again[n - 1]["input_ids"], expected)
        close_stream(again)


# ------------------------------------------------------------------------------- properties


@settings(max_examples=200, deadline=None)
@given(st.text())
def test_byte_tokenizer_round_trip(text: str) -> None:
    ids = BYTE.encode(text)
    assert ids.dtype == np.int32
    assert ids[-1] == BYTE.eos_id
    assert ids.min() >= 0
    assert ids.max() < BYTE.vocab_size
    assert BYTE.decode(ids) == text


@settings(max_examples=200, deadline=None)
@given(
    n=st.integers(0, 300),
    max_seq_len=st.integers(1, 64),
    min_tokens=st.integers(1, 64),
)
def test_split_document_properties(n: int, max_seq_len: int, min_tokens: int) -> None:
    assume(min_tokens <= max_seq_len)  # prepare() refuses the rest
    ids = np.arange(n, dtype=np.int32)
    pieces = split_document(ids, max_seq_len, min_tokens)
    assert all(p.size == max_seq_len for p in pieces[:-1])
    joined = np.concatenate(pieces) if pieces else ids[:0]
    np.testing.assert_array_equal(joined, ids[: joined.size])
    assert n - joined.size < min_tokens
    if pieces:
        assert min_tokens <= pieces[-1].size <= max_seq_len


def test_close_stream_releases_descriptors(tmp_path: Path) -> None:
    prepare([write(tmp_path / "d.txt", TEXT_A * 5)], tmp_path / "ds", max_seq_len=32)

    def num_fds() -> int:
        return len(list(Path("/proc/self/fd").iterdir()))

    close_stream(open_stream(tmp_path / "ds"))  # warm-up: imports, the first shared objects
    before = num_fds()
    for _ in range(5):
        ds = open_stream(tmp_path / "ds")
        assert ds[0]["num_tokens"] > 0
        close_stream(ds)
    assert num_fds() <= before
