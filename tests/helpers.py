"""Shared helpers of the tests that build real MDS data and launch real DeepSpeed ranks on CPU."""

from __future__ import annotations

import base64
import json
import os
import re
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from curriculum_ds.commands.launch import build_command, launcher_env
from curriculum_ds.data import prepare
from curriculum_ds.data.streams import remove_stale_shared_memory
from curriculum_ds.records.jsonl import read_jsonl

REPO = Path(__file__).resolve().parents[1]
INTEGRATION = Path(__file__).resolve().parent / "integration"
FAULT_FLAGS = frozenset(
    {
        "--kill-after-step",
        "--kill-during-save",
        "--dump-state",
        "--dump-sample-losses",
        "--nan-loss",
        "--mix-file-at",
        "--sigterm-at",
        "--truncate-shard",
    }
)
"""Flags of tests/integration/faulty_train.py: the reference loop with fault injection and a
state dump."""
_SHM_RACE = re.compile(r"cannot open MDS dataset .*File exists: '/\d+_locals'")


def unlink_stale_shared_memory(*, min_age_s: float = 2.0) -> list[str]:
    """Remove the shared-memory files killed ranks left behind: the product's own cleanup.

    The resume tests kill ranks on purpose (SIGKILL), which leaves their ``/dev/shm`` segments
    behind; :func:`curriculum_ds.data.streams.remove_stale_shared_memory` removes those no live
    process uses. Returns the names removed.
    """
    return remove_stale_shared_memory(min_age_s=min_age_s)


def make_dataset(
    root: Path,
    name: str,
    docs: list[str],
    *,
    max_seq_len: int = 64,
    min_tokens: int = 2,
    pack: bool = False,
) -> Path:
    """Prepare `docs` (one document each, byte tokens) into the MDS dataset root/name."""
    src = root / f"{name}.jsonl"
    src.parent.mkdir(parents=True, exist_ok=True)
    src.write_text("".join(json.dumps({"text": d}) + "\n" for d in docs))
    out = root / name
    prepare([src], out, max_seq_len=max_seq_len, min_tokens=min_tokens, pack=pack)
    return out


def ragged_docs(num_docs: int, *, seed: int = 0, min_len: int = 8, max_len: int = 60) -> list[str]:
    """Deterministic English-like documents of varied lengths (ragged sequences)."""
    import random

    rng = random.Random(seed)
    words = (
        "the model reads data in phases and every token of a step weighs the same "
        "curriculum learning starts easy and ends hard while ranks agree"
    ).split()
    docs = []
    for _ in range(num_docs):
        n = rng.randint(min_len, max_len)
        text = ""
        while len(text.encode()) < n:
            text += rng.choice(words) + " "
        docs.append(text[:n].strip() or "x")
    return docs


def qa_records(num: int, *, seed: int = 0) -> list[dict[str, str]]:
    """Deterministic question-answer records (``prepare --format qa``): the prompt is the start
    of an English-like document (:func:`ragged_docs`), the answer its next word."""
    out = []
    for k, doc in enumerate(ragged_docs(num, seed=seed, min_len=30, max_len=50)):
        words = doc.split()
        out.append({"prompt": f"{k}: " + " ".join(words[:-1]) + " ", "answer": words[-1]})
    return out


def make_qa_dataset(
    root: Path, name: str, records: list[dict[str, str]], *, max_seq_len: int = 64
) -> Path:
    """Prepare QA ``records`` (byte tokens) into the MDS dataset root/name (``--format qa``)."""
    src = root / f"{name}.jsonl"
    src.parent.mkdir(parents=True, exist_ok=True)
    src.write_text("".join(json.dumps(r) + "\n" for r in records))
    prepare([src], root / name, max_seq_len=max_seq_len, format="qa")
    return root / name


def fixed_docs(num_docs: int, length: int) -> list[str]:
    """Documents of exactly `length - 1` bytes (+1 EOS token = `length` tokens each)."""
    return [f"{i:06d}".ljust(length - 1, "abcdefghij"[i % 10]) for i in range(num_docs)]


def write_ds_config(path: Path, curriculum: dict[str, Any], **ds: Any) -> Path:
    """A ds_config JSON: small defaults for CPU runs, overridden by `ds`, plus the curriculum.

    An Adam/AdamW optimizer gets ``"torch_adam": true`` unless `ds` says otherwise: DeepSpeed's
    default FusedAdam JIT-loads its CPU op in every rank process, and that load asks py-cpuinfo
    (a Python subprocess) twice, ~4 s of each process's ~12 s start on this machine. The tests'
    subject is the curriculum and the engine's update, not the optimizer kernel; the product's
    own configs (the demo, the shipped experiments, the docs' scripts) keep FusedAdam and run in
    the suite too (test_cli_front_door, test_ablate_runs_arms_and_seeds, test_hf_trainer).
    """
    config: dict[str, Any] = {
        "train_micro_batch_size_per_gpu": 2,
        "gradient_accumulation_steps": 2,
        "steps_per_print": 1_000_000,
        "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}},
        "zero_optimization": {"stage": 0},
    }
    config.update(ds)
    optimizer = config.get("optimizer")
    if isinstance(optimizer, dict) and str(optimizer.get("type", "")).lower() in {"adam", "adamw"}:
        optimizer["params"] = {"torch_adam": True, **optimizer.get("params", {})}
    config["curriculum"] = curriculum
    path.write_text(json.dumps(config, indent=2))
    return path


def launch(
    ds_config: Path,
    run_dir: Path,
    *extra: str,
    num_gpus: int = 2,
    timeout: int = 600,
    check: bool = True,
) -> subprocess.CompletedProcess[str]:
    """Run `deepspeed --num_gpus N --module curriculum_ds.train ...` on CPU ranks (gloo)."""
    cmd = build_command(
        ds_config,
        num_gpus=num_gpus,
        train_args=["--run-dir", str(run_dir), "--no-progress", *extra],
    )
    if any(arg.split("=")[0] in FAULT_FLAGS for arg in extra):
        # the product loop has no fault injection: the tests' wrapper of it does
        cmd[cmd.index("curriculum_ds.train")] = "faulty_train"
    return run_launched(cmd, cwd=ds_config.parent, timeout=timeout, check=check)


@dataclass(frozen=True)
class RunOutput:
    """One run of :func:`launch_many`: its exit code (the highest of its ranks') and output."""

    returncode: int
    output: str
    """stdout and stderr of every rank, rank 0 first."""
    job_output: str = ""
    """stdout and stderr of the whole launched job (the launcher's own lines among them)."""


def launch_many(
    runs: list[tuple[Path, Path, tuple[str, ...]]],
    *,
    num_gpus: int = 2,
    may_fail: frozenset[Path] = frozenset(),
    launcher: bool = True,
    timeout: int = 900,
) -> dict[Path, RunOutput]:
    """Several runs ``(ds_config, run_dir, extra args)`` in ONE launched job (many_runs.py).

    Each run is what :func:`launch` runs for ``(ds_config, run_dir, *extra)``: the whole
    ``curriculum_ds.train.main`` (with ``--dump-state`` or ``--nan-loss`` of faulty_train), one
    after the other in the same rank processes, so the launcher and the torch/DeepSpeed imports
    are paid once. Runs whose run dir is in ``may_fail`` may exit non-zero (an exception: its
    traceback in the output). The last run may take ``--kill-after-step`` or
    ``--kill-during-save`` (then put it in ``may_fail``: the SIGKILL ends the job). A run failed
    by streaming's shared-memory race is launched again once, with the runs after it (as
    :func:`run_launched` launches a run again). ``launcher=False``: one plain ``python -m
    many_runs`` process (a world of one, as :func:`run_train_module` runs one).

    Returns each run dir's :class:`RunOutput`. Raises AssertionError with the output tails when
    a run not in ``may_fail`` fails.
    A new launched test declares its runs with ``@shared_runs`` (``tests/shared_job.py``, which
    calls this) unless its job cannot be shared (docs/layout.md, "Adding a launched test").
    """
    assert runs, "no runs"
    results, proc, cmd = _launch_many_once(runs, num_gpus, may_fail, launcher, timeout)
    # mosaicml-streaming's shared-memory prefix race with jobs of other checkouts (see
    # run_launched): the run it failed and the runs after it are launched again, once
    raced = [i for i, (_, d, _) in enumerate(runs) if _SHM_RACE.search(results[d].output)]
    if raced:
        again, proc, cmd = _launch_many_once(
            runs[raced[0] :], num_gpus, may_fail, launcher, timeout
        )
        results |= again
    failed = [d for d, r in results.items() if r.returncode != 0 and d not in may_fail]
    if failed or (proc.returncode != 0 and runs[-1][1] not in may_fail):
        tails = "".join(
            f"--- {d} ---\n{r.output[-3000:]}\n" for d, r in results.items() if r.output
        )
        raise AssertionError(
            f"launch failed ({proc.returncode}): {' '.join(cmd)}\n{tails}"
            f"--- stdout ---\n{proc.stdout[-3000:]}\n--- stderr ---\n{proc.stderr[-4000:]}"
        )
    return results


def _launch_many_once(
    runs: list[tuple[Path, Path, tuple[str, ...]]],
    num_gpus: int,
    may_fail: frozenset[Path],
    launcher: bool,
    timeout: int,
) -> tuple[dict[Path, RunOutput], subprocess.CompletedProcess[str], list[str]]:
    """One job of :func:`launch_many`: its runs' outputs, the job's process and command."""
    specs = []
    for ds_config, run_dir, extra in runs:
        argv = ["--deepspeed_config", str(ds_config), "--run-dir", str(run_dir), "--no-progress"]
        log = run_dir.parent / f"{run_dir.name}.log"
        for old in run_dir.parent.glob(f"{log.name}.rank*"):  # an earlier job's, same run dir
            old.unlink()
        specs.append({"argv": [*argv, *extra], "log": str(log), "may_fail": run_dir in may_fail})
    first_config = runs[0][0]
    spec_file = first_config.parent / f"many_runs_{runs[0][1].name}.json"
    spec_file.write_text(json.dumps(specs, indent=1))
    if launcher:
        cmd = build_command(first_config, num_gpus=num_gpus, train_args=["--runs", str(spec_file)])
        cmd[cmd.index("curriculum_ds.train")] = "many_runs"
    else:
        assert num_gpus == 1, "without the launcher: a world of one"
        cmd = [sys.executable, "-m", "many_runs", "--runs", str(spec_file)]
    started = time.monotonic()
    proc = run_launched(cmd, cwd=first_config.parent, timeout=timeout, check=False)
    _log_job(runs, num_gpus, time.monotonic() - started)
    results = {}
    for _, run_dir, _ in runs:
        logs = [run_dir.parent / f"{run_dir.name}.log.rank{r}" for r in range(num_gpus)]
        codes = [int(c.read_text()) for log in logs if (c := Path(f"{log}.code")).exists()]
        results[run_dir] = RunOutput(
            # a run that never finished (killed, or not reached): the job's exit code
            returncode=max(codes) if len(codes) == num_gpus else proc.returncode or -1,
            output="".join(log.read_text() for log in logs if log.exists()),
            job_output=proc.stdout + proc.stderr,
        )
    return results, proc, cmd


def _log_job(runs: list[tuple[Path, Path, tuple[str, ...]]], num_gpus: int, wall_s: float) -> None:
    """With ``CURRICULUM_DS_JOB_LOG=FILE``: one JSON line per launched job (its wall time, and
    each run's, from its exit-code files' times), to see where the launched suite's time goes."""
    path = os.environ.get("CURRICULUM_DS_JOB_LOG")
    if not path:
        return
    ends = []
    for _, run_dir, extra in runs:
        code = run_dir.parent / f"{run_dir.name}.log.rank0.code"
        ends.append(
            (
                f"{run_dir.parent.name}/{run_dir.name}",
                extra,
                code.stat().st_mtime if code.exists() else None,
            )
        )
    line = {
        "wall_s": round(wall_s, 1),
        "num_gpus": num_gpus,
        "runs": [[n, " ".join(a), e] for n, a, e in ends],
    }
    with open(path, "a", encoding="utf-8") as f:
        f.write(json.dumps(line) + "\n")


def launched_env() -> dict[str, str]:
    """The product's ``launcher_env(cuda=False)`` (CUDA/NCCL ranks when
    ``CURRICULUM_DS_TEST_CUDA=1``, as bench/gpu_check.sh runs the exactness tests) with the repo's
    ``python/`` and ``tests/integration/`` (the tests' own scripts) first on PYTHONPATH."""
    env = launcher_env(cuda=os.environ.get("CURRICULUM_DS_TEST_CUDA") == "1")
    env["PYTHONPATH"] = os.pathsep.join(
        filter(None, [str(REPO / "python"), str(INTEGRATION), env.get("PYTHONPATH")])
    )
    return env


def node_launcher_command(cmd: list[str]) -> list[str]:
    """The product's ``deepspeed`` runner command as the node launcher command the runner execs.

    On one machine DeepSpeed's runner (``deepspeed --num_gpus N --master_port P ...``) only
    imports DeepSpeed and starts ``python -u -m deepspeed.launcher.launch --world_info=...
    --master_addr=127.0.0.1 --master_port=P [--module] TARGET ARGS`` (runner.py, the local
    branch), which spawns the ranks, appends ``--local_rank=K`` and stops them all on a failure or
    SIGTERM. The tests start what that node launcher does, as ``tests/node_launcher.py`` (the same
    environment, commands and ending, without importing torch and DeepSpeed first: ~4 s of every
    launch on 2 cores; ``tests/unit/test_node_launcher_matches_deepspeeds.py`` compares the two).
    The runner's own start and exit cost ~3 s more; DeepSpeed's runner and node launcher are
    exercised by the tests of ``curriculum-ds launch`` (test_cli_front_door,
    test_preemption_stops_after_a_step, test_readme_user_loop).
    A command that is not the runner's (a plain python one) is returned as it is.
    """
    if not cmd or Path(cmd[0]).name != "deepspeed":
        return cmd
    args = list(cmd[1:])
    num_gpus = int(args[args.index("--num_gpus") + 1])
    port = args[args.index("--master_port") + 1]
    rest = args[args.index("--master_port") + 2 :]
    module = rest[:1] == ["--module"]
    world = json.dumps({"localhost": list(range(num_gpus))})
    return [
        sys.executable,
        "-u",
        str(Path(__file__).with_name("node_launcher.py")),  # deepspeed.launcher.launch, lighter
        f"--world_info={base64.urlsafe_b64encode(world.encode()).decode()}",
        "--master_addr=127.0.0.1",
        f"--master_port={port}",
        *(["--module"] if module else []),
        *(rest[1:] if module else rest),
    ]


def world_of_one_command(cmd: list[str]) -> list[str]:
    """The product's ``deepspeed --num_gpus 1`` runner command as one plain Python process.

    ``deepspeed --num_gpus 1 --master_port P --module TARGET ARGS`` becomes ``python -u -m
    TARGET ARGS``: the rank itself, without the runner and the node launcher (each imports
    DeepSpeed, ~3 s, and the node launcher polls its rank every second). The process takes the
    rendezvous of a world of one (``curriculum_ds.distributed.prepare_environment``), as
    :func:`run_train_module` and ``launch_many(launcher=False)`` run it. For tests whose subject
    is not the ranks (``curriculum-ds ablate``'s bookkeeping); the runner and the node launcher
    are exercised by the tests of ``curriculum-ds launch`` and by every launched test.
    """
    assert Path(cmd[0]).name == "deepspeed", cmd
    args = list(cmd[1:])
    assert args[args.index("--num_gpus") + 1] == "1", f"not a world of one: {cmd}"
    rest = args[args.index("--master_port") + 2 :]
    return [sys.executable, "-u", *(["-m", *rest[1:]] if rest[:1] == ["--module"] else rest)]


def run_launched(
    cmd: list[str], *, cwd: Path, timeout: int = 600, check: bool = True
) -> subprocess.CompletedProcess[str]:
    """Run a launcher (or plain python) command of the tests on CPU ranks (gloo).

    A ``deepspeed`` runner command runs as its node launcher (:func:`node_launcher_command`).
    The environment is :func:`launched_env` (``CURRICULUM_DS_TEST_CUDA=1``: CUDA/NCCL ranks, as
    bench/gpu_check.sh runs the exactness tests). Raises AssertionError with the output tails when
    ``check`` and the command fails.
    """
    cmd = node_launcher_command(cmd)
    env = launched_env()
    for _ in range(2):
        unlink_stale_shared_memory()  # what an earlier killed job left would collide
        proc = subprocess.run(
            cmd, env=env, capture_output=True, text=True, timeout=timeout, cwd=cwd
        )
        # mosaicml-streaming picks a free shared-memory prefix by looking at /dev/shm, which
        # races with jobs of other checkouts starting at that moment ("[Errno 17] File exists:
        # '/000004_locals'"): such a launch is retried once, nothing else
        if not _SHM_RACE.search(proc.stderr):
            break
    if check and proc.returncode != 0:
        raise AssertionError(
            f"launch failed ({proc.returncode}): {' '.join(cmd)}\n"
            f"--- stdout ---\n{proc.stdout[-4000:]}\n--- stderr ---\n{proc.stderr[-6000:]}"
        )
    return proc


def run_train_module(
    *args: str, env: dict[str, str] | None = None, cwd: Path | None = None, timeout: int = 300
) -> subprocess.CompletedProcess[str]:
    """`python -m curriculum_ds.train ...` in a subprocess (single process, no launcher)."""
    full_env = launcher_env(cuda=False) | (env or {})
    unlink_stale_shared_memory()  # what an earlier killed job left would collide
    return subprocess.run(
        [sys.executable, "-m", "curriculum_ds.train", *args],
        env=full_env,
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=cwd,
    )


def metrics(run_dir: Path) -> list[dict[str, Any]]:
    return read_jsonl(run_dir / "metrics.jsonl")


def trace(run_dir: Path) -> list[dict[str, Any]]:
    return read_jsonl(run_dir / "sample_trace.jsonl")


def history(run_dir: Path) -> list[dict[str, Any]]:
    return read_jsonl(run_dir / "curriculum_history.jsonl")


def one_error_line(result: Any) -> str:
    """The single line a CLI command (click ``CliRunner`` result) printed when it refused: exit 1,
    no traceback, exactly one non-blank line."""
    assert result.exit_code == 1, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1, result.output
    assert "Traceback" not in result.output
    return lines[0]


def two_phase_curriculum(
    first: Path, second: Path, *, static_metric: str | None = None
) -> dict[str, Any]:
    """A 3000-token curriculum: "short" (``first`` only, 1000 tok), then "mix" (0.3/0.7), with
    dynamic re-weighting by ``static_metric`` when given (2 buckets)."""
    cur: dict[str, Any] = {
        "max_duration": "3000tok",
        "schedule": [
            {
                "name": "short",
                "duration": "1000tok",
                "train_loader": {"streams": [{"local": str(first)}], "max_seq_len": 64},
            },
            {
                "name": "mix",
                "duration": "2000tok",
                "train_loader": {
                    "streams": [
                        {"local": str(first), "proportion": 0.3},
                        {"local": str(second), "proportion": 0.7},
                    ],
                    "max_seq_len": 64,
                },
            },
        ],
    }
    if static_metric is not None:
        cur["dynamic"] = {"enabled": True, "num_buckets": 2, "static_metric": static_metric}
    return cur


def recompute(dynamic: Any, global_step: int, loader: Any) -> dict[str, Any] | None:
    """What the curriculum does after a step: ``maybe_recompute``, the loader applying the update
    it hands back; returns the history record (None between recomputes)."""
    update = dynamic.maybe_recompute(global_step)
    if update is None:
        return None
    loader.apply(update)
    return update.record  # type: ignore[no-any-return]


def tiny_experiment(root: Path, *, total: int = 2000, micro_batch_size: int = 2) -> Path:
    """A 2-arm × 2-seed ``curriculum-ds ablate`` experiment on tiny byte-level data in ``root``.

    Arms: ``mixed`` (the reference: one phase, streams ``a``/``b`` at 0.5/0.5) and ``phases``
    (``a`` alone for the first 40% of the tokens, then the same mix); both ``total`` tokens, with
    held-out streams ``val_a`` and ``val_b`` (12 samples each) and the question-answer stream
    ``val_qa`` (6 records, :func:`qa_records`), ``micro_batch_size`` samples per
    micro-batch (GAS 2). Returns ``root/experiment.json`` (its ``base`` is ``root/base.json``).
    The data is built once per ``root``.
    """
    if not (root / "a").is_dir():
        make_dataset(root, "a", ragged_docs(160, seed=11, min_len=10, max_len=40))
        make_dataset(root, "b", ragged_docs(160, seed=12, min_len=30, max_len=60))
        make_dataset(root, "val_a", ragged_docs(12, seed=13, min_len=10, max_len=40))
        make_dataset(root, "val_b", ragged_docs(12, seed=14, min_len=30, max_len=60))
        make_qa_dataset(root, "val_qa", qa_records(6, seed=15))
    mix = {
        "streams": [
            {"local": str(root / "a"), "proportion": 0.5},
            {"local": str(root / "b"), "proportion": 0.5},
        ],
        "max_seq_len": 64,
    }
    curriculum = {
        "max_duration": f"{total}tok",
        "schedule": [{"name": "mix", "duration": f"{total}tok", "train_loader": mix}],
        "eval": {
            "streams": [
                {"local": str(root / "val_a")},
                {"local": str(root / "val_b")},
                {"local": str(root / "val_qa")},
            ],
            "max_samples": 12,
        },
    }
    write_ds_config(root / "base.json", curriculum, train_micro_batch_size_per_gpu=micro_batch_size)
    first = total * 2 // 5
    a_only = {"streams": [{"local": str(root / "a")}], "max_seq_len": 64}
    phases = [
        {"name": "a", "duration": f"{first}tok", "train_loader": a_only},
        {"name": "mix", "duration": f"{total - first}tok", "train_loader": mix},
    ]
    experiment = {
        "base": "base.json",
        "arms": {"mixed": {}, "phases": {"curriculum": {"schedule": phases}}},
        "reference": "mixed",
        "seeds": [1, 2],
    }
    path = root / "experiment.json"
    path.write_text(json.dumps(experiment, indent=2))
    return path
