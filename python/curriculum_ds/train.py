"""Training entry point.

Launched as ``deepspeed --num_gpus N --module curriculum_ds.train --deepspeed_config ds.json``.

One loop owns the optimizer step: it draws the step's global batch from the current phase's
loader (every rank computes the same batch and takes its slice), runs the micro-batches through
the DeepSpeed engine with the token-weighted loss, feeds the per-sample losses to the dynamic
re-weighting, advances the phase at the exact cumulative boundary, logs, and checkpoints through
DeepSpeed with the curriculum state in ``client_state``.

Also runs as ``python -m curriculum_ds.train ...`` (one process) and under torchrun.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import sys
import time
from fractions import Fraction
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Sequence

    from curriculum_ds.config import RunConfig

__all__ = ["build_parser", "main", "parse_args", "skipped_steps_warning"]


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
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument(
        "--local_rank",
        "--local-rank",
        type=int,
        default=None,
        help="set by the DeepSpeed launcher; must agree with LOCAL_RANK",
    )
    p.add_argument("--deepspeed", action="store_true", help="accepted for DeepSpeed compatibility")
    p.add_argument("--dump-state", type=Path, default=None, help=argparse.SUPPRESS)
    # Fault injection for the resume tests: SIGKILL this process at a precise point.
    p.add_argument("--kill-after-step", type=int, default=None, help=argparse.SUPPRESS)
    p.add_argument("--kill-during-save", type=int, default=None, help=argparse.SUPPRESS)
    return p


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """Parse the module's arguments and reconcile ``--local_rank`` with ``LOCAL_RANK``.

    Raises:
        SystemExit: On a usage error (argparse's exit code 2).
        curriculum_ds.distributed.LocalRankError: If the two local ranks disagree.
    """
    from curriculum_ds.distributed import resolve_local_rank

    args = build_parser().parse_args(argv)
    args.local_rank = resolve_local_rank(args.local_rank)
    return args


def main(argv: Sequence[str] | None = None) -> int:
    """Run training; returns the process exit code (0 ok, 1 refused config/resume)."""
    from curriculum_ds.config import load_config
    from curriculum_ds.distributed import LocalRankError, lock_run_dir, prepare_environment
    from curriculum_ds.errors import CurriculumError

    run_dir_lock = None  # held (open) until this process ends
    try:
        args = parse_args(argv)
        # refused before any rank trains: the checks of `curriculum-ds validate --model`
        run = load_config(args.deepspeed_config, check_data=True, model=args.model, strict=True)
        if os.environ.get("RANK", "0") == "0":
            # one run per run dir, taken before anything is read or written there; a second
            # run's rank 0 exits 1 here and its launcher stops its other ranks
            run_dir_lock = lock_run_dir(args.run_dir)
        check_resume_before_training(args, run)
    except (CurriculumError, LocalRankError) as exc:
        # every rank reaches the same verdict on the same files: one line, from global rank 0
        if os.environ.get("RANK", "0") == "0":
            print(f"curriculum_ds: error: {exc}", file=sys.stderr)
        return 1
    has_cuda = prepare_environment()
    try:
        return Trainer(args, run, has_cuda=has_cuda).train()
    except CurriculumError as exc:
        if os.environ.get("RANK", "0") == "0":  # the same verdict on every rank: print it once
            print(f"curriculum_ds: error: {exc}", file=sys.stderr)
        return 1
    finally:
        if run_dir_lock is not None:
            run_dir_lock.close()


def check_resume_before_training(args: argparse.Namespace, run: RunConfig) -> None:
    """Apply the resume rules to the checkpoint ``--resume`` names, before DeepSpeed starts.

    Reads only the checkpoint's curriculum state (memory-mapped); a missing or unreadable
    checkpoint is left to the trainer, which reports it.

    Raises:
        curriculum_ds.errors.ResumeError: The schedule may not resume from that checkpoint.
    """
    from curriculum_ds.checkpoint import read_curriculum_state, resume_target
    from curriculum_ds.schedule import check_resume

    target = resume_target(args.resume, args.run_dir)
    if target is None:
        return  # no --resume, or nothing saved yet: a fresh start
    load_dir, tag = target
    _, saved = read_curriculum_state(load_dir / tag)
    if saved is not None:
        check_resume(run.curriculum, saved)


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


class Trainer:
    """The training loop. Built after the environment is prepared (imports DeepSpeed)."""

    def __init__(self, args: argparse.Namespace, run: RunConfig, *, has_cuda: bool):
        import deepspeed
        import torch
        import torch.distributed as dist

        from curriculum_ds.dynamic import DynamicReweighter
        from curriculum_ds.schedule import PhaseSchedule

        self.args = args
        self.run = run
        self.cfg = run.curriculum
        self.torch = torch
        self.dist = dist
        if has_cuda:
            torch.cuda.set_device(args.local_rank)
        deepspeed.init_distributed(verbose=False)
        if not has_cuda:
            _unlink_shm_allreduce_buffer(dist)
        self.dp_rank = dist.get_rank()
        self.dp_world_size = dist.get_world_size()
        self.is_main = self.dp_rank == 0
        self.micro_batch_size = run.micro_batch_size
        self.gradient_accumulation_steps = run.gradient_accumulation_steps
        self.global_batch_size = run.global_batch_size(self.dp_world_size)
        self.schedule = PhaseSchedule(self.cfg)
        self.run_dir: Path = args.run_dir
        self.ckpt_dir = self.run_dir / "checkpoints"

        torch.manual_seed(self.cfg.seed)  # model init only; the data order uses no global RNG
        model = build_model(
            args.model, self.cfg, max(p.train_loader.max_seq_len for p in self.cfg.schedule)
        )
        ds_config = dict(run.ds_config)
        ds_config["train_batch_size"] = self.global_batch_size
        self.engine, *_ = deepspeed.initialize(
            model=model,
            model_parameters=[p for p in model.parameters() if p.requires_grad],
            config=ds_config,
        )
        self.device = self.engine.device
        self.dynamic = (
            DynamicReweighter(self.cfg.dynamic, seed=self.cfg.seed)
            if self.cfg.dynamic.enabled
            else None
        )

    # ------------------------------------------------------------------------------------ run
    def train(self) -> int:
        """Run the schedule to its end (or ``--max-steps``); returns the exit code."""
        from curriculum_ds.loader import PhaseLoader
        from curriculum_ds.runlog import JsonlWriter, truncate_jsonl

        state = self._resume()
        self.global_step: int = state["global_step"]
        self.consumed_tokens: int = state["consumed_tokens"]
        self.consumed_samples: int = state["consumed_samples"]
        self.progress: int | Fraction = state["progress"]
        loader_state = state.get("loader")
        # the first phase started after a resume gets the saved re-weighting state: all of it when
        # the checkpoint is inside that phase, the probabilities alone when it is on a boundary
        dynamic_state = state.get("dynamic")

        metrics = history = trace = None
        if self.is_main:
            self.run_dir.mkdir(parents=True, exist_ok=True)
            for name in ("metrics.jsonl", "curriculum_history.jsonl", "sample_trace.jsonl"):
                # resumed: keep the lines up to the checkpoint's step; fresh: start anew
                truncate_jsonl(self.run_dir / name, self.global_step if state["resumed"] else -1)
            metrics = JsonlWriter(self.run_dir / "metrics.jsonl")
            history = (
                JsonlWriter(self.run_dir / "curriculum_history.jsonl") if self.dynamic else None
            )
            trace = (
                JsonlWriter(self.run_dir / "sample_trace.jsonl")
                if self.args.trace_samples
                else None
            )
        self.dist.barrier()

        progress_bar = self._progress_bar()
        loader: PhaseLoader | None = None
        phase_idx = self.schedule.phase_at(self.progress)
        start_step = self.global_step
        self.num_skipped_steps = 0  # this run's steps without loss-bearing tokens (all ranks agree)
        last_log = time.perf_counter()
        while phase_idx < self.schedule.num_phases:
            if loader is None or loader.phase_idx != phase_idx:
                if loader is not None:
                    loader.close()
                num_buckets = self.cfg.dynamic.num_buckets if self.dynamic else 1
                loader = PhaseLoader(
                    self.cfg.schedule[phase_idx],
                    phase_idx,
                    seed=self.cfg.seed,
                    num_buckets=num_buckets,
                )
                resumed_here = loader_state is not None and loader_state["phase_idx"] == phase_idx
                if self.dynamic:
                    self.dynamic.start_phase(loader, dynamic_state)
                if loader_state is not None and resumed_here:
                    loader.load_state_dict(loader_state)
                loader_state = dynamic_state = None

            probs = self.dynamic.probs if self.dynamic else None
            batch = loader.next_global_batch(self.global_batch_size, probs)
            step_tokens = loader.batch_tokens(batch)
            result = self._train_step(loader, batch)
            self.num_skipped_steps += int(result["skipped"])
            self.global_step += 1
            self.consumed_tokens += step_tokens
            self.consumed_samples += len(batch)
            if self.schedule.unit == "tok":
                self.progress += step_tokens
            else:
                self.progress += Fraction(len(batch), loader.samples_per_pass)
            record_weights = None
            if self.dynamic:
                self.dynamic.observe(loader, batch, result["sample_losses"])
                record_weights = self.dynamic.maybe_recompute(self.global_step, loader)

            now = time.perf_counter()
            tokens_per_s = step_tokens / max(now - last_log, 1e-9)
            last_log = now
            phase = self.cfg.schedule[phase_idx]
            if self.is_main:
                assert metrics is not None
                metrics.write(
                    {
                        "step": self.global_step,
                        "phase": phase_idx,
                        "phase_name": phase.name,
                        "tokens": self.consumed_tokens,
                        "samples": self.consumed_samples,
                        "progress": str(self.progress),
                        "loss": result["loss"],
                        "token_loss": result["token_loss"],
                        "valid_tokens": result["valid_tokens"],
                        "step_tokens": step_tokens,
                        "skipped": result["skipped"],
                        "step_applied": result["step_applied"],
                        "lr": float(self.engine.get_lr()[0]),
                        "tokens_per_s": round(tokens_per_s, 1),
                        "phase_epochs": round(loader.epochs_done(), 6),
                    }
                )
                if trace is not None:
                    names = loader.stream_names
                    trace.write(
                        {
                            "step": self.global_step,
                            "phase": phase_idx,
                            "samples": [[names[s], int(i)] for s, i in batch],
                        }
                    )
                if history is not None and record_weights is not None:
                    history.write(
                        {
                            "step": self.global_step,
                            "phase": phase_idx,
                            "phase_name": phase.name,
                            **record_weights,
                        }
                    )
            if progress_bar is not None:
                progress_bar.update(self._progress_value(step_tokens, len(batch), loader))
                progress_bar.set_postfix(
                    phase=phase.name,
                    loss=_loss_postfix(result["loss"]),
                    tok_s=f"{tokens_per_s:,.0f}",
                    refresh=False,
                )

            phase_idx = self.schedule.phase_at(self.progress)
            if self.args.kill_after_step == self.global_step:
                os.kill(os.getpid(), signal.SIGKILL)
            stop = self.args.max_steps is not None and self.global_step >= self.args.max_steps
            done = phase_idx >= self.schedule.num_phases
            if (
                (self.args.save_interval and self.global_step % self.args.save_interval == 0)
                or stop
                or done
            ):
                self._save(phase_idx, loader)
            if stop:
                break
        if progress_bar is not None:
            progress_bar.close()
        if self.args.dump_state is not None:
            self._dump_state(self.args.dump_state)
        for writer in (metrics, history, trace):
            if writer is not None:
                writer.close()
        if self.is_main:
            self._print_summary(start_step)
        self.dist.barrier()
        return 0

    # ------------------------------------------------------------------------------- one step
    def _train_step(self, loader: Any, batch: Any) -> dict[str, Any]:
        """Forward/backward every micro-batch of this rank, then one optimizer step."""
        from curriculum_ds.loss import (
            engine_grad_divisor,
            global_valid_tokens,
            per_sample_token_losses,
            scale_micro_batch_loss,
        )

        torch, dist = self.torch, self.dist
        mode = self.cfg.loss_weighting
        micro_batches = loader.micro_batches(
            batch,
            dp_rank=self.dp_rank,
            dp_world_size=self.dp_world_size,
            micro_batch_size=self.micro_batch_size,
        )
        # Loss-bearing tokens of the whole step, counted before any forward (labels are known):
        # one all-reduce per step over the data-parallel group, kept on device.
        global_valid = global_valid_tokens([mb.labels for mb in micro_batches], device=self.device)
        num_global_valid = int(global_valid.item())  # one host sync per step: decides a skip
        per_rank = len(batch) // self.dp_world_size
        sample_losses = torch.full(
            (per_rank,), float("nan"), dtype=torch.float64, device=self.device
        )
        # [sum of token losses (nats), sum of micro-batch mean losses / GAS] of this rank
        stats = torch.zeros(2, dtype=torch.float64, device=self.device)
        skipped = num_global_valid == 0
        # what DeepSpeed divides the summed gradients by (dp_world_size but for two config corners)
        grad_divisor = engine_grad_divisor(self.engine, dp_world_size=self.dp_world_size)
        if not skipped:
            for mb_idx, mb in enumerate(micro_batches):
                input_ids = mb.input_ids.to(self.device)
                labels = mb.labels.to(self.device)
                logits = self.engine(
                    input_ids=input_ids, attention_mask=mb.attention_mask.to(self.device)
                ).logits
                loss_sums, num_valid = per_sample_token_losses(logits, labels)
                loss = scale_micro_batch_loss(
                    loss_sums.sum(),
                    num_valid.sum(),
                    mode=mode,
                    global_valid_tokens=global_valid,
                    dp_world_size=self.dp_world_size,
                    grad_divisor=grad_divisor,
                )
                # token mode: our factor is the whole normalisation, so DeepSpeed's 1/GAS is off
                self.engine.backward(loss, scale_wrt_gas=(mode == "sample"))
                self.engine.step()
                with torch.no_grad():
                    lo = mb_idx * self.micro_batch_size
                    sample_losses[lo : lo + len(num_valid)] = torch.where(
                        num_valid > 0, loss_sums.double() / num_valid.clamp(min=1), float("nan")
                    )
                    stats[0] += loss_sums.sum().double()
                    stats[1] += (loss_sums.sum() / num_valid.sum().clamp(min=1)).double() / len(
                        micro_batches
                    )
        dist.all_reduce(stats)
        token_loss = float(stats[0]) / num_global_valid if num_global_valid else float("nan")
        sample_loss = float(stats[1]) / self.dp_world_size
        gathered = None
        if self.dynamic is not None:
            gathered_list = [torch.empty_like(sample_losses) for _ in range(self.dp_world_size)]
            dist.all_gather(
                gathered_list, sample_losses
            )  # one collective: the step's per-sample losses
            gathered = torch.cat(gathered_list).cpu().numpy()
        return {
            "loss": (token_loss if mode == "token" else sample_loss) if not skipped else None,
            "token_loss": token_loss if not skipped else None,
            "valid_tokens": num_global_valid,
            "skipped": skipped,
            # False also when DeepSpeed's fp16 loss scaler found an overflow and skipped the update
            "step_applied": (not skipped) and bool(self.engine.was_step_applied()),
            "sample_losses": gathered,
        }

    # ---------------------------------------------------------------------------- checkpoints
    def _saved_curriculum(self, phase_idx: int, loader: Any) -> dict[str, Any]:
        from curriculum_ds.schedule import progress_to_str

        return {
            "version": 1,
            "seed": self.cfg.seed,
            "unit": self.schedule.unit,
            "progress": progress_to_str(self.progress),
            "phase_idx": phase_idx,
            "phases": [p.model_dump(mode="json") for p in self.cfg.schedule],
            "global_step": self.global_step,
            "consumed_tokens": self.consumed_tokens,
            "consumed_samples": self.consumed_samples,
            "loader": loader.state_dict(),
            "dynamic": self.dynamic.state_dict() if self.dynamic else None,
        }

    def _save(self, phase_idx: int, loader: Any) -> None:
        """DeepSpeed checkpoint, curriculum in client_state; `latest` written last, atomically."""
        tag = f"global_step{self.global_step}"
        self.engine.save_checkpoint(
            str(self.ckpt_dir),
            tag=tag,
            save_latest=False,
            client_state={"curriculum": self._saved_curriculum(phase_idx, loader)},
        )
        if self.args.kill_during_save == self.global_step:
            os.kill(os.getpid(), signal.SIGKILL)  # the tag exists but `latest` never points at it
        self.dist.barrier()  # every rank's shards are on disk before `latest` moves
        if self.is_main:
            tmp = self.ckpt_dir / "latest.tmp"
            tmp.write_text(tag)
            os.replace(tmp, self.ckpt_dir / "latest")
        self.dist.barrier()

    def _resume(self) -> dict[str, Any]:
        """Load a checkpoint when asked; check the schedule against it; return the counters."""
        from curriculum_ds.checkpoint import resume_target
        from curriculum_ds.errors import ResumeError
        from curriculum_ds.schedule import check_resume, progress_from_str

        fresh = {
            "global_step": 0,
            "consumed_tokens": 0,
            "consumed_samples": 0,
            "progress": 0 if self.schedule.unit == "tok" else Fraction(0),
            "resumed": False,
        }
        target = resume_target(self.args.resume, self.run_dir)
        if target is None:
            return fresh
        load_dir, tag = target
        load_path, client_state = self.engine.load_checkpoint(str(load_dir), tag=tag)
        if load_path is None:
            raise ResumeError(f"--resume {load_dir}: DeepSpeed could not load checkpoint {tag!r}")
        saved = (client_state or {}).get("curriculum")
        if saved is None:
            # a DeepSpeed run without curriculum: start the schedule, keep its step count
            return {**fresh, "global_step": int(self.engine.global_steps), "resumed": True}
        plan = check_resume(self.cfg, saved)
        return {
            "global_step": int(saved["global_step"]),
            "consumed_tokens": int(saved["consumed_tokens"]),
            "consumed_samples": int(saved["consumed_samples"]),
            "progress": progress_from_str(saved["progress"], self.schedule.unit),
            "loader": None if plan.is_new_phase else saved.get("loader"),
            "dynamic": saved.get("dynamic"),
            "resumed": True,
        }

    def _dump_state(self, out: Path) -> None:
        """For tests: full parameters (gathered under ZeRO-3) and this rank's dynamic state."""
        import deepspeed

        torch = self.torch
        out.mkdir(parents=True, exist_ok=True)
        named = list(self.engine.module.named_parameters())
        zero3 = self.engine.zero_optimization_stage() == 3
        with deepspeed.zero.GatheredParameters([p for _, p in named], enabled=zero3):
            if self.is_main:
                torch.save(
                    {n: p.detach().float().cpu().clone() for n, p in named}, out / "params.pt"
                )
        if self.dynamic is not None:
            torch.save(
                self.dynamic.state_dict() | {"window_values": self.dynamic.window.values()},
                out / f"rank{self.dp_rank}_dynamic.pt",
            )
        self.dist.barrier()

    # ------------------------------------------------------------------------------- display
    def _progress_bar(self) -> Any:
        if not self.is_main or self.args.no_progress:
            return None
        from tqdm.auto import tqdm

        total = self.schedule.total
        unit = "tok" if self.schedule.unit == "tok" else "ep"
        bar = tqdm(
            total=float(total) if unit == "ep" else int(total),
            unit=unit,
            unit_scale=unit == "tok",
            dynamic_ncols=True,
            file=sys.stderr,
        )
        bar.update(float(self.progress) if unit == "ep" else int(self.progress))
        return bar

    def _progress_value(self, step_tokens: int, num_samples: int, loader: Any) -> float:
        if self.schedule.unit == "tok":
            return step_tokens
        return num_samples / loader.samples_per_pass

    def _print_summary(self, start_step: int) -> None:
        num_steps = self.global_step - start_step
        lines = [
            "",
            f"curriculum_ds: finished at step {self.global_step} "
            f"({num_steps} this run), "
            f"{self.consumed_tokens:,} tokens, {self.consumed_samples:,} samples",
            f"  metrics:     {self.run_dir / 'metrics.jsonl'}",
            f"  checkpoints: {self.ckpt_dir}",
        ]
        if self.num_skipped_steps:
            lines.append(
                f"  skipped:     {self.num_skipped_steps} of {num_steps} steps "
                "(no loss-bearing tokens; `skipped` in metrics.jsonl)"
            )
        if self.dynamic:
            lines.append(
                f"  history:     {self.run_dir / 'curriculum_history.jsonl'}"
                f"  (plot: curriculum-ds curve {self.run_dir})"
            )
        if self.args.trace_samples:
            lines.append(f"  trace:       {self.run_dir / 'sample_trace.jsonl'}")
        print("\n".join(lines), flush=True)
        warning = skipped_steps_warning(self.num_skipped_steps, num_steps)
        if warning is not None:
            print(warning, file=sys.stderr, flush=True)


def _unlink_shm_allreduce_buffer(dist: Any) -> None:
    """Unlink this rank's DeepSpeed CPU all-reduce buffer from /dev/shm (the mapping stays).

    DeepSpeed's CPU accelerator creates ``/dev/shm/deepspeed_allreduce_buffer_<uid>_<addr>_<port>
    _<rank>`` (about 66 MiB per rank) and never unlinks it, so every CPU run leaks it until
    /dev/shm is full. After a barrier every rank has opened every buffer, so the names can go:
    the memory lives on in the mappings until the processes exit, killed or not.
    """
    dist.barrier()
    name = (
        f"deepspeed_allreduce_buffer_{os.getuid()}_{os.environ.get('MASTER_ADDR', '')}_"
        f"{os.environ.get('MASTER_PORT', '')}_{dist.get_rank()}"
    )
    with contextlib.suppress(OSError):
        os.unlink(Path("/dev/shm") / name)


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
        read_stream_info(s.local).vocab_size for p in cfg.schedule for s in p.train_loader.streams
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


if __name__ == "__main__":
    sys.exit(main())
