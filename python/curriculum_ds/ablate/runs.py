"""Running an experiment's arms × seeds with the reference loop, resumably.

Each run is one launch of ``curriculum_ds.train`` through the launcher code of ``curriculum-ds
launch`` (:mod:`curriculum_ds.commands.launch`: the same environment, watchdog and signal
forwarding) into ``OUT/runs/ARM/seed-S/``, a normal run directory, with ``--resume auto``: an
interrupted run continues from its latest checkpoint. The run directory also holds what ablate
itself needs: ``ds_config.json`` (the run's config: base + arm patch + seed; compared on every
later invocation), ``train.log`` (the launch's output), ``ablate.json`` (the wall time of its
launches, :func:`launch_state`) and, once it finished, ``result.json`` (its row of
``results.jsonl``). Each is replaced atomically; an unreadable one counts as not written.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click

from curriculum_ds.ablate.experiment import Experiment, arm_config, first_difference
from curriculum_ds.errors import ConfigError, CurriculumError
from curriculum_ds.files.atomic import write_text_atomically
from curriculum_ds.records.jsonl import read_jsonl

__all__ = [
    "CommandHook",
    "RunKey",
    "check_unchanged",
    "launch_state",
    "run_dir",
    "run_experiment",
]

CommandHook = Callable[[str, int, list[str]], list[str]]
"""``(arm, seed, command) -> command``: may rewrite a run's launcher command (the tests' fault
injection uses it); the identity when absent."""


@dataclass(frozen=True)
class RunKey:
    """One run of an experiment: an arm and a seed."""

    arm: str
    seed: int


def run_dir(out: Path, key: RunKey) -> Path:
    """``OUT/runs/ARM/seed-S``: the run directory of one arm and seed."""
    return out / "runs" / key.arm / f"seed-{key.seed}"


def run_keys(experiment: Experiment) -> list[RunKey]:
    """The experiment's runs in the order they start: seed by seed, each arm in turn.

    The first finished pairs already give paired deltas.
    """
    return [RunKey(arm, seed) for seed in experiment.seeds for arm in experiment.arms]


def _stored(directory: Path, name: str) -> dict[str, Any] | None:
    """The JSON object in ``directory/name``; None when it is missing or unreadable.

    Every such file is written atomically (:func:`~curriculum_ds.files.atomic.
    write_text_atomically`), so an unreadable one (empty, cut, not an object) was left by
    something else (an older version killed mid-write, a copy): it counts as not written, and
    what it held is rebuilt from the run's own records.
    """
    path = directory / name
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):  # missing, unreadable, not UTF-8, not JSON (0 bytes)
        return None
    return value if isinstance(value, dict) else None


def check_unchanged(experiment: Experiment, out: Path) -> None:
    """Refuse an experiment whose arm changed after some of its runs started (reads only).

    Every ``OUT/runs/ARM/seed-S`` of an arm of ``experiment`` that holds a ``ds_config.json``
    must hold exactly the config the experiment now gives that arm and seed, and the same
    ``model``. New arms and seeds are fine.

    Raises:
        ConfigError: one line naming the arm, the run directory and the first changed field.
    """
    for arm in experiment.arms:
        arm_dir = out / "runs" / arm
        if not arm_dir.is_dir():
            continue
        for directory in sorted(arm_dir.glob("seed-*")):
            stored = _stored(directory, "ds_config.json")
            try:
                seed = int(directory.name.removeprefix("seed-"))
            except ValueError:
                continue
            if stored is None:
                continue
            field = first_difference(stored, arm_config(experiment, arm, seed))
            state = _stored(directory, "ablate.json")  # None: unreadable, its model unknown
            if field is None and state is not None and state.get("model") != experiment.model_label:
                field = "model"
            if field is not None:
                raise ConfigError(
                    f'arm "{arm}": changed since it ran ({field} differs from {directory}/'
                    "ds_config.json): give the changed arm a new name, or use a new --out"
                )


@contextlib.contextmanager
def _output_to(log: Path) -> Iterator[None]:
    """File descriptors 1 and 2 (this process's and its children's) appended to ``log``."""
    with open(log, "ab") as f:
        saved = [os.dup(1), os.dup(2)]
        try:
            os.dup2(f.fileno(), 1)
            os.dup2(f.fileno(), 2)
            yield
        finally:
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            for fd in saved:
                os.close(fd)


def _finished_row(experiment: Experiment, key: RunKey, directory: Path) -> dict[str, Any] | None:
    """The run's ``results.jsonl`` row if it reached ``max_duration`` and evaluated there."""
    from curriculum_ds.config import Duration

    metrics_path, eval_path = directory / "metrics.jsonl", directory / "eval.jsonl"
    if not metrics_path.is_file() or not eval_path.is_file():
        return None
    metrics, evals = read_jsonl(metrics_path), read_jsonl(eval_path)
    if not metrics or not evals or evals[-1]["step"] != metrics[-1]["step"]:
        return None
    total = Duration.parse(experiment.max_duration)
    if total.unit == "tok" and metrics[-1]["tokens"] < total.value:
        return None  # stopped early (SIGTERM) at an eval step
    final = evals[-1]
    exact = {n: s.get("exact_match") for n, s in final["streams"].items()}
    return {
        "arm": key.arm,
        "seed": key.seed,
        "tokens": int(metrics[-1]["tokens"]),
        "steps": int(metrics[-1]["step"]),
        "wall_s": float(launch_state(directory, experiment.model_label)["wall_s"]),
        "loss": float(final["loss"]),
        "streams": {name: float(s["loss"]) for name, s in final["streams"].items()},
        **(
            {"exact_match": {n: float(v) for n, v in exact.items() if v is not None}}
            if any(v is not None for v in exact.values())
            else {}
        ),
    }


def _log_tail(log: Path, num_lines: int = 8) -> str:
    lines = log.read_text(encoding="utf-8", errors="replace").splitlines()
    return "\n".join(lines[-num_lines:])


def _launch(
    experiment: Experiment,
    key: RunKey,
    directory: Path,
    *,
    num_gpus: int,
    save_interval: int,
    cuda: bool,
    command_hook: CommandHook | None,
) -> float:
    """One launch of the run (fresh or resumed); returns its wall seconds.

    Raises:
        CurriculumError: the launch failed (one line naming the run and its log).
    """
    from curriculum_ds.commands.launch import build_command, run_command

    directory.mkdir(parents=True, exist_ok=True)
    config_path = directory / "ds_config.json"
    if _stored(directory, "ds_config.json") is None:
        config = arm_config(experiment, key.arm, key.seed)
        write_text_atomically(config_path, json.dumps(config, indent=2))
    train_args = ["--run-dir", str(directory), "--resume", "auto", "--no-progress"]
    train_args += ["--save-interval", str(save_interval), "--keep-last", "1"]
    if experiment.model is not None:
        train_args += ["--model", experiment.model]
    elif experiment.model_preset != "proxy":
        train_args += ["--model-preset", experiment.model_preset]
    cmd = build_command(config_path, num_gpus=num_gpus, train_args=train_args)
    if command_hook is not None:
        cmd = command_hook(key.arm, key.seed, cmd)
    log = directory / "train.log"
    state = launch_state(directory, experiment.model_label)
    start = state["running"] = time.time()
    write_text_atomically(directory / "ablate.json", json.dumps(state))  # durable before it runs
    with _output_to(log):
        print(" ".join(cmd), flush=True)
        code = run_command(cmd, cuda=cuda)
    wall_s = time.time() - start
    _close_launch(state, time.time())
    write_text_atomically(directory / "ablate.json", json.dumps(state))
    if code != 0:
        click.echo(_log_tail(log), err=True)
        raise CurriculumError(
            f"run {key.arm} seed {key.seed} failed (exit code {code}; its output: {log}); "
            "the same command resumes it from its last checkpoint"
        )
    return wall_s


def launch_state(directory: Path, model: str | None) -> dict[str, Any]:
    """The run's ``ablate.json``: its ``model`` and ``wall_s``, every launch counted.

    A launch records its start (``running``, Unix seconds) before the launcher starts and adds
    its wall time to ``wall_s`` when it returns. A launch that never returned (``ablate``
    SIGKILLed: its watchdog stopped the ranks) is counted up to the last write of its
    ``train.log`` (what the launch and its ranks printed), here, when the state is next read.
    A missing or unreadable ``ablate.json`` starts from ``wall_s`` 0 with ``model``.
    """
    state = _stored(directory, "ablate.json") or {"model": model, "wall_s": 0.0}
    if not isinstance(state.get("wall_s"), (int, float)):
        state["wall_s"] = 0.0
    if "running" in state:
        try:
            last = (directory / "train.log").stat().st_mtime
        except OSError:
            last = 0.0
        _close_launch(state, last)
    return state


def _close_launch(state: dict[str, Any], end: float) -> None:
    """Add the running launch's seconds (``end`` minus its start, at least 0) to ``wall_s``."""
    start = state.pop("running", None)
    if isinstance(start, (int, float)):
        state["wall_s"] = float(state["wall_s"]) + max(0.0, end - float(start))
    state["launches"] = int(state.get("launches", 0)) + 1


def _eval_summary(row: dict[str, Any]) -> str:
    streams = ", ".join(f"{name} {loss:.4f}" for name, loss in row["streams"].items())
    exact = "".join(
        f", {name} exact_match {share:.3f}" for name, share in row.get("exact_match", {}).items()
    )
    return f"final eval loss {row['loss']:.4f} ({streams}){exact}"


def _write_results(out: Path, rows: Sequence[dict[str, Any]]) -> None:
    write_text_atomically(out / "results.jsonl", "".join(json.dumps(row) + "\n" for row in rows))


def run_experiment(
    experiment: Experiment,
    out: Path,
    *,
    num_gpus: int,
    save_interval: int = 50,
    command_hook: CommandHook | None = None,
    target: Callable[[dict[str, Any]], float] | None = None,
) -> list[dict[str, Any]]:
    """Run (or resume, or skip) every arm × seed; returns the ``results.jsonl`` rows.

    Prints one line as each run starts and one as it ends (its final eval loss and the ETA of
    the rest). ``OUT/results.jsonl`` is rewritten after each finished run (the finished runs of
    this experiment, in run order).

    Args:
        experiment: a checked experiment (:func:`~curriculum_ds.ablate.experiment.
            load_experiment`); :func:`check_unchanged` must have passed on ``out``.
        out: the experiment's output folder (created).
        num_gpus: ranks per run (CUDA devices, or CPU ranks without CUDA), ≥ 1.
        save_interval: optimizer steps between checkpoints (what an interrupted run resumes
            from); the end of a run is always saved.
        command_hook: rewrites a run's launcher command (tests); None: as built.
        target: a finished run's row → the value printed as its ``target`` on its end line
            (``mixopt run``'s); None: none printed.

    Raises:
        CurriculumError: a run failed (its log is named); the finished ones are kept.
    """
    from curriculum_ds.commands.launch import has_cuda

    cuda: bool | None = None  # torch is imported only when something is launched
    out.mkdir(parents=True, exist_ok=True)
    keys = run_keys(experiment)
    rows: list[dict[str, Any]] = []
    launched_s: list[float] = []

    def summary(row: dict[str, Any]) -> str:
        text = _eval_summary(row)
        return text if target is None else f"target {target(row):.4f}, {text}"

    for idx, key in enumerate(keys, start=1):
        directory = run_dir(out, key)
        tag = f"[{idx}/{len(keys)}] {key.arm} seed {key.seed}"
        done = _stored(directory, "result.json")
        if done is None:  # never written, or unreadable: the run's records say if it finished
            done = _finished_row(experiment, key, directory)
            if done is not None:
                write_text_atomically(directory / "result.json", json.dumps(done))
        if done is not None:
            click.echo(f"{tag}: finished earlier, {summary(done)}")
            rows.append(done)
            continue
        resuming = (directory / "checkpoints" / "latest").is_file()
        how = "resuming from its last checkpoint" if resuming else "starting"
        click.echo(f"{tag}: {how} ({directory})")
        if cuda is None:
            cuda = has_cuda()
        wall_s = _launch(
            experiment,
            key,
            directory,
            num_gpus=num_gpus,
            save_interval=save_interval,
            cuda=cuda,
            command_hook=command_hook,
        )
        row = _finished_row(experiment, key, directory)
        if row is None:
            raise CurriculumError(
                f"run {key.arm} seed {key.seed} stopped before max_duration "
                f"({directory / 'train.log'}); the same command resumes it"
            )
        write_text_atomically(directory / "result.json", json.dumps(row))
        rows.append(row)
        _write_results(out, rows)
        launched_s.append(wall_s)
        left = len(keys) - idx
        eta = sum(launched_s) / len(launched_s) * left
        click.echo(f"{tag}: done in {wall_s:.1f} s, {summary(row)}; ETA {eta:.0f} s")
    _write_results(out, rows)
    return rows


def eval_curves(out: Path, experiment: Experiment) -> dict[str, list[list[dict[str, Any]]]]:
    """Arm → the ``eval.jsonl`` rows of each of its finished runs (seed order)."""
    curves: dict[str, list[list[dict[str, Any]]]] = {arm: [] for arm in experiment.arms}
    for key in run_keys(experiment):
        path = run_dir(out, key) / "eval.jsonl"
        if path.is_file():
            curves[key.arm].append(read_jsonl(path))
    return curves
