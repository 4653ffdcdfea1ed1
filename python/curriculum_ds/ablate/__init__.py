"""``curriculum-ds ablate``: arms × seeds of an experiment at equal tokens, and the table.

Modules: ``experiment`` (``EXPERIMENT.json``: loading, JSON merge patches, the checks before any
run), ``runs`` (each arm × seed launched with the reference loop, resumably, into
``OUT/runs/ARM/seed-S/``), ``summary`` (means, Student-t intervals, paired deltas; ``summary.json``
and ``summary.md``), ``plot`` (``ablation.png``), ``compare`` (``curriculum-ds ablate-compare``:
the same experiment's deltas at two model sizes). :func:`ablate` is the whole command. The
contract is docs/ablate.md.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from curriculum_ds.ablate.runs import CommandHook

__all__ = ["ablate"]


def ablate(
    experiment_path: Path,
    out: Path,
    *,
    num_gpus: int | None = None,
    save_interval: int = 50,
    command_hook: CommandHook | None = None,
) -> str:
    """Check the experiment, run what is left of it, write the results; returns summary.md.

    Writes ``OUT/results.jsonl``, ``OUT/summary.json``, ``OUT/summary.md`` and
    ``OUT/ablation.png`` (docs/ablate.md). Nothing is written when a check refuses.

    Args:
        experiment_path: the ``EXPERIMENT.json`` file.
        out: the output folder (``--out``); reused by later invocations.
        num_gpus: ranks per run; None: every CUDA device, or 2 CPU ranks.
        save_interval: optimizer steps between checkpoints of each run.
        command_hook: rewrites each run's launcher command (tests).

    Raises:
        ConfigError: one line, before any run: see
            :func:`~curriculum_ds.ablate.experiment.load_experiment` and
            :func:`~curriculum_ds.ablate.runs.check_unchanged`.
        CurriculumError: a run failed (named, with its log).
    """
    from curriculum_ds.ablate.experiment import load_experiment, monitor_paths
    from curriculum_ds.ablate.plot import render_png
    from curriculum_ds.ablate.runs import check_unchanged, eval_curves, run_experiment
    from curriculum_ds.ablate.summary import render_markdown, summarize
    from curriculum_ds.commands.launch import default_num_gpus
    from curriculum_ds.files.user_paths import make_folder, path_error

    experiment = load_experiment(experiment_path)
    try:
        out.exists()
    except OSError as exc:  # a component over 255 bytes: before check_unchanged reads there
        raise path_error("--out", out, exc) from None
    check_unchanged(experiment, out)
    moved = monitor_paths(experiment.base)
    if moved:
        import click

        keys = ", ".join(f"{section}.output_path" for section in moved)
        click.echo(
            f"base config: {keys} replaced by each run's own folder "
            f"({out}/runs/ARM/seed-S/monitors/), as every arm and seed would write into one"
        )
    if num_gpus is not None and num_gpus < 1:
        raise ValueError(f"--num-gpus must be >= 1, got {num_gpus}")
    make_folder(out, field="--out")
    rows = run_experiment(
        experiment,
        out,
        num_gpus=num_gpus or default_num_gpus(),
        save_interval=save_interval,
        command_hook=command_hook,
    )
    summary = summarize(rows, reference=experiment.reference, arms=list(experiment.arms))
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
    table = render_markdown(summary)
    (out / "summary.md").write_text(table, encoding="utf-8")
    render_png(summary, eval_curves(out, experiment), out / "ablation.png")
    return table
