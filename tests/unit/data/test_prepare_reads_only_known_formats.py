"""prepare reads the formats it knows (.txt, .md, .jsonl, .json arrays, .parquet, saved datasets,
.gz/.zst compressed) and refuses the rest.

A named file of another suffix is one line naming it and the accepted formats, before anything
is written; ``--format`` reads it anyway; inside folders such files are read by content and the
binary ones skipped and counted. A refused prepare draws no progress bar: its whole output is
the error line.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from helpers import one_error_line
from prepared_mds import documents_of, names, read_all, write

from curriculum_ds.cli import main
from curriculum_ds.data import prepare
from curriculum_ds.errors import DataError

DOCS = ["first document", "second — with ünïcode\u2028and seps\r\n", "x" * 40, "", "last"]
ACCEPTED = (
    r"\.txt and \.md \(plain text\), \.jsonl \(JSON lines\), \.json \(an array of documents\), "
    r"\.parquet, saved HF datasets folders; \.gz/\.zst compressed; inside folders, any other "
    r"UTF-8 text file"
)


def _decoded(out: Path) -> list[str]:
    return [bytes(d).decode() for d in documents_of(read_all(out), eos_id=256)]


def _invoke(*args: str | Path):
    return CliRunner().invoke(main, ["prepare", *map(str, args)])


def test_json_array_gives_the_same_shards_as_jsonl(tmp_path: Path) -> None:
    jsonl = write(tmp_path / "d.jsonl", "".join(json.dumps({"text": d}) + "\n" for d in DOCS))
    # strings and objects may mix in one array; other fields of an object are ignored
    items = [d if i % 2 else {"text": d, "id": i} for i, d in enumerate(DOCS)]
    array = write(tmp_path / "d.json", json.dumps(items, indent=2, ensure_ascii=False))
    a = prepare([jsonl], tmp_path / "from_jsonl", max_seq_len=8, min_tokens=1)
    b = prepare([array], tmp_path / "from_json", max_seq_len=8, min_tokens=1)
    assert (a.num_documents, a.num_samples, a.num_tokens) == (4, b.num_samples, b.num_tokens)
    assert b.num_documents == 4  # the empty document has no tokens
    rows_a, rows_b = read_all(tmp_path / "from_jsonl"), read_all(tmp_path / "from_json")
    assert [r["input_ids"].tolist() for r in rows_a] == [r["input_ids"].tolist() for r in rows_b]
    assert _decoded(tmp_path / "from_json") == [d for d in DOCS if d]


def test_text_field_for_json_and_jsonl(tmp_path: Path) -> None:
    jsonl = write(tmp_path / "d.jsonl", "".join(json.dumps({"body": d}) + "\n" for d in DOCS))
    array = write(tmp_path / "d.json", json.dumps([{"body": d, "text": "no"} for d in DOCS]))
    for src, out in ((jsonl, "a"), (array, "b")):
        result = _invoke(src, "--out", tmp_path / out, "--text-field", "body")
        assert result.exit_code == 0, result.output
        assert _decoded(tmp_path / out) == [d for d in DOCS if d]
    line = one_error_line(_invoke(jsonl, "--out", tmp_path / "c"))  # default field: text
    assert line == f"Error: {jsonl}:1: missing field 'text' (fields: body)"
    assert not (tmp_path / "c").exists()


@pytest.mark.parametrize(
    "name", ["data.parquet.gz", "tokens.bin", "table.csv", "README", "a.rst", "notes.csv.zst"]
)
def test_unknown_suffix_is_one_line_and_writes_nothing(tmp_path: Path, name: str) -> None:
    src = write(tmp_path / "in" / name, b"PAR1\x00\x15binary" if "." in name else "plain words")
    before = set(names(tmp_path))
    line = one_error_line(_invoke(src, "--out", tmp_path / "ds"))
    suffix = "".join(src.suffixes[-2:]) if src.suffix in (".gz", ".zst") else src.suffix
    kind = f"suffix '{suffix}'" if suffix else "no suffix"
    assert line.startswith(f"Error: {src}: unknown input format ({kind}); prepare reads ")
    assert line.endswith("name its format with --format text, jsonl, json or parquet")
    with pytest.raises(
        DataError, match=rf"^{src}: unknown input format .*; prepare reads {ACCEPTED}"
    ):
        prepare([src], tmp_path / "ds")
    assert set(names(tmp_path)) == before
    # a known input beside it does not help: refused before anything is read
    good = write(tmp_path / "good.txt", "fine")
    one_error_line(_invoke(good, src, "--out", tmp_path / "ds"))
    assert not (tmp_path / "ds").exists()


def test_format_overrides_the_suffix(tmp_path: Path) -> None:
    notes = write(tmp_path / "notes.rst", "Title\n=====\n\nBody text.\n")
    result = _invoke(notes, "--out", tmp_path / "t", "--format", "text")
    assert result.exit_code == 0, result.output
    assert _decoded(tmp_path / "t") == ["Title\n=====\n\nBody text.\n"]
    lines = write(tmp_path / "dump.data", json.dumps({"text": "a"}) + "\n" + '{"text": "b"}\n')
    assert prepare([lines], tmp_path / "l", format="jsonl").num_documents == 2
    array = write(tmp_path / "docs.txt", json.dumps(["one", {"text": "two"}]))
    prepare([array], tmp_path / "j", format="json")
    assert _decoded(tmp_path / "j") == ["one", "two"]
    # and a known suffix read in another format: the .jsonl's raw lines are one text document
    prepare([lines.rename(tmp_path / "raw.jsonl")], tmp_path / "r", format="text")
    assert _decoded(tmp_path / "r") == ['{"text": "a"}\n{"text": "b"}\n']


def test_folder_skips_binary_files_and_says_so(tmp_path: Path) -> None:
    root = tmp_path / "corpus"
    write(root / "a.md", "alpha")
    write(root / "sub" / "b.json", json.dumps(["beta"]))
    write(root / "sub" / "c.csv", b"a,b\x00")
    write(root / "sub" / "d.csv", b"a,b\x00")
    write(root / "LICENSE", "MIT")  # no suffix: read as text (issue 24; it used to be skipped)
    result = _invoke(root, "--out", tmp_path / "ds")
    assert result.exit_code == 0, result.output
    assert result.output.splitlines()[-1] == (
        "skipped in folders: 2 binary, not UTF-8 or unreadable files (.csv 2)"
    )
    assert _decoded(tmp_path / "ds") == ["MIT", "alpha", "beta"]
    # a folder of nothing readable: one line saying what was skipped
    only = tmp_path / "csv_only"
    write(only / "part-0.csv", b"a,b\x00")
    line = one_error_line(_invoke(only, "--out", tmp_path / "none"))
    assert line.startswith(f"Error: no documents found in inputs: {only} (skipped 1 binary, ")
    assert "1 binary, not UTF-8 or unreadable file (.csv 1); reads .txt and .md" in line
    assert not (tmp_path / "none").exists()


@pytest.mark.parametrize(
    ("body", "match"),
    [
        ('{"text": "a"}', r"d\.json: expected a JSON array of documents \(strings or objects "),
        ("[1, 2]", r"d\.json\[0\]: expected a string or an object with a 'text' field, got int$"),
        ('["ok", {"txt": "x"}]', r"d\.json\[1\]: missing field 'text' \(fields: txt\)$"),
        ('[{"text": ["x"]}]', r"d\.json\[0\]: field 'text' must be a string, got list$"),
        ('[\n  "ok",\n  oops\n]', r"d\.json:3: invalid JSON \(Expecting value\)$"),
        ('["ok", "bad \\ud800"]', r"d\.json\[1\]: the document is not valid Unicode \(lone "),
        (b'["\xff"]', r"d\.json:1: not UTF-8 text \(invalid byte at offset 2\)$"),
    ],
)
def test_bad_json_names_file_and_element(tmp_path: Path, body: str | bytes, match: str) -> None:
    src = write(tmp_path / "in" / "d.json", body)
    before = set(names(tmp_path))
    with pytest.raises(DataError, match=match):
        prepare([src], tmp_path / "ds")
    line = one_error_line(_invoke(src, "--out", tmp_path / "ds"))
    assert str(src) in line
    assert set(names(tmp_path)) == before


def test_bad_row_after_good_ones_names_file_and_row(tmp_path: Path) -> None:
    items = [{"body": f"doc {i} " * 40} for i in range(700)] + [{"body": 7}]
    src = write(tmp_path / "d.json", json.dumps(items))
    line = one_error_line(_invoke(src, "--out", tmp_path / "ds", "--text-field", "body"))
    assert line == f"Error: {src}[700]: field 'body' must be a string, got int"
    assert not (tmp_path / "ds").exists()


@pytest.mark.parametrize(
    "make_input",
    [
        lambda p: p / "missing.txt",
        lambda p: write(p / "data.parquet", b"PAR1\x00"),
        lambda p: write(p / "empty.txt", ""),
        lambda p: write(p / "blank.jsonl", "\n\n"),
        lambda p: (p / "emptydir").mkdir() or p / "emptydir",
        lambda p: write(p / "bad.jsonl", '{"txt": 1}\n'),
    ],
)
def test_refused_prepare_draws_no_progress_bar(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], make_input
) -> None:
    src = make_input(tmp_path)
    one_error_line(_invoke(src, "--out", tmp_path / "ds"))
    capsys.readouterr()
    with pytest.raises(DataError):
        prepare([src], tmp_path / "ds", progress=True)
    captured = capsys.readouterr()
    assert (captured.out, captured.err) == ("", "")  # no "0doc" bar before the error
    # the same check sees a bar when there is one
    prepare([write(tmp_path / "ok.txt", "fine")], tmp_path / "ok", progress=True)
    assert "prepare" in capsys.readouterr().err
