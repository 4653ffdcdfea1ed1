"""A training loop's bookkeeping around the curriculum: :class:`RunDir`.

What the reference loop (:mod:`curriculum_ds.train`) does around ``for step in curriculum``, in
one public place, so a loop of one's own with a custom forward is about ten lines::

    engine, curriculum = curriculum_ds.initialize(model=model, config=args.deepspeed_config)
    with curriculum_ds.RunDir(args.run_dir, curriculum, save_interval=50) as run:
        for step in run:
            for mb in step.micro_batches:
                step.backward(engine(mb.input_ids, attention_mask=mb.attention_mask), mb)
            run.finish(step)

Entering takes the run directory's lock (global rank 0), resumes from its latest checkpoint (if
any), opens its records (:class:`~curriculum_ds.records.jsonl.RunLog`, cut back to the
checkpoint's step) and prints the banner; :meth:`RunDir.finish` finishes a step and does what is
due after it: the records, a progress line, an evaluation, a checkpoint (the save cadence, the
last step, ``max_steps``, SIGTERM) and ``keep_last`` pruning; leaving closes the curriculum and
the records and prints the end-of-run summary. Every rank enters, iterates and finishes the
same steps (the saves and evaluations are collective); only global rank 0 writes records and
prints.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator
    from types import TracebackType
    from typing import IO

    from curriculum_ds.checkpoint.files import SavedTag
    from curriculum_ds.checkpoint.rules import ResumePlan
    from curriculum_ds.plugin import Curriculum, MicroBatch, Step
    from curriculum_ds.records.schema import EvalRow, StepResult

__all__ = ["RunDir", "skipped_steps_warning"]


class RunDir:
    """The run directory of a training loop: resume, records, progress, evals, saves, SIGTERM.

    Args:
        run_dir: The run directory: ``metrics.jsonl`` (and ``curriculum_history.jsonl``,
            ``sample_trace.jsonl``, ``eval.jsonl`` when on) and ``checkpoints/``.
        curriculum: The curriculum of :func:`curriculum_ds.initialize` (or ``attach``), before
            its first step.
        save_interval: Checkpoint every N optimizer steps (0: only at the end), ≥ 0. A
            checkpoint is also written after the last step, at ``max_steps`` and on SIGTERM.
        resume: ``"auto"`` (the latest checkpoint of ``run_dir/checkpoints``, a fresh start when
            there is none), a checkpoints folder or tag folder, a tag already read with its
            resume verdict (``(open_tag(...), check_resume(...))``, as the reference loop checks
            it before DeepSpeed starts), or None (a fresh start).
        max_steps: Stop after this global step, with its checkpoint (≥ 1), or None.
        keep_last: Keep only the newest N checkpoint tags (≥ 1; rank 0 prunes after each save),
            or None: keep all.
        trace: Write ``sample_trace.jsonl`` (every step's global batch).
        progress: A tqdm bar on rank 0 (True), log lines every ``log_interval`` steps (False),
            or None: a bar when stderr is a terminal.
        log_interval: Log lines every N steps; 0: the first step, then about every 10 s.
        eval_forward: ``forward(mb) -> logits`` for the evaluations, for a model not called as
            ``engine(input_ids, attention_mask=...)``; None: that call.
        lock: Take the run directory's lock on rank 0 (False when the caller holds it).

    Raises:
        ValueError: ``save_interval`` < 0, ``max_steps`` or ``keep_last`` < 1, ``log_interval``
            < 0.
    """

    def __init__(
        self,
        run_dir: str | Path,
        curriculum: Curriculum,
        *,
        save_interval: int = 0,
        resume: str | Path | tuple[SavedTag, ResumePlan] | None = "auto",
        max_steps: int | None = None,
        keep_last: int | None = None,
        trace: bool = False,
        progress: bool | None = None,
        log_interval: int = 0,
        eval_forward: Callable[[MicroBatch], Any] | None = None,
        lock: bool = True,
    ) -> None:
        for name, value, low in (
            ("save_interval", save_interval, 0),
            ("log_interval", log_interval, 0),
        ):
            if value < low:
                raise ValueError(f"RunDir: {name} must be >= {low}, got {value}")
        for name, opt in (("max_steps", max_steps), ("keep_last", keep_last)):
            if opt is not None and opt < 1:
                raise ValueError(f"RunDir: {name} must be >= 1, got {opt}")
        self.run_dir = Path(run_dir)
        self.checkpoints = self.run_dir / "checkpoints"
        self.curriculum = curriculum
        self.save_interval = save_interval
        self.max_steps = max_steps
        self.keep_last = keep_last
        self.trace = trace
        self._resume = resume
        self._progress = progress
        self._log_interval = log_interval
        self._eval_forward = eval_forward
        if eval_forward is not None:  # a re-weighting method's own evaluations too
            curriculum.eval_forward = eval_forward
        self._take_lock = lock
        self._lock: IO[str] | None = None
        self._log: Any = None
        self._bar: Any = None
        self._logger: Any = None
        self._is_main = False
        self._stop = False
        self._progress_before = 0.0
        self.start_step = 0
        """The global step this run started from (the checkpoint's, 0 for a fresh start)."""

    def __enter__(self) -> RunDir:
        import torch.distributed as dist

        from curriculum_ds.distributed import lock_run_dir
        from curriculum_ds.records.jsonl import RunLog
        from curriculum_ds.records.progress import StepLogger, banner, schedule_bar

        curriculum = self.curriculum
        curriculum.run_dir = self.run_dir  # where a method keeps its own files (file's journal)
        self._is_main = dist.get_rank() == 0
        if self._is_main and self._take_lock:
            self._lock = lock_run_dir(self.run_dir)
        try:
            self._load()
            if self._is_main:
                self._log = RunLog(
                    self.run_dir,
                    resumed_step=curriculum.global_step if curriculum.resumed_from else None,
                    history=curriculum.dynamic is not None,
                    trace=self.trace,
                    evaluation=curriculum.evaluator is not None,
                )
                print(banner(curriculum.engine, curriculum), flush=True)
            dist.barrier()
            bar = self._progress if self._progress is not None else sys.stderr.isatty()
            if self._is_main and bar:
                self._bar = schedule_bar(curriculum)
            elif self._is_main:
                self._logger = StepLogger(self._log_interval, schedule=curriculum.schedule)
        except BaseException:
            self._release()
            raise
        self.start_step = curriculum.global_step
        self._progress_before = float(curriculum.progress)
        return self

    def _load(self) -> None:
        from curriculum_ds.checkpoint.files import open_tag, resume_target

        resume = self._resume
        if isinstance(resume, tuple):
            self.curriculum.load_checkpoint(resume[0], plan=resume[1])
            return
        target = resume_target(None if resume is None else str(resume), self.run_dir)
        if target is not None:
            self.curriculum.load_checkpoint(open_tag(*target))

    def __iter__(self) -> Iterator[Step]:
        """The curriculum's steps, until the schedule ends, ``max_steps`` or a SIGTERM's step."""
        for step in self.curriculum:
            yield step
            if self._stop:
                return

    @property
    def stopping(self) -> bool:
        """True once :meth:`finish` saw ``max_steps`` or a SIGTERM: iterating ``run`` ends."""
        return self._stop

    def finish(self, step: Step) -> StepResult:
        """Finish ``step`` (:meth:`Step.finish`), then what is due after it; collective.

        In order: the records (rank 0), a progress line, an evaluation when
        ``curriculum.eval_due`` (before the checkpoint, so a resume neither repeats nor skips
        it), a checkpoint when the save cadence, the end of the schedule, ``max_steps`` or a
        SIGTERM (on any rank: every rank sees it after the same step) asks for one, then
        ``keep_last`` pruning.

        Returns:
            The step's ``metrics.jsonl`` row.

        Raises:
            StepError: A micro-batch of the step did not go backward.
        """
        curriculum = self.curriculum
        record = step.finish()
        if self._log is not None:
            self._log.write(record.row, reweighting=record.history, trace=step.trace_record())
        line = self._logger.line(record) if self._logger is not None else None
        if line is not None:
            print(line, flush=True)
        if curriculum.eval_due:  # an eval interval or a phase ended: before the checkpoint
            self.evaluate()
        if self._bar is not None:
            progress = float(curriculum.progress)
            self._bar.update(progress - self._progress_before)
            self._progress_before = progress
            self._bar.set_postfix(
                phase=record["phase_name"],
                loss=_loss_postfix(record["loss"]),
                tok_s=f"{record['tokens_per_s']:,.0f}",
                refresh=False,
            )
        step_no = curriculum.global_step
        stop = self.max_steps is not None and step_no >= self.max_steps
        preempted = curriculum.stop_requested
        interval = self.save_interval and step_no % self.save_interval == 0
        if interval or stop or preempted or curriculum.is_done:
            curriculum.save_checkpoint(self.checkpoints)  # returns once `latest` moved (barrier)
            if self._is_main and self.keep_last is not None:
                from curriculum_ds.checkpoint.retention import prune_checkpoints

                prune_checkpoints(self.checkpoints, keep_last=self.keep_last)
        if preempted and self._is_main:
            print(
                f"curriculum_ds: SIGTERM: stopped after step {step_no} with its checkpoint "
                f"{self.checkpoints / f'global_step{step_no}'}; continue with --resume auto",
                flush=True,
            )
        self._stop = bool(stop or preempted)
        return record

    def evaluate(self) -> EvalRow:
        """One held-out evaluation (collective): ``eval.jsonl`` and a line (rank 0).

        Its time is not training time: ``curriculum.evaluate`` leaves it out of
        ``tokens_per_s``.
        """
        row = self.curriculum.evaluate(self._eval_forward)
        if self._log is not None:
            self._log.write_eval(row)
            streams = "  ".join(
                f"{name} {_loss_postfix(s['loss'])}" for name, s in row["streams"].items()
            )
            line = (
                f"curriculum_ds: eval at step {row['step']} ({row['phase_name']}): loss "
                f"{_loss_postfix(row['loss'])}  [{streams}]  {row['eval_time_s']:.2f} s"
            )
            if self._bar is not None:
                self._bar.write(line)
            else:
                print(line, flush=True)
        return row

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        """Close the curriculum and the records; after a clean run, the summary (rank 0)."""
        if exc_type is not None:
            self._release()
            return
        import torch.distributed as dist

        self.curriculum.close()
        self._release()
        if self._is_main:
            print_summary(self.run_dir, self.curriculum, self.start_step, trace=self.trace)
        dist.barrier()

    def _release(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None
        if self._log is not None:
            self._log.close()
            self._log = None
        if self._lock is not None:
            self._lock.close()
            self._lock = None


def print_summary(run_dir: Path, curriculum: Curriculum, start_step: int, *, trace: bool) -> None:
    """The end-of-run summary: steps, tokens, samples, where the records are; skip warnings."""
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
    if trace:
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
