"""``curriculum-ds migrate DS_CONFIG``: DeepSpeed's sequence-length curriculum as a section.

Reads a ds_config whose DeepSpeed ``curriculum_learning`` (or data-efficiency ``seqlen_*``
curriculum) drives the sequence length, and writes the same ds_config with that block replaced
by the equivalent ``curriculum`` section (:func:`curriculum_ds.config.legacy.translate_legacy`),
ready for ``curriculum-ds validate`` once its stream folder is the user's.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from curriculum_ds.config.legacy import migrate_config
from curriculum_ds.errors import ConfigError

__all__ = ["migrate_config", "read_ds_config"]


def read_ds_config(path: Path) -> dict[str, Any]:
    """A ds_config file as a dict (one-line ConfigError when unreadable or not an object)."""
    try:
        raw = json.loads(path.read_text())
    except (OSError, ValueError) as err:
        raise ConfigError(f"{path}: cannot read a JSON ds_config: {err}") from None
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: expected a JSON object at the top level")
    return raw
