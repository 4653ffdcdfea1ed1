"""``prepare --shard I/N`` + ``merge``, and ``--num-workers``: one prepare over many processes
(issue 35, item 5).

Three parts merged hold exactly the samples, in order, with the same columns, as a one-process
``prepare``: every sample's columns, ``metrics.npz``, ``curriculum_meta.json`` and the tokenizer
files byte for byte (only where the shard files split the samples differs). With ``--pack``:
the same tokens in at most N - 1 more rows. ``--val-fraction`` agrees across the parts. Bad input
is one line each, before anything is written.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from helpers import one_error_line
from prepared_mds import read_all, write
from test_prepare_with_an_hf_tokenizer_json import make_wordlevel

from curriculum_ds.cli import main
from curriculum_ds.data import prepare, read_stream_info
from curriculum_ds.data.merge import merge_parts
from curriculum_ds.data.parts import Shard, document_range, parse_shard
from curriculum_ds.data.sharded import prepare_parts
from curriculum_ds.data.split import prepare_split
from curriculum_ds.errors import DataError

WORDS = "the cat sat on the mat a dog ate the cat food hello world".split()
SIDECARS = ("metrics.npz", "curriculum_meta.json", "tokenizer.json", "tokenizer_config.json")


def _corpus(root: Path, num_docs: int = 23) -> Path:
    """JSONL documents of 1 to ~60 words (some split over rows at max_seq_len 16), two empty."""
    rng = np.random.default_rng(0)
    lines = []
    for i in range(num_docs):
        n = 0 if i in (4, 11) else int(rng.integers(1, 60))
        lines.append(json.dumps({"text": " ".join(rng.choice(WORDS, n)) + f" #{i}" * (n > 0)}))
    return write(root / "docs.jsonl", "\n".join(lines) + "\n")


def _invoke(*args: str | Path):
    return CliRunner().invoke(main, [str(a) for a in args])


def _assert_same_stream(merged: Path, whole: Path) -> None:
    """The same samples (every column's bytes) in order, and the same sidecar files' bytes."""
    got, want = read_all(merged), read_all(whole)
    assert len(got) == len(want)
    for a, b in zip(got, want, strict=True):
        assert a.keys() == b.keys()
        for key in a:
            assert np.asarray(a[key]).tobytes() == np.asarray(b[key]).tobytes(), key
    for name in SIDECARS:
        if (whole / name).exists():
            assert (merged / name).read_bytes() == (whole / name).read_bytes(), name
    assert read_stream_info(merged).num_samples == len(want)


def test_three_parts_merged_are_the_one_process_stream(tmp_path: Path) -> None:
    src = _corpus(tmp_path / "in")
    kw = {"max_seq_len": 16, "size_limit": 400}  # several shard files per part
    whole = tmp_path / "whole"
    prepare([src], whole, **kw)
    parts = [tmp_path / f"part{i}" for i in range(3)]
    for i, part in enumerate(parts):
        (summary,) = prepare_parts([src], part, shard=Shard(i, 3), **kw)
        meta = json.loads((part / "curriculum_meta.json").read_text())
        assert meta["part"] == {
            "index": i,
            "count": 3,
            "documents": list(document_range(Shard(i, 3), 21)),
            "total_documents": 21,
        }
        assert summary.num_documents == 7  # 21 non-empty documents, 7 per part
    merged = merge_parts(tmp_path / "merged", parts[::-1])  # any order: joined by index
    assert merged.num_parts == 3
    assert merged.num_shards > 3  # each part wrote several shard files
    _assert_same_stream(tmp_path / "merged", whole)
    for part in parts:  # the parts are left as they were
        assert read_stream_info(part).num_samples > 0


def test_the_cli_parts_of_an_hf_tokenizer_split_agree_on_the_held_out_documents(
    tmp_path: Path,
) -> None:
    src = _corpus(tmp_path / "in")
    (tmp_path / "tok").mkdir()
    tok = make_wordlevel(tmp_path / "tok" / "tokenizer.json", ["</s>"])
    common = ("--tokenizer", tok, "--max-seq-len", "16", "--val-fraction", "0.3", "--seed", "5")
    assert _invoke("prepare", src, "--out", tmp_path / "whole", *common).exit_code == 0
    for i in range(3):
        result = _invoke("prepare", src, "--out", tmp_path / f"p{i}", "--shard", f"{i}/3", *common)
        assert result.exit_code == 0, result.output
        assert result.output.splitlines()[-1].startswith(f"part {i}/3 written")
    for suffix in ("", "_val"):
        parts = [tmp_path / f"p{i}{suffix}" for i in range(3)]
        result = _invoke("merge", tmp_path / f"merged{suffix}", *parts)
        assert result.exit_code == 0, result.output
        assert result.output.startswith("merged 3 parts: ")
        _assert_same_stream(tmp_path / f"merged{suffix}", tmp_path / f"whole{suffix}")


def test_packed_parts_hold_the_same_tokens_in_at_most_n_minus_one_more_rows(
    tmp_path: Path,
) -> None:
    src = _corpus(tmp_path / "in")
    whole = tmp_path / "whole"
    prepare([src], whole, max_seq_len=32, pack=True)
    parts = [tmp_path / f"part{i}" for i in range(3)]
    for i, part in enumerate(parts):
        prepare_parts([src], part, shard=Shard(i, 3), max_seq_len=32, pack=True)
    merge_parts(tmp_path / "merged", parts)
    got, want = read_all(tmp_path / "merged"), read_all(whole)
    assert len(want) <= len(got) <= len(want) + 2
    flat = [np.concatenate([np.asarray(r["input_ids"]) for r in rows]) for rows in (got, want)]
    assert flat[0].tobytes() == flat[1].tobytes()
    info, whole_info = read_stream_info(tmp_path / "merged"), read_stream_info(whole)
    assert (info.num_tokens, info.max_token_id) == (whole_info.num_tokens, whole_info.max_token_id)


def test_more_parts_than_documents_leave_some_parts_empty(tmp_path: Path) -> None:
    src = write(tmp_path / "in" / "d.jsonl", '{"text": "one doc"}\n{"text": "and another"}\n')
    for i in range(3):
        prepare_parts([src], tmp_path / f"p{i}", shard=Shard(i, 3), max_seq_len=8)
    prepare([src], tmp_path / "whole", max_seq_len=8)
    merge_parts(tmp_path / "merged", [tmp_path / f"p{i}" for i in range(3)])
    _assert_same_stream(tmp_path / "merged", tmp_path / "whole")


def test_workers_on_one_machine_write_the_one_process_stream(tmp_path: Path) -> None:
    src = _corpus(tmp_path / "in")
    kw = {"max_seq_len": 16, "val_fraction": 0.25}
    prepare_split([src], tmp_path / "whole", **kw)
    train, held = prepare_parts([src], tmp_path / "two", num_workers=2, **kw)
    assert (train.num_documents + held.num_documents, train.out) == (21, tmp_path / "two")
    _assert_same_stream(tmp_path / "two", tmp_path / "whole")
    _assert_same_stream(tmp_path / "two_val", tmp_path / "whole_val")
    assert not [p.name for p in tmp_path.iterdir() if p.name.startswith(".")]  # no parts left


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("3/3", "--shard 3/3: part index 3 is out of range for 3 parts; the parts are 0/3 to 2/3"),
        ("1", "--shard 1: must be I/N with integers 0 <= I < N"),
        ("a/2", "--shard a/2: must be I/N"),
        ("0/0", "--shard 0/0: must be I/N"),
        ("-1/2", "--shard -1/2: part index -1 is out of range"),
    ],
)
def test_a_bad_shard_is_one_line_before_anything_is_read(
    tmp_path: Path, value: str, expected: str
) -> None:
    with pytest.raises(DataError, match="^" + expected.replace("(", r"\(")):
        parse_shard(value)
    line = one_error_line(
        _invoke("prepare", tmp_path / "missing.jsonl", "--out", tmp_path / "o", "--shard", value)
    )
    assert line.startswith("Error: " + expected)
    assert not (tmp_path / "o").exists()


def test_bad_workers_and_a_remote_part_are_one_line(tmp_path: Path) -> None:
    src = _corpus(tmp_path / "in")
    line = one_error_line(_invoke("prepare", src, "--out", tmp_path / "o", "--num-workers", "0"))
    assert line == "Error: --num-workers 0: must be an integer >= 1 (processes on this machine)"
    line = one_error_line(_invoke("prepare", src, "--out", "s3://b/p", "--shard", "0/2"))
    assert line.startswith("Error: --shard with --out s3://b/p: a part is a local folder")


def _parts(root: Path, src: Path, count: int, **kw) -> list[Path]:
    folders = [root / f"{count}-{i}" for i in range(count)]
    for i, folder in enumerate(folders):
        prepare_parts([src], folder, shard=Shard(i, count), **kw)
    return folders


def test_merge_refuses_parts_that_are_not_one_stream_in_one_line(tmp_path: Path) -> None:
    src = _corpus(tmp_path / "in")
    three = _parts(tmp_path, src, 3, max_seq_len=16)
    out = tmp_path / "out"
    cases = {
        "missing": ([three[0], three[2]], "merge: part 1/3 of 3 is missing; give every part once"),
        "twice": (
            [*three, three[1]],
            f"merge: part 1/3 is given twice ({three[1]} and {three[1]})",
        ),
        "other N": (
            [*_parts(tmp_path, src, 2, max_seq_len=16)[:1], *three[1:]],
            "merge: the parts disagree on their part counts N (2 in",
        ),
        "max_seq_len": (
            [three[0], *_parts(tmp_path / "l", src, 3, max_seq_len=8)[1:]],
            "merge: the parts were prepared with different max_seq_len: 16 in",
        ),
        "tokenizer": (
            [
                three[0],
                *_parts(
                    tmp_path / "t",
                    src,
                    3,
                    max_seq_len=16,
                    tokenizer=make_wordlevel(tmp_path / "tokenizer.json", ["</s>"]),
                )[1:],
            ],
            "merge: the parts were prepared with different tokenizers: 'byte' in",
        ),
    }
    prepare([src], tmp_path / "whole", max_seq_len=16)
    cases["whole"] = (
        [tmp_path / "whole"],
        f"merge: {tmp_path / 'whole'} is not a part written by `curriculum-ds prepare --shard`",
    )
    for name, (parts, expected) in cases.items():
        line = one_error_line(_invoke("merge", out, *parts))
        assert line.startswith("Error: " + expected), (name, line)
        assert not out.exists(), name
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []
