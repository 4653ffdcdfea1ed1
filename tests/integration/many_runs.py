"""Several runs of the reference loop in ONE launched job, one after the other, for the tests only.

Run by the launcher as ``--module many_runs --runs FILE`` (tests/ on PYTHONPATH; the launcher's
own ``--deepspeed_config`` and ``--local_rank`` are passed on to every run). ``FILE`` is a JSON
list of runs, each ``{"argv": [...], "log": PATH, "may_fail": bool}`` (``"log": null``: the run
writes to the job's own stdout and stderr, and no exit-code file): the arguments of
``curriculum_ds.train`` (its own ``--deepspeed_config``, ``--run-dir`` ...) plus, optionally,
``--dump-state DIR``, ``--dump-history DIR``, ``--nan-loss RANK:STEPS``,
``--truncate-shard STEP:PATH`` and ``--mix-file-at STEP:SRC:DST`` of ``faulty_train`` (the
methods they replace are put back after the run), and for the last run
``--kill-after-step N``, ``--kill-during-save N`` or ``--kill-during-prune N`` (the SIGKILL ends
the job, as it ends a launch of its own).

Every run runs as ``helpers.launch`` runs it, in its ds_config's folder (the current directory,
and first on ``sys.path`` as ``python -m`` puts it: a ``--model-factory`` module of that folder
imports), and is a full ``curriculum_ds.train.main`` in this process: the config check, the
run-dir lock, ``torch.manual_seed(seed)``, a new model, ``deepspeed.initialize``, the loop and its
checkpoints; the process group (gloo) is made once and kept. Each rank writes its stdout and
stderr of a run (file descriptors 1 and 2, so DeepSpeed's C++ output too) to ``LOG.rank{RANK}``
and its exit code to ``LOG.rank{RANK}.code``. An exception that would end a process of its own
(DeepSpeed refusing a config) is printed there, with exit code 1.

A launch costs the launcher plus torch/DeepSpeed imports on every rank (10-20 s on 2 CPU
ranks); a one-step run costs a second. The first non-zero exit code of a run not marked
``may_fail`` stops the job with it. The other faults of ``faulty_train`` (SIGTERM, the per-sample
loss dump) outlive a run: one launch per run.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import traceback
import warnings
from pathlib import Path

import faulty_train

from curriculum_ds import train
from curriculum_ds.checkpoint import engine_io
from curriculum_ds.plugin import Curriculum, Step

_OTHER_FAULTS = {"--dump-sample-losses", "--sigterm-at"}
"""The fault flags of faulty_train that this runner refuses."""
_PATCHED = ((Step, "backward"), (Step, "finish"), (Curriculum, "save_checkpoint"))
_PATCHED += ((Curriculum, "__next__"), (engine_io, "publish_latest"))
"""What faulty_train's faults replace: put back after every run."""


def _run(argv: list[str], log: Path | None, *, last: bool) -> int:
    """One run with fds 1 and 2 sent to ``log.rank{RANK}`` (``log`` None: left as they are, the
    job's own output); returns its exit code.

    ``--kill-after-step``, ``--kill-during-save`` (SIGKILL of every rank) and
    ``--kill-during-prune`` (SIGKILL of rank 0, the launcher stops the others): the job ends
    there, so the ``last`` run only takes them.
    """
    p = argparse.ArgumentParser(add_help=False)
    p.add_argument("--dump-state", type=Path)
    p.add_argument("--dump-history", type=Path)
    p.add_argument("--kill-after-step", type=int)
    p.add_argument("--kill-during-save", type=int)
    p.add_argument("--kill-during-prune", type=int)
    p.add_argument("--nan-loss")
    p.add_argument("--truncate-shard")
    p.add_argument("--mix-file-at", action="append", default=[])
    faults, rest = p.parse_known_args(argv)
    unknown = [a for a in rest if a.split("=")[0] in _OTHER_FAULTS]
    if unknown:
        raise SystemExit(f"many_runs: {unknown}: not a fault of this runner")
    kills = faults.kill_after_step, faults.kill_during_save
    if kills != (None, None) or faults.kill_during_prune is not None:
        if not last:
            raise SystemExit("many_runs: a kill ends the job: only the last run may take one")
        faulty_train.install(*kills)
        if faults.kill_during_prune is not None:
            faulty_train.install_kill_during_prune(faults.kill_during_prune)
    originals = [(owner, name, getattr(owner, name)) for owner, name in _PATCHED]
    if faults.nan_loss is not None:
        faulty_train.install_nan_loss(faults.nan_loss)
    if faults.truncate_shard is not None:
        faulty_train.install_truncate_shard(faults.truncate_shard)
    if faults.dump_history is not None:
        faulty_train.install_dump_history(faults.dump_history)
    if faults.mix_file_at:
        faulty_train.install_mix_file_edits(faults.mix_file_at)
    sys.stdout.flush()
    sys.stderr.flush()
    saved = os.dup(1), os.dup(2)
    out = None
    if log is not None:
        out = open(f"{log}.rank{os.environ.get('RANK', '0')}", "w", encoding="utf-8")  # noqa: SIM115
        os.dup2(out.fileno(), 1)
        os.dup2(out.fileno(), 2)
    # as helpers.launch runs it: in its ds_config's folder, which `python -m` puts on sys.path
    # (a run's --model-factory module can live there)
    cwd, folder = Path.cwd(), str(Path(_config_of(rest)).resolve().parent)
    os.chdir(folder)
    sys.path.insert(0, folder)
    try:
        # a fresh warnings registry: a warning printed by an earlier run of the job is printed
        # again (Python prints a warning once per place and process), as in a launch of its own
        with warnings.catch_warnings():
            code = train.main(rest)
        if code == 0 and faults.dump_state is not None:
            faulty_train.dump_state(faults.dump_state)
        return code
    except Exception:  # what would end a process of its own: its traceback, exit code 1
        traceback.print_exc()
        return 1
    finally:
        os.chdir(cwd)
        sys.path.remove(folder)
        for owner, name, original in originals:
            setattr(owner, name, original)
        sys.stdout.flush()
        sys.stderr.flush()
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        os.close(saved[0])
        os.close(saved[1])
        if out is not None:
            out.close()


def _config_of(argv: list[str]) -> str:
    """The run's ``--deepspeed_config`` (the last one given)."""
    p = argparse.ArgumentParser(add_help=False)
    p.add_argument("--deepspeed_config", required=True)
    return str(p.parse_known_args(argv)[0].deepspeed_config)


def main() -> int:
    p = argparse.ArgumentParser(add_help=False)
    p.add_argument("--runs", type=Path, required=True)
    p.add_argument("--local_rank", "--local-rank")
    p.add_argument("--deepspeed_config")  # the launcher's; each run names its own
    args, _ = p.parse_known_args()
    launcher = [] if args.local_rank is None else [f"--local_rank={args.local_rank}"]
    faulty_train.install(None, None)  # captures the engine for --dump-state
    runs = json.loads(args.runs.read_text())
    for at, run in enumerate(runs):
        log = None if run["log"] is None else Path(run["log"])
        code = _run([*run["argv"], *launcher], log, last=at == len(runs) - 1)
        if log is not None:
            Path(f"{log}.rank{os.environ.get('RANK', '0')}.code").write_text(str(code))
        if code != 0 and not run["may_fail"]:
            print(f"many_runs: run {run['argv']} exited {code}", file=sys.stderr, flush=True)
            return code
    train.shutdown()
    return 0


if __name__ == "__main__":
    exit_code = main()
    # The job's files are closed and its process group is gone: run the atexit handlers
    # (streaming's shared-memory cleanup among them) and end without the interpreter's teardown
    # of torch, transformers and DeepSpeed, which takes ~1.5 s of every rank on this machine.
    import atexit

    atexit._run_exitfuncs()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(exit_code)
