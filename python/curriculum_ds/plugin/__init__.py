"""The plugin API: a curriculum beside a DeepSpeed engine, for any training loop.

``initialize`` builds the engine and the curriculum; ``attach`` adds a curriculum to an engine
built elsewhere; iterating the :class:`Curriculum` yields :class:`Step` objects whose
micro-batches go ``backward`` and which ``finish`` (DESIGN.md, "Library use").
"""

from curriculum_ds.loader import MicroBatch
from curriculum_ds.plugin.curriculum import Curriculum
from curriculum_ds.plugin.engine import attach, deepspeed_config, initialize, load_run_config
from curriculum_ds.plugin.step import Step

__all__ = [
    "Curriculum",
    "MicroBatch",
    "Step",
    "attach",
    "deepspeed_config",
    "initialize",
    "load_run_config",
]
