"""The reference loop itself: draw a step, forward and backward its micro-batches, finish, log.

:func:`train` is one user of :func:`curriculum_ds.initialize` (see :mod:`curriculum_ds.train`);
around the loop it evaluates when ``curriculum.eval_due``, checkpoints (``--save-interval``,
``--max-steps``, SIGTERM, the end), prunes (``--keep-last``), exports (``--export-final``) and
prints the end-of-run summary (:func:`skipped_steps_warning` among it).
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from curriculum_ds.default_model import build_model

if TYPE_CHECKING:
    from pathlib import Path

    from curriculum_ds.checkpoint.files import SavedTag
    from curriculum_ds.checkpoint.rules import ResumePlan
    from curriculum_ds.config import RunConfig
    from curriculum_ds.plugin import Curriculum
    from curriculum_ds.records.schema import EvalRow

__all__ = ["skipped_steps_warning", "train"]


def train(
    args: argparse.Namespace, run: RunConfig, resume: tuple[SavedTag, ResumePlan] | None
) -> int:
    """The loop: returns the exit code.

    ``resume`` is the tag to resume from, read once, and the resume rules' verdict on it under
    ``run`` (:func:`~curriculum_ds.checkpoint.rules.check_resume`, checked by :func:`main` before
    DeepSpeed starts), or None for a fresh start. Neither is read nor checked again.
    """
    from curriculum_ds.distributed import prepare_environment

    prepare_environment()  # before torch/DeepSpeed read their environment
    import torch
    import torch.distributed as dist

    import curriculum_ds as cds
    from curriculum_ds.checkpoint.retention import prune_checkpoints
    from curriculum_ds.records.jsonl import RunLog
    from curriculum_ds.records.monitors import default_monitor_paths
    from curriculum_ds.records.progress import StepLogger, banner

    cfg = run.curriculum
    torch.manual_seed(cfg.seed)  # model init only; the data order uses no global RNG
    model = build_model(args.model, cfg, max(p.train_loader.peak_seq_len for p in cfg.schedule))
    # monitors without an output_path write under --run-dir/monitors/, not the working dir
    ds_config = default_monitor_paths(run.ds_config, args.run_dir)
    engine, curriculum = cds.initialize(model=model, config=replace(run, ds_config=ds_config))
    if resume is not None:
        curriculum.load_checkpoint(resume[0], plan=resume[1])
    is_main = dist.get_rank() == 0
    ckpt_dir = args.run_dir / "checkpoints"
    log = None
    if is_main:
        log = RunLog(
            args.run_dir,
            resumed_step=curriculum.global_step if curriculum.resumed_from else None,
            history=curriculum.dynamic is not None,
            trace=args.trace_samples,
            evaluation=curriculum.evaluator is not None,
        )
        print(banner(engine, curriculum), flush=True)
    dist.barrier()
    # a bar on a terminal; one line per --log-interval in a file or pipe (or with --no-progress)
    use_bar = is_main and not args.no_progress and sys.stderr.isatty()
    bar = _progress_bar(curriculum) if use_bar else None
    logger = (
        StepLogger(args.log_interval, schedule=curriculum.schedule)
        if is_main and bar is None
        else None
    )
    start_step = curriculum.global_step

    for step in curriculum:
        progress_before = curriculum.progress
        for mb in step.micro_batches:
            logits = engine(mb.input_ids, attention_mask=mb.attention_mask)
            step.backward(logits, mb)  # token-weighted loss -> engine.backward + engine.step
        record = step.finish()
        if log is not None:
            log.write(record, reweighting=step.reweighting, trace=step.trace_record())
        line = logger.line(record) if logger is not None else None
        if line is not None:
            print(line, flush=True)
        if curriculum.eval_due:  # an eval interval or a phase ended: before the checkpoint
            _evaluate(curriculum, log, bar)
        if bar is not None:
            bar.update(float(curriculum.progress - progress_before))
            bar.set_postfix(
                phase=record["phase_name"],
                loss=_loss_postfix(record["loss"]),
                tok_s=f"{record['tokens_per_s']:,.0f}",
                refresh=False,
            )
        stop = args.max_steps is not None and curriculum.global_step >= args.max_steps
        # SIGTERM on any rank (preemption): every rank sees it after the same step
        preempted = curriculum.stop_requested
        interval = args.save_interval and curriculum.global_step % args.save_interval == 0
        if interval or stop or preempted or curriculum.is_done:
            curriculum.save_checkpoint(ckpt_dir)  # returns once `latest` has moved (barrier)
            if is_main and args.keep_last is not None:
                prune_checkpoints(ckpt_dir, keep_last=args.keep_last)
        if preempted and is_main:
            print(
                f"curriculum_ds: SIGTERM: stopped after step {curriculum.global_step} with its "
                f"checkpoint {ckpt_dir / f'global_step{curriculum.global_step}'}; continue with "
                "--resume auto",
                flush=True,
            )
        if stop or preempted:
            break
    curriculum.close()
    if bar is not None:
        bar.close()
    if log is not None:
        log.close()
    if is_main and args.export_final is not None and not curriculum.stop_requested:
        _export_final(args, run, ckpt_dir)  # after the last save; the other ranks wait below
    if log is not None:
        _print_summary(args, curriculum, start_step)
    dist.barrier()
    return 0


def _evaluate(curriculum: Curriculum, log: Any, bar: Any) -> EvalRow:
    """One held-out evaluation: ``eval.jsonl`` and a line with its losses and wall time (rank 0).

    Its time is not training time: ``curriculum.evaluate`` leaves it out of ``tokens_per_s``.
    """
    row = curriculum.evaluate()
    if log is not None:
        log.write_eval(row)
        streams = "  ".join(
            f"{name} {_loss_postfix(s['loss'])}" for name, s in row["streams"].items()
        )
        line = (
            f"curriculum_ds: eval at step {row['step']} ({row['phase_name']}): loss "
            f"{_loss_postfix(row['loss'])}  [{streams}]  {row['eval_time_s']:.2f} s"
        )
        if bar is not None:
            bar.write(line)
        else:
            print(line, flush=True)
    return row


def _export_final(args: argparse.Namespace, run: RunConfig, ckpt_dir: Path) -> None:
    """``--export-final``: the last checkpoint's model, as ``curriculum-ds export`` writes it."""
    from curriculum_ds.commands.export import export_checkpoint

    done = export_checkpoint(ckpt_dir, args.export_final, model=args.model, ds_config=run)
    print(
        f"curriculum_ds: exported {done.tag_dir.name} ({done.num_parameters:,} parameters) "
        f"to {done.out}",
        flush=True,
    )


def _progress_bar(curriculum: Curriculum) -> Any:
    from tqdm.auto import tqdm

    unit = curriculum.schedule.unit
    total = curriculum.schedule.total
    bar = tqdm(
        total=float(total) if unit == "ep" else int(total),
        unit=unit,
        unit_scale=unit == "tok",
        dynamic_ncols=True,
        file=sys.stderr,
    )
    bar.update(float(curriculum.progress) if unit == "ep" else int(curriculum.progress))
    return bar


def _print_summary(args: argparse.Namespace, curriculum: Curriculum, start_step: int) -> None:
    run_dir = args.run_dir
    num_steps = curriculum.global_step - start_step
    num_skipped = curriculum.num_skipped_steps
    lines = [
        "",
        f"curriculum_ds: {'stopped (SIGTERM)' if curriculum.stop_requested else 'finished'} "
        f"at step {curriculum.global_step} ({num_steps} this run), "
        f"{curriculum.consumed_tokens:,} tokens, {curriculum.consumed_samples:,} samples",
        f"  metrics:     {run_dir / 'metrics.jsonl'}",
        f"  checkpoints: {run_dir / 'checkpoints'}",
    ]
    if num_skipped:
        lines.append(
            f"  skipped:     {num_skipped} of {num_steps} steps "
            "(no loss-bearing tokens; `skipped` in metrics.jsonl)"
        )
    if curriculum.num_nonfinite_steps:
        lines.append(
            f"  non-finite:  {curriculum.num_nonfinite_steps} of {num_steps} steps updated "
            "nothing (NaN/inf loss; `skip_reason` in metrics.jsonl)"
        )
    if curriculum.dynamic is not None:
        lines.append(
            f"  history:     {run_dir / 'curriculum_history.jsonl'}"
            f"  (plot: curriculum-ds curve {run_dir})"
        )
    if args.trace_samples:
        lines.append(f"  trace:       {run_dir / 'sample_trace.jsonl'}")
    if curriculum.evaluator is not None:
        lines.append(f"  evals:       {run_dir / 'eval.jsonl'}")
    lines.append(f"  report:      curriculum-ds report {run_dir}")
    print("\n".join(lines), flush=True)
    warning = skipped_steps_warning(num_skipped, num_steps)
    if warning is not None:
        print(warning, file=sys.stderr, flush=True)


def skipped_steps_warning(num_skipped: int, num_steps: int) -> str | None:
    """The end-of-run warning about optimizer steps skipped for lack of loss-bearing tokens.

    A step is skipped when no micro-batch on any dp rank has a loss-bearing token (every shifted
    label is -100): there is no loss to divide, the model is not updated, but the step's samples
    and tokens are consumed (see ``skipped`` in metrics.jsonl).

    Args:
        num_skipped: skipped optimizer steps of this run (this process; a resumed run counts
            from its checkpoint), in ``[0, num_steps]``.
        num_steps: optimizer steps of this run.

    Returns:
        One line, or None when no step was skipped. It says "all" when every step was.

    Raises:
        ValueError: a count is negative or ``num_skipped > num_steps``.
    """
    if num_steps < 0 or not 0 <= num_skipped <= num_steps:
        raise ValueError(f"need 0 <= num_skipped <= num_steps, got {num_skipped}, {num_steps}")
    if num_skipped == 0:
        return None
    cause = (
        "no loss-bearing tokens (every label is -100 after the shift), so they did not update "
        "the model"
    )
    if num_skipped == num_steps:
        return (
            f"curriculum_ds: warning: ALL {num_steps} optimizer steps of this run were skipped: "
            f"they had {cause}; check the data's labels (e.g. samples of one token, or a mask "
            "that covers everything)"
        )
    return (
        f"curriculum_ds: warning: {num_skipped} of {num_steps} optimizer steps of this run were "
        f"skipped because they had {cause}"
    )


def _loss_postfix(loss: float | None) -> str:
    """The progress bar's loss: 3 decimals, or "skipped" for a step without loss-bearing tokens."""
    return "skipped" if loss is None else f"{loss:.3f}"
