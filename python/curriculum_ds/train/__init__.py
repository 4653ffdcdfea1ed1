"""The reference training loop, built on the public API and nothing else.

Launched as ``deepspeed --num_gpus N --module curriculum_ds.train --deepspeed_config ds.json
--run-dir DIR``; also runs as ``python -m curriculum_ds.train ...`` (one process) and under
torchrun. It is one user of :func:`curriculum_ds.initialize`, straight in nanoGPT's style: draw a
step, forward and backward each of this rank's micro-batches, finish the step, log, checkpoint.
Everything curriculum-specific (phase swaps, token-weighted loss, re-weighting, resume rules)
happens inside the API, so a loop of your own does exactly what this one does.

Around the loop, :class:`curriculum_ds.RunDir`, the public bookkeeping a user loop uses the same
way: the resume, the records, the start banner and a log line every ``--log-interval`` steps when
stderr is not a terminal or with ``--no-progress`` (a tqdm bar on a terminal), evaluations, the
save cadence, ``--keep-last N`` checkpoint tags, SIGTERM (preemption: the loop ends after the step
in progress, with a checkpoint of it, exit code 0) and the end-of-run summary. Then
``--export-final DIR`` (:func:`curriculum_ds.checkpoint.export.export_checkpoint`, rank 0, after the
last save). ``--model-factory module:function`` trains a user's own model
(:mod:`curriculum_ds.model_factory`).

The module is a package: ``args`` (the command line), ``entry`` (:func:`main`: the checks before
any rank trains, the run-dir lock, the exit code; :func:`shutdown`), ``loop`` (:func:`train`, the
loop itself). Its default model is the library's
(:func:`curriculum_ds.default_model.build_model`, re-exported here).
"""

from __future__ import annotations

from curriculum_ds.default_model import build_model
from curriculum_ds.train.args import build_parser, parse_args
from curriculum_ds.train.entry import main, shutdown
from curriculum_ds.train.loop import skipped_steps_warning, train

__all__ = [
    "build_model",
    "build_parser",
    "main",
    "parse_args",
    "shutdown",
    "skipped_steps_warning",
    "train",
]
