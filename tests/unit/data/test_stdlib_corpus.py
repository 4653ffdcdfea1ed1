"""The stdlib demo corpus: real text from this machine's standard library, two mixes."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import numpy as np
import pytest

from curriculum_ds.commands.corpus import (
    EASY_MAX_BYTES,
    HARD_MIN_BYTES,
    build_stdlib_corpus,
    stdlib_source_files,
)
from curriculum_ds.data import prepare, read_stream_info
from curriculum_ds.errors import DataError


def records(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


@pytest.fixture(scope="module")
def real_corpus(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return build_stdlib_corpus(tmp_path_factory.mktemp("corpus"), max_docs=60)


def test_two_non_empty_mixes_from_the_real_stdlib(real_corpus: dict[str, Path]) -> None:
    assert list(real_corpus) == ["easy", "hard"]
    easy, hard = records(real_corpus["easy"]), records(real_corpus["hard"])
    assert len(easy) == 60
    assert len(hard) == 60
    assert all(20 <= len(r["text"].encode()) <= EASY_MAX_BYTES for r in easy)
    assert len({r["text"] for r in easy}) == len(easy)  # no duplicates
    assert all(len(r["text"].encode()) >= HARD_MIN_BYTES for r in hard)
    # real code: every hard document is a parseable module with a def or class
    assert all(("def " in r["text"] or "class " in r["text"]) for r in hard)
    assert not any("/test/" in f"/{r['source']}" or "test_" in r["source"] for r in hard)


def test_easy_mix_has_clearly_shorter_samples(real_corpus: dict[str, Path], tmp_path: Path) -> None:
    prepare([real_corpus["easy"]], tmp_path / "easy", max_seq_len=512)
    prepare([real_corpus["hard"]], tmp_path / "hard", max_seq_len=512)
    easy = read_stream_info(tmp_path / "easy").metrics["num_tokens"]
    hard = read_stream_info(tmp_path / "hard").metrics["num_tokens"]
    assert easy.size == 60  # one docstring is one sample
    assert hard.size > 60  # long modules are split at max_seq_len
    assert np.mean(easy) * 3 < np.mean(hard)
    assert np.median(hard) == 512


def test_deterministic(real_corpus: dict[str, Path], tmp_path: Path) -> None:
    again = build_stdlib_corpus(tmp_path, max_docs=60)
    for name, path in again.items():
        assert path.read_bytes() == real_corpus[name].read_bytes()


def test_byte_cap(tmp_path: Path) -> None:
    mixes = build_stdlib_corpus(tmp_path, max_docs=30, max_bytes_per_mix=20_000)
    for path in mixes.values():
        assert 0 < sum(len(r["text"].encode()) for r in records(path)) <= 20_000


def test_source_files_skip_tests_and_are_ordered() -> None:
    files = stdlib_source_files()
    assert len(files) > 100
    assert all(f.suffix == ".py" for f in files)
    parts = {part for f in files for part in f.parts}
    assert not parts & {"test", "tests", "idle_test", "site-packages"}
    assert not any(f.name.startswith("test_") for f in files)
    assert files == stdlib_source_files()


def fake_stdlib(root: Path) -> Path:
    long_body = "\n".join(f"def f{i}(x):\n    return x + {i}\n" for i in range(100))
    (root / "pkg").mkdir(parents=True)
    (root / "pkg" / "__init__.py").write_text(
        textwrap.dedent('''\
            """A package whose docstring is long enough to count as prose."""

            class Thing:
                """Hold one value and give it back on request, unchanged."""

                def get(self):
                    """Return the held value to the caller, untouched."""
            ''')
        + long_body
    )
    (root / "broken.py").write_text(
        '"""This module docstring is fine but the code is not."""\ndef ('
    )
    (root / "test").mkdir()
    (root / "test" / "t.py").write_text('"""A test module docstring that must be skipped."""\n')
    (root / "test_mod.py").write_text('"""Another test module docstring to skip here."""\n')
    return root


def test_fake_stdlib_content(tmp_path: Path) -> None:
    mixes = build_stdlib_corpus(tmp_path / "out", stdlib=fake_stdlib(tmp_path / "lib"))
    easy = records(mixes["easy"])
    assert sorted(r["source"] for r in easy) == ["pkg", "pkg.Thing", "pkg.Thing.get"]
    assert {r["text"] for r in easy} >= {"Hold one value and give it back on request, unchanged."}
    hard = records(mixes["hard"])
    assert [r["source"] for r in hard] == ["pkg/__init__.py"]


def test_errors(tmp_path: Path) -> None:
    with pytest.raises(DataError, match=r"^max_docs must be >= 1, got 0$"):
        build_stdlib_corpus(tmp_path, max_docs=0)
    with pytest.raises(DataError, match=r"^max_bytes_per_mix must be >= 2000, got 10$"):
        build_stdlib_corpus(tmp_path, max_bytes_per_mix=10)
    with pytest.raises(DataError, match=r"^standard library folder not found: .*nowhere$"):
        build_stdlib_corpus(tmp_path / "out", stdlib=tmp_path / "nowhere")
    short = tmp_path / "short"
    short.mkdir()
    (short / "m.py").write_text('"""A short module with a docstring that is long enough."""\n')
    with pytest.raises(DataError, match=r"^stdlib corpus: the 'hard' mix is empty"):
        build_stdlib_corpus(tmp_path / "out2", stdlib=short)
    assert not (tmp_path / "out2").exists()


def test_docstring_with_lone_surrogate_is_skipped(tmp_path: Path) -> None:
    lib = fake_stdlib(tmp_path / "lib")
    # a "\ud800" escape is valid Python but not text: it cannot be written as UTF-8 JSONL
    (lib / "surrogate.py").write_text(
        '"""A module docstring with a lone \\ud800 surrogate escape inside."""\n'
    )
    mixes = build_stdlib_corpus(tmp_path / "out", stdlib=lib)
    easy = records(mixes["easy"])
    assert "surrogate" not in {r["source"] for r in easy}
    assert sorted(r["source"] for r in easy) == ["pkg", "pkg.Thing", "pkg.Thing.get"]
