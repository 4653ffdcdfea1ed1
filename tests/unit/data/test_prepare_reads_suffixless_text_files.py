"""prepare reads suffix-less UTF-8 files in a folder as plain text (issue 24, item 5).

License and notice files have no suffix (``LICENSE``, ``COPYING``, Debian's ``copyright``,
``GPL-3``); a folder walk skipped them unless ``--format text`` was given. They are now read as
text when they are UTF-8, and a suffix-less file that is binary (a NUL byte) or not UTF-8 is
still skipped and counted.
"""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner
from prepared_mds import documents_of, read_all, write

from curriculum_ds.cli import main
from curriculum_ds.data import prepare

GPL = "GNU GENERAL PUBLIC LICENSE\nVersion 3, 29 June 2007\n\n© 2007 Free Software Foundation\n"


def _decoded(out: Path) -> list[str]:
    return [bytes(d).decode() for d in documents_of(read_all(out), eos_id=256)]


def test_license_files_without_a_suffix_are_read_as_text(tmp_path: Path) -> None:
    root = tmp_path / "licenses"
    write(root / "COPYING", "Copying permission: ünïcode kept.\n")
    write(root / "LICENSE", "\ufeffMIT License\n")  # a UTF-8 BOM is dropped, as for .txt
    write(root / "common" / "GPL-3", GPL)
    write(root / "pkg" / "copyright", "Format: https://www.debian.org/doc/packaging-manuals/\n")
    write(root / "notes.txt", "a txt beside them")
    result = CliRunner().invoke(main, ["prepare", str(root), "--out", str(tmp_path / "ds")])
    assert result.exit_code == 0, result.output
    assert "skipped" not in result.output
    assert _decoded(tmp_path / "ds") == [
        "Copying permission: ünïcode kept.\n",
        "MIT License\n",
        GPL,
        "a txt beside them",
        "Format: https://www.debian.org/doc/packaging-manuals/\n",
    ]


def test_binary_and_non_utf8_files_without_a_suffix_are_still_skipped(tmp_path: Path) -> None:
    root = tmp_path / "mixed"
    write(root / "LICENSE", "MIT")
    write(root / "a.out", b"\x7fELF\x02\x01\x01\x00")  # another suffix: binary by content
    write(root / "bin" / "tool", b"\x7fELF\x02\x01\x01\x00\x00\x00")  # NUL bytes: binary
    write(root / "latin1" / "COPYING", "Lizenz für alle".encode("latin-1"))  # not UTF-8
    result = CliRunner().invoke(main, ["prepare", str(root), "--out", str(tmp_path / "ds")])
    assert result.exit_code == 0, result.output
    assert result.output.splitlines()[-1] == (
        "skipped in folders: 3 binary, not UTF-8 or unreadable files ((no suffix) 2, .out 1)"
    )
    assert _decoded(tmp_path / "ds") == ["MIT"]
    summary = prepare([root], tmp_path / "api")
    assert (summary.num_documents, summary.num_skipped_files) == (1, 3)
    assert summary.skipped_suffixes == {"": 2, ".out": 1}
