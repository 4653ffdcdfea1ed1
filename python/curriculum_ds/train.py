"""The reference training loop, built on the public API and nothing else.

Launched as ``deepspeed --num_gpus N --module curriculum_ds.train --deepspeed_config ds.json
--run-dir DIR``; also runs as ``python -m curriculum_ds.train ...`` (one process) and under
torchrun. It is one user of :func:`curriculum_ds.initialize`, straight in nanoGPT's style: draw a
step, forward and backward each of this rank's micro-batches, finish the step, log, checkpoint.
Everything curriculum-specific (phase swaps, token-weighted loss, re-weighting, resume rules)
happens inside the API, so a loop of your own does exactly what this one does.

Around the loop, from public modules a user loop can call the same way: the start banner and a
log line every ``--log-interval`` steps when stderr is not a terminal or with ``--no-progress``
(:mod:`curriculum_ds.progress`; a tqdm bar on a terminal), ``--keep-last N`` checkpoint tags
(:func:`curriculum_ds.retention.prune_checkpoints`, rank 0, after ``save_checkpoint`` returned)
and ``--export-final DIR`` (:func:`curriculum_ds.export.export_checkpoint`, rank 0, after the
last save). SIGTERM (preemption) ends the loop after the step in progress, with a checkpoint of
it (``curriculum.stop_requested``), exit code 0.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Sequence

    from curriculum_ds.config import RunConfig
    from curriculum_ds.plugin import Curriculum

__all__ = [
    "build_model",
    "build_parser",
    "main",
    "parse_args",
    "shutdown",
    "skipped_steps_warning",
    "train",
]

_PEER_ERROR_GRACE_S = 3.0
"""Seconds a rank other than 0 waits before printing its own DownloadError (see ``main``)."""


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of the training module (DeepSpeed launcher compatible)."""
    p = argparse.ArgumentParser(
        prog="python -m curriculum_ds.train",
        description="Curriculum training on DeepSpeed; launch with "
        "`deepspeed --num_gpus N --module curriculum_ds.train --deepspeed_config ds.json ...`.",
    )
    p.add_argument(
        "--deepspeed_config",
        "--deepspeed-config",
        type=Path,
        required=True,
        help="ds_config JSON with a `curriculum` section",
    )
    p.add_argument(
        "--run-dir",
        "--run_dir",
        type=Path,
        required=True,
        help="where metrics.jsonl, curriculum_history.jsonl and checkpoints/ go",
    )
    p.add_argument(
        "--model",
        default=None,
        help="local HF model folder; default: a small GPT-2 built from a config",
    )
    p.add_argument(
        "--save-interval",
        type=int,
        default=0,
        help="checkpoint every N optimizer steps (0: only at the end)",
    )
    p.add_argument(
        "--resume",
        default=None,
        help="`auto` (latest checkpoint of --run-dir, if any) or a checkpoint folder",
    )
    p.add_argument(
        "--trace-samples",
        action="store_true",
        help="write sample_trace.jsonl: the global batch of every step",
    )
    p.add_argument(
        "--max-steps",
        type=int,
        default=None,
        help="stop after this global step (a checkpoint is written), for smoke runs",
    )
    p.add_argument(
        "--no-progress",
        action="store_true",
        help="no progress bar: log lines instead (the default when stderr is not a terminal)",
    )
    p.add_argument(
        "--log-interval",
        type=int,
        default=0,
        help="without a progress bar, one log line every N optimizer steps "
        "(0, the default: the first step, then about every 10 s of wall time)",
    )
    p.add_argument(
        "--keep-last",
        type=int,
        default=None,
        help="keep only the newest N checkpoint tags (never the one `latest` names; "
        "default: keep all)",
    )
    p.add_argument(
        "--export-final",
        type=Path,
        default=None,
        help="at the end, write the model of the last checkpoint to this folder "
        "(HF save_pretrained; as `curriculum-ds export`)",
    )
    p.add_argument(
        "--local_rank",
        "--local-rank",
        type=int,
        default=None,
        help="set by the DeepSpeed launcher; must agree with LOCAL_RANK",
    )
    p.add_argument("--deepspeed", action="store_true", help="accepted for DeepSpeed compatibility")
    return p


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """Parse the module's arguments and reconcile ``--local_rank`` with ``LOCAL_RANK``.

    Raises:
        SystemExit: On a usage error (argparse's exit code 2).
        curriculum_ds.distributed.LocalRankError: If the two local ranks disagree.
    """
    from curriculum_ds.distributed import resolve_local_rank

    parser = build_parser()
    args = parser.parse_args(argv)
    if args.log_interval < 0:
        parser.error(f"--log-interval: must be >= 0 (0: about every 10 s), got {args.log_interval}")
    if args.keep_last is not None and args.keep_last < 1:
        parser.error(f"--keep-last: must be >= 1, got {args.keep_last}")
    args.local_rank = resolve_local_rank(args.local_rank)
    return args


def main(argv: Sequence[str] | None = None) -> int:
    """Run training; returns the process exit code.

    0: the schedule (or ``--max-steps``) is done, or SIGTERM stopped it after a step and its
    checkpoint; 1: a refused config or resume, or ``curriculum.max_consecutive_nonfinite``
    non-finite steps in a row (one line each).
    """
    from curriculum_ds.checkpoint import read_curriculum_state, resume_target
    from curriculum_ds.config import load_config
    from curriculum_ds.distributed import LocalRankError, lock_run_dir
    from curriculum_ds.errors import ConfigError, CurriculumError, DownloadError
    from curriculum_ds.resume_rules import check_resume

    is_rank0 = os.environ.get("RANK", "0") == "0"
    run_dir_lock = None  # held (open) until this process ends
    try:
        args = parse_args(argv)
        # refused before any rank trains: the checks of `curriculum-ds validate --model`
        run = load_config(args.deepspeed_config, check_data=True, model=args.model, strict=True)
        if is_rank0:
            # one run per run dir, taken before anything is read or written there; a second
            # run's rank 0 exits 1 here and its launcher stops its other ranks
            run_dir_lock = lock_run_dir(args.run_dir)
        if args.export_final is not None and _not_empty(args.export_final):
            raise ConfigError(
                f"--export-final {args.export_final}: exists and is not an empty folder"
            )
        resume = resume_target(args.resume, args.run_dir)
        if resume is not None:  # the resume rules, before DeepSpeed starts
            _, saved = read_curriculum_state(resume[0] / resume[1])
            if saved is not None:
                check_resume(run.curriculum, saved)
    except (CurriculumError, LocalRankError) as exc:
        # every rank reaches the same verdict on the same files: one line, from global rank 0
        if is_rank0:
            print(f"curriculum_ds: error: {exc}", file=sys.stderr)
        return 1
    try:
        return train(args, run, resume)
    except DownloadError as exc:
        # one rank's verdict (its own samples' shard): that rank prints it. Rank 0 at once; any
        # other rank after a grace period, in which the launcher stops it if rank 0 failed too
        # (it polls every second), so a failure every rank sees prints once
        if not is_rank0:
            time.sleep(_PEER_ERROR_GRACE_S)
        print(f"curriculum_ds: error: {exc}", file=sys.stderr, flush=True)
        return 1
    except CurriculumError as exc:
        if is_rank0:  # the same verdict on every rank: print it once
            print(f"curriculum_ds: error: {exc}", file=sys.stderr)
        return 1
    finally:
        if run_dir_lock is not None:
            run_dir_lock.close()


def train(args: argparse.Namespace, run: RunConfig, resume: tuple[Path, str] | None) -> int:
    """The loop: returns the exit code. ``resume`` is ``(checkpoints folder, tag)`` or None."""
    from curriculum_ds.distributed import prepare_environment

    prepare_environment()  # before torch/DeepSpeed read their environment
    import torch
    import torch.distributed as dist

    import curriculum_ds as cds
    from curriculum_ds.progress import StepLogger, banner
    from curriculum_ds.retention import prune_checkpoints
    from curriculum_ds.runlog import RunLog

    cfg = run.curriculum
    torch.manual_seed(cfg.seed)  # model init only; the data order uses no global RNG
    model = build_model(args.model, cfg, max(p.train_loader.max_seq_len for p in cfg.schedule))
    engine, curriculum = cds.initialize(model=model, config=run)
    if resume is not None:
        curriculum.load_checkpoint(resume[0], tag=resume[1])
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


def _evaluate(curriculum: Curriculum, log: Any, bar: Any) -> dict[str, Any]:
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


def _not_empty(path: Path) -> bool:
    return path.exists() and (not path.is_dir() or any(path.iterdir()))


def _export_final(args: argparse.Namespace, run: RunConfig, ckpt_dir: Path) -> None:
    """``--export-final``: the last checkpoint's model, as ``curriculum-ds export`` writes it."""
    from curriculum_ds.export import export_checkpoint

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


def build_model(model: str | None, cfg: Any, max_seq_len: int) -> Any:
    """A HF causal LM: a local model folder, or a small GPT-2 built from a config (no download).

    The default model has 2 layers, width 128, no dropout (modern pre-training practice, and it
    makes micro-batch splits exactly comparable), a vocabulary sized to the data (the largest
    ``vocab_size`` recorded by ``prepare`` over all streams of the schedule) and positions for the
    longest ``max_seq_len`` of the schedule.
    """
    from transformers import AutoModelForCausalLM, GPT2Config, GPT2LMHeadModel

    from curriculum_ds.data import read_stream_info
    from curriculum_ds.errors import ConfigError

    vocab_sizes = [
        read_stream_info(s.local, remote=s.remote).vocab_size
        for p in cfg.schedule
        for s in p.train_loader.streams
    ]
    if model is not None:
        if not Path(model).is_dir():
            raise ConfigError(
                f"--model {model}: not a local model folder (no download at run time)"
            )
        return AutoModelForCausalLM.from_pretrained(model)
    known = [v for v in vocab_sizes if v is not None]
    if not known:
        raise ConfigError("curriculum.schedule: no stream records its vocab_size; pass --model")
    config = GPT2Config(
        vocab_size=max(known),
        n_positions=max_seq_len,
        n_embd=128,
        n_layer=2,
        n_head=4,
        resid_pdrop=0.0,
        embd_pdrop=0.0,
        attn_pdrop=0.0,
    )
    return GPT2LMHeadModel(config)


def shutdown() -> None:
    """Destroy the process group before the interpreter exits.

    ``torch.distributed``'s gloo group owns C++ worker threads; left to the interpreter's
    teardown, a rank can abort there ("terminate called without an active exception", exit -6)
    after the run itself succeeded. Destroying the group joins them first.
    """
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


if __name__ == "__main__":
    exit_code = main()
    shutdown()
    sys.exit(exit_code)
