"""prepare's errors: one line naming the file (and line), and nothing left in the output folder."""

from __future__ import annotations

import json
import pathlib
from pathlib import Path
from typing import Any

import pytest
from prepared_mds import assert_nothing_written, names, write

from curriculum_ds.data import prepare, read_stream_info
from curriculum_ds.errors import CurriculumError, DataError


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


def test_unreadable_named_file_is_an_error_but_skipped_in_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Tests may run as root, where chmod 000 does not stop reads: simulate EACCES instead.
    secret = write(tmp_path / "in" / "secret.txt", "top secret")
    write(tmp_path / "in" / "open.txt", "fine")
    real = pathlib.Path.open

    def open_(self: Path, *args: Any, **kwargs: Any) -> Any:
        if self.name == "secret.txt":
            raise PermissionError(13, "Permission denied", str(self))
        return real(self, *args, **kwargs)

    monkeypatch.setattr(pathlib.Path, "open", open_)
    with pytest.raises(DataError, match=r"^cannot read .*secret\.txt: permission denied$"):
        prepare([secret], tmp_path / "ds")
    assert not (tmp_path / "ds").exists()
    summary = prepare([tmp_path / "in"], tmp_path / "ds")
    assert summary.num_documents == 1
    assert summary.num_skipped_files == 1
