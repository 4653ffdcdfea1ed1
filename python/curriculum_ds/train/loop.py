"""The reference loop itself: draw a step, forward and backward its micro-batches, finish.

:func:`train` is one user of :func:`curriculum_ds.initialize` and :class:`curriculum_ds.RunDir`
(see :mod:`curriculum_ds.train`): the run directory's bookkeeping (resume, records, progress,
evaluations, the save cadence, SIGTERM, the end-of-run summary) is the public one a user loop
gets; this module adds the model (the default one, ``--model`` or ``--model-factory``), the
record of its architecture beside the checkpoints (so ``export`` needs no flag) and
``--export-final``.
"""

from __future__ import annotations

import argparse
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from curriculum_ds.default_model import build_model
from curriculum_ds.run_dir import skipped_steps_warning

if TYPE_CHECKING:
    from pathlib import Path

    from curriculum_ds.checkpoint.files import SavedTag
    from curriculum_ds.checkpoint.rules import ResumePlan
    from curriculum_ds.config import RunConfig

__all__ = ["skipped_steps_warning", "train"]


def train(
    args: argparse.Namespace, run: RunConfig, resume: tuple[SavedTag, ResumePlan] | None
) -> int:
    """The loop: returns the exit code.

    ``resume`` is the tag to resume from, read once, and the resume rules' verdict on it under
    ``run`` (:func:`~curriculum_ds.checkpoint.rules.check_resume`, checked by :func:`main` before
    DeepSpeed starts), or None for a fresh start. Neither is read nor checked again. The run
    directory's lock is :func:`main`'s, taken before anything was read.
    """
    from curriculum_ds.distributed import prepare_environment

    prepare_environment()  # before torch/DeepSpeed read their environment
    import torch
    import torch.distributed as dist

    import curriculum_ds as cds
    from curriculum_ds.checkpoint.export import record_architecture
    from curriculum_ds.records.monitors import default_monitor_paths

    cfg = run.curriculum
    torch.manual_seed(cfg.seed)  # model init only; the data order uses no global RNG
    model, forward = _model(args, run)
    # monitors without an output_path write under --run-dir/monitors/, not the working dir
    ds_config = default_monitor_paths(run.ds_config, args.run_dir)
    engine, curriculum = cds.initialize(model=model, config=replace(run, ds_config=ds_config))
    if dist.get_rank() == 0:  # `curriculum-ds export RUN/checkpoints OUT` needs no flag then
        record_architecture(model, args.run_dir / "checkpoints", source=args.model)
    with cds.RunDir(
        args.run_dir,
        curriculum,
        save_interval=args.save_interval,
        resume=resume,
        max_steps=args.max_steps,
        keep_last=args.keep_last,
        trace=args.trace_samples,
        progress=False if args.no_progress else None,
        log_interval=args.log_interval,
        eval_forward=None if forward is None else (lambda mb: forward(engine, mb)),
        lock=False,
    ) as run_dir:
        # a HF model runs without a KV cache: transformers builds the per-document mask of
        # position_ids (document masking) only without one, and training never reads it
        no_cache = (
            {"use_cache": False} if hasattr(getattr(model, "config", None), "use_cache") else {}
        )
        for step in run_dir:
            for mb in step.micro_batches:
                if forward is None:  # attention_mask, or position_ids for packed documents
                    logits = engine(mb.input_ids, **mb.forward_kwargs(), **no_cache)
                else:
                    logits = forward(engine, mb)
                step.backward(logits, mb)  # token-weighted loss -> engine.backward + engine.step
            run_dir.finish(step)
    if dist.get_rank() == 0 and args.export_final is not None and not curriculum.stop_requested:
        _export_final(args, run, run_dir.checkpoints)  # after the last save; the others wait
    dist.barrier()
    return 0


def _model(args: argparse.Namespace, run: RunConfig) -> tuple[Any, Any]:
    """The model and its forward (None: ``engine(input_ids, **mb.forward_kwargs())``)."""
    max_seq_len = max(p.train_loader.peak_seq_len for p in run.curriculum.schedule)
    if args.model_factory is not None:
        from curriculum_ds.model_factory import build_from_factory

        return build_from_factory(args.model_factory, run.curriculum, max_seq_len)
    # a Namespace built by hand (tests, callers of train()) may predate --model-preset
    preset = getattr(args, "model_preset", "proxy")
    return build_model(args.model, run.curriculum, max_seq_len, preset), None


def _export_final(args: argparse.Namespace, run: RunConfig, ckpt_dir: Path) -> None:
    """``--export-final``: the last checkpoint's model, as ``curriculum-ds export`` writes it."""
    from curriculum_ds.checkpoint.export import export_checkpoint

    done = export_checkpoint(ckpt_dir, args.export_final, model=args.model, ds_config=run)
    print(
        f"curriculum_ds: exported {done.tag_dir.name} ({done.num_parameters:,} parameters) "
        f"to {done.out}",
        flush=True,
    )
