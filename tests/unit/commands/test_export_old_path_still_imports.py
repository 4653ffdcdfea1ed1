"""``curriculum_ds.commands.export`` (the docs' old path for user loops) still imports, warns, and
hands out the functions of ``curriculum_ds.checkpoint.export``."""

from __future__ import annotations

import importlib
import sys

import pytest

from curriculum_ds.checkpoint import export


def test_the_old_path_warns_and_is_the_same_functions() -> None:
    sys.modules.pop("curriculum_ds.commands.export", None)
    with pytest.warns(DeprecationWarning, match="moved to curriculum_ds.checkpoint.export"):
        old = importlib.import_module("curriculum_ds.commands.export")
    assert old.record_architecture is export.record_architecture
    assert old.export_checkpoint is export.export_checkpoint
    assert set(old.__all__) == set(export.__all__)
