"""The ``curriculum-ds`` command line, one module per kind of command.

Thin by design: each command parses options and calls one plain function; a
:class:`~curriculum_ds.errors.CurriculumError` becomes one clean line on stderr and exit code 1 in
one place (``group.py``).

- ``group.py``: the ``main`` group and its one-line error handling;
- ``data.py``: ``prepare``, ``score`` and ``validate``;
- ``runs.py``: ``launch``, ``demo``, ``ablate``, ``migrate``;
- ``inspect_runs.py``: ``curve``, ``report``, ``mix``, ``export``, ``bench``;
- ``mixopt.py``: ``mixopt fit``.
"""

from __future__ import annotations

from curriculum_ds.cli import data, inspect_runs, mixopt, runs  # noqa: F401  (each registers its commands)
from curriculum_ds.cli.group import main

__all__ = ["main"]
