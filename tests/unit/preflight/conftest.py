"""Fixtures shared by the preflight tests."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import make_dataset, ragged_docs


@pytest.fixture(scope="module")
def two_streams(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """Two small MDS datasets (byte tokens), "short" and "long", for ``two_phase_curriculum``."""
    root = tmp_path_factory.mktemp("two_streams")
    return (
        make_dataset(root, "short", ragged_docs(40, seed=1)),
        make_dataset(root, "long", ragged_docs(40, seed=2)),
    )
