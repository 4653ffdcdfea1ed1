"""The demo's data: docstrings, code and an unlearnable ``noise`` stream (random printable
characters, the docstrings' lengths), each with a held-out split; the demo's own run does not
train on the noise. ``curriculum-ds demo --data-only`` builds the data and starts no run."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from curriculum_ds.cli import main
from curriculum_ds.commands.corpus import (
    NOISE_ALPHABET,
    NOISE_DOCS_PER_DOCSTRING,
    build_stdlib_corpus,
    write_noise_corpus,
)
from curriculum_ds.commands.demo import DOCSTRINGS_ROW_LEN, build_demo_data, demo_ds_config
from curriculum_ds.data import read_stream_info
from curriculum_ds.errors import DataError


def records(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


@pytest.fixture(scope="module")
def easy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_stdlib_corpus(tmp_path_factory.mktemp("corpus"), max_docs=40)["easy"]


def test_noise_documents_copy_the_docstrings_lengths(easy: Path, tmp_path: Path) -> None:
    noise = records(write_noise_corpus(tmp_path / "noise.jsonl", easy))
    lengths = [len(r["text"].encode()) for r in records(easy)]
    assert [len(r["text"]) for r in noise] == lengths * NOISE_DOCS_PER_DOCSTRING
    text = "".join(r["text"] for r in noise)
    assert set(text) <= set(NOISE_ALPHABET)
    assert len(NOISE_ALPHABET) == len(set(NOISE_ALPHABET)) == 95
    # uniform: every character shows up, none far from its 1/95 share
    counts = np.array([text.count(c) for c in NOISE_ALPHABET])
    assert counts.min() > 0
    assert np.abs(counts / len(text) - 1 / 95).max() < 0.01
    assert len({r["source"] for r in noise}) == len(noise)


def test_noise_is_seeded(easy: Path, tmp_path: Path) -> None:
    a = write_noise_corpus(tmp_path / "a.jsonl", easy)
    b = write_noise_corpus(tmp_path / "b.jsonl", easy)
    c = write_noise_corpus(tmp_path / "c.jsonl", easy, seed=1)
    assert a.read_bytes() == b.read_bytes()
    assert a.read_bytes() != c.read_bytes()
    one = write_noise_corpus(tmp_path / "one.jsonl", easy, copies=1)
    assert len(records(one)) * NOISE_DOCS_PER_DOCSTRING == len(records(a))


def test_noise_refuses_bad_arguments(easy: Path, tmp_path: Path) -> None:
    with pytest.raises(DataError, match="copies must be >= 1"):
        write_noise_corpus(tmp_path / "n.jsonl", easy, copies=0)
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    with pytest.raises(DataError, match="is empty"):
        write_noise_corpus(tmp_path / "n.jsonl", empty)
    assert not (tmp_path / "n.jsonl").exists()


def test_demo_data_has_three_streams_with_held_out_splits(tmp_path: Path) -> None:
    data = build_demo_data(tmp_path, max_docs=40)
    assert data == tmp_path / "data"
    infos = {
        (split, name): read_stream_info(data / split / name)
        for split in ("train", "val")
        for name in ("docstrings", "code", "noise")
    }
    assert all(info.num_samples > 0 for info in infos.values())
    for split in ("train", "val"):
        noise, docs = infos[split, "noise"], infos[split, "docstrings"]
        # packed as the docstrings are: full rows of the first phase's max_seq_len
        noise_meta = json.loads((data / split / "noise" / "curriculum_meta.json").read_text())
        assert noise_meta["packed"] is True
        assert noise_meta["max_seq_len"] == DOCSTRINGS_ROW_LEN
        assert set(noise.metrics["num_tokens"].tolist()) <= set(range(1, DOCSTRINGS_ROW_LEN + 1))
        # the docstrings' lengths, twice over (the held-out documents differ)
        ratio = noise.metrics["num_tokens"].sum() / docs.metrics["num_tokens"].sum()
        assert ratio == pytest.approx(NOISE_DOCS_PER_DOCSTRING, rel=0.5)
    # reused when present: a second build rewrites no shard
    before = {p: p.stat().st_mtime_ns for p in data.rglob("*.mds*")}
    build_demo_data(tmp_path, max_docs=40)
    assert {p: p.stat().st_mtime_ns for p in data.rglob("*.mds*")} == before


def test_the_demos_own_run_does_not_train_on_the_noise(tmp_path: Path) -> None:
    config = json.dumps(demo_ds_config(tmp_path / "data", max_duration=600_000, cuda=False))
    assert "noise" not in config


def test_demo_data_only_builds_the_data_and_starts_no_run(monkeypatch, tmp_path: Path) -> None:
    import curriculum_ds.commands.demo as demo

    built: list[Path] = []

    def fake_build(out: Path) -> Path:
        built.append(out)
        return out / "data"

    def no_run(*args, **kwargs):  # pragma: no cover - the assertion is that it is not called
        raise AssertionError("--data-only started a run")

    monkeypatch.setattr(demo, "build_demo_data", fake_build)
    monkeypatch.setattr(demo, "run_demo", no_run)
    result = CliRunner().invoke(main, ["demo", "--out", str(tmp_path / "d"), "--data-only"])
    assert result.exit_code == 0, result.output
    assert built == [(tmp_path / "d").resolve()]
    assert f"demo data: {(tmp_path / 'd').resolve() / 'data'}" in result.output
