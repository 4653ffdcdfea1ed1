"""Deprecated: :mod:`curriculum_ds.checkpoint.export` is the export's home now.

Kept one release for user loops that call ``record_architecture`` or ``export_checkpoint`` from
here; importing it warns (``DeprecationWarning``).
"""

from __future__ import annotations

import warnings

from curriculum_ds.checkpoint.export import (
    ARCHITECTURE_DIR,
    STATE_DICT_FILE,
    Exported,
    consolidated_state_dict,
    export_checkpoint,
    record_architecture,
    recorded_architecture,
)

__all__ = [
    "ARCHITECTURE_DIR",
    "STATE_DICT_FILE",
    "Exported",
    "consolidated_state_dict",
    "export_checkpoint",
    "record_architecture",
    "recorded_architecture",
]

warnings.warn(
    "curriculum_ds.commands.export moved to curriculum_ds.checkpoint.export",
    DeprecationWarning,
    stacklevel=2,
)
