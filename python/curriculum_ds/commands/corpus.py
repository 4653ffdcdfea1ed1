r"""A real, human-written demo corpus built from the Python standard library on this machine.

No download: the text is the standard library's own ``.py`` sources (``sysconfig``'s ``stdlib``
path) and their docstrings. Two datamixes of different difficulty are written as JSONL files
(``{"text": ..., "source": ...}`` per line), ready for :func:`curriculum_ds.data.prepare`:

* ``easy`` — short docstrings (prose) of modules, classes and functions, 20–300 UTF-8 bytes each,
  exact duplicates removed: many short, plain-English samples.
* ``hard`` — whole module sources (code) of at least 2,000 bytes: long samples full of
  identifiers, indentation and symbols.

Test suites (``test``/``tests``/``idle_test`` folders, ``test_*.py``), ``site-packages``, files
that are not UTF-8 or fail to parse, and docstrings holding a lone surrogate (written as a
``\ud800`` escape in the source) are skipped. Files are visited in a deterministic order
(sorted relative path, then ranked by SHA-1 of that path so that a size cap samples modules from
the whole library rather than the alphabet's first letters). The output depends only on the
Python installation and the arguments.

A third mix, ``noise`` (:func:`write_noise_corpus`), is unlearnable text for ablations: random
printable characters from a seeded RNG, in documents as long as the ``easy`` mix's docstrings.
"""

from __future__ import annotations

import ast
import hashlib
import json
import os
import random
import string
import sysconfig
from collections.abc import Iterator
from pathlib import Path

from curriculum_ds.errors import DataError

__all__ = [
    "EASY_MAX_BYTES",
    "HARD_MIN_BYTES",
    "NOISE_ALPHABET",
    "NOISE_DOCS_PER_DOCSTRING",
    "NOISE_SEED",
    "build_stdlib_corpus",
    "stdlib_source_files",
    "write_noise_corpus",
]

EASY_MAX_BYTES = 300
"""Longest docstring (UTF-8 bytes) in the ``easy`` mix."""
EASY_MIN_BYTES = 20
"""Shortest docstring (UTF-8 bytes) in the ``easy`` mix; shorter ones are mostly fragments."""
HARD_MIN_BYTES = 2_000
"""Shortest module source (UTF-8 bytes) in the ``hard`` mix."""
DEFAULT_MAX_BYTES_PER_MIX = 3_000_000
"""Default cap on each mix's total text, in UTF-8 bytes (~3 M byte-level tokens)."""

NOISE_ALPHABET = string.ascii_letters + string.digits + string.punctuation + " "
"""The 95 printable ASCII characters a ``noise`` document draws from, uniformly: one byte-level
token each, so no model can get below ln 95 = 4.55 nats per token on it."""
NOISE_DOCS_PER_DOCSTRING = 2
"""``noise`` documents per ``easy`` docstring, each as long as that docstring (UTF-8 bytes):
about twice the docstrings' tokens."""
NOISE_SEED = 0
"""Seed of the ``noise`` mix's RNG (:class:`random.Random`, stable across Python versions)."""

_SKIP_DIRS = frozenset(
    {"test", "tests", "idle_test", "site-packages", "dist-packages", "__pycache__"}
)
_DOC_NODES = (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)


def stdlib_source_files(stdlib: Path | None = None) -> list[Path]:
    """The standard library's non-test ``.py`` files, in the corpus's deterministic order.

    Args:
        stdlib: Root to scan; defaults to ``sysconfig.get_paths()["stdlib"]``.

    Returns:
        Paths ordered by the SHA-1 of their POSIX path relative to ``stdlib`` (ties impossible in
        practice; broken by the path itself).

    Raises:
        DataError: the root is not a folder.
    """
    root = Path(stdlib if stdlib is not None else sysconfig.get_paths()["stdlib"])
    if not root.is_dir():
        raise DataError(f"standard library folder not found: {root}")
    rels: list[str] = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d not in _SKIP_DIRS and not d.startswith("."))
        for name in filenames:
            if name.endswith(".py") and not name.startswith("test_"):
                rels.append((Path(dirpath) / name).relative_to(root).as_posix())
    rels.sort(key=lambda rel: (hashlib.sha1(rel.encode("utf-8")).hexdigest(), rel))
    return [root / rel for rel in rels]


def _parsed(files: list[Path]) -> Iterator[tuple[Path, str, ast.Module]]:
    for path in files:
        try:
            source = path.read_bytes().decode("utf-8")
            tree = ast.parse(source, filename=str(path))
        except (OSError, UnicodeDecodeError, SyntaxError, ValueError):
            continue
        yield path, source, tree


def _module_name(path: Path, root: Path) -> str:
    rel = path.relative_to(root).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts) or rel.name


def _docstrings(tree: ast.Module, module: str) -> Iterator[tuple[str, str]]:
    """(qualified name, docstring) of the module, its classes and functions, in source order."""

    def visit(node: ast.AST, prefix: str) -> Iterator[tuple[str, str]]:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                name = f"{prefix}.{child.name}"
                doc = ast.get_docstring(child)
                if doc:
                    yield name, doc
                yield from visit(child, name)
            else:
                yield from visit(child, prefix)

    doc = ast.get_docstring(tree)
    if doc:
        yield module, doc
    yield from visit(tree, module)


def _write_jsonl(path: Path, records: list[dict[str, str]]) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    with open(tmp, "w", encoding="utf-8", newline="\n") as fh:
        for record in records:
            fh.write(json.dumps(record, ensure_ascii=False) + "\n")
    tmp.replace(path)


def build_stdlib_corpus(
    out_dir: Path,
    *,
    max_docs: int | None = None,
    max_bytes_per_mix: int = DEFAULT_MAX_BYTES_PER_MIX,
    stdlib: Path | None = None,
) -> dict[str, Path]:
    """Write the ``easy`` and ``hard`` datamixes of the standard-library corpus as JSONL.

    Takes about 5 s on one core for the full ``easy`` mix (every module is parsed); with the
    defaults the two mixes hold about 0.7 MB (``easy``) and 3 MB (``hard``) of text, which the
    byte tokenizer turns into as many tokens. Deterministic for a given Python installation.

    Args:
        out_dir: Folder to write ``easy.jsonl`` and ``hard.jsonl`` into (created; existing files
            of those names are replaced atomically).
        max_docs: Most documents per mix (``None``: no count cap).
        max_bytes_per_mix: Most UTF-8 bytes of text per mix; a document that would cross it is
            not taken.
        stdlib: Root to scan instead of ``sysconfig``'s ``stdlib`` path (tests).

    Returns:
        ``{"easy": path, "hard": path}``, easiest first.

    Raises:
        DataError: a bad cap, a missing standard library, or a mix that came out empty.
    """
    if max_docs is not None and max_docs < 1:
        raise DataError(f"max_docs must be >= 1, got {max_docs}")
    if max_bytes_per_mix < HARD_MIN_BYTES:
        raise DataError(f"max_bytes_per_mix must be >= {HARD_MIN_BYTES}, got {max_bytes_per_mix}")
    root = Path(stdlib if stdlib is not None else sysconfig.get_paths()["stdlib"])
    files = stdlib_source_files(root)
    limit = max_docs if max_docs is not None else len(files) * 1_000_000

    easy: list[dict[str, str]] = []
    easy_bytes = 0
    seen: set[str] = set()
    for path, _source, tree in _parsed(files):
        if len(easy) >= limit or easy_bytes >= max_bytes_per_mix:
            break
        for qualname, doc in _docstrings(tree, _module_name(path, root)):
            try:
                size = len(doc.encode("utf-8"))
            except UnicodeEncodeError:
                continue  # a "\ud800" escape: a lone surrogate is not text, nor valid JSONL
            if not EASY_MIN_BYTES <= size <= EASY_MAX_BYTES or doc in seen:
                continue
            if len(easy) >= limit or easy_bytes + size > max_bytes_per_mix:
                break
            seen.add(doc)
            easy.append({"text": doc, "source": qualname})
            easy_bytes += size

    hard: list[dict[str, str]] = []
    hard_bytes = 0
    for path in files:
        if len(hard) >= limit or max_bytes_per_mix - hard_bytes < HARD_MIN_BYTES:
            break
        try:
            size = path.stat().st_size
        except OSError:
            continue
        if size < HARD_MIN_BYTES or hard_bytes + size > max_bytes_per_mix:
            continue  # a cheap pre-check on the file size; the exact byte count follows
        for _path, source, _tree in _parsed([path]):
            nbytes = len(source.encode("utf-8"))
            if nbytes >= HARD_MIN_BYTES and hard_bytes + nbytes <= max_bytes_per_mix:
                hard.append({"text": source, "source": path.relative_to(root).as_posix()})
                hard_bytes += nbytes

    for name, records in (("easy", easy), ("hard", hard)):
        if not records:
            raise DataError(f"stdlib corpus: the {name!r} mix is empty (scanned {root})")
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = {"easy": out_dir / "easy.jsonl", "hard": out_dir / "hard.jsonl"}
    _write_jsonl(paths["easy"], easy)
    _write_jsonl(paths["hard"], hard)
    return paths


def write_noise_corpus(
    path: Path,
    easy: Path,
    *,
    copies: int = NOISE_DOCS_PER_DOCSTRING,
    seed: int = NOISE_SEED,
) -> Path:
    """Write the ``noise`` mix: unlearnable text, as JSONL, with the ``easy`` mix's lengths.

    For each pass ``c < copies`` over the docstrings of ``easy`` (a JSONL file written by
    :func:`build_stdlib_corpus`), one document of as many characters as that docstring has UTF-8
    bytes, each character drawn uniformly from :data:`NOISE_ALPHABET` by one seeded RNG.
    Deterministic for a given ``easy`` file, ``copies`` and ``seed``.

    Args:
        path: The JSONL file to write (replaced atomically when present).
        easy: The ``easy`` mix whose document lengths the noise copies.
        copies: Noise documents per docstring (>= 1).
        seed: The RNG's seed.

    Returns:
        ``path``.

    Raises:
        DataError: ``copies`` < 1 or an empty ``easy`` mix.
    """
    if copies < 1:
        raise DataError(f"copies must be >= 1, got {copies}")
    lengths = [
        len(json.loads(line)["text"].encode("utf-8"))
        for line in Path(easy).read_text(encoding="utf-8").splitlines()
    ]
    if not lengths:
        raise DataError(f"noise corpus: the easy mix {easy} is empty")
    rng = random.Random(seed)
    records = [
        {"text": "".join(rng.choices(NOISE_ALPHABET, k=n)), "source": f"noise-{c}-{i}"}
        for c in range(copies)
        for i, n in enumerate(lengths)
    ]
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    _write_jsonl(path, records)
    return path
