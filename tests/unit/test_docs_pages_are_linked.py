"""Issue 18, item 4: a short README linking every ``docs/`` page, and pages that stay true.

The README is at most 250 lines and links each ``docs/*.md`` page; every relative link of the
README and the pages resolves to a file and, with a ``#fragment``, to one of its headings (GitHub's
heading anchors). The commands the pages print name real ``curriculum-ds`` subcommands and
options, and real options of the reference loop; the README's short loop uses the public API's
names; ``docs/config.md`` names every key of the ``curriculum`` section.
"""

from __future__ import annotations

import inspect
import re
import shlex
import typing
from collections.abc import Iterator
from pathlib import Path

import click
import pytest
from helpers import REPO
from pydantic import BaseModel

import curriculum_ds
from curriculum_ds.cli import main as cli
from curriculum_ds.config import CurriculumConfig, Duration
from curriculum_ds.train.args import build_parser

README = REPO / "README.md"
DOCS = REPO / "docs"
PAGES = sorted(DOCS.glob("*.md"))
MAX_README_LINES = 250
REQUIRED_PAGES = {
    "config.md",
    "data.md",
    "own-loop.md",
    "resume-and-faults.md",
    "monitors-and-report.md",
    "kernels.md",
    "benchmarks.md",
    "layout.md",
}

FENCE = re.compile(r"^```(\w*)\n(.*?)^```$", re.DOTALL | re.MULTILINE)
LINK = re.compile(r"\]\(([^)\s]+)\)")


def without_fences(text: str) -> str:
    """The Markdown text with its fenced code blocks blanked out."""
    return FENCE.sub("", text)


def github_anchor(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = heading.strip().lower().replace("`", "")
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """Every heading anchor of a Markdown file (a repeated heading gets ``-1``, ``-2``...)."""
    seen: dict[str, int] = {}
    out = set()
    for line in without_fences(path.read_text()).splitlines():
        if m := re.match(r"^#{1,6} (.+)$", line):
            anchor = github_anchor(m.group(1))
            n = seen.get(anchor, 0)
            seen[anchor] = n + 1
            out.add(anchor if n == 0 else f"{anchor}-{n}")
    return out


def relative_links(path: Path) -> Iterator[tuple[Path, str]]:
    """(target file, fragment) of every relative link of a Markdown file, outside code."""
    for target in LINK.findall(without_fences(path.read_text())):
        if re.match(r"^[a-z]+:", target):
            continue  # https:, mailto:
        file_part, _, fragment = target.partition("#")
        yield (path.parent / file_part).resolve() if file_part else path, fragment


def test_readme_is_short_and_links_every_docs_page():
    text = README.read_text()
    assert len(text.splitlines()) <= MAX_README_LINES
    assert {p.name for p in PAGES} >= REQUIRED_PAGES
    linked = {t.name for t, _ in relative_links(README) if t.parent == DOCS.resolve()}
    assert linked == {p.name for p in PAGES}, "every docs page is linked from the README"
    # the quick start's two commands stay at the top
    assert text.index("make demo") < text.index("## What the demo shows")
    assert "make test" in text.split("## What the demo shows")[0]


@pytest.mark.parametrize("path", [README, *PAGES], ids=lambda p: p.name)
def test_every_relative_link_resolves(path: Path):
    for target, fragment in relative_links(path):
        assert target.exists(), f"{path.name}: link to missing {target}"
        if fragment and target.suffix == ".md":
            assert fragment in anchors(target), f"{path.name}: no heading #{fragment} in {target}"


@pytest.mark.parametrize("path", PAGES, ids=lambda p: p.name)
def test_every_page_starts_with_a_title_and_a_summary(path: Path):
    lines = path.read_text().splitlines()
    assert lines[0].startswith("# ")
    assert lines[1] == ""
    assert lines[2]
    assert not lines[2].startswith(("#", "- ", "|", "```"))  # a summary paragraph comes first


def command_lines(text: str) -> Iterator[str]:
    """Every command the text prints: lines of ``bash`` blocks and inline code spans."""
    for lang, body in FENCE.findall(text):
        if lang == "bash":
            joined = body.replace("\\\n", " ")
            yield from (line.split(" # ")[0] for line in joined.splitlines())
    for span in re.findall(r"`([^`]+)`", without_fences(text)):
        yield span.replace("\n", " ")


def options(tokens: list[str]) -> list[str]:
    """The ``--option`` names among tokens (``--opt=value`` and bracketed ones included)."""
    out = []
    for token in tokens:
        if m := re.match(r"^\[?(--[a-z][a-z0-9_-]*)", token):
            out.append(m.group(1))
    return out


def check_train_options(tokens: list[str], where: str) -> None:
    known = {s for action in build_parser()._actions for s in action.option_strings}
    for opt in options(tokens):
        assert opt in known, f"{where}: the reference loop has no option {opt}"


@pytest.mark.parametrize("path", [README, *PAGES], ids=lambda p: p.name)
def test_printed_commands_use_real_subcommands_and_options(path: Path):
    assert isinstance(cli, click.Group)
    checked = 0
    for line in command_lines(path.read_text()):
        try:
            tokens = shlex.split(line)
        except ValueError:
            tokens = line.split()
        for i, token in enumerate(tokens):
            rest = tokens[i + 1 :]
            if token == "curriculum-ds" and rest and not rest[0].startswith("-"):
                command = cli.commands.get(rest[0])
                if command is None and rest[0].isupper():
                    continue  # prose: `curriculum-ds COMMAND`
                assert command is not None, f"{path.name}: no subcommand in {line!r}"
                end = rest.index("--") if "--" in rest else len(rest)
                ours, train = rest[1:end], rest[end + 1 :]
                if isinstance(command, click.Group) and ours and ours[0] in command.commands:
                    command, ours = command.commands[ours[0]], ours[1:]  # `mixopt fit`
                known = {s for p in command.params for s in getattr(p, "opts", [])}
                known |= {s for p in command.params for s in getattr(p, "secondary_opts", [])}
                known.add("--help")
                for opt in options(ours):
                    assert opt in known, f"{path.name}: {rest[0]} has no option {opt}: {line!r}"
                if rest[0] == "launch" and "--script" not in ours:  # else the script's own
                    check_train_options(train, f"{path.name}: {line!r}")
                checked += 1
            elif token == "curriculum_ds.train":
                check_train_options(rest, f"{path.name}: {line!r}")
                checked += 1
    if path in (README, DOCS / "launch.md"):
        assert checked >= 5


def has_attribute(cls: type, name: str) -> bool:
    """A method, property or dataclass field of ``cls``, or an attribute its code assigns."""
    if hasattr(cls, name) or name in getattr(cls, "__dataclass_fields__", {}):
        return True
    return re.search(rf"\bself\.{name}\s*(:[^=]+)?=", inspect.getsource(cls)) is not None


def test_readme_loop_uses_the_public_api():
    blocks = [body for lang, body in FENCE.findall(README.read_text()) if lang == "python"]
    assert len(blocks) == 1
    loop = blocks[0]
    compile(loop, "README.md", "exec")
    assert "cds.initialize(model=model, config=" in loop
    assert "with cds.RunDir(" in loop  # the reference loop's bookkeeping (issue 24)
    assert "for step in run:" in loop
    for name in re.findall(r"\brun\.(\w+)", loop):
        assert has_attribute(curriculum_ds.RunDir, name), f"RunDir has no {name}"
    for name in re.findall(r"\bcurriculum\.(\w+)", loop):
        assert has_attribute(curriculum_ds.Curriculum, name), f"Curriculum has no {name}"
    for name in re.findall(r"\bstep\.(\w+)", loop):
        assert has_attribute(curriculum_ds.Step, name), f"Step has no {name}"


def section_keys(model: type[BaseModel]) -> Iterator[str]:
    """Every key of a section model and of the models nested in it (durations are values)."""
    for name, field in model.model_fields.items():
        yield name
        pending = [field.annotation]
        while pending:
            tp = pending.pop()
            if isinstance(tp, type) and issubclass(tp, BaseModel) and tp is not Duration:
                yield from section_keys(tp)
            pending.extend(typing.get_args(tp))


def test_config_page_names_every_key_of_the_section():
    text = (DOCS / "config.md").read_text()
    table = text[text.index("## Every key") :]
    table = table[: table.index("\n## ")]
    for key in set(section_keys(CurriculumConfig)):
        assert re.search(rf"`([\w\[\]]+\.)*{key}`", table), f"docs/config.md: no key {key}"
