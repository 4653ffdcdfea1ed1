"""The commands that start runs: ``launch``, ``demo``, ``ablate`` and ``migrate``."""

from __future__ import annotations

import shlex
import sys
from collections.abc import Sequence
from pathlib import Path

import click

from curriculum_ds.cli.group import main


def _train_option(train_args: Sequence[str], name: str) -> str | None:
    """The value of the trainer option ``name`` (``NAME VALUE`` or ``NAME=VALUE``), if given."""
    for i, arg in enumerate(train_args):
        if arg == name and i + 1 < len(train_args):
            return train_args[i + 1]
        if arg.startswith(name + "="):
            return arg.split("=", 1)[1]
    return None


@main.command(context_settings={"ignore_unknown_options": True})
@click.argument("ds_config", type=click.Path(path_type=Path, exists=True, dir_okay=False))
@click.option(
    "--num-gpus",
    type=int,
    default=None,
    help="ranks on this node (default: all GPUs, or 2 CPU ranks)",
)
@click.option("--master-port", type=int, default=None, help="rendezvous port (default: a free one)")
@click.option(
    "--script",
    type=click.Path(path_type=Path, exists=True, dir_okay=False),
    default=None,
    help="your own training script, started on every rank with --deepspeed_config DS_CONFIG and "
    "the arguments after `--` (default: the reference loop, curriculum_ds.train)",
)
@click.argument("train_args", nargs=-1, type=click.UNPROCESSED)
def launch(
    ds_config: Path,
    num_gpus: int | None,
    master_port: int | None,
    script: Path | None,
    train_args: tuple[str, ...],
) -> None:
    """Print and run `deepspeed --num_gpus N --module curriculum_ds.train ...` (its exit code).

    With --script, `deepspeed --num_gpus N SCRIPT --deepspeed_config DS_CONFIG ...`: the same
    environment, port choice and signal forwarding (SIGTERM reaches every rank of the script).
    First the checks of `validate --model` (the trainer's --model; without it for a script), so a
    bad config, model or data is refused in one line per problem before any rank starts; the
    trainer's --run-dir is created there too (one line when the system refuses it).
    """
    from curriculum_ds.commands.launch import build_command, default_num_gpus, has_cuda, run_command
    from curriculum_ds.config import load_config
    from curriculum_ds.config.hf_auto import BATCH_KEYS, hf_auto_keys, hf_auto_note

    # refuse a bad config or data before starting any rank: the checks of `validate --model`
    model = _train_option(train_args, "--model") if script is None else None
    # a script may be an HF Trainer's, which fills HF's "auto" values; the reference loop cannot
    run = load_config(ds_config, check_data=True, model=model, strict=True, hf_auto=bool(script))
    ranks = default_num_gpus() if num_gpus is None else num_gpus
    if ranks < 1:
        raise click.BadParameter(f"must be >= 1, got {ranks}", param_hint="--num-gpus")
    auto = hf_auto_keys(run.ds_config)
    if not any(key in BATCH_KEYS for key in auto):  # else the Trainer checks them
        run.global_batch_size(ranks)  # train_batch_size must agree with this many ranks
    run_dir = _train_option(train_args, "--run-dir") or _train_option(train_args, "--run_dir")
    if script is None and run_dir is not None:
        from curriculum_ds.distributed import open_run_dir

        open_run_dir(Path(run_dir)).close()  # the loop's first act there, once, before the ranks
    cmd = build_command(
        ds_config,
        num_gpus=ranks,
        train_args=train_args,
        master_port=master_port,
        script=script,
    )
    cuda = has_cuda()
    if auto:
        click.echo(f"curriculum_ds: note: {hf_auto_note(auto)}")
    click.echo(("" if cuda else "DS_ACCELERATOR=cpu ") + shlex.join(cmd))
    sys.exit(run_command(cmd, cuda=cuda))


@main.command()
@click.option(
    "--out",
    default=Path("demo_run"),
    show_default=True,
    type=click.Path(path_type=Path),
    help="folder for corpus, shards, config and the run",
)
@click.option(
    "--num-gpus", type=int, default=None, help="ranks (default: all GPUs, or 2 CPU ranks)"
)
@click.option(
    "--max-duration", default=None, help="override the demo's total tokens, e.g. 400000tok"
)
@click.option(
    "--data-only",
    is_flag=True,
    help="only build the corpus and datamixes under OUT/data (docstrings, code, noise), no run",
)
@click.option(
    "--facts",
    is_flag=True,
    help="also build the synthetic facts (train/facts) and their held-out questions "
    "(val/facts_qa) of configs/experiments/facts/, then stop (no run)",
)
@click.option(
    "--facts-people",
    type=click.IntRange(1, 2000),
    default=None,
    help="with --facts: people invented (default 100)",
)
@click.option("--facts-seed", type=int, default=0, show_default=True, help="with --facts: seed")
def demo(
    out: Path,
    num_gpus: int | None,
    max_duration: str | None,
    data_only: bool,
    facts: bool,
    facts_people: int | None,
    facts_seed: int,
) -> None:
    """Real text from Python's stdlib → two datamixes → a 2-phase dynamic curriculum run.

    With --facts: the demo's data plus the synthetic biographies and held-out questions of
    configs/experiments/facts/ (commands/facts.py), no run.
    """
    from curriculum_ds.commands.demo import build_demo_data, run_demo
    from curriculum_ds.files.user_paths import make_folder

    make_folder(out, field="--out")
    if facts:
        from curriculum_ds.commands.facts import DEFAULT_PEOPLE, build_facts_data

        build_demo_data(out.resolve())
        people = facts_people or DEFAULT_PEOPLE
        click.echo(
            f"demo data: {build_facts_data(out.resolve(), num_people=people, seed=facts_seed)}"
        )
        return
    if data_only:
        click.echo(f"demo data: {build_demo_data(out.resolve())}")
        return
    sys.exit(run_demo(out, num_gpus=num_gpus, max_duration=max_duration))


@main.command()
@click.argument("ds_config", type=click.Path(path_type=Path))
@click.option(
    "--out",
    type=click.Path(path_type=Path),
    default=None,
    help="write the migrated ds_config here (default: print it)",
)
@click.option(
    "--num-gpus",
    default=1,
    show_default=True,
    type=click.IntRange(min=1),
    help="data-parallel ranks, for the global batch when the file has no train_batch_size",
)
@click.option(
    "--total-steps",
    default=None,
    type=click.IntRange(min=1),
    help="optimizer steps of the whole run (a phase at the full length follows the warmup); "
    "default: the curriculum's own steps",
)
@click.option(
    "--data",
    default="data/train",
    show_default=True,
    help="the stream folder (prepared MDS) of the migrated phases",
)
def migrate(
    ds_config: Path, out: Path | None, num_gpus: int, total_steps: int | None, data: str
) -> None:
    """Translate DeepSpeed's sequence-length curriculum into the curriculum section.

    DS_CONFIG's `curriculum_learning` (seqlen: fixed_linear, fixed_root, fixed_discrete) or
    data-efficiency seqlen curriculum becomes a `max_seq_len` ramp, DeepSpeed's steps tokens at
    the global batch and the schedule's lengths (one line on stderr says how).
    """
    import json

    from curriculum_ds.commands.migrate import migrate_config, read_ds_config

    migrated, note = migrate_config(
        read_ds_config(ds_config), num_gpus=num_gpus, local=data, total_steps=total_steps
    )
    text = json.dumps(migrated, indent=2)
    if out is None:
        click.echo(text)
    else:
        out.write_text(text + "\n")
    click.echo(f"curriculum_ds: note: {note}", err=True)


@main.command()
@click.argument("experiment", type=click.Path(path_type=Path, dir_okay=False))
@click.option("--out", required=True, type=click.Path(path_type=Path), help="results folder")
@click.option(
    "--num-gpus", type=int, default=None, help="ranks per run (default: all GPUs, or 2 CPU ranks)"
)
@click.option(
    "--save-interval", default=50, show_default=True, help="checkpoint every N steps of a run"
)
def ablate(experiment: Path, out: Path, num_gpus: int | None, save_interval: int) -> None:
    """Run an experiment's arms × seeds at equal tokens; print the table (docs/ablate.md)."""
    from curriculum_ds.ablate import ablate as run_ablation

    table = run_ablation(experiment, out, num_gpus=num_gpus, save_interval=save_interval)
    click.echo(f"\n{table}\nresults: {out / 'summary.json'}  picture: {out / 'ablation.png'}")


@main.command("ablate-compare")
@click.argument("dir_small", type=click.Path(path_type=Path, file_okay=False))
@click.argument("dir_large", type=click.Path(path_type=Path, file_okay=False))
def ablate_compare(dir_small: Path, dir_large: Path) -> None:
    """Each arm's paired delta at two model sizes, and whether the signs agree (docs/ablate.md).

    DIR_SMALL and DIR_LARGE are the --out folders of the same experiment run at two sizes
    (its "model": "proxy" and "proxy_10x"). With at least 4 arms, Spearman's rank correlation
    of the arms' mean deltas is printed too.
    """
    from curriculum_ds.ablate.compare import compare_summaries, read_summary, render_comparison

    small, large = read_summary(dir_small), read_summary(dir_large)
    comparison = compare_summaries(small, large)
    click.echo(
        render_comparison(
            comparison, dir_small.name or str(dir_small), dir_large.name or str(dir_large)
        )
    )
