"""The package's layout rules hold: tiers import downhill, a step never sees its curriculum, no
module grows past the size the house style sets (~450 lines)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "python" / "curriculum_ds"
MODULES = sorted(p for p in PACKAGE.rglob("*.py") if "__pycache__" not in p.parts)
MAX_LINES = 460  # "~450": a module past it is a sign to split


def _imported(path: Path) -> set[str]:
    """Every module ``path`` imports (absolute names; relative imports are not used here)."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module is not None:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return names


def _name(path: Path) -> str:
    return str(path.relative_to(PACKAGE.parent)).removesuffix(".py").replace("/", ".")


@pytest.mark.parametrize("path", MODULES, ids=_name)
def test_no_module_is_over_the_size_limit(path: Path) -> None:
    num_lines = len(path.read_text(encoding="utf-8").splitlines())
    assert num_lines <= MAX_LINES, f"{_name(path)} has {num_lines} lines"


def test_the_library_never_imports_the_reference_loop() -> None:
    offenders = [
        _name(p)
        for p in MODULES
        if "train" not in p.relative_to(PACKAGE).parts
        and any(
            n == "curriculum_ds.train" or n.startswith("curriculum_ds.train.") for n in _imported(p)
        )
    ]
    assert offenders == []


def test_a_step_never_sees_its_curriculum() -> None:
    step = PACKAGE / "plugin" / "step.py"
    imported = _imported(step)
    assert not any(n.startswith("curriculum_ds.plugin.curriculum") for n in imported)
    source = step.read_text(encoding="utf-8")
    assert "Curriculum(" not in source
    assert "._curriculum" not in source
    # nothing private of another object is reached through a curriculum
    assert "curriculum._" not in source


@pytest.mark.parametrize(
    ("package", "forbidden"),
    [
        ("dynamic", ("curriculum_ds.core.loader", "curriculum_ds.plugin")),
        ("checkpoint", ("curriculum_ds.plugin",)),
    ],
)
def test_lower_tiers_never_import_the_plugin_or_the_loader(package, forbidden) -> None:
    """A re-weighting reads a ``PhaseView`` and hands back a ``MixtureUpdate`` (it never sees
    the loader); the checkpoint package stores states and never reaches up into the plugin."""
    offenders = [
        f"{_name(p)} imports {n}"
        for p in MODULES
        if p.relative_to(PACKAGE).parts[0] == package
        for n in sorted(_imported(p))
        if any(n == f or n.startswith(f"{f}.") for f in forbidden)
    ]
    assert offenders == []


def test_only_the_shared_modules_lie_at_the_top() -> None:
    """Every module lives in a package (``core/`` for the curriculum logic), but the few every
    tier shares: the exception hierarchy, the process environment, the loop's run dir and the
    model builders."""
    top = sorted(p.stem for p in PACKAGE.glob("*.py"))
    shared = ["__init__", "default_model", "distributed", "errors", "model_factory", "run_dir"]
    assert top == shared
