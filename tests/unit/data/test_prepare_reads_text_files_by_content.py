"""prepare reads a folder's text files by content, whatever the suffix (issue 32, item 8).

A folder of C headers (``.h``), one of Perl modules (``.pm``) and one of Debian changelogs
(``changelog.Debian.gz``, gzip; ``NEWS.Debian.zst``, zstd) are read without ``--format``: each
file one plain-text document, decompressed first. Binary files beside them (NUL bytes, a gzip of
binary data, a ``.gz`` that is not gzip) and a non-UTF-8 file are skipped and counted by suffix
in the summary line. A named file of such a suffix still needs ``--format``.
"""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest
import zstandard
from click.testing import CliRunner
from helpers import one_error_line
from prepared_mds import documents_of, read_all, write

from curriculum_ds.cli import main
from curriculum_ds.data import prepare

HEADERS = {
    "include/list.h": (
        "#ifndef LIST_H\n#define LIST_H\n\n#include <stddef.h>\n\n"
        "struct list_node {\n    struct list_node *next;\n    void *value;\n};\n\n"
        "size_t list_length(const struct list_node *head);\n\n#endif /* LIST_H */\n"
    ),
    "include/sys/clock.h": (
        "/* clock.h — monotonic time, ünïcode in a comment */\n#pragma once\n"
        "typedef long long clock_ns;\nclock_ns clock_now(void);\n"
    ),
    "lib/Text/Wrap.pm": (
        "package Text::Wrap;\nuse strict;\nuse warnings;\n\nour $columns = 76;\n\n"
        "sub wrap {\n    my ($init, $sub, @text) = @_;\n    return join ' ', @text;\n}\n\n1;\n"
    ),
}
CHANGELOGS = {
    "doc/zlib1g/changelog.Debian.gz": (
        "zlib (1:1.2.13.dfsg-1) unstable; urgency=medium\n\n"
        "  * New upstream release.\n\n -- Maintainer <m@example.org>  Mon, 16 Jan 2023\n"
    ),
    "doc/bash/changelog.Debian.gz": (
        "bash (5.2.15-2) unstable; urgency=medium\n\n  * Fix a build failure.\n\n"
        " -- Maintainer <m@example.org>  Sat, 10 Dec 2022\n"
    ),
    "doc/bash/NEWS.Debian.zst": "bash (5.0-1)\n\n  Bash 5 is the default shell.\n",
}


def _decoded(out: Path) -> list[str]:
    return [bytes(d).decode() for d in documents_of(read_all(out), eos_id=256)]


def _prepare(*args: str | Path):
    return CliRunner().invoke(main, ["prepare", *map(str, args)])


@pytest.fixture
def corpus(tmp_path: Path) -> Path:
    root = tmp_path / "corpus"
    for name, text in HEADERS.items():
        write(root / name, text)
    for name, text in CHANGELOGS.items():
        data = text.encode()
        packed = gzip.compress(data) if name.endswith(".gz") else zstandard.compress(data)
        write(root / name, packed)
    return root


def test_headers_and_perl_modules_are_read_without_format(tmp_path: Path, corpus: Path) -> None:
    result = _prepare(corpus / "include", corpus / "lib", "--out", tmp_path / "code")
    assert result.exit_code == 0, result.output
    assert "skipped" not in result.output
    assert _decoded(tmp_path / "code") == [HEADERS[n] for n in sorted(HEADERS)]


def test_debian_changelogs_are_decompressed_without_format(tmp_path: Path, corpus: Path) -> None:
    result = _prepare(corpus / "doc", "--out", tmp_path / "changelogs")
    assert result.exit_code == 0, result.output
    assert "skipped" not in result.output
    # sorted by relative path: bash/NEWS.Debian.zst, bash/changelog.Debian.gz, zlib1g/...
    assert _decoded(tmp_path / "changelogs") == [CHANGELOGS[n] for n in sorted(CHANGELOGS)]


def test_binary_and_non_utf8_files_beside_them_are_skipped_and_counted(
    tmp_path: Path, corpus: Path
) -> None:
    write(corpus / "lib" / "libz.so.1", b"\x7fELF\x02\x01\x01\x00" + bytes(64))
    write(corpus / "doc" / "data.tar.gz", gzip.compress(b"ustar\x00" + bytes(512)))
    write(corpus / "doc" / "broken.gz", b"not gzip at all")  # does not decompress
    write(corpus / "lib" / "Latin.pm", "package Lätin;\n1;\n".encode("latin-1"))
    result = _prepare(corpus, "--out", tmp_path / "all")
    assert result.exit_code == 0, result.output
    assert result.output.splitlines()[-1] == (
        "skipped in folders: 4 binary, not UTF-8 or unreadable files (.1 1, .gz 1, .pm 1, "
        ".tar.gz 1)"
    )
    texts = {**HEADERS, **CHANGELOGS}
    assert sorted(_decoded(tmp_path / "all")) == sorted(texts.values())
    summary = prepare([corpus], tmp_path / "api")
    assert (summary.num_documents, summary.num_skipped_files) == (len(texts), 4)
    assert summary.skipped_suffixes == {".1": 1, ".gz": 1, ".pm": 1, ".tar.gz": 1}


def test_a_named_file_of_another_suffix_still_needs_format(tmp_path: Path, corpus: Path) -> None:
    header = corpus / "include" / "list.h"
    line = one_error_line(_prepare(header, "--out", tmp_path / "one"))
    assert line.startswith(f"Error: {header}: unknown input format (suffix '.h'); prepare reads ")
    result = _prepare(header, "--out", tmp_path / "one", "--format", "text")
    assert result.exit_code == 0, result.output
    assert _decoded(tmp_path / "one") == [HEADERS["include/list.h"]]
