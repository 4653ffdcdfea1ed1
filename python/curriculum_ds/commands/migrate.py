"""``curriculum-ds migrate DS_CONFIG``: DeepSpeed's sequence-length curriculum as a section.

Reads a ds_config whose DeepSpeed ``curriculum_learning`` (or data-efficiency ``seqlen_*``
curriculum) drives the sequence length, and writes the same ds_config with that block replaced
by the equivalent ``curriculum`` section (:func:`curriculum_ds.config.legacy.translate_legacy`),
ready for ``curriculum-ds validate`` once its stream folder is the user's.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from curriculum_ds.config import read_json_object
from curriculum_ds.config.legacy import migrate_config

__all__ = ["migrate_config", "read_ds_config"]


def read_ds_config(path: Path) -> dict[str, Any]:
    """A ds_config file as a dict (:func:`~curriculum_ds.config.read_json_object`)."""
    return read_json_object(path)
