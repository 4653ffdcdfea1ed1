"""``prepare --val-fraction F`` writes a held-out MDS folder ``OUT_val`` (issue 24, item 5).

Every trial user made their own ``val/`` by hand. Now ``round(F × documents)`` whole documents,
drawn by ``--seed``, go to ``OUT_val`` beside ``--out``: disjoint by document from ``--out``,
the same for the same seed, both readable as MDS, and together the unsplit set. An F outside
(0, 1) is one line naming the option, before anything is written.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
from click.testing import CliRunner
from helpers import one_error_line
from prepared_mds import documents_of, names, read_all, write

from curriculum_ds.cli import main
from curriculum_ds.data import read_stream_info
from curriculum_ds.data.split import prepare_split
from curriculum_ds.errors import DataError

DOCS = [f"document {i}: " + "word " * (i % 7) for i in range(40)]


def _corpus(root: Path) -> Path:
    for i, doc in enumerate(DOCS):
        write(root / f"d{i:02d}.txt", doc)
    write(root / "empty.txt", "")  # an empty document goes to neither side
    return root


def _decoded(out: Path) -> list[str]:
    return [bytes(d).decode() for d in documents_of(read_all(out), eos_id=256)]


def _prepare(*args: str | Path):
    return CliRunner().invoke(main, ["prepare", *map(str, args)])


def test_held_out_documents_are_disjoint_deterministic_and_complete(tmp_path: Path) -> None:
    corpus = _corpus(tmp_path / "corpus")
    result = _prepare(corpus, "--out", tmp_path / "a" / "train", "--val-fraction", "0.25")
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines[0].endswith(f"from 30 documents to {tmp_path / 'a' / 'train'}")
    assert lines[1].endswith(f"from 10 documents to {tmp_path / 'a' / 'train_val'}")
    train, val = _decoded(tmp_path / "a" / "train"), _decoded(tmp_path / "a" / "train_val")
    assert (len(train), len(val)) == (30, 10)
    assert not set(train) & set(val)  # disjoint by document
    assert Counter(train + val) == Counter(DOCS)  # the union is the unsplit set
    assert _prepare(corpus, "--out", tmp_path / "all").exit_code == 0
    assert Counter(_decoded(tmp_path / "all")) == Counter(train + val)
    for folder in ("train", "train_val"):  # each a prepared MDS folder of its own
        assert read_stream_info(tmp_path / "a" / folder).vocab_size == 257
    # the same seed (default 0): byte-identical folders; another seed: another draw
    again = _prepare(corpus, "--out", tmp_path / "b" / "train", "--val-fraction", "0.25")
    assert again.exit_code == 0, again.output
    for folder in ("train", "train_val"):
        first, second = tmp_path / "a" / folder, tmp_path / "b" / folder
        assert {p.name: p.read_bytes() for p in first.iterdir()} == {
            p.name: p.read_bytes() for p in second.iterdir()
        }
    other = _prepare(
        corpus, "--out", tmp_path / "c" / "train", "--val-fraction", "0.25", "--seed", "7"
    )
    assert other.exit_code == 0, other.output
    other_val = _decoded(tmp_path / "c" / "train_val")
    assert len(other_val) == 10
    assert set(other_val) != set(val)


@pytest.mark.parametrize("fraction", ["0", "1", "1.5", "-0.1", "nan"])
def test_a_fraction_outside_the_open_interval_is_one_line(tmp_path: Path, fraction: str) -> None:
    corpus = _corpus(tmp_path / "corpus")
    before = set(names(tmp_path))
    line = one_error_line(_prepare(corpus, "--out", tmp_path / "ds", "--val-fraction", fraction))
    assert line.startswith(f"Error: --val-fraction {float(fraction)}: must be a number in (0, 1)")
    assert set(names(tmp_path)) == before


def test_the_api_names_the_held_out_folder_and_refuses_one_document(tmp_path: Path) -> None:
    corpus = _corpus(tmp_path / "corpus")
    train, val = prepare_split(
        [corpus], tmp_path / "t", val_out=tmp_path / "v", val_fraction=0.01, max_seq_len=64
    )
    assert (train.num_documents, val.num_documents) == (39, 1)  # at least one held out
    one = write(tmp_path / "one" / "only.txt", "a single document")
    with pytest.raises(DataError, match="hold 1 non-empty document; a split by document"):
        prepare_split([one], tmp_path / "x", val_fraction=0.5)
    assert not (tmp_path / "x").exists()
    assert not (tmp_path / "x_val").exists()


def test_an_s3_out_gets_its_held_out_prefix_beside_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from object_store import s3_server

    from curriculum_ds.data.remote import list_remote

    corpus = _corpus(tmp_path / "corpus")
    args = ["--val-fraction", "0.25", "--out"]
    assert _prepare(corpus, *args, tmp_path / "local" / "web").exit_code == 0
    with s3_server(monkeypatch) as server:
        server.client().create_bucket(Bucket="split")  # its own: the server outlives a test
        result = _prepare(corpus, *args, "s3://split/web")
        assert result.exit_code == 0, result.output
        assert result.output.splitlines()[1].endswith("from 10 documents to s3://split/web_val")
        for name in ("web", "web_val"):
            local = tmp_path / "local" / name
            assert list_remote(f"s3://split/{name}") == {
                p.name: p.stat().st_size for p in local.iterdir()
            }
