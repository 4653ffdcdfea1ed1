"""The plugin API: a curriculum beside a DeepSpeed engine, for any training loop.

``initialize`` builds the engine and the curriculum; ``attach`` adds a curriculum to an engine
built elsewhere; iterating the :class:`Curriculum` yields :class:`Step` objects whose
micro-batches go ``backward`` and which ``finish`` (``docs/own-loop.md``).

Modules, one concern each: ``engine`` (``initialize``, ``attach``, ``deepspeed_config``),
``engine_like`` (the ``EngineLike`` surface of a DeepSpeed engine the plugin uses, and the
``Topology`` read from it), ``curriculum`` (``Curriculum``: iteration, phase swaps, the
coordinator of the others), ``step`` (``Step``: micro-batches, token-weighted backward,
``finish``), ``inputs`` (checks of what a loop hands ``step.backward``), ``stats`` (a step's
statistics and its one all-reduce), ``accounting`` (per-stream samples, tokens and losses),
``completion`` (what a finished step hands back and what the run makes of it: counters, skip
counts, re-weighting, the rows), ``evaluation`` (held-out evaluation), ``nonfinite`` (steps that
update nothing), ``preemption`` (SIGTERM), ``prefetch`` (the next step's micro-batches read on a
background thread; the samples still decided on the training thread), ``checkpointing`` (the
curriculum's ``state_dict`` and checkpoint calls; files, tags, rules and formats are
:mod:`curriculum_ds.checkpoint`).
"""

from curriculum_ds.core.loader import MicroBatch
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
