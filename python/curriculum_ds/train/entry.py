"""The process entry of ``curriculum_ds.train``: checks, the run-dir lock, the exit code.

:func:`main` refuses a bad config, model, data or resume before any rank trains (one line from
global rank 0, exit code 1), holds the run directory's lock on rank 0 for the whole run, runs the
loop (:func:`curriculum_ds.train.loop.train`) and turns its errors into one line each;
:func:`shutdown` destroys the process group before the interpreter exits.
"""

from __future__ import annotations

import os
import sys
import time
from typing import TYPE_CHECKING, NoReturn

from curriculum_ds.train.args import parse_args
from curriculum_ds.train.loop import train

if TYPE_CHECKING:
    from collections.abc import Sequence
    from pathlib import Path

__all__ = ["exit_now", "main", "shutdown"]

_PEER_ERROR_GRACE_S = 3.0
"""Seconds a rank other than 0 waits before printing its own DownloadError (see ``main``)."""


def main(argv: Sequence[str] | None = None) -> int:
    """Run training; returns the process exit code.

    0: the schedule (or ``--max-steps``) is done, or SIGTERM stopped it after a step and its
    checkpoint; 1: a refused config or resume, or ``curriculum.max_consecutive_nonfinite``
    non-finite steps in a row (one line each).
    """
    from curriculum_ds.checkpoint.files import open_tag, resume_target
    from curriculum_ds.checkpoint.rules import check_resume
    from curriculum_ds.config import load_config
    from curriculum_ds.distributed import LocalRankError, lock_run_dir
    from curriculum_ds.errors import ConfigError, CurriculumError, DownloadError

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
        target = resume_target(args.resume, args.run_dir)
        resume = None
        if target is not None:  # the resume rules, before DeepSpeed starts: the one check
            saved = open_tag(*target)  # the tag's one read; the load takes it as it is
            resume = (saved, check_resume(run.curriculum, saved))
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


def _not_empty(path: Path) -> bool:
    return path.exists() and (not path.is_dir() or any(path.iterdir()))


def shutdown() -> None:
    """Destroy the process group before the interpreter exits.

    ``torch.distributed``'s gloo group owns C++ worker threads; left to the interpreter's
    teardown, a rank can abort there ("terminate called without an active exception", exit -6)
    after the run itself succeeded. Destroying the group joins them first.
    """
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


def exit_now(exit_code: int) -> NoReturn:
    """End the rank's process with ``exit_code``; a successful one without the teardown.

    The run's files are closed and its process group destroyed (:func:`shutdown`). Exit code 0:
    the atexit handlers run here (streaming's shared-memory cleanup, logging's flush), then the
    process ends, skipping the interpreter's teardown of torch's, transformers' and DeepSpeed's
    module graphs (~1.5 s of every rank's exit on a 2-core machine, for no memory anyone gets
    back). A failing rank exits the usual way: its peers' one-line verdict (rank 0 prints it) is
    not cut short by a launcher that stops every rank once one has failed.
    """
    if exit_code != 0:
        sys.exit(exit_code)
    import atexit

    atexit._run_exitfuncs()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(exit_code)
